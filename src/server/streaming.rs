//! The streaming server (`crates/streaming`) behind Exec, Attach and
//! PortForward (`exec.rs`, `attach.rs`, `port_forward.rs` hand out its URLs):
//! its making, and the backend that serves its sessions: exec and attach
//! through the container's shim, port-forward to the pod's loopback from
//! inside its network namespace. With `streaming.enable_tls` it serves
//! HTTPS: the configured certificate, or a self-signed one made at each
//! start and written (the certificate only) to
//! `<state>/streaming/tls.crt` for clients that want to verify it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_shim::{AttachOptions, IoStream, StreamEvent};
use berth_streaming::{
    Backend, BackendError, Input, Output, PortStream, StreamIo, StreamingServer, TerminalSize,
    TlsIdentity,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::Cri;
use crate::config::StreamingConfig;
use crate::container::Container;
use crate::core::Core;
use crate::error::Error;
use crate::layout::Layout;
use crate::sandbox::SandboxState;

/// Bound on connecting to a port inside a pod.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the client's direction may go on after the pod's has ended.
const HALF_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The streaming server on the configured address (bound, not yet
/// serving: its owner, `crate::node`, serves it and shuts it down), over
/// `core`'s shims and pods.
pub fn server(
    config: &StreamingConfig,
    layout: &Layout,
    core: Arc<Core>,
) -> Result<StreamingServer, Error> {
    let mut server_config = config
        .server_config()
        .map_err(|(key, message)| Error::InvalidArgument(format!("{key}: {message}")))?;
    if config.enable_tls {
        server_config.tls = Some(identity(config, layout, server_config.addr.ip())?);
    }
    let backend = Arc::new(ShimBackend { core });
    StreamingServer::new(server_config, backend).map_err(|e| Error::Internal(e.to_string()))
}

/// The certificate the streaming server serves: the configured files,
/// or a new self-signed one for `ip`, the loopbacks and this host's
/// name, whose certificate is written to `Layout::streaming_cert`.
fn identity(
    streaming: &StreamingConfig,
    layout: &Layout,
    ip: IpAddr,
) -> Result<TlsIdentity, Error> {
    if !streaming.tls_cert_file.as_os_str().is_empty() {
        return TlsIdentity::from_files(&streaming.tls_cert_file, &streaming.tls_key_file)
            .map_err(|e| Error::InvalidArgument(format!("streaming.tls_cert_file: {e}")));
    }
    let mut names = vec![
        "localhost".to_string(),
        Ipv4Addr::LOCALHOST.to_string(),
        Ipv6Addr::LOCALHOST.to_string(),
    ];
    if !ip.is_unspecified() && !ip.is_loopback() {
        names.push(ip.to_string());
    }
    if let Ok(host) = nix::unistd::gethostname() {
        if let Some(host) = host.to_str().filter(|h| !h.is_empty()) {
            names.push(host.to_string());
        }
    }
    let identity = TlsIdentity::self_signed(&names).map_err(|e| Error::Internal(e.to_string()))?;
    let path = layout.streaming_cert();
    let written = (|| {
        let dir = path.parent().unwrap_or(&path);
        std::fs::create_dir_all(dir)?;
        // Like every subtree of the state dir (root reads it there).
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        berth_atomic_file::write(&path, identity.cert_pem().as_bytes(), 0o644)
    })();
    written.map_err(|e| {
        Error::Internal(format!(
            "writing the streaming certificate {}: {e}",
            path.display()
        ))
    })?;
    tracing::info!(cert = %path.display(), "streaming server: self-signed certificate");
    Ok(identity)
}

impl Cri {
    /// The streaming server (none in the unit tests of the CRI layer).
    pub(super) fn streaming_server(&self) -> Result<&StreamingServer, Error> {
        self.streaming
            .as_ref()
            .ok_or_else(|| Error::Unavailable("the streaming server is not running".into()))
    }
}

/// The RPC error of a streaming request the server refused.
pub(super) fn invalid(e: berth_streaming::Error) -> Error {
    match e {
        berth_streaming::Error::InvalidArgument(m) => Error::InvalidArgument(m),
        berth_streaming::Error::TooManyRequests(_) => Error::Unavailable(e.to_string()),
        e => Error::Internal(e.to_string()),
    }
}

/// The container, if it is running (exec and attach need that).
pub(super) fn running(cri: &Cri, id: &str) -> Result<Arc<Container>, Error> {
    cri.core.running_container(id)
}

/// Serves the streaming server's sessions with the core (the shims, through
/// its `Task`s) and the pods' network namespaces.
struct ShimBackend {
    core: Arc<Core>,
}

/// The streaming server's error for a core error, by its gRPC code.
fn backend_err(e: Error) -> BackendError {
    match e.code() {
        tonic::Code::NotFound => BackendError::NotFound(e.to_string()),
        tonic::Code::FailedPrecondition => BackendError::FailedPrecondition(e.to_string()),
        _ => BackendError::Internal(e.to_string()),
    }
}

#[tonic::async_trait]
impl Backend for ShimBackend {
    async fn exec(
        &self,
        req: &berth_streaming::ExecRequest,
        io: StreamIo,
    ) -> Result<i32, BackendError> {
        let stream = self
            .core
            .exec_stream(
                &req.container_id,
                req.cmd.clone(),
                req.tty,
                io.stdin.is_some(),
            )
            .await
            .map_err(backend_err)?;
        match relay(stream, io, false).await? {
            Some(code) => Ok(code),
            None => Err(BackendError::Internal(format!(
                "container {}: the exec ended without an exit status",
                req.container_id
            ))),
        }
    }

    async fn attach(
        &self,
        req: &berth_streaming::AttachRequest,
        io: StreamIo,
    ) -> Result<(), BackendError> {
        let opts = AttachOptions {
            stdin: io.stdin.is_some(),
            stdout: io.stdout.is_some(),
            stderr: io.stderr.is_some(),
        };
        let (stream, follow) = self
            .core
            .attach(&req.container_id, opts)
            .await
            .map_err(backend_err)?;
        relay(stream, io, !follow).await.map(|_| ())
    }

    async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        port: u16,
        stream: PortStream,
    ) -> Result<(), BackendError> {
        let sandbox = self.core.sandbox(pod_sandbox_id).map_err(backend_err)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(BackendError::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.meta.id
            )));
        }
        let pod = connect(sandbox.meta.netns.clone(), port)
            .await
            .map_err(|e| {
                BackendError::FailedPrecondition(format!(
                    "connecting to port {port} in pod sandbox {}: {e}",
                    sandbox.meta.id
                ))
            })?;
        splice(stream, pod).await;
        Ok(())
    }
}

