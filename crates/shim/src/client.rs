//! The daemon's side of a shim (async, tokio): start one for a bundle, find
//! one again by its socket after a restart, and call it.
//!
//! Every call opens its own connection ([`crate::protocol`]). Short calls
//! are bounded by the client's request timeout; [`ShimClient::wait`] and the
//! streams are not (wrap them in `tokio::time::timeout` where needed).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::UnixStream;

use crate::error::Error;
use crate::options::{ShimOptions, ShimPaths};

mod stream;

use crate::protocol::{
    self, AttachRequest, ExecRequest, ExitInfo, FrameKind, Request, Response, ShimState,
};
pub(crate) use stream::read_frame;
use stream::write_frame;
pub use stream::{IoStream, StreamEvent, StreamReader, StreamWriter};

/// Bound on short calls unless [`ShimClient::set_request_timeout`] says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// Most bytes of each stream [`ShimClient::exec_sync`] keeps (the rest is
/// read and dropped): CRI's message limit.
pub const MAX_EXEC_OUTPUT: usize = 16 << 20;

/// How to start a shim.
#[derive(Debug, Clone)]
pub struct SpawnOptions {
    /// The `berth-shim` executable.
    pub shim_binary: PathBuf,
    /// What the shim is told.
    pub shim: ShimOptions,
    /// Bound on the shim's start-up answer (it includes `runtime create`);
    /// by default the runtime timeout plus 10 s.
    pub start_timeout: Option<Duration>,
}

impl SpawnOptions {
    /// Start `shim_binary` with `shim`.
    pub fn new(shim_binary: impl Into<PathBuf>, shim: ShimOptions) -> SpawnOptions {
        SpawnOptions {
            shim_binary: shim_binary.into(),
            shim,
            start_timeout: None,
        }
    }
}

/// A process to run in the container, with a stream of its stdio.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Unique per container while it runs: `[A-Za-z0-9_.-]`, up to 64 bytes.
    pub exec_id: String,
    /// The process (its `terminal` is set from `tty`).
    pub process: oci_spec::runtime::Process,
    pub tty: bool,
    pub stdin: bool,
    /// The shim kills the process after this long and reports `timed_out`.
    pub timeout: Option<Duration>,
}

/// Which of the container's streams to attach to.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttachOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// What [`ShimClient::exec_sync`] collected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code (137 when the timeout killed it).
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The timeout killed the process.
    pub timed_out: bool,
    /// Output beyond [`MAX_EXEC_OUTPUT`] per stream was dropped.
    pub truncated: bool,
}

