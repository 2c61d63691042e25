//! The OCI runtime command line (`runc`, or any binary with the same CLI such
//! as `crun`): one method per verb, every invocation bounded by a timeout, and
//! a typed error that keeps the exit status and stderr.
//!
//! Methods block: call them from a plain thread, or from `spawn_blocking` in
//! async code. How processes are started and waited for is a [`Spawner`]:
//! [`DirectSpawner`] (the default) waits on its own children, while the shim,
//! a child subreaper that reaps with `waitpid(-1)`, plugs in its reaper so that
//! no exit is stolen from the code waiting for runc.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::sys::{self, ReadOutcome};

/// Default bound on one runtime invocation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long output is still read after the runtime exited, in case a process
/// it left behind holds the pipes.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// Most stdout or stderr bytes kept from one invocation.
const MAX_CAPTURE: usize = 4 << 20;

/// An OCI runtime invocation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RuncError {
    /// The runtime binary could not be started.
    #[error("{binary} {command} {id}: cannot run: {source}", binary = .binary.display())]
    Spawn {
        binary: PathBuf,
        command: &'static str,
        id: String,
        #[source]
        source: io::Error,
    },
    /// The invocation ran past its timeout and was killed.
    #[error("{binary} {command} {id}: timed out after {timeout:?}{}", fmt_stderr(.stderr), binary = .binary.display())]
    Timeout {
        binary: PathBuf,
        command: &'static str,
        id: String,
        timeout: Duration,
        stderr: String,
    },
    /// The runtime exited with a non-zero status (128 + signal if killed).
    #[error("{binary} {command} {id}: exit status {status}{}", fmt_stderr(.stderr), binary = .binary.display())]
    Failed {
        binary: PathBuf,
        command: &'static str,
        id: String,
        status: i32,
        stderr: String,
    },
    /// The runtime succeeded but its output is not what it should be.
    #[error("{binary} {command} {id}: unexpected output: {source}", binary = .binary.display())]
    Parse {
        binary: PathBuf,
        command: &'static str,
        id: String,
        #[source]
        source: serde_json::Error,
    },
    /// Talking to the runtime process failed (pipes, waiting).
    #[error("{binary} {command} {id}: {source}", binary = .binary.display())]
    Io {
        binary: PathBuf,
        command: &'static str,
        id: String,
        #[source]
        source: io::Error,
    },
}

fn fmt_stderr(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

impl RuncError {
    /// The container id the invocation was about.
    pub fn id(&self) -> &str {
        match self {
            RuncError::Spawn { id, .. }
            | RuncError::Timeout { id, .. }
            | RuncError::Failed { id, .. }
            | RuncError::Parse { id, .. }
            | RuncError::Io { id, .. } => id,
        }
    }

    /// The runtime's exit status, when it exited on its own with a failure.
    pub fn exit_status(&self) -> Option<i32> {
        match self {
            RuncError::Failed { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// What the runtime said on stderr (or in its log), possibly empty.
    pub fn stderr(&self) -> &str {
        match self {
            RuncError::Timeout { stderr, .. } | RuncError::Failed { stderr, .. } => stderr,
            _ => "",
        }
    }

    /// Whether the invocation ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, RuncError::Timeout { .. })
    }

    /// Whether the runtime said the container does not exist.
    pub fn is_not_found(&self) -> bool {
        let text = self.stderr();
        self.exit_status().is_some()
            && (text.contains("does not exist")
                || text.contains("not exist")
                || text.contains("No such file or directory"))
    }
}

/// Starts processes and waits for their exit. See the module docs.
pub trait Spawner: Send + Sync {
    /// Starts `cmd`.
    fn spawn(&self, cmd: &mut Command) -> io::Result<Box<dyn Spawned>>;
}

/// A process started by a [`Spawner`].
pub trait Spawned: Send {
    /// Its pid.
    fn pid(&self) -> u32;
    /// A descriptor that turns readable once the process has exited, if the
    /// spawner has one; without it the caller polls [`Spawned::try_wait`].
    fn exit_fd(&self) -> Option<BorrowedFd<'_>>;
    /// Its exit status, once it has exited (never blocks).
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>>;
    /// Sends SIGKILL, unless it has already been reaped.
    fn kill(&mut self) -> io::Result<()>;
}

/// Spawns with [`Command::spawn`] and waits with [`Child::try_wait`] (and a
/// pidfd to learn of the exit without polling): for callers that do not reap
/// with `waitpid(-1)`, such as the daemon.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectSpawner;

struct DirectChild {
    child: Child,
    pidfd: Option<OwnedFd>,
}

impl Spawner for DirectSpawner {
    fn spawn(&self, cmd: &mut Command) -> io::Result<Box<dyn Spawned>> {
        let child = cmd.spawn()?;
        let pidfd = sys::pidfd_open(child.id());
        Ok(Box::new(DirectChild { child, pidfd }))
    }
}

impl Spawned for DirectChild {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|fd| fd.as_fd())
    }
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }
    fn kill(&mut self) -> io::Result<()> {
        self.child.kill()
    }
}

