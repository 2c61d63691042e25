//! The lifecycle core's error, and the one place where it becomes a gRPC
//! status ([`Error::code`], `From<Error> for Status`).
//!
//! Failures of a mechanism keep their cause and say which object and which
//! step they belong to (`Network`, `Runtime`, `Io`, `Record`), so the code
//! a client sees follows the cause: a timed-out plugin or runtime is
//! DeadlineExceeded, a full disk ResourceExhausted, a shim that is gone
//! FailedPrecondition.

use std::path::PathBuf;

use tonic::{Code, Status};

/// What a core operation or an RPC handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{kind} {id:?} not found")]
    NotFound { kind: &'static str, id: String },
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error("{0} is not implemented by berth yet")]
    Unimplemented(&'static str),
    /// An RPC berth does not serve, and why.
    #[error("{rpc} is not implemented by berth: {why}")]
    NotServed {
        rpc: &'static str,
        why: &'static str,
    },
    #[error("berth is starting up and not ready to serve calls yet")]
    Starting,
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    DataLoss(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    Internal(String),
    /// A CNI call for a sandbox failed.
    #[error("pod sandbox {id}: {op}: {source}")]
    Network {
        id: String,
        op: &'static str,
        #[source]
        source: Box<berth_cni::Error>,
    },
    /// A shim or the OCI runtime failed for a container or sandbox.
    #[error("{id}: {op}: {source}")]
    Runtime {
        id: String,
        op: &'static str,
        #[source]
        source: Box<berth_shim::Error>,
    },
    /// A file, directory, mount or namespace operation failed.
    #[error("{id}: {op} {}: {source}", path.display())]
    Io {
        id: String,
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    // What the lifecycle core found wrong, by what it is (the code a client
    // sees is chosen in `Error::code`).
    /// A request's field that cannot be used as it is.
    #[error("{field}: {why}")]
    BadField { field: String, why: String },
    /// A runtime handler berth is not configured with.
    #[error("unknown runtime handler {0:?}")]
    UnknownHandler(String),
    /// A pod that is gone or not ready for what was asked in it.
    #[error("pod sandbox {id} is not ready{}", container.as_ref().map(|c| format!(" for container {c}")).unwrap_or_default())]
    PodNotReady {
        id: String,
        container: Option<String>,
    },
    /// A container in a state the operation cannot work from.
    #[error("container {id} is {state}: {why}")]
    ContainerState {
        id: String,
        state: String,
        why: &'static str,
    },
    /// A container's target PID namespace is not a running container's.
    #[error("PID namespace target {0:?} is not a running container")]
    PidTarget(String),
    /// A runtime handler's binary that is not there.
    #[error("pod {id}: runtime {runtime}: cannot run: no such executable (as a path or in PATH)")]
    RuntimeMissing { id: String, runtime: String },
    /// A spec that could not be encoded or read back.
    #[error("{id}: {op}: {why}")]
    Spec {
        id: String,
        op: &'static str,
        why: String,
    },
    /// A container's cgroup that cannot be found or changed.
    #[error("{id}: {why}")]
    Cgroup { id: String, why: String },
    /// A record could not be written or read.
    #[error(transparent)]
    Record(#[from] berth_store::RecordError),
    /// A cleanup after a failure did not finish: the object is kept so that a
    /// later Stop/Remove can finish it.
    #[error("{error} (and cleanup failed: {cleanup})")]
    Cleanup { error: Box<Error>, cleanup: String },
}

impl Error {
    /// A file operation on `path` for object `id`.
    pub fn io(
        id: &str,
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let (id, path) = (id.to_string(), path.into());
        move |source| Error::Io {
            id,
            op,
            path,
            source,
        }
    }

    /// A shim or runtime call for object `id`.
    pub fn runtime(id: &str, op: &'static str) -> impl FnOnce(berth_shim::Error) -> Error {
        let id = id.to_string();
        move |source| Error::Runtime {
            id,
            op,
            source: Box::new(source),
        }
    }

    /// A CNI call for sandbox `id`.
    pub fn network(id: &str, op: &'static str) -> impl FnOnce(berth_cni::Error) -> Error {
        let id = id.to_string();
        move |source| Error::Network {
            id,
            op,
            source: Box::new(source),
        }
    }

    /// A task that should not have failed (a panicked blocking task).
    pub fn join(e: tokio::task::JoinError) -> Error {
        Error::Internal(format!("a blocking task failed: {e}"))
    }

    /// The gRPC code of this error.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound { .. } => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::Unimplemented(_) | Error::NotServed { .. } => Code::Unimplemented,
            Error::Starting | Error::Unavailable(_) => Code::Unavailable,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::DataLoss(_) => Code::DataLoss,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Internal(_) => Code::Internal,
            Error::Network { source, .. } => match &**source {
                berth_cni::Error::Timeout { .. } => Code::DeadlineExceeded,
                berth_cni::Error::InvalidAttachment { .. } => Code::InvalidArgument,
                berth_cni::Error::NoNetwork { .. } | berth_cni::Error::NetworkNotFound { .. } => {
                    Code::FailedPrecondition
                }
                berth_cni::Error::Io { source, .. } | berth_cni::Error::Exec { source, .. } => {
                    io_code(source)
                }
                _ => Code::Internal,
            },
            Error::Runtime { source, .. } => shim_code(source),
            Error::Io { source, .. } => io_code(source),
            Error::Record(e) => match e {
                berth_store::RecordError::Io { source, .. } => io_code(source),
                _ => Code::Internal,
            },
            Error::Cleanup { error, .. } => error.code(),
            Error::BadField { .. } | Error::UnknownHandler(_) => Code::InvalidArgument,
            Error::PodNotReady { .. }
            | Error::ContainerState { .. }
            | Error::PidTarget(_)
            | Error::Cgroup { .. } => Code::FailedPrecondition,
            // As a runtime that cannot run is at create (containerd: Unknown).
            Error::RuntimeMissing { .. } | Error::Spec { .. } => Code::Internal,
        }
    }

    /// Adds the failures of a cleanup to this error, keeping its kind.
    pub fn with_cleanup(self, cleanup: String) -> Error {
        Error::Cleanup {
            error: Box::new(self),
            cleanup,
        }
    }
}

/// A full disk is ResourceExhausted; other I/O failures are Internal.
fn io_code(e: &std::io::Error) -> Code {
    if is_disk_full(e) {
        return Code::ResourceExhausted;
    }
    match e.kind() {
        std::io::ErrorKind::TimedOut => Code::DeadlineExceeded,
        _ => Code::Internal,
    }
}

/// ENOSPC, EDQUOT, or an error made as StorageFull (the image store's own
/// free-space reserve).
fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
}

