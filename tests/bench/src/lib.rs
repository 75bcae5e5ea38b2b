//! Benchmarks of the booking operator (issue 9), run by `make bench`.
//!
//! - [`load`]: a keep-alive HTTPS load client (hyper + rustls, HTTP/1.1): closed-loop peak
//!   throughput over a fixed number of connections, and an open-loop fixed rate whose latencies
//!   are measured from each request's *scheduled* send time (no coordinated omission).
//! - [`echo`]: the bare hyper + rustls server answering a fixed AdmissionReview: the ceiling of
//!   the machine against which the webhook's throughput is read.
//! - [`stats`]: percentiles of latency samples.
//! - [`sys`]: CPU pinning (`taskset`) and resident memory from `/proc`.
//! - [`fixtures`]: AdmissionReview bodies and Booking objects.
//!
//! The binary `booking-bench` runs the suite and writes `target/bench/results.json`;
//! `booking-bench --smoke` runs a seconds-long check of the harness itself (CI).

pub mod echo;
pub mod fixtures;
pub mod load;
pub mod stats;
pub mod sys;