/// The stdio a created container or an executed process gets; `None` is
/// `/dev/null`.
#[derive(Debug, Default)]
pub struct ProcessIo {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// Arguments of `create`.
#[derive(Debug)]
pub struct CreateOptions<'a> {
    /// The bundle directory (holding config.json).
    pub bundle: &'a Path,
    /// Where the runtime writes the container's init pid.
    pub pid_file: &'a Path,
    /// Where the runtime sends the pty master, when the process has a terminal.
    pub console_socket: Option<&'a Path>,
    /// The runtime's own log (JSON); its error lines become the error's stderr,
    /// since the runtime's stderr is the container's.
    pub log_file: &'a Path,
    /// The container's stdio (ignored by the runtime when it has a terminal).
    pub io: ProcessIo,
}

/// Arguments of `exec`.
#[derive(Debug)]
pub struct ExecOptions<'a> {
    /// The process spec (JSON) to run.
    pub process_file: &'a Path,
    /// Where the runtime writes the new process's pid.
    pub pid_file: &'a Path,
    /// Where the runtime sends the pty master, when the process has a terminal.
    pub console_socket: Option<&'a Path>,
    /// Return once the process started (`--detach`) instead of waiting for it.
    pub detach: bool,
    /// The runtime's own log, as for [`CreateOptions::log_file`].
    pub log_file: &'a Path,
    /// The process's stdio.
    pub io: ProcessIo,
}

/// What `state` says about a container.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ContainerState {
    /// The container id.
    pub id: String,
    /// The init process's pid (0 once stopped, for some runtimes).
    #[serde(default)]
    pub pid: i32,
    /// `created`, `running`, `paused` or `stopped`.
    pub status: String,
    /// The bundle directory.
    #[serde(default)]
    pub bundle: PathBuf,
}

/// An OCI runtime binary with its state root directory.
#[derive(Clone)]
pub struct Runtime {
    binary: PathBuf,
    root: PathBuf,
    systemd_cgroup: bool,
    global_args: Vec<String>,
    timeout: Duration,
    spawner: Arc<dyn Spawner>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("binary", &self.binary)
            .field("root", &self.root)
            .field("systemd_cgroup", &self.systemd_cgroup)
            .field("global_args", &self.global_args)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What `create` and `exec` share: the new process's pid file, terminal and stdio.
struct Launch<'a> {
    pid_file: &'a Path,
    console_socket: Option<&'a Path>,
    log_file: &'a Path,
    io: ProcessIo,
}

/// How one invocation's stdio is wired.
enum Stdio3 {
    /// Captured through pipes, with optional bytes for stdin.
    Capture { stdin: Option<Vec<u8>> },
    /// Given to the runtime (and through it to a container process); errors
    /// are read from the runtime's log file.
    Give { io: ProcessIo, log_file: PathBuf },
}

impl Runtime {
    /// `binary` (a path, or a name looked up in PATH) with `--root root`.
    pub fn new(binary: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Runtime {
        Runtime {
            binary: binary.into(),
            root: root.into(),
            systemd_cgroup: false,
            global_args: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            spawner: Arc::new(DirectSpawner),
        }
    }

    /// Bounds every invocation by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Runtime {
        self.timeout = timeout;
        self
    }

    /// Passes `--systemd-cgroup` (cgroupsPath is then `slice:prefix:name`).
    pub fn with_systemd_cgroup(mut self, on: bool) -> Runtime {
        self.systemd_cgroup = on;
        self
    }

    /// Passes `args` as more global options, before the command.
    pub fn with_global_args(mut self, args: Vec<String>) -> Runtime {
        self.global_args = args;
        self
    }

    /// Starts and waits for processes through `spawner`.
    pub fn with_spawner(mut self, spawner: Arc<dyn Spawner>) -> Runtime {
        self.spawner = spawner;
        self
    }

