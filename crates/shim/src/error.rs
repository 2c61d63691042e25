//! The error of the shim library: what the client (and the exit-file reader)
//! can fail with. Every variant names the container and, where there is one,
//! the path it is about.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::{ErrorKind, RemoteError};

/// A shim operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Options that cannot work (bad id, socket path too long, …).
    #[error("shim of {id}: {message}")]
    Invalid { id: String, message: String },
    /// A file, socket or process of the shim could not be used.
    #[error("shim of {id}: {what} {}: {source}", path.display())]
    Io {
        id: String,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The shim answered with an error (a runtime failure keeps the runtime's
    /// exit status and stderr).
    #[error("shim of {id}: {source}")]
    Remote {
        id: String,
        #[source]
        source: RemoteError,
    },
    /// The shim did not answer in time.
    #[error("shim of {id}: {what} timed out after {timeout:?}")]
    Timeout {
        id: String,
        what: &'static str,
        timeout: Duration,
    },
    /// The shim said something that makes no sense, or hung up early.
    #[error("shim of {id}: {message}")]
    Protocol { id: String, message: String },
    /// The OCI runtime, called directly (the shim being gone), failed.
    #[error("runtime for {id}: {source}")]
    Runtime {
        id: String,
        #[source]
        source: Box<crate::runc::RuncError>,
    },
    /// An exit file that is not valid JSON.
    #[error("exit file {}: {source}", path.display())]
    ExitFile {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// The shim's error, when it answered with one.
    pub fn remote(&self) -> Option<&RemoteError> {
        match self {
            Error::Remote { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The OCI runtime's exit status, when the runtime failed.
    pub fn runtime_exit_status(&self) -> Option<i32> {
        self.remote().and_then(|r| r.exit_status)
    }

    /// Whether the runtime said the container does not exist.
    pub fn is_not_found(&self) -> bool {
        self.remote().is_some_and(RemoteError::is_not_found)
    }

    /// Whether the shim refused because of the container's state.
    pub fn is_failed_precondition(&self) -> bool {
        self.remote()
            .is_some_and(|r| r.kind == ErrorKind::FailedPrecondition)
    }

    /// Whether the shim is gone: its socket is missing or refuses connections.
    pub fn is_shim_gone(&self) -> bool {
        matches!(self, Error::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused))
    }
}
