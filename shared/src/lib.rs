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
//! - [`overlap`]: the interval structure answering which bookings overlap a slot, and the
//!   webhook's index of bookings built on it.
//! - [`arbitration`]: which booking of a Resource holds it (first created wins), over the same
//!   structure; the controller's decision, the webhook's admission rule in its strict form.
//! - [`names`]: names and label values shortened with a hash suffix.
//! - `client` (feature `client`): the Kubernetes API client of every binary, its pool bounded.
//! - `ops` (feature `ops`): the admin port and the shutdown signal of both binaries.
//! - `heap` (feature `ops`): both binaries' allocator (jemalloc) and its live-heap metrics.
//!
//! Nothing here performs I/O or reads the clock: every rule takes `now` as a parameter (the
//! binaries inject [`time::system_clock`]).

pub mod api;
pub mod arbitration;
pub mod claims;
#[cfg(feature = "client")]
pub mod client;
pub mod crd;
#[cfg(feature = "ops")]
pub mod heap;
pub mod names;
#[cfg(feature = "ops")]
pub mod ops;
pub mod overlap;
pub mod schedule;
pub mod scheduling;
pub mod time;
pub mod validation;