    /// The runtime binary.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The runtime's state root (`--root`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The bound on one invocation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `create --bundle B --pid-file P [--console-socket S] ID`.
    pub fn create(&self, id: &str, opts: CreateOptions<'_>) -> Result<(), RuncError> {
        self.launch_bundle("create", &[], id, opts)
    }

    /// `run --detach --bundle B --pid-file P [--console-socket S] ID`:
    /// `create` and `start` in one exec.
    pub fn run_detached(&self, id: &str, opts: CreateOptions<'_>) -> Result<(), RuncError> {
        self.launch_bundle("run", &["--detach"], id, opts)
    }

    /// `command [flags] --bundle B` plus the launch options of `opts`.
    fn launch_bundle(
        &self,
        command: &'static str,
        flags: &[&str],
        id: &str,
        opts: CreateOptions<'_>,
    ) -> Result<(), RuncError> {
        let CreateOptions {
            bundle,
            pid_file,
            console_socket,
            log_file,
            io,
        } = opts;
        let mut args: Vec<OsString> = flags.iter().map(OsString::from).collect();
        args.extend(["--bundle".into(), bundle.into()]);
        let launch = Launch {
            pid_file,
            console_socket,
            log_file,
            io,
        };
        self.launch(command, id, args, launch)
    }

    /// `start ID`.
    pub fn start(&self, id: &str) -> Result<(), RuncError> {
        self.run_simple("start", id, &[])
    }

