//! The harness's error type.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while setting up or driving a test environment.
///
/// Messages are written for the person reading a failed test: they say what was being done,
/// and for processes they carry the tail of the process's logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The project's Python virtualenv (or a tool in it) is missing.
    #[error(
        "{tool} not found at {path}: the project's Python virtualenv is missing or incomplete; \
         run `make venv` in the repository root (the test command `make test` does it)"
    )]
    VenvMissing {
        /// The executable looked for.
        tool: String,
        /// Where it was expected.
        path: PathBuf,
    },
    /// A file or directory operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A process could not be started.
    #[error("cannot start {name} ({program}): {source}")]
    Spawn {
        /// The harness's name for the process.
        name: String,
        /// The program run.
        program: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A process exited while the harness waited for it to become ready.
    #[error("{name} exited with {status} before it was ready; logs in {log_dir}:\n{log_tail}")]
    ExitedEarly {
        /// The harness's name for the process.
        name: String,
        /// How it exited.
        status: std::process::ExitStatus,
        /// Where its logs are.
        log_dir: PathBuf,
        /// The last lines of its stdout and stderr.
        log_tail: String,
    },
    /// A process did not become ready in time.
    #[error("{name} not ready after {waited:?} ({last_error}); logs in {log_dir}:\n{log_tail}")]
    NotReady {
        /// The harness's name for the process.
        name: String,
        /// How long the harness waited.
        waited: Duration,
        /// The last probe's failure.
        last_error: String,
        /// Where its logs are.
        log_dir: PathBuf,
        /// The last lines of its stdout and stderr.
        log_tail: String,
    },
    /// An HTTP exchange with a test server failed.
    #[error("HTTP {method} {url}: {message}")]
    Http {
        /// The request method.
        method: String,
        /// The request URL.
        url: String,
        /// What went wrong (transport error, or unexpected status and body).
        message: String,
    },
    /// A test server answered something the harness cannot read.
    #[error("unexpected answer from {what}: {message}")]
    Protocol {
        /// Which server or document.
        what: String,
        /// What was wrong with it.
        message: String,
    },
    /// An AWS SDK call made by a seeding helper failed.
    #[error("AWS call {operation} failed: {message}")]
    Aws {
        /// The AWS operation.
        operation: &'static str,
        /// The SDK's error, with its source chain.
        message: String,
    },
    /// Generating test certificates failed.
    #[error("test certificate generation failed: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A TLS configuration could not be built.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// Something did not happen within the given time.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// The control plane's binaries are missing and could not be built.
    #[error(
        "Kubernetes control plane binaries: {0}. They are built from their Go modules by \
         tests/control-plane/build.sh (needs `go`), or taken from KUBEBUILDER_ASSETS \
         (kube-apiserver, etcd, kubectl) and TEST_ASSET_KUBE_APISERVER, TEST_ASSET_ETCD, \
         TEST_ASSET_KUBECTL, TEST_ASSET_KUBE_CONTROLLER_MANAGER, TEST_ASSET_HELM"
    )]
    ControlPlaneBinaries(String),
    /// A test asked for the run's shared control plane outside `booking-control-plane run`.
    #[error(
        "no shared Kubernetes control plane: BOOKING_TEST_KUBECONFIG is not set. Run the tests \
         with `make test`, or wrap the test command: \
         `cargo run -p booking-harness --bin booking-control-plane -- run -- cargo nextest run ...`"
    )]
    NoSharedControlPlane,
    /// A Kubernetes client call or a kubectl command failed.
    #[error("Kubernetes: {0}")]
    Kube(String),
}

/// The harness's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] with a description of what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`Error::Aws`] from any SDK error, keeping its source chain in the message.
    pub(crate) fn aws(operation: &'static str, err: &dyn std::error::Error) -> Self {
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Error::Aws { operation, message }
    }
}
