//! The booking operator's API and pure rules, shared by `booking-controller` and
//! `booking-webhook`.
//!
//! - [`api`]: the four custom resources (`Resource`, `ResourceMonitor`, `Booking`,
//!   `BookingScheduler`) of `manager.kotaico.de/v1`, wire-compatible with the original operator.
//! - [`time`]: RFC 3339 parsing, booking slots, phases and overlaps.
//! - [`schedule`]: cron schedules in IANA time zones, DST-correct.
//! - [`scheduling`]: BookingScheduler fires (names, missed fires) and notification timing.
//! - [`crd`]: the generated CustomResourceDefinitions.
//! - [`validation`]: admission rules (`validate_*`) and defaults (`default_*`) of the four kinds.
//! - [`overlap`]: the interval index answering which bookings overlap a slot.
//!
//! Nothing here performs I/O or reads the clock: every rule takes `now` as a parameter.

pub mod api;
pub mod crd;
pub mod overlap;
pub mod schedule;
pub mod scheduling;
pub mod time;
pub mod validation;