    /// `kill [--all] ID SIGNAL`.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), RuncError> {
        let mut args: Vec<OsString> = Vec::new();
        if all {
            args.push("--all".into());
        }
        args.push(id.into());
        args.push(signal.to_string().into());
        self.run("kill", id, args, Stdio3::Capture { stdin: None })
            .map(drop)
    }

    /// `delete [--force] ID`.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), RuncError> {
        self.run_simple("delete", id, if force { &["--force"] } else { &[] })
    }

    /// `state ID`.
    pub fn state(&self, id: &str) -> Result<ContainerState, RuncError> {
        let out = self.run(
            "state",
            id,
            vec![id.into()],
            Stdio3::Capture { stdin: None },
        )?;
        serde_json::from_slice(&out).map_err(|source| RuncError::Parse {
            binary: self.binary.clone(),
            command: "state",
            id: id.to_string(),
            source,
        })
    }

    /// `exec --process F --pid-file P [--detach] [--console-socket S] ID`.
    /// Without `detach` it returns once the process has exited, and a
    /// non-zero exit of the process is a [`RuncError::Failed`].
    pub fn exec(&self, id: &str, opts: ExecOptions<'_>) -> Result<(), RuncError> {
        let ExecOptions {
            process_file,
            pid_file,
            console_socket,
            detach,
            log_file,
            io,
        } = opts;
        let mut args: Vec<OsString> = vec!["--process".into(), process_file.into()];
        if detach {
            args.push("--detach".into());
        }
        let launch = Launch {
            pid_file,
            console_socket,
            log_file,
            io,
        };
        self.launch("exec", id, args, launch)
    }

    /// Runs a command that starts a container process with `launch.io` as
    /// its stdio: `args --pid-file P [--console-socket S] ID`.
    fn launch(
        &self,
        command: &'static str,
        id: &str,
        mut args: Vec<OsString>,
        launch: Launch<'_>,
    ) -> Result<(), RuncError> {
        args.extend(["--pid-file".into(), launch.pid_file.into()]);
        if let Some(socket) = launch.console_socket {
            args.extend(["--console-socket".into(), socket.into()]);
        }
        args.push(id.into());
        let stdio = Stdio3::Give {
            io: launch.io,
            log_file: launch.log_file.to_path_buf(),
        };
        self.run(command, id, args, stdio).map(drop)
    }

    /// `update --resources - ID`, with the LinuxResources JSON on stdin.
    pub fn update(&self, id: &str, resources: &serde_json::Value) -> Result<(), RuncError> {
        let json = serde_json::to_vec(resources).map_err(|source| RuncError::Parse {
            binary: self.binary.clone(),
            command: "update",
            id: id.to_string(),
            source,
        })?;
        let args = vec!["--resources".into(), "-".into(), id.into()];
        self.run("update", id, args, Stdio3::Capture { stdin: Some(json) })
            .map(drop)
    }

    /// `pause ID`.
    pub fn pause(&self, id: &str) -> Result<(), RuncError> {
        self.run_simple("pause", id, &[])
    }

    /// `resume ID`.
    pub fn resume(&self, id: &str) -> Result<(), RuncError> {
        self.run_simple("resume", id, &[])
    }

    fn run_simple(&self, command: &'static str, id: &str, flags: &[&str]) -> Result<(), RuncError> {
        let mut args: Vec<OsString> = flags.iter().map(OsString::from).collect();
        args.push(id.into());
        self.run(command, id, args, Stdio3::Capture { stdin: None })
            .map(drop)
    }

    /// Runs `binary --root R [globals] command args…`; returns its stdout.
    fn run(
        &self,
        command: &'static str,
        id: &str,
        args: Vec<OsString>,
        stdio: Stdio3,
    ) -> Result<Vec<u8>, RuncError> {
        let io_err = |source: io::Error| RuncError::Io {
            binary: self.binary.clone(),
            command,
            id: id.to_string(),
            source,
        };
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root").arg(&self.root);
        if self.systemd_cgroup {
            cmd.arg("--systemd-cgroup");
        }
        cmd.args(&self.global_args);

        let mut pipes = Pipes::default();
        let log_file = match stdio {
            Stdio3::Capture { stdin } => {
                pipes = Pipes::attach(&mut cmd, stdin).map_err(io_err)?;
                None
            }
            Stdio3::Give { io, log_file } => {
                // A fresh log per invocation, so its errors are this one's.
                let _ = std::fs::remove_file(&log_file);
                cmd.arg("--log")
                    .arg(&log_file)
                    .arg("--log-format")
                    .arg("json");
                cmd.stdin(io.stdin.map_or_else(Stdio::null, Stdio::from));
                cmd.stdout(io.stdout.map_or_else(Stdio::null, Stdio::from));
                cmd.stderr(io.stderr.map_or_else(Stdio::null, Stdio::from));
                Some(log_file)
            }
        };
        cmd.arg(command).args(&args);

        let mut child = self
            .spawner
            .spawn(&mut cmd)
            .map_err(|source| RuncError::Spawn {
                binary: self.binary.clone(),
                command,
                id: id.to_string(),
                source,
            })?;
        // Our copies of the child's ends must go, or we never see EOF.
        drop(cmd);
        let outcome = pipes.pump(child.as_mut(), Instant::now() + self.timeout);
        let (status, stdout, stderr) = match outcome {
            Ok(done) => done,
            Err(PumpError::Io(e)) => {
                let _ = child.kill();
                return Err(io_err(e));
            }
            Err(PumpError::Timeout { stderr }) => {
                let stderr = match &log_file {
                    Some(log) => read_runtime_log(log),
                    None => String::from_utf8_lossy(&stderr).into_owned(),
                };
                return Err(RuncError::Timeout {
                    binary: self.binary.clone(),
                    command,
                    id: id.to_string(),
                    timeout: self.timeout,
                    stderr,
                });
            }
        };
        if status.success() {
            if let Some(log) = &log_file {
                let _ = std::fs::remove_file(log);
            }
            return Ok(stdout);
        }
        let stderr = match &log_file {
            Some(log) => read_runtime_log(log),
            None => String::from_utf8_lossy(&stderr).trim().to_string(),
        };
        Err(RuncError::Failed {
            binary: self.binary.clone(),
            command,
            id: id.to_string(),
            status: sys::exit_code(status),
            stderr,
        })
    }
}

/// The error lines of a runtime's JSON log (`{"level":"error","msg":…}`), or
/// its raw text when it holds none.
fn read_runtime_log(path: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    parse_runtime_log(&text)
}

fn parse_runtime_log(text: &str) -> String {
    #[derive(Deserialize)]
    struct Line {
        #[serde(default)]
        level: String,
        #[serde(default)]
        msg: String,
    }
    let errors: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        .filter(|l| matches!(l.level.as_str(), "error" | "fatal" | "panic"))
        .map(|l| l.msg)
        .collect();
    if errors.is_empty() {
        text.trim().to_string()
    } else {
        errors.join("; ")
    }
}

enum PumpError {
    Io(io::Error),
    Timeout { stderr: Vec<u8> },
}

impl From<io::Error> for PumpError {
    fn from(e: io::Error) -> Self {
        PumpError::Io(e)
    }
}