fn shim_code(e: &berth_shim::Error) -> Code {
    match e {
        e if e.is_shim_gone() => Code::FailedPrecondition,
        berth_shim::Error::Timeout { .. } => Code::DeadlineExceeded,
        berth_shim::Error::Runtime { source, .. } if source.is_timeout() => Code::DeadlineExceeded,
        berth_shim::Error::Invalid { .. } => Code::InvalidArgument,
        berth_shim::Error::Io { source, .. } => io_code(source),
        e if e.is_not_found() => Code::NotFound,
        e if e.is_failed_precondition() => Code::FailedPrecondition,
        _ => Code::Internal,
    }
}

impl From<berth_oci_image::Error> for Error {
    fn from(e: berth_oci_image::Error) -> Error {
        use berth_oci_image::ErrorKind as K;
        let message = e.to_string();
        if let berth_oci_image::Error::Io { source, .. } = &e {
            // A full disk during a pull is the node's, not a bug.
            if is_disk_full(source) {
                return Error::ResourceExhausted(message);
            }
        }
        match e.kind() {
            K::InvalidArgument => Error::InvalidArgument(message),
            K::NotFound => Error::NotFound {
                kind: "image",
                id: message,
            },
            K::Unauthenticated => Error::Unauthenticated(message),
            K::PermissionDenied => Error::PermissionDenied(message),
            K::DeadlineExceeded => Error::DeadlineExceeded(message),
            K::Unavailable => Error::Unavailable(message),
            K::DataLoss => Error::DataLoss(message),
            K::Internal => Error::Internal(message),
        }
    }
}

impl From<berth_spec::Error> for Error {
    fn from(e: berth_spec::Error) -> Error {
        if e.kind() == berth_spec::ErrorKind::InvalidArgument {
            Error::InvalidArgument(e.to_string())
        } else {
            Error::Internal(e.to_string())
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        Status::new(e.code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_to_grpc_codes() {
        let s: Status = Error::Unimplemented("RunPodSandbox").into();
        assert_eq!(s.code(), Code::Unimplemented);
        assert!(s.message().contains("RunPodSandbox"));
        let s: Status = Error::NotFound {
            kind: "container",
            id: "abc".into(),
        }
        .into();
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "container \"abc\" not found");
        let s: Status = Error::Starting.into();
        assert_eq!(s.code(), Code::Unavailable);
    }

    #[test]
    fn causes_keep_their_kind() {
        let full =
            Error::io("abc", "writing", "/x")(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(full.code(), Code::ResourceExhausted);
        assert_eq!(
            full.to_string(),
            "abc: writing /x: No space left on device (os error 28)"
        );
        let pull: Error = berth_oci_image::Error::Io {
            op: "store blob",
            path: "/x".into(),
            source: std::sync::Arc::new(std::io::Error::from_raw_os_error(libc::ENOSPC)),
        }
        .into();
        assert_eq!(pull.code(), Code::ResourceExhausted);
        let cleanup =
            Error::FailedPrecondition("not ready".into()).with_cleanup("CNI DEL: busy".into());
        assert_eq!(cleanup.code(), Code::FailedPrecondition);
        assert_eq!(
            cleanup.to_string(),
            "not ready (and cleanup failed: CNI DEL: busy)"
        );
    }
}