/// Deletes container `id` from its runtime and ends its shim, whichever of
/// them is still there: through the shim (`runtime delete --force`, then the
/// shim exits) when it answers, else with `runtime` directly. Idempotent: a
/// container the runtime holds no state for (no `<root>/<id>`) is already
/// deleted, and that check costs no runtime call. Returns `Ok` only once
/// the shim is told to go too: a shim whose own delete failed while the
/// direct one worked is asked again (its delete then finds nothing left and
/// it exits), else it would serve on, unreachable once its dir is removed.
pub async fn delete_container(
    shim_dir: &Path,
    runtime: &crate::runc::Runtime,
    id: &str,
) -> Result<(), Error> {
    let socket = ShimPaths::new(shim_dir).socket();
    let mut shim_failed = false;
    if socket.exists() {
        if let Ok(client) = ShimClient::connect(&socket).await {
            // On failure (a runtime error or timeout, or the shim ending
            // mid-call because another delete got there first) the
            // runtime's own state decides below.
            if client.delete(true).await.is_ok() {
                return Ok(());
            }
            shim_failed = true;
        }
    }
    if runtime.root().join(id).exists() {
        let (runtime, owned) = (runtime.clone(), id.to_string());
        let deleted = tokio::task::spawn_blocking(move || runtime.delete(&owned, true))
            .await
            .map_err(|e| Error::Protocol {
                id: id.to_string(),
                message: format!("runtime delete task: {e}"),
            })?;
        match deleted {
            Err(e) if !e.is_not_found() => {
                return Err(Error::Runtime {
                    id: id.to_string(),
                    source: Box::new(e),
                })
            }
            _ => {}
        }
    }
    // A shim that ended meanwhile removed its socket.
    if shim_failed && socket.exists() {
        let again = match ShimClient::connect(&socket).await {
            Ok(client) => client.delete(true).await,
            Err(e) => Err(e),
        };
        if let Err(e) = again {
            if socket.exists() {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A connection to one shim. Cheap to clone; holds no connection itself.
#[derive(Debug, Clone)]
pub struct ShimClient {
    id: String,
    socket: PathBuf,
    exit_file: PathBuf,
    shim_pid: u32,
    pid: u32,
    request_timeout: Duration,
    /// Spawned with `run --detach`: the container runs already, and the
    /// first [`ShimClient::start`] reports it without a round trip (the
    /// shim's own Start would only echo the pid it answered with).
    started: Option<Arc<AtomicBool>>,
}

impl ShimClient {
    /// Starts a shim, which creates the container (`runtime create`); returns
    /// once it is created, or with the runtime's error.
    pub async fn spawn(opts: &SpawnOptions) -> Result<ShimClient, Error> {
        let shim = &opts.shim;
        let id = shim.id.clone();
        validate(shim)?;
        let paths = shim.paths();
        let io_err = |what: &'static str, path: &Path| {
            let (id, path) = (id.clone(), path.to_path_buf());
            move |source| Error::Io {
                id,
                what,
                path,
                source,
            }
        };
        tokio::fs::create_dir_all(paths.dir())
            .await
            .map_err(io_err("creating", paths.dir()))?;
        // The shim's stderr until it opens the log itself: start-up errors land there too.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(paths.shim_log())
            .map_err(io_err("opening", &paths.shim_log()))?;
        let mut child = tokio::process::Command::new(&opts.shim_binary)
            .args(shim.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(false)
            .spawn()
            .map_err(io_err("starting", &opts.shim_binary))?;
        let mut stdout = child.stdout.take().ok_or_else(|| Error::Protocol {
            id: id.clone(),
            message: "the shim's stdout is not a pipe".into(),
        })?;
        let timeout = start_timeout(shim, opts.start_timeout);
        let answer = tokio::time::timeout(timeout, read_frame(&mut stdout)).await;
        // The first process forks the shim and exits at once: reap it.
        let first = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        let answer = answer.map_err(|_| Error::Timeout {
            id: id.clone(),
            what: "shim start-up",
            timeout,
        })?;
        let frame = answer.map_err(|e| Error::Protocol {
            id: id.clone(),
            message: format!("reading the shim's answer: {e}"),
        })?;
        let Some((kind, payload)) = frame else {
            let status = match first {
                Ok(Ok(status)) => status.to_string(),
                _ => "still running".into(),
            };
            return Err(Error::Protocol {
                id: id.clone(),
                message: format!(
                    "the shim ended without answering (first process: {status}); {}",
                    log_tail(&paths.shim_log())
                ),
            });
        };
        ShimClient::created(shim, kind, &payload)
    }

    /// The client of the shim started with `shim` that answered `payload`
    /// (a frame of `kind`), or the error it answered.
    pub(crate) fn created(
        shim: &ShimOptions,
        kind: FrameKind,
        payload: &[u8],
    ) -> Result<ShimClient, Error> {
        let paths = shim.paths();
        match decode_response(&shim.id, kind, payload)? {
            Response::Created { pid, shim_pid } => Ok(ShimClient {
                id: shim.id.clone(),
                socket: paths.socket(),
                exit_file: paths.exit_file(),
                shim_pid,
                pid,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                started: shim.run_detached.then(|| Arc::new(AtomicBool::new(false))),
            }),
            other => Err(unexpected(&shim.id, other)),
        }
    }

    /// Finds a running shim by its socket (after a daemon restart).
    pub async fn connect(socket: impl AsRef<Path>) -> Result<ShimClient, Error> {
        let mut client = ShimClient {
            id: String::new(),
            socket: socket.as_ref().to_path_buf(),
            exit_file: PathBuf::new(),
            shim_pid: 0,
            pid: 0,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            started: None,
        };
        let state = client.state().await?;
        client.id = state.id;
        client.exit_file = state.exit_file;
        client.shim_pid = state.shim_pid;
        client.pid = state.pid;
        Ok(client)
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The shim's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The exit file ([`crate::read_exit_file`]).
    pub fn exit_file(&self) -> &Path {
        &self.exit_file
    }

    /// The shim process's pid.
    pub fn shim_pid(&self) -> u32 {
        self.shim_pid
    }

    /// The container's init pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Bounds short calls (everything but wait and streams) by `timeout`.
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.request_timeout = timeout;
    }

    /// The shim's view of the container.
    pub async fn state(&self) -> Result<ShimState, Error> {
        match self.call(&Request::State).await? {
            Response::State(state) => Ok(state),
            other => Err(unexpected(&self.id, other)),
        }
    }

    /// Starts the container; returns its pid. One spawned with `run
    /// --detach` runs already: its first start is answered here, a second
    /// one is refused as the shim would refuse it.
    pub async fn start(&self) -> Result<u32, Error> {
        if let Some(started) = &self.started {
            if started.swap(true, Ordering::SeqCst) {
                return Err(Error::Remote {
                    id: self.id.clone(),
                    source: protocol::RemoteError::new(
                        protocol::ErrorKind::FailedPrecondition,
                        format!("container {} was started already", self.id),
                    ),
                });
            }
            return Ok(self.pid);
        }
        match self.call(&Request::Start).await? {
            Response::Started { pid } => Ok(pid),
            other => Err(unexpected(&self.id, other)),
        }
    }

    /// Signals the container's init (`all`: every process in it).
    pub async fn kill(&self, signal: i32, all: bool) -> Result<(), Error> {
        self.call_ok(&Request::Kill { signal, all }).await
    }

    /// Waits (without bound) until the container has exited.
    pub async fn wait(&self) -> Result<ExitInfo, Error> {
        let resp = self.exchange(&Request::Wait).await?;
        match resp {
            Response::Exited(info) => Ok(info),
            other => Err(unexpected(&self.id, other)),
        }
    }

    /// Resizes the container's terminal.
    pub async fn resize(&self, width: u16, height: u16) -> Result<(), Error> {
        self.call_ok(&Request::Resize { width, height }).await
    }

    /// Reopens the container's log file (after kubelet rotated it).
    pub async fn reopen_log(&self) -> Result<(), Error> {
        self.call_ok(&Request::ReopenLog).await
    }

    /// Updates the container's resources (`runtime update`).
    pub async fn update(&self, resources: &oci_spec::runtime::LinuxResources) -> Result<(), Error> {
        let resources = serde_json::to_value(resources).map_err(|e| Error::Invalid {
            id: self.id.clone(),
            message: format!("encoding resources: {e}"),
        })?;
        self.call_ok(&Request::Update { resources }).await
    }

    /// Freezes the container.
    pub async fn pause(&self) -> Result<(), Error> {
        self.call_ok(&Request::Pause).await
    }

    /// Thaws the container.
    pub async fn resume(&self) -> Result<(), Error> {
        self.call_ok(&Request::Resume).await
    }

    /// Deletes the container (`runtime delete`); the shim then exits. The
    /// exit file stays.
    pub async fn delete(&self, force: bool) -> Result<(), Error> {
        self.call_ok(&Request::Delete { force }).await
    }

    /// Runs `process` in the container and collects its output (ExecSync).
    /// The shim kills it after `timeout` and says so in `timed_out`.
    pub async fn exec_sync(
        &self,
        process: &oci_spec::runtime::Process,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput, Error> {
        let opts = ExecOptions {
            exec_id: new_exec_id("sync"),
            process: process.clone(),
            tty: false,
            stdin: false,
            timeout,
        };
        let mut stream = self.exec(&opts).await?;
        let mut out = ExecOutput::default();
        let collect = async {
            while let Some(event) = stream.next().await? {
                match event {
                    StreamEvent::Stdout(data) => {
                        out.truncated |= append_capped(&mut out.stdout, &data)
                    }
                    StreamEvent::Stderr(data) => {
                        out.truncated |= append_capped(&mut out.stderr, &data)
                    }
                    StreamEvent::Exit {
                        exit_code,
                        timed_out,
                    } => {
                        out.exit_code = exit_code;
                        out.timed_out = timed_out;
                        return Ok(true);
                    }
                }
            }
            Ok::<bool, Error>(false)
        };
        // The shim enforces the timeout; this only guards against a shim
        // that stopped answering.
        let guard = timeout.map(|t| t + self.request_timeout);
        let exited = match guard {
            Some(g) => tokio::time::timeout(g, collect)
                .await
                .map_err(|_| Error::Timeout {
                    id: self.id.clone(),
                    what: "exec",
                    timeout: g,
                })??,
            None => collect.await?,
        };
        if !exited {
            return Err(Error::Protocol {
                id: self.id.clone(),
                message: "the exec stream ended without an exit status".into(),
            });
        }
        Ok(out)
    }

    /// Starts a process in the container and streams its stdio.
    pub async fn exec(&self, opts: &ExecOptions) -> Result<IoStream, Error> {
        let process = serde_json::to_value(&opts.process).map_err(|e| Error::Invalid {
            id: self.id.clone(),
            message: format!("encoding the process: {e}"),
        })?;
        let req = Request::Exec(ExecRequest {
            exec_id: opts.exec_id.clone(),
            process,
            tty: opts.tty,
            stdin: opts.stdin,
            timeout_ms: opts
                .timeout
                .map(|t| t.as_millis().min(u64::MAX as u128) as u64),
        });
        match self.open_stream(&req).await? {
            (Response::Started { pid }, stream) => Ok(stream.with_pid(pid)),
            (other, _) => Err(unexpected(&self.id, other)),
        }
    }

    /// Streams the container's live output and, if asked, feeds its stdin.
    pub async fn attach(&self, opts: AttachOptions) -> Result<IoStream, Error> {
        let req = Request::Attach(AttachRequest {
            stdin: opts.stdin,
            stdout: opts.stdout,
            stderr: opts.stderr,
        });
        match self.open_stream(&req).await? {
            (Response::Ok, stream) => Ok(stream),
            (other, _) => Err(unexpected(&self.id, other)),
        }
    }

    async fn open_stream(&self, req: &Request) -> Result<(Response, IoStream), Error> {
        let fut = async {
            let mut conn = self.send(req).await?;
            let resp = self.read_response(&mut conn).await?;
            Ok::<_, Error>((resp, conn))
        };
        let (resp, conn) = self.bounded(fut).await?;
        Ok((resp, IoStream::new(&self.id, conn)))
    }

    async fn call_ok(&self, req: &Request) -> Result<(), Error> {
        match self.call(req).await? {
            Response::Ok => Ok(()),
            other => Err(unexpected(&self.id, other)),
        }
    }

    /// One request, bounded by the request timeout.
    async fn call(&self, req: &Request) -> Result<Response, Error> {
        self.bounded(self.exchange(req)).await
    }

    async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.request_timeout, fut)
            .await
            .map_err(|_| Error::Timeout {
                id: self.id.clone(),
                what: "shim request",
                timeout: self.request_timeout,
            })?
    }

    /// One request and its answer, unbounded.
    async fn exchange(&self, req: &Request) -> Result<Response, Error> {
        let mut conn = self.send(req).await?;
        self.read_response(&mut conn).await
    }

    async fn send(&self, req: &Request) -> Result<UnixStream, Error> {
        let io_err = |what: &'static str| {
            move |source| Error::Io {
                id: self.id.clone(),
                what,
                path: self.socket.clone(),
                source,
            }
        };
        let mut conn = UnixStream::connect(&self.socket)
            .await
            .map_err(io_err("connecting to"))?;
        let payload = serde_json::to_vec(req).map_err(|e| io_err("encoding for")(e.into()))?;
        write_frame(&mut conn, FrameKind::Json, &payload)
            .await
            .map_err(io_err("writing to"))?;
        Ok(conn)
    }

    async fn read_response(&self, conn: &mut UnixStream) -> Result<Response, Error> {
        let frame = read_frame(conn).await.map_err(|e| Error::Io {
            id: self.id.clone(),
            what: "reading from",
            path: self.socket.clone(),
            source: e,
        })?;
        let Some((kind, payload)) = frame else {
            return Err(Error::Protocol {
                id: self.id.clone(),
                message: "the shim hung up without answering".into(),
            });
        };
        decode_response(&self.id, kind, &payload)
    }
}

/// `shim` checked as the shim will check it.
pub(crate) fn validate(shim: &ShimOptions) -> Result<(), Error> {
    shim.validate().map_err(|message| Error::Invalid {
        id: shim.id.clone(),
        message,
    })
}

/// Bound on a shim's start-up answer: `given`, or the runtime timeout plus 10 s.
pub(crate) fn start_timeout(shim: &ShimOptions, given: Option<Duration>) -> Duration {
    given.unwrap_or(shim.runtime_timeout + Duration::from_secs(10))
}

fn decode_response(id: &str, kind: FrameKind, payload: &[u8]) -> Result<Response, Error> {
    match protocol::decode::<Response>(kind, payload) {
        Ok(Response::Error(source)) => Err(Error::Remote {
            id: id.to_string(),
            source,
        }),
        Ok(resp) => Ok(resp),
        Err(e) => Err(Error::Protocol {
            id: id.to_string(),
            message: e.to_string(),
        }),
    }
}

fn unexpected(id: &str, resp: Response) -> Error {
    Error::Protocol {
        id: id.to_string(),
        message: format!("unexpected answer {resp:?}"),
    }
}

/// Appends up to the cap; says whether anything was dropped.
fn append_capped(into: &mut Vec<u8>, data: &[u8]) -> bool {
    let room = MAX_EXEC_OUTPUT.saturating_sub(into.len());
    into.extend_from_slice(&data[..data.len().min(room)]);
    data.len() > room
}

/// A fresh exec id, unique in this process: `prefix` (`[A-Za-z0-9_.-]`),
/// pid, time and a counter.
pub fn new_exec_id(prefix: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos:x}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The last lines of the shim's log, for an error message.
pub(crate) fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
            format!("{}: {tail}", path.display())
        }
        Err(e) => format!("{}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests;