/// Reads the client's stdin, or waits forever without one.
async fn read_input(input: &mut Option<Input>, buf: &mut [u8]) -> std::io::Result<usize> {
    match input {
        Some(input) => input.read(buf).await,
        None => std::future::pending().await,
    }
}

/// The next terminal size, or waits forever without a resize stream.
async fn next_size(sizes: &mut Option<mpsc::Receiver<TerminalSize>>) -> Option<TerminalSize> {
    match sizes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Writes to the client; a client that has gone stops getting output.
async fn write_output(out: &mut Option<Output>, data: &[u8]) {
    if let Some(w) = out {
        if w.write_all(data).await.is_err() {
            *out = None;
        }
    }
}

/// Moves a shim stream's output to the client and the client's stdin and
/// resizes to the shim, until the process (or container) exits: its exit
/// code. With `detach`, also until the client ends its stdin (the
/// container's stdin is closed then if it was made `stdin_once`): `None`.
async fn relay(stream: IoStream, io: StreamIo, detach: bool) -> Result<Option<i32>, BackendError> {
    let (mut reader, mut writer) = stream.split();
    let StreamIo {
        mut stdin,
        mut stdout,
        mut stderr,
        mut resize,
        ..
    } = io;
    let input = async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            tokio::select! {
                n = read_input(&mut stdin, &mut buf) => match n {
                    Ok(n) if n > 0 => {
                        if writer.stdin(&buf[..n]).await.is_err() {
                            stdin = None;
                        }
                    }
                    _ => {
                        stdin = None;
                        let _ = writer.close_stdin().await;
                        if detach {
                            return;
                        }
                    }
                },
                size = next_size(&mut resize) => match size {
                    Some(size) => {
                        if let Err(e) = writer.resize(size.width, size.height).await {
                            tracing::debug!(error = %e, "resizing the terminal");
                        }
                    }
                    None => resize = None,
                },
            }
        }
    };
    let output = async move {
        loop {
            match reader.next().await {
                Ok(Some(StreamEvent::Stdout(data))) => write_output(&mut stdout, &data).await,
                Ok(Some(StreamEvent::Stderr(data))) => write_output(&mut stderr, &data).await,
                Ok(Some(StreamEvent::Exit { exit_code, .. })) => return Ok(Some(exit_code)),
                Ok(None) => return Ok(None),
                Err(e) => return Err(BackendError::Internal(e.to_string())),
            }
        }
    };
    tokio::select! {
        result = output => result,
        () = input => Ok(None),
    }
}

/// Connects to `port` on the pod's loopback: from inside its network
/// namespace, on a dedicated thread (`None`: a host-network pod).
async fn connect(netns: Option<PathBuf>, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let dial = move || -> std::io::Result<std::net::TcpStream> {
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        std::net::TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT)
            .or_else(|e| std::net::TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|_| e))
    };
    let joined = match netns {
        Some(path) => {
            tokio::task::spawn_blocking(move || {
                berth_netns::run_in(&path, dial).map_err(std::io::Error::other)?
            })
            .await
        }
        None => tokio::task::spawn_blocking(dial).await,
    };
    let tcp = joined.map_err(std::io::Error::other)??;
    tcp.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(tcp)
}

/// Copies both ways, passing on half-closes. When the pod's side ends
/// first, the client's gets [`HALF_CLOSE_GRACE`] more; when the client's
/// ends first, the pod decides when to stop.
async fn splice(client: PortStream, pod: tokio::net::TcpStream) {
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut pod_read, mut pod_write) = pod.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut client_read, &mut pod_write).await;
        let _ = pod_write.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut pod_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        () = &mut up => down.await,
        () = &mut down => {
            let _ = tokio::time::timeout(HALF_CLOSE_GRACE, up).await;
        }
    }
}
