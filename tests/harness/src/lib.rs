//! The booking operator's end-to-end test harness.
//!
//! Everything a test (or the local sandbox) needs around the product, run as real processes
//! and servers on 127.0.0.1:
//!
//! - [`process`]: child processes with logs in a per-test [`TestDir`], readiness waits with
//!   deadlines, stop by PID (SIGTERM, then SIGKILL, to the whole process group) on drop —
//!   also on panic, when the logs are kept and their tails printed.
//! - [`moto`]: the moto AWS emulator from the project's virtualenv, its reset and request
//!   recorder (AWS calls counted by action), SDK configuration and seeding of tagged EC2 and
//!   RDS instances.
//! - [`smtp`]: a real SMTP server (aiosmtpd, `tests/python/smtp_server.py`) with AUTH PLAIN
//!   and LOGIN, STARTTLS or implicit TLS, one RFC 5322 file per received message.
//! - [`proxy`]: a fault-injecting HTTP proxy in front of moto that answers chosen actions
//!   with AWS-shaped errors (throttling, `IncorrectInstanceState`, errors tied to one
//!   instance) a given number of times, and records each request's time and action.
//! - [`webhook_receiver`]: a real HTTPS endpoint for webhook notifications that records what
//!   it gets and answers as told (a status, or an error body that never ends).
//! - [`tls`]: a CA and serving certificates generated at test time (rcgen), written to the
//!   test directory; no private key is ever committed.
//!
//! # Example
//!
//! ```no_run
//! use booking_harness::TestDir;
//! use booking_harness::aws_query::Service;
//! use booking_harness::moto::{MotoServer, seed_ec2_instances};
//! use booking_harness::proxy::{Fault, FaultProxy};
//! use booking_harness::smtp::{SmtpOptions, SmtpServer};
//! use booking_harness::tls::TestCa;
//!
//! # async fn example() -> booking_harness::Result<()> {
//! let dir = TestDir::new("start_throttled")?;
//! let moto = MotoServer::start(&dir).await?;
//! let ids = seed_ec2_instances(&moto.ec2(), 2, &[("resource-booking-application", "web")]).await?;
//! moto.start_recording().await?;
//!
//! // The product talks to the proxy, which throttles the first two StartInstances calls.
//! let proxy = FaultProxy::start(&moto.endpoint_url()).await?;
//! proxy.inject(Fault::throttle(Service::Ec2, "StartInstances").times(2));
//! let aws_env = proxy.env(); // AWS_ENDPOINT_URL, fake keys, region: give to the controller
//!
//! let ca = TestCa::new(&dir, "smtp")?;
//! let cert = ca.issue_server_cert("smtp", &["localhost", "127.0.0.1"])?;
//! let smtp = SmtpServer::start(
//!     &dir,
//!     SmtpOptions::default().require_auth("mailer", "pw").starttls(&cert),
//! )
//! .await?;
//!
//! // ... run the controller against `aws_env` and `smtp.port()`, then:
//! let calls = moto.action_counts().await?;
//! assert_eq!(calls.get(Service::Ec2, "StartInstances"), 1);
//! assert_eq!(proxy.count("StartInstances"), 3);
//! let mails = smtp.wait_for_messages(1, std::time::Duration::from_secs(10)).await?;
//! assert!(mails[0].tls);
//! # drop((ids, aws_env));
//! # Ok(())
//! # }
//! ```
//!
//! The Python tools come from `<repo>/.venv` (or `$BOOKING_HARNESS_VENV`); `make venv`
//! creates it from `tests/requirements.txt`, and `make test` does so first. Without it the
//! starters fail with [`Error::VenvMissing`], which says so.
//!
//! Test directories are deleted after a passing test and kept (path printed on stderr) after
//! a panic, or always with `BOOKING_HARNESS_KEEP=1`.
//!
//! # Known moto gaps (moto 5.2.5)
//!
//! Tests against moto must not take these for AWS behaviour; the product's state rules are
//! unit-tested separately against the real AWS semantics.
//!
//! - EC2 instances and RDS DB instances jump straight to `stopped`/`running` (`available`):
//!   there is no `pending`/`stopping` (`starting`/`stopping`) phase to observe, though
//!   `RunInstances` itself answers `pending`.
//! - moto accepts stopping an already stopped EC2 instance and starting a terminated one;
//!   real AWS refuses the latter (`IncorrectInstanceState`). Use the [`proxy`] to inject
//!   such errors.
//! - moto never throttles; use the [`proxy`] for `RequestLimitExceeded` / `Throttling`.
//! - Pagination of `DescribeInstances` counts reservations (one per `RunInstances` call),
//!   not instances, so `MaxResults` pages differ from AWS's.
//! - A `DescribeInstances` of 50 instances takes about 0.2 s: keep per-test fleets small.
//!
//! # Processes outliving a killed test
//!
//! Children are stopped when their handle is dropped. If the test process is killed
//! outright (SIGKILL, a runner's timeout) no destructor runs; the Python helpers
//! (`tests/python/*.py`) therefore watch their parent (`BOOKING_HARNESS_PARENT_PID`) and
//! exit on their own within half a second.

pub mod aws_query;
pub mod control_plane;
mod error;
mod http_util;
pub mod kube_proxy;
pub mod moto;
pub mod paths;
pub mod process;
pub mod proxy;
pub mod smtp;
pub mod tls;
pub mod webhook_receiver;

pub use error::{Error, Result};
pub use paths::{TestDir, free_port};

/// Polls `check` every 150 ms until it answers `Ok`, for at most `timeout`; then panics naming
/// `what` and the last answer (a test's wait for something that must happen).
pub async fn wait_for<F, Fut>(what: &str, timeout: std::time::Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), String>>,
{
    if let Err(e) = try_wait_for(what, timeout, check).await {
        panic!("{e}")
    }
}

/// [`wait_for`] that returns the failure (naming `what` and the last answer) instead of
/// panicking, for a test that adds what it saw meanwhile to the report.
pub async fn try_wait_for<F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut check: F,
) -> std::result::Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), String>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return Ok(()),
            Err(last) if std::time::Instant::now() >= deadline => {
                return Err(format!(
                    "timed out after {timeout:?} waiting for {what}: {last}"
                ));
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(150)).await,
        }
    }
}
