//! The daemon's RPC error, and the one place where it becomes a gRPC status.

use tonic::{Code, Status};

/// What an RPC handler can fail with. Every variant maps to one gRPC code.
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
}

impl Error {
    /// The gRPC code of this error.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound { .. } => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::Starting | Error::Unavailable(_) => Code::Unavailable,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::DataLoss(_) => Code::DataLoss,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Internal(_) => Code::Internal,
        }
    }
}

impl From<berth_oci_image::Error> for Error {
    fn from(e: berth_oci_image::Error) -> Error {
        use berth_oci_image::ErrorKind as K;
        let message = e.to_string();
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
}
