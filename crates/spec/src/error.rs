//! What can go wrong while building a container's spec. Every error names the
//! container and the CRI field or the path at fault, and falls in one of two
//! kinds: the request cannot be honoured ([`ErrorKind::InvalidArgument`]), or
//! the host failed us ([`ErrorKind::Internal`]).

use std::io;
use std::path::{Path, PathBuf};

/// How an [`Error`] maps onto a gRPC status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request asks for something wrong or impossible here: a user that is
    /// not in the image, a host path that does not exist, an unknown
    /// capability or signal, a seccomp profile file that is missing.
    InvalidArgument,
    /// Reading a file or inspecting the host failed.
    Internal,
}

/// An error building a container's spec.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CRI field holds a value that cannot be used.
    #[error("container {id}: {field}: {reason}")]
    InvalidField {
        id: String,
        /// The CRI field, e.g. `linux.security_context.run_as_username`.
        field: String,
        reason: String,
    },
    /// A path named by the request cannot be used (missing, wrong type, ...).
    #[error("container {id}: {field} {}: {reason}", path.display())]
    InvalidPath {
        id: String,
        field: String,
        path: PathBuf,
        reason: String,
    },
    /// A system call or file read failed.
    #[error("container {id}: {op} {}: {source}", path.display())]
    Io {
        id: String,
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The gRPC-facing kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidField { .. } | Error::InvalidPath { .. } => ErrorKind::InvalidArgument,
            Error::Io { .. } => ErrorKind::Internal,
        }
    }

    /// The container the error is about.
    pub fn container_id(&self) -> &str {
        match self {
            Error::InvalidField { id, .. }
            | Error::InvalidPath { id, .. }
            | Error::Io { id, .. } => id,
        }
    }
}

/// An [`Error::InvalidField`].
pub(crate) fn invalid(id: &str, field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::InvalidField {
        id: id.to_string(),
        field: field.into(),
        reason: reason.into(),
    }
}

/// An [`Error::InvalidPath`].
pub(crate) fn invalid_path(
    id: &str,
    field: impl Into<String>,
    path: &Path,
    reason: impl Into<String>,
) -> Error {
    Error::InvalidPath {
        id: id.to_string(),
        field: field.into(),
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// An [`Error::Io`].
pub(crate) fn io_error(id: &str, op: &'static str, path: &Path, source: io::Error) -> Error {
    Error::Io {
        id: id.to_string(),
        path: path.to_owned(),
        op,
        source,
    }
}

/// A missing path is the request's fault; any other failure is the host's.
pub(crate) fn path_error(
    id: &str,
    field: &str,
    op: &'static str,
    path: &Path,
    e: io::Error,
) -> Error {
    match e.kind() {
        io::ErrorKind::NotFound => invalid_path(id, field, path, "does not exist"),
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => invalid_path(
            id,
            field,
            path,
            "a component of the path is not a directory",
        ),
        _ => io_error(id, op, path, e),
    }
}
