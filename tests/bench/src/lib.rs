//! Benchmarks of the booking operator (issue 9), run by `make bench`.
//!
//! - [`load`]: a keep-alive HTTPS load client (hyper + rustls, HTTP/1.1): closed-loop peak
//!   throughput over a fixed number of connections, and an open-loop fixed rate whose latencies
//!   are measured from each request's *scheduled* send time (no coordinated omission).
//! - [`echo`]: the bare hyper + rustls server answering a fixed AdmissionReview: the ceiling of
//!   the machine against which the webhook's throughput is read.
//! - [`capture`]: an admission endpoint registered with a real API server that records the
//!   reviews it sends: the load of the webhook figures.
//! - [`stats`]: percentiles of latency samples.
//! - [`sys`]: CPU pinning (`taskset`) and resident memory from `/proc`.
//! - [`fixtures`]: AdmissionReview bodies and Booking objects.
//! - [`audit`]: the controller's own identity (the shipped ServiceAccount and RBAC) and its API
//!   requests, counted from kube-apiserver's audit log.
//! - [`cluster`]: a private etcd and kube-apiserver per section (the real binaries of the tested
//!   release), with the CRDs; bulk creation through the API; the shipped webhook configurations
//!   registered against a webhook on 127.0.0.1.
//!
//! The binary `booking-bench` runs the suite and writes `target/bench/results.json`;
//! `booking-bench --smoke` runs a seconds-long check of the harness itself (CI).

pub mod audit;
pub mod capture;
pub mod cluster;
pub mod echo;
pub mod fixtures;
pub mod load;
pub mod stats;
pub mod sys;
