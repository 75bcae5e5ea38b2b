//! `booking-controller`: reconciles Resources, Bookings and ResourceMonitors of
//! `manager.kotaico.de/v1` against AWS EC2 and RDS.
//!
//! Decide, then do: [`arbitration`] and [`plan`] are pure functions of (spec, bookings, observed
//! AWS state, `now`); the [`aws`] layer and the reconcilers execute what they decide.

pub mod admin;
pub mod arbitration;
pub mod aws;
pub mod conditions;
pub mod config;
pub mod error;
pub mod fanout;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod plan;
pub mod reconcile;
pub mod run;
pub mod tags;
