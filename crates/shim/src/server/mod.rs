//! The shim process itself (the `berth-shim` binary calls [`main`]).
//!
//! Start-up: parse the options, fork (the parent exits at once, so the daemon
//! only waits for that short-lived process) and `setsid`, so the shim
//! outlives the daemon and no signal to the daemon's group or session reaches
//! it; become child subreaper; block SIGCHLD for the reaper; bind the socket;
//! `runtime create` with the container's stdio; then answer on stdout (a pipe
//! the daemon reads) with [`Response::Created`] or [`Response::Error`], point
//! stdout at /dev/null, and serve one request per connection, a thread each.
//!
//! A standby shim (`--standby`, see `standby`) does the same with its
//! options read from stdin instead of its command line, after having done
//! everything that needs none ahead.
//!
//! Threads of an idle shim: the accept loop, the reaper, the exit monitor,
//! and one copier per output stream. No async runtime: an idle shim stays
//! well under 2 MiB of RSS (see the crate README).

mod exec;
mod io;
mod reaper;
mod setup;
mod standby;
mod worker;

use berth_lock::MutexExt;
use std::fmt;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::crilog::format_timestamp;
use crate::options::ShimOptions;
use crate::protocol::{
    self, AttachRequest, ContainerStatus, ErrorKind, ExitInfo, RemoteError, Request, Response,
    ShimState,
};
use crate::runc::Runtime;
use crate::sys;
use crate::ShimPaths;

use self::io::{ContainerIo, StdinSink};
use self::reaper::{Reaper, Subscription};
use self::setup::{setup, OomWatch, Started};

/// How long the exit monitor waits for the output to reach EOF before it
/// records the exit anyway (a process outside the container's PID namespace
/// may hold the pipes).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// How long a forced delete waits for the killed init's exit to be recorded.
const DELETE_EXIT_WAIT: Duration = Duration::from_secs(10);

/// How long a new connection may take to send its request.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a silent attach looks whether its client hung up.
const ATTACH_HANGUP_CHECK: Duration = Duration::from_secs(1);

/// How long to wait for the pty master after a successful create.
const CONSOLE_WAIT: Duration = Duration::from_secs(5);

/// Writes a line to the shim's log (its stderr, redirected to `shim.log`).
pub(crate) fn log(args: fmt::Arguments<'_>) {
    let line = format!(
        "{} berth-shim[{}]: {args}\n",
        format_timestamp(SystemTime::now()),
        std::process::id()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The entry point of the `berth-shim` binary.
pub fn main() -> ! {
    close_inherited_fds();
    let mut args = std::env::args_os().skip(1).peekable();
    match args.peek().and_then(|a| a.to_str()) {
        Some("--version") => {
            println!("berth-shim {}", env!("CARGO_PKG_VERSION"));
            std::process::exit(0);
        }
        Some("--help") | Some("-h") | None => {
            eprintln!(
                "usage: berth-shim --id ID --bundle DIR --state-dir DIR [--runtime BIN] \
                 [--runtime-root DIR] [--runtime-timeout-ms N] [--log-path FILE] \
                 [--systemd-cgroup] [--runtime-arg ARG]... [--stdin] [--stdin-once] [--tty]\n\
                 or:    berth-shim --standby --state-root DIR (the same, framed, on stdin)\n\
                 Started by the berth daemon, one per container; answers on stdout."
            );
            std::process::exit(2);
        }
        Some("--standby") => standby::main(args.skip(1)),
        _ => {}
    }
    let opts = match ShimOptions::from_args(args) {
        Ok(opts) => opts,
        Err(msg) => {
            eprintln!("berth-shim: {msg}");
            std::process::exit(2);
        }
    };
    detach();
    finish(setup(opts), || {})
}

/// Answers the start-up's outcome on stdout; then (after `after`) serves,
/// or exits.
fn finish(started: Result<Started, RemoteError>, after: impl FnOnce()) -> ! {
    let started = match started {
        Ok(started) => started,
        Err(err) => {
            log(format_args!("start-up failed: {}", err.message));
            answer(&Response::Error(err));
            std::process::exit(1);
        }
    };
    answer(&Response::Created {
        pid: started.shim.pid,
        shim_pid: std::process::id(),
    });
    let shim = started.run();
    after();
    serve(shim)
}

/// Closes every descriptor above stderr the daemon let us inherit: the shim
/// must not keep the daemon's files (or pass them on to runtimes).
fn close_inherited_fds() {
    // SAFETY: close_range on descriptors nothing in this fresh process uses.
    let done = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } == 0;
    if done {
        return;
    }
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|fd| *fd > 2)
            .collect(),
        Err(_) => return,
    };
    for fd in fds {
        // SAFETY: as above (the directory's own descriptor is closed already
        // and close fails harmlessly on it).
        unsafe { libc::close(fd) };
    }
}

