//! Command-line flags; every flag can also be given as an environment variable.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use booking_shared::validation::Policy;
use clap::{Args as ClapArgs, Parser};

use crate::server::Limits;

/// Rejects overlapping or malformed bookings at admission time and fills defaults.
#[derive(Parser, Debug, Clone)]
#[command(name = "booking-webhook", version, about)]
pub struct Args {
    /// Serving certificate.
    #[clap(flatten)]
    pub tls: TlsArgs,
    /// Listeners and limits.
    #[clap(flatten)]
    pub server: ServerArgs,
    /// Admission rules.
    #[clap(flatten)]
    pub policy: PolicyArgs,
}

/// The serving certificate.
#[derive(ClapArgs, Debug, Clone)]
pub struct TlsArgs {
    /// PEM certificate chain served on the admission port (reloaded when it changes).
    #[arg(long, env = "TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,
    /// PEM private key of the certificate (reloaded when it changes).
    #[arg(long, env = "TLS_KEY_FILE")]
    pub tls_key_file: PathBuf,
    /// How often to check the certificate files for changes, in seconds.
    #[arg(long, env = "TLS_RELOAD_INTERVAL_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub tls_reload_interval_seconds: u64,
    /// PEM CA certificate(s) that must have signed a client certificate: when set, TLS
    /// handshakes without a valid client certificate from this CA are refused (give the API
    /// server that certificate through its admission configuration's kubeConfigFile). Unset:
    /// no client certificate is asked for.
    #[arg(long, env = "WEBHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
}

impl TlsArgs {
    /// The poll interval.
    pub fn reload_interval(&self) -> Duration {
        Duration::from_secs(self.tls_reload_interval_seconds)
    }
}

/// Listeners and limits.
#[derive(ClapArgs, Debug, Clone)]
pub struct ServerArgs {
    /// Address of the HTTPS admission listener (`POST /validate`, `POST /mutate`).
    #[arg(long, env = "WEBHOOK_LISTEN_ADDR", default_value = "0.0.0.0:8443")]
    pub listen_addr: SocketAddr,
    /// Address of the plain-HTTP admin listener (`/healthz`, `/readyz`, `/metrics`).
    #[arg(long, env = "WEBHOOK_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "WEBHOOK_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Deadline for a TLS handshake, for reading request headers and for reading a body, in
    /// seconds.
    #[arg(long, env = "WEBHOOK_REQUEST_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub request_timeout_seconds: u64,
    /// How long open connections may take to finish after SIGTERM, in seconds.
    #[arg(long, env = "WEBHOOK_SHUTDOWN_GRACE_SECONDS", default_value_t = 20)]
    pub shutdown_grace_seconds: u64,
    /// After SIGTERM, how long `/readyz` fails while admission requests are still served (so
    /// that the Service's endpoints drop this replica first), in seconds; then the listener
    /// stops accepting and open requests get --shutdown-grace-seconds.
    #[arg(long, env = "WEBHOOK_DRAIN_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub drain_seconds: u64,
    /// Most open admission connections; further ones wait in the listen backlog.
    #[arg(long, env = "WEBHOOK_MAX_CONNECTIONS", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: u32,
    /// Most concurrent HTTP/2 streams per connection.
    #[arg(long, env = "WEBHOOK_MAX_CONCURRENT_STREAMS", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_concurrent_streams: u32,
    /// Most admission requests being read or judged at once; a request waits up to
    /// --request-timeout-seconds for a place, then gets 503.
    #[arg(long, env = "WEBHOOK_MAX_IN_FLIGHT_REQUESTS", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_in_flight_requests: u32,
    /// Most bytes of large request bodies (over 64 KiB, or of unknown length, counted at their
    /// declared or largest size) held at once; a request waits up to
    /// --request-timeout-seconds for room, then gets 503. Small bodies (every real review)
    /// never wait for it. At least --max-body-bytes.
    #[arg(long, env = "WEBHOOK_MAX_IN_FLIGHT_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_in_flight_body_bytes: usize,
    /// How long the booking watch may fail before the webhook goes unready and refuses booking
    /// reviews (its overlap index may be stale), in seconds; ready again after a relist.
    #[arg(long, env = "WEBHOOK_WATCH_FAILURE_BOUND_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub watch_failure_bound_seconds: u32,
}

impl ServerArgs {
    /// The limits of the admission server.
    pub fn limits(&self) -> Limits {
        let timeout = Duration::from_secs(self.request_timeout_seconds);
        Limits {
            max_body_bytes: self.max_body_bytes,
            handshake_timeout: timeout,
            header_read_timeout: timeout,
            body_read_timeout: timeout,
            shutdown_grace: Duration::from_secs(self.shutdown_grace_seconds),
            max_connections: self.max_connections as usize,
            max_concurrent_streams: self.max_concurrent_streams,
            max_in_flight_requests: self.max_in_flight_requests as usize,
            max_in_flight_body_bytes: self.max_in_flight_body_bytes.max(self.max_body_bytes),
        }
    }

    /// The drain period after SIGTERM.
    pub fn drain(&self) -> Duration {
        Duration::from_secs(self.drain_seconds)
    }
}

/// The default longest booking, in minutes: 30 days.
pub const DEFAULT_MAX_BOOKING_MINUTES: u32 = 30 * 24 * 60;

/// Admission rules.
#[derive(ClapArgs, Debug, Clone)]
pub struct PolicyArgs {
    /// Longest booking (and scheduler duration) allowed, in minutes; 0 allows any length. The
    /// default, 43200, is 30 days.
    #[arg(long, env = "MAX_BOOKING_MINUTES", default_value_t = DEFAULT_MAX_BOOKING_MINUTES)]
    pub max_booking_minutes: u32,
    /// How long an admitted booking's slot stays reserved in the overlap index until the watch
    /// delivers the booking, in seconds.
    #[arg(long, env = "RESERVATION_TTL_SECONDS", default_value_t = 30)]
    pub reservation_ttl_seconds: u32,
    /// Most reservations one requester (`userInfo.username`) may hold at once: bookings it
    /// created or moved that the watch has not delivered yet. Beyond it a real (not dry-run)
    /// request is refused, naming the bound, until the watch catches up.
    #[arg(long, env = "MAX_RESERVATIONS_PER_REQUESTER", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_reservations_per_requester: u32,
    /// Require a Booking's `spec.user_id` to be the authenticated requester, and only its
    /// creator to change its `user_id`, `end_at` or `resource_name`, unless a
    /// SubjectAccessReview grants the verb `book-for-others` on `bookings` in the namespace.
    /// Off by default (the original's manifests carry external user ids).
    #[arg(long, env = "RESTRICT_USER_ID", default_value_t = false)]
    pub restrict_user_id: bool,
    /// Deadline of one SubjectAccessReview of `--restrict-user-id`, in milliseconds; a review
    /// that does not answer in time refuses the request.
    #[arg(long, env = "AUTHORIZATION_TIMEOUT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    pub authorization_timeout_ms: u64,
}

impl PolicyArgs {
    /// The policy of the validation rules.
    pub fn policy(&self) -> anyhow::Result<Policy> {
        Ok(Policy {
            max_booking_duration: (self.max_booking_minutes > 0)
                .then(|| chrono::Duration::minutes(i64::from(self.max_booking_minutes))),
        })
    }
}
