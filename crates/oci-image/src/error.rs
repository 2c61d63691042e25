//! Errors of the image library. Every error carries the image reference, the
//! blob digest or the path it is about, and has an [`ErrorKind`] that maps to
//! one gRPC code. Errors are `Clone` because one pull's result is handed to
//! every caller that waited for it (see `ImageStore::pull`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The class of an [`Error`], named after the gRPC code it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A malformed image reference or registry configuration.
    InvalidArgument,
    /// An unknown image, repository, manifest or platform.
    NotFound,
    /// The registry wants credentials, or refused the ones given.
    Unauthenticated,
    /// The registry knows who we are and still says no.
    PermissionDenied,
    /// The pull made no progress for `progress_timeout`.
    DeadlineExceeded,
    /// The registry could not be reached or failed (network, 5xx).
    Unavailable,
    /// The registry sent content that is wrong or hostile: digest or size
    /// mismatch, truncated data, an unsupported format, a tar entry that
    /// escapes its root.
    DataLoss,
    /// A local failure (disk, I/O) or a bug.
    Internal,
}

/// What went wrong in the image store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    #[error("invalid registry configuration: {0}")]
    Config(String),
    #[error("invalid credentials: {0}")]
    InvalidAuth(String),
    #[error("image {0:?} not found")]
    ImageNotFound(String),
    #[error("{reference}: not found at {registry}: {message}")]
    RemoteNotFound {
        reference: String,
        registry: String,
        message: String,
    },
    #[error("{reference}: registry {registry} wants valid credentials: {message}")]
    Unauthenticated {
        reference: String,
        registry: String,
        message: String,
    },
    #[error("{reference}: registry {registry} denied access: {message}")]
    PermissionDenied {
        reference: String,
        registry: String,
        message: String,
    },
    #[error("{reference}: no progress for {timeout:?} (pull aborted)")]
    ProgressTimeout {
        reference: String,
        timeout: Duration,
    },
    #[error("{reference}: registry {registry}: {message}")]
    Registry {
        reference: String,
        registry: String,
        message: String,
    },
    #[error("{reference}: content {digest}: {reason}")]
    BadContent {
        reference: String,
        digest: String,
        reason: String,
    },
    #[error("image archive {}: {reason}", path.display())]
    BadArchive { path: PathBuf, reason: String },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: Arc<std::io::Error>,
    },
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// The class of this error (and so its gRPC code).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidReference { .. } | Error::Config(_) | Error::InvalidAuth(_) => {
                ErrorKind::InvalidArgument
            }
            Error::ImageNotFound(_) | Error::RemoteNotFound { .. } => ErrorKind::NotFound,
            Error::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::ProgressTimeout { .. } => ErrorKind::DeadlineExceeded,
            Error::Registry { .. } => ErrorKind::Unavailable,
            Error::BadContent { .. } => ErrorKind::DataLoss,
            Error::BadArchive { .. } => ErrorKind::InvalidArgument,
            Error::Io { .. } | Error::Internal(_) => ErrorKind::Internal,
        }
    }

    /// An I/O error on `path` during `op`.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// Bad content from the registry.
    pub(crate) fn bad(reference: &str, digest: &str, reason: impl Into<String>) -> Error {
        Error::BadContent {
            reference: reference.to_string(),
            digest: digest.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_reference(reference: &str, reason: impl Into<String>) -> Error {
        Error::InvalidReference {
            reference: reference.to_string(),
            reason: reason.into(),
        }
    }
}