/// Forks; the parent exits at once and the child leads a new session.
fn detach() {
    // SAFETY: no thread has been started yet, so the child may do anything.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            // SAFETY: _exit ends the process without touching shared state.
            unsafe { libc::_exit(0) }
        }
        Ok(nix::unistd::ForkResult::Child) => {
            let _ = nix::unistd::setsid();
        }
        Err(e) => {
            eprintln!("berth-shim: fork: {e}");
            std::process::exit(1);
        }
    }
}

/// Sends the start-up answer on stdout and points stdout at /dev/null, so
/// the daemon's pipe sees EOF.
fn answer(resp: &Response) {
    let mut out = std::io::stdout().lock();
    let _ = protocol::write_json(&mut out, resp);
    let _ = out.flush();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto fd 1 (stdout), which we own.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

fn internal(what: impl fmt::Display, e: impl fmt::Display) -> RemoteError {
    RemoteError::new(ErrorKind::Internal, format!("{what}: {e}"))
}

/// A log that could not be opened: refused for what is at its place (a
/// symlink, …) is the caller's precondition, anything else internal.
fn log_error(what: impl fmt::Display, e: crate::crilog::LogError) -> RemoteError {
    let kind = if e.is_refused() {
        ErrorKind::FailedPrecondition
    } else {
        ErrorKind::Internal
    };
    RemoteError::new(kind, format!("{what}: {e}"))
}

/// The container's life as the shim sees it.
struct Life {
    status: ContainerStatus,
    exit: Option<ExitInfo>,
    /// When the runtime was told to run it (`run --detach` or `start`).
    started_at_ns: Option<i64>,
}

/// `t` in nanoseconds since the Unix epoch (0 before it).
fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// One shim: its container, its runtime, its stdio.
pub(crate) struct Shim {
    opts: ShimOptions,
    paths: ShimPaths,
    runtime: Runtime,
    reaper: Arc<Reaper>,
    io: Arc<ContainerIo>,
    pid: u32,
    life: Mutex<Life>,
    changed: Condvar,
    seq: AtomicU64,
    /// With `run_detached`: whether Start has been answered.
    start_reported: AtomicBool,
    listener: UnixListener,
}

/// The pid a runtime wrote to `path`.
pub(crate) fn read_pid_file(path: &Path) -> std::io::Result<u32> {
    let text = std::fs::read_to_string(path)?;
    text.trim().parse().map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} holds {text:?}, not a pid", path.display()),
        )
    })
}

