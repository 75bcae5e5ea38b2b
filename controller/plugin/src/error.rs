//! The plugin's one error type. Each variant is something the user can act on; its message
//! names what was given and the fix. [`Error::exit_code`] follows kubectl: 1 for a failed or
//! refused request (clap itself exits 2 for bad usage).

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag or argument that parsed but means nothing valid (a bad time, duration, zone, …).
    #[error("{0}")]
    Usage(String),
    /// No kubeconfig, an unknown context, or a cluster that cannot be reached.
    #[error("{0}")]
    Kubeconfig(String),
    /// The API server refused or failed the request; the message is the server's (for a
    /// webhook denial, the webhook's message as it is).
    #[error("{0}")]
    Api(String),
    /// A named object that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// An object that is not in a state the command applies to (releasing a finished booking,
    /// extending one that has ended, …); the message says what to do instead.
    #[error("{0}")]
    State(String),
    /// An AWS call that failed, or no credentials.
    #[error("{0}")]
    Aws(String),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(String),
}

impl Error {
    /// The process exit code: 2 for usage errors (as clap's own), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }

    /// An API error, with the server's message for a refused request (an admission denial is
    /// shown exactly as the webhook wrote it).
    pub fn from_kube(what: &str, e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) if status.code == 404 => {
                Error::NotFound(format!("{what}: {}", status.message))
            }
            kube::Error::Api(status) => Error::Api(format!("{what}: {}", status.message)),
            other => Error::Api(format!("{what}: {other}")),
        }
    }
}

/// Result of the plugin's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
