//! The streaming crate's errors.

use std::net::SocketAddr;

/// What the server's own calls fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request kubelet would refuse (the RPC answers InvalidArgument).
    #[error("{0}")]
    InvalidArgument(String),
    /// Too many URLs handed out and not used yet.
    #[error("too many streaming requests in flight ({0}); try again later")]
    TooManyRequests(usize),
    #[error("binding the streaming server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A [`crate::Config`] the server cannot run with.
    #[error("streaming server configuration: {0}")]
    Config(String),
    #[error("the streaming server is already serving")]
    AlreadyServing,
    #[error("streaming server: {0}")]
    Io(#[from] std::io::Error),
    #[error("streaming server: no randomness for a token: {0}")]
    Random(String),
    /// A certificate or key file that cannot be read.
    #[error("streaming TLS: {path}: {source}")]
    TlsFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A certificate or key that cannot be used.
    #[error("streaming TLS: {0}")]
    Tls(String),
}