/// Serves connections until a delete ends the process.
fn serve(shim: Arc<Shim>) -> ! {
    loop {
        match shim.listener.accept() {
            Ok((conn, _)) => {
                let s = shim.clone();
                let spawned = std::thread::Builder::new()
                    .name("conn".into())
                    .stack_size(256 * 1024)
                    .spawn(move || s.handle(conn));
                if let Err(e) = spawned {
                    log(format_args!("cannot start a connection thread: {e}"));
                }
            }
            Err(e) => {
                log(format_args!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl Shim {
    fn life(&self) -> MutexGuard<'_, Life> {
        self.life.lock_unpoisoned()
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    fn require_running(&self, what: &str) -> Result<(), RemoteError> {
        let life = self.life();
        if life.status != ContainerStatus::Running {
            return Err(RemoteError::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "cannot {what} container {}: it is {:?}",
                    self.opts.id, life.status
                ),
            ));
        }
        Ok(())
    }

    /// Waits for the container's init and records how it ended: exit file
    /// first, then everyone waiting is told.
    fn monitor(&self, init: Subscription, oom: OomWatch) {
        let exit = loop {
            if let Some(exit) = init.wait(None) {
                break exit;
            }
        };
        drop(init);
        // The bundle's spec, read once for both questions below.
        let spec = bundle_spec(&self.opts.bundle);
        if spec.as_ref().is_some_and(shares_pid_namespace) {
            // No PID namespace of its own: the init's death does not end the
            // rest, which would hold the pipes and live on. End them, as
            // containerd does (`kill --all` signals the whole cgroup).
            if let Err(e) = self.runtime.kill(&self.opts.id, libc::SIGKILL, true) {
                eprintln!("berth-shim {}: killing what is left: {e}", self.opts.id);
            }
        }
        self.io.wait_copiers(OUTPUT_DRAIN);
        // The container's cgroup stays until the runtime deletes it, after
        // the exit is recorded.
        let oom = oom.resolve(spec.as_ref());
        let oom_killed = oom.is_some_and(|(counter, base)| match counter.read() {
            Ok(n) => n > base,
            Err(e) => {
                log(format_args!("reading {}: {e}", counter.file().display()));
                false
            }
        });
        let exited_at_ns = unix_ns(exit.at);
        let info = ExitInfo {
            pid: self.pid,
            exit_code: sys::exit_code(exit.status),
            exited_at_ns,
            oom_killed,
        };
        let exit_file = self.paths.exit_file();
        {
            // The file first, then everyone told; under the state's lock,
            // so that no state request answers Running once the exit file
            // is there (recovery reads both).
            let mut life = self.life();
            if let Err(e) = crate::write_exit_file(&exit_file, &info) {
                log(format_args!("writing {}: {e}", exit_file.display()));
            }
            life.exit = Some(info);
            life.status = ContainerStatus::Stopped;
        }
        self.changed.notify_all();
        self.io.broadcast_exit(info.exit_code);
        log(format_args!(
            "{} exited with {} (oom killed: {oom_killed})",
            self.opts.id, info.exit_code
        ));
    }

    /// Waits up to `timeout` (`None`: for ever) for the recorded exit.
    fn wait_exit(&self, timeout: Option<Duration>) -> Option<ExitInfo> {
        let mut life = self.life();
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(exit) = life.exit {
                return Some(exit);
            }
            life = match deadline {
                None => self.changed.wait(life).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.changed
                        .wait_timeout(life, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    fn state(&self) -> ShimState {
        let life = self.life();
        ShimState {
            id: self.opts.id.clone(),
            pid: self.pid,
            shim_pid: std::process::id(),
            status: life.status,
            exit: life.exit,
            exit_file: self.paths.exit_file(),
            started_at_ns: life.started_at_ns,
        }
    }

    /// Sets the status after a runtime call succeeded, unless the container
    /// has exited meanwhile.
    fn set_status(&self, status: ContainerStatus) {
        let mut life = self.life();
        if life.exit.is_none() {
            life.status = status;
        }
    }

    fn start(&self) -> Result<Response, RemoteError> {
        // Run at once: the first Start reports it (it may have exited since).
        if self.opts.run_detached {
            if self.start_reported.swap(true, Ordering::SeqCst) {
                return Err(RemoteError::new(
                    ErrorKind::FailedPrecondition,
                    format!("container {} was started already", self.opts.id),
                ));
            }
            return Ok(Response::Started { pid: self.pid });
        }
        if self.life().status != ContainerStatus::Created {
            return Err(RemoteError::new(
                ErrorKind::FailedPrecondition,
                format!("container {} is not in the created state", self.opts.id),
            ));
        }
        let started_at = unix_ns(SystemTime::now());
        self.runtime.start(&self.opts.id)?;
        self.set_status(ContainerStatus::Running);
        self.life().started_at_ns.get_or_insert(started_at);
        Ok(Response::Started { pid: self.pid })
    }

    fn kill(&self, signal: i32, all: bool) -> Result<Response, RemoteError> {
        if !(1..=64).contains(&signal) {
            return Err(RemoteError::new(
                ErrorKind::InvalidRequest,
                format!("{signal} is not a signal number"),
            ));
        }
        if !all && self.life().exit.is_some() {
            return Ok(Response::Ok);
        }
        match self.runtime.kill(&self.opts.id, signal, all) {
            Ok(()) => Ok(Response::Ok),
            // It exited between our look and the runtime's.
            Err(_) if !all && self.wait_exit(Some(Duration::from_millis(200))).is_some() => {
                Ok(Response::Ok)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn delete(&self, force: bool) -> Result<Response, RemoteError> {
        match self.runtime.delete(&self.opts.id, force) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        // A forced delete killed the init: record its exit before going.
        if self.wait_exit(Some(DELETE_EXIT_WAIT)).is_none() {
            log(format_args!(
                "{} deleted before its exit was seen",
                self.opts.id
            ));
        }
        Ok(Response::Ok)
    }

    fn handle(&self, mut conn: UnixStream) {
        let _ = conn.set_read_timeout(Some(REQUEST_READ_TIMEOUT));
        let req = match protocol::read_frame(&mut conn) {
            Ok(Some((kind, payload))) => protocol::decode::<Request>(kind, &payload),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        let _ = conn.set_read_timeout(None);
        let req = match req {
            Ok(req) => req,
            Err(e) => {
                let err = RemoteError::new(ErrorKind::InvalidRequest, e.to_string());
                let _ = protocol::write_json(&mut conn, &Response::Error(err));
                return;
            }
        };
        let id = &self.opts.id;
        let resp = match req {
            Request::State => Ok(Response::State(self.state())),
            Request::Start => self.start(),
            Request::Kill { signal, all } => self.kill(signal, all),
            Request::Wait => Ok(self.wait_exit(None).map_or(Response::Ok, Response::Exited)),
            Request::Exec(req) => {
                if let Err(e) = exec::exec(self, conn, req) {
                    log(format_args!("exec: {e}"));
                }
                return;
            }
            Request::Attach(req) => {
                self.attach(conn, req);
                return;
            }
            Request::Resize { width, height } => self
                .io
                .resize(width, height)
                .map(|()| Response::Ok)
                .map_err(|e| RemoteError::new(ErrorKind::FailedPrecondition, e.to_string())),
            Request::ReopenLog => match self.io.reopen_log() {
                Some(result) => result
                    .map(|()| Response::Ok)
                    .map_err(|e| log_error("reopening the log", e)),
                None => Err(RemoteError::new(
                    ErrorKind::FailedPrecondition,
                    "reopening the log: the container has no log file",
                )),
            },
            Request::Update { resources } => self
                .runtime
                .update(id, &resources)
                .map(|()| Response::Ok)
                .map_err(RemoteError::from),
            Request::Pause => self.runtime.pause(id).map_err(RemoteError::from).map(|()| {
                self.set_status(ContainerStatus::Paused);
                Response::Ok
            }),
            Request::Resume => self
                .runtime
                .resume(id)
                .map_err(RemoteError::from)
                .map(|()| {
                    self.set_status(ContainerStatus::Running);
                    Response::Ok
                }),
            Request::Delete { force } => match self.delete(force) {
                Ok(resp) => {
                    let _ = protocol::write_json(&mut conn, &resp);
                    let _ = conn.flush();
                    self.exit_after_delete();
                }
                Err(e) => Err(e),
            },
        };
        let resp = resp.unwrap_or_else(Response::Error);
        let _ = protocol::write_json(&mut conn, &resp);
    }

    /// Removes the shim's own files (not the exit file: the daemon reads it)
    /// and ends the process.
    fn exit_after_delete(&self) -> ! {
        let _ = std::fs::remove_file(self.paths.socket());
        let _ = std::fs::remove_file(self.paths.pid_file());
        log(format_args!("{} deleted; shim exits", self.opts.id));
        std::process::exit(0)
    }

    fn attach(&self, mut conn: UnixStream, req: AttachRequest) {
        if req.stdin && !self.io.has_stdin() {
            let err = RemoteError::new(
                ErrorKind::FailedPrecondition,
                format!("container {} has no open stdin", self.opts.id),
            );
            let _ = protocol::write_json(&mut conn, &Response::Error(err));
            return;
        }
        // With a terminal everything comes as stdout.
        let (sub_id, rx) = self.io.subscribe(req.stdout, req.stderr && !self.opts.tty);
        if protocol::write_json(&mut conn, &Response::Ok).is_err() {
            self.io.unsubscribe(sub_id);
            return;
        }
        let reader = conn.try_clone().ok().and_then(|c| {
            let io = self.io.clone();
            let close_on_end = req.stdin && self.opts.stdin_once;
            let stdin = req.stdin;
            std::thread::Builder::new()
                .name("attach-stdin".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut sink = AttachSink {
                        io: &io,
                        stdin,
                        close_on_end,
                    };
                    io::read_client_frames(c, &mut sink)
                })
                .ok()
        });
        loop {
            let event = match rx.recv_timeout(ATTACH_HANGUP_CHECK) {
                Ok(event) => event,
                // A silent container: look whether the client is still there.
                Err(RecvTimeoutError::Timeout) if !io::peer_gone(&conn) => continue,
                Err(_) => break,
            };
            let sent = match event {
                io::OutEvent::Data(stream, data) => io::send_output(&mut conn, stream, &data),
                io::OutEvent::Exit(exit_code) => {
                    let _ = protocol::write_json(
                        &mut conn,
                        &protocol::Control::Exit {
                            exit_code,
                            timed_out: false,
                        },
                    );
                    break;
                }
            };
            if sent.is_err() {
                break;
            }
        }
        self.io.unsubscribe(sub_id);
        let _ = conn.shutdown(std::net::Shutdown::Both);
        if let Some(reader) = reader {
            let _ = reader.join();
        }
    }
}

/// An attach client's stdin and resizes, for the container.
struct AttachSink<'a> {
    io: &'a ContainerIo,
    stdin: bool,
    close_on_end: bool,
}

impl StdinSink for AttachSink<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        if !self.stdin {
            return Ok(());
        }
        self.io.write_stdin(data)
    }
    fn close(&mut self) {
        if self.close_on_end {
            self.io.close_stdin();
        }
    }
    fn resize(&mut self, width: u16, height: u16) -> std::io::Result<()> {
        self.io.resize(width, height)
    }
}

/// The bundle's spec (`config.json`), as JSON.
fn bundle_spec(bundle: &std::path::Path) -> Option<serde_json::Value> {
    let text = std::fs::read(bundle.join("config.json")).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Whether a bundle's container (its `spec`) joins an existing PID
/// namespace (the pod's, another container's, or the host's) instead of
/// making its own.
fn shares_pid_namespace(spec: &serde_json::Value) -> bool {
    let Some(namespaces) = spec["linux"]["namespaces"].as_array() else {
        return true;
    };
    !namespaces
        .iter()
        .any(|ns| ns["type"] == "pid" && ns["path"].as_str().is_none_or(|p| p.is_empty()))
}
