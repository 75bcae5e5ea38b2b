//! The controller's error type. Each variant knows its metric label.

use crate::aws::AwsError;

/// Why a reconciliation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An AWS call failed in a way that leaves the observation unusable (e.g. the inventory).
    #[error("AWS: {0}")]
    Aws(#[from] AwsError),
    /// The object lacks something every object has (namespace, name).
    #[error("malformed object: {0}")]
    Malformed(String),
    /// A cache's watch ended before its first list (only during shutdown).
    #[error("cache closed before its first list: {0}")]
    CacheClosed(#[from] kube::runtime::reflector::store::WriterDropped),
}

impl Error {
    /// Label for the failures metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Aws(_) => "aws",
            Error::Malformed(_) => "malformed",
            Error::CacheClosed(_) => "cache",
        }
    }
}

/// Result with the controller's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
