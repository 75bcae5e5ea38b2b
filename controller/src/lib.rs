//! `booking-controller`: reconciles Resources, Bookings and ResourceMonitors of
//! `manager.kotaico.de/v1` against AWS EC2 and RDS.
//!
//! Decide, then do: arbitration (`booking_shared::arbitration`, shared with the webhook),
//! [`plan`] and [`triggers`] are pure functions of (spec, bookings, observed AWS state, `now`);
//! the [`aws`] layer and the [`reconcile`]rs execute what they decide, all through one
//! [`context::Context`], one [`error::Error`] and one status writer.

pub mod admin;
pub mod aws;
pub mod backoff;
pub mod conditions;
pub mod config;
pub mod context;
pub mod dry_run;
pub mod error;
pub mod events;
pub mod fanout;
pub mod feeds;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod plan;
pub mod queue;
pub mod reconcile;
pub mod regions;
pub mod run;
pub mod stop_reads;
pub mod tags;
pub mod triggers;
pub mod wakeups;
