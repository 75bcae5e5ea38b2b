//! The controller's one error type. Each variant knows its metric label.

use crate::aws::AwsError;

/// Why a reconciliation failed (it is retried with the context's backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An AWS call failed in a way that leaves the observation unusable (e.g. the inventory).
    #[error("AWS: {0}")]
    Aws(#[from] AwsError),
    /// The object lacks something every stored object has (namespace, name).
    #[error("malformed object: {0}")]
    Malformed(String),
    /// A status could not be serialized.
    #[error("status not serializable: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    /// Every value of [`Error::metric_label`].
    pub const METRIC_LABELS: [&'static str; 5] =
        ["conflict", "kube", "aws", "malformed", "serialize"];

    /// Label for the failures metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            _ if self.is_conflict() => "conflict",
            Error::Kube(_) => "kube",
            Error::Aws(_) => "aws",
            Error::Malformed(_) => "malformed",
            Error::Serialize(_) => "serialize",
        }
    }
}

impl Error {
    /// Whether the API server refused a write made from a stale read (409 Conflict).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(e)) if e.code == 409)
    }
}

/// Result with the controller's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
