//! What the server asks of the runtime: run a process in a container with
//! the client's stdio, attach to a container's stdio, and connect to a port
//! inside a pod. The requests are the ones the CRI RPCs hand over.

use std::pin::Pin;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::error::Error;

/// The client's stdin: EOF when the client closed it.
pub type Input = Pin<Box<dyn AsyncRead + Send>>;
/// Where a process's output goes to the client.
pub type Output = Pin<Box<dyn AsyncWrite + Send>>;
/// One forwarded connection, the client's end: bytes to the port, bytes
/// from it; a shut-down write side is the client's half-close.
pub type PortStream = tokio::io::DuplexStream;

/// `Exec`: a command to run in a running container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub container_id: String,
    pub cmd: Vec<String>,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// `Attach`: the stdio of a running container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    pub container_id: String,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// `PortForward`: ports of a pod. SPDY clients name the port per
/// connection; WebSocket clients get these (or name them in the URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortForwardRequest {
    pub pod_sandbox_id: String,
    pub ports: Vec<u16>,
}

fn check_streams(tty: bool, stdin: bool, stdout: bool, stderr: bool) -> Result<(), Error> {
    if tty && stderr {
        return Err(Error::InvalidArgument(
            "tty and stderr cannot both be true".into(),
        ));
    }
    if !stdin && !stdout && !stderr {
        return Err(Error::InvalidArgument(
            "one of stdin, stdout, or stderr must be set".into(),
        ));
    }
    Ok(())
}

impl ExecRequest {
    /// The checks kubelet makes before it hands out a URL.
    pub fn validate(&self) -> Result<(), Error> {
        if self.container_id.is_empty() {
            return Err(Error::InvalidArgument(
                "missing required container_id".into(),
            ));
        }
        if self.cmd.is_empty() {
            return Err(Error::InvalidArgument("missing required cmd".into()));
        }
        check_streams(self.tty, self.stdin, self.stdout, self.stderr)
    }
}

impl AttachRequest {
    /// The checks kubelet makes before it hands out a URL.
    pub fn validate(&self) -> Result<(), Error> {
        if self.container_id.is_empty() {
            return Err(Error::InvalidArgument(
                "missing required container_id".into(),
            ));
        }
        check_streams(self.tty, self.stdin, self.stdout, self.stderr)
    }
}

impl PortForwardRequest {
    /// The checks kubelet makes before it hands out a URL.
    pub fn validate(&self) -> Result<(), Error> {
        if self.pod_sandbox_id.is_empty() {
            return Err(Error::InvalidArgument(
                "missing required pod_sandbox_id".into(),
            ));
        }
        if self.ports.contains(&0) {
            return Err(Error::InvalidArgument("port 0 cannot be forwarded".into()));
        }
        if self.ports.len() > crate::websocket::MAX_PORTS {
            return Err(Error::InvalidArgument(format!(
                "at most {} ports per request",
                crate::websocket::MAX_PORTS
            )));
        }
        Ok(())
    }
}

/// A terminal size, as clients send it on the resize stream
/// (`{"Width":80,"Height":24}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    #[serde(rename = "Width", alias = "width")]
    pub width: u16,
    #[serde(rename = "Height", alias = "height")]
    pub height: u16,
}

/// The client's side of an exec or attach: the streams it asked for.
pub struct StreamIo {
    pub stdin: Option<Input>,
    pub stdout: Option<Output>,
    /// Absent with a terminal (its output is all on stdout).
    pub stderr: Option<Output>,
    pub tty: bool,
    /// Terminal sizes as the client changes them (with `tty`).
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

impl std::fmt::Debug for StreamIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamIo")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("tty", &self.tty)
            .field("resize", &self.resize.is_some())
            .finish()
    }
}

/// Why the runtime could not serve a stream. Its text reaches the client
/// (the error stream of an exec or attach, the error stream of a port).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Internal(String),
}

/// The runtime behind the server.
///
/// Each call's future is dropped when the client goes away (or the server
/// stops): an implementation must then end what it started (dropping the
/// shim's stream ends an exec). Implementations drop `io` (or the port
/// stream) when they return, so the server knows all output is written.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Runs `req.cmd` in the container; returns its exit code once it has
    /// exited and its output has been written to `io`.
    async fn exec(&self, req: &ExecRequest, io: StreamIo) -> Result<i32, BackendError>;

    /// Connects `io` to the container's live stdio; returns when the
    /// container exits, or when the client ends its stdin (after closing
    /// the container's stdin if it was made with `stdin_once`; such a
    /// container without a tty keeps its output attached until it exits,
    /// so that its answer to the input reaches the client).
    async fn attach(&self, req: &AttachRequest, io: StreamIo) -> Result<(), BackendError>;

    /// Connects `stream` to `port` on the pod's loopback; returns when both
    /// directions have ended.
    async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        port: u16,
        stream: PortStream,
    ) -> Result<(), BackendError>;
}