/// The parent's ends of a captured invocation's stdio.
#[derive(Default)]
struct Pipes {
    stdin: Option<(File, Vec<u8>, usize)>,
    stdout: Option<File>,
    stderr: Option<File>,
}

impl Pipes {
    /// Wires pipes for stdout and stderr (and stdin when there are bytes for it) into `cmd`.
    fn attach(cmd: &mut Command, stdin: Option<Vec<u8>>) -> io::Result<Pipes> {
        let mut pipes = Pipes::default();
        match stdin {
            Some(data) => {
                let (r, w) = sys::pipe()?;
                sys::set_nonblocking(w.as_raw_fd())?;
                cmd.stdin(Stdio::from(r));
                pipes.stdin = Some((File::from(w), data, 0));
            }
            None => {
                cmd.stdin(Stdio::null());
            }
        }
        let (r, w) = sys::pipe()?;
        sys::set_nonblocking(r.as_raw_fd())?;
        cmd.stdout(Stdio::from(w));
        pipes.stdout = Some(File::from(r));
        let (r, w) = sys::pipe()?;
        sys::set_nonblocking(r.as_raw_fd())?;
        cmd.stderr(Stdio::from(w));
        pipes.stderr = Some(File::from(r));
        Ok(pipes)
    }

    /// Feeds stdin and collects stdout and stderr until the child exits and
    /// the pipes close, or `deadline` passes (then it kills the child).
    fn pump(
        &mut self,
        child: &mut dyn Spawned,
        deadline: Instant,
    ) -> Result<(ExitStatus, Vec<u8>, Vec<u8>), PumpError> {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 16 * 1024];
        let mut exited: Option<(ExitStatus, Instant)> = None;
        loop {
            if exited.is_none() {
                if let Some(status) = child.try_wait()? {
                    exited = Some((status, Instant::now()));
                }
            }
            let pipes_open = self.stdout.is_some() || self.stderr.is_some();
            if let Some((status, at)) = exited {
                if !pipes_open || at.elapsed() >= DRAIN_AFTER_EXIT {
                    return Ok((status, out, err));
                }
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                // Reap it (bounded), so no zombie stays behind.
                let until = Instant::now() + Duration::from_secs(5);
                while child.try_wait()?.is_none() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Err(PumpError::Timeout { stderr: err });
            }

            let mut fds = Vec::with_capacity(4);
            for f in [&self.stdout, &self.stderr].into_iter().flatten() {
                fds.push(sys::pollin(f.as_raw_fd()));
            }
            if let Some((w, _, _)) = &self.stdin {
                fds.push(libc::pollfd {
                    fd: w.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
            }
            let exit_fd = match (exited, child.exit_fd()) {
                (None, Some(fd)) => {
                    fds.push(sys::pollin(fd.as_raw_fd()));
                    true
                }
                _ => false,
            };
            // Without an exit descriptor, look at the child every few ms.
            let mut wait = deadline.saturating_duration_since(Instant::now());
            if !exit_fd && exited.is_none() {
                wait = wait.min(Duration::from_millis(10));
            }
            if let Some((_, at)) = exited {
                wait = wait.min(DRAIN_AFTER_EXIT.saturating_sub(at.elapsed()));
            }
            sys::poll(&mut fds, Some(wait))?;

            self.feed_stdin()?;
            read_into(&mut self.stdout, &mut buf, &mut out)?;
            read_into(&mut self.stderr, &mut buf, &mut err)?;
        }
    }

    fn feed_stdin(&mut self) -> io::Result<()> {
        let Some((file, data, off)) = &mut self.stdin else {
            return Ok(());
        };
        while *off < data.len() {
            match file.write(&data[*off..]) {
                Ok(n) => *off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The runtime closed its stdin: it will say why on stderr.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => break,
                Err(e) => return Err(e),
            }
        }
        self.stdin = None;
        Ok(())
    }
}

/// Reads what is available from `pipe` into `into` (up to [`MAX_CAPTURE`]);
/// drops the pipe at EOF.
fn read_into(pipe: &mut Option<File>, buf: &mut [u8], into: &mut Vec<u8>) -> io::Result<()> {
    let Some(file) = pipe else {
        return Ok(());
    };
    loop {
        match sys::read_some(file, buf)? {
            ReadOutcome::Data(n) => {
                let room = MAX_CAPTURE.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
            }
            ReadOutcome::Empty => return Ok(()),
            ReadOutcome::Eof => {
                *pipe = None;
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests;
