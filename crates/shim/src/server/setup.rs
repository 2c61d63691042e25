//! The shim's start-up after the fork (see the module doc of `server`).
//!
//! First what does not depend on the container ([`prepare`]): SIGCHLD
//! blocked, child subreaper, the reaper, and the threads of the exit monitor
//! and the output copiers, started ahead (see `worker`). A standby shim does
//! this before its options come. Then, for the container: its directory and
//! the shim's stdio, the runtime, the socket, the container's stdio, `runtime
//! create` (or `run --detach`), its OOM counter, the exit monitor given the
//! container; after the answer the copiers start copying ([`Started::run`]).
//! So that once the runtime exits only the pid file, the watch on the init
//! and the answer are left. A failing step undoes what the steps before it
//! left behind (the socket, a created container); the threads started ahead
//! end with it (their work never comes).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex};

use crate::cgroup::OomCounter;
use crate::crilog::Stream;
use crate::options::ShimOptions;
use crate::protocol::{ContainerStatus, RemoteError};
use crate::runc::{CreateOptions, ProcessIo, Runtime};
use crate::sys;
use crate::ShimPaths;

use super::io::{ConsoleSocket, ContainerIo, Copier};
use super::reaper::{self, Reaper, ReaperSpawner, Subscription};
use super::worker::{run_on, Worker, Workers, SMALL_STACK};
use super::{internal, log, log_error, read_pid_file, Life, Shim, CONSOLE_WAIT};

/// Undoes start-up steps when a later one fails.
struct Undo<'a> {
    runtime: &'a Runtime,
    id: &'a str,
    socket: &'a Path,
    created: bool,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.created {
            if let Err(e) = self.runtime.delete(self.id, true) {
                log(format_args!("cleaning up after a failed start: {e}"));
            }
        }
        let _ = std::fs::remove_file(self.socket);
    }
}

/// This side's ends of the container's stdio, until they are handed to
/// its [`ContainerIo`].
struct StdioEnds {
    /// With a terminal: where the runtime sends the terminal's master.
    console: Option<ConsoleSocket>,
    /// Where the container's stdin is written (without a terminal).
    stdin: Option<File>,
    /// What the container writes, by stream (without a terminal).
    outputs: Vec<(File, Stream)>,
}

/// What a shim has ready before it knows its container.
pub(super) struct Prepared {
    reaper: Arc<Reaper>,
    workers: Workers,
}

/// The process-wide start-up, which needs no options: SIGCHLD blocked,
/// child subreaper, one malloc arena, the reaper, and the threads started
/// ahead (`stderr`: a stderr copier's too). Before any other thread exists.
pub(super) fn prepare(stderr: bool) -> Result<Prepared, RemoteError> {
    prepare_process()?;
    let reaper = Reaper::start().map_err(|e| internal("starting the reaper", e))?;
    Ok(Prepared {
        reaper,
        workers: Workers::start(stderr),
    })
}

/// A shim started, ready to answer: the copiers wait to be started until
/// the answer is sent ([`Started::run`]).
pub(super) struct Started {
    pub(super) shim: Arc<Shim>,
    copiers: Vec<(Copier, Worker)>,
}

impl Started {
    /// After the answer: the output copiers start copying; the shim, to
    /// serve.
    pub(super) fn run(self) -> Arc<Shim> {
        for (copier, worker) in self.copiers {
            // A worker only fails to take its job if its thread is gone,
            // and then a new thread is tried.
            if let Err(e) = copier.start(Some(worker)) {
                log(format_args!("starting an output copier: {e}"));
            }
        }
        let shim = self.shim;
        let verb = if shim.opts.run_detached {
            "started"
        } else {
            "created"
        };
        log(format_args!("{verb} {} (pid {})", shim.opts.id, shim.pid));
        shim
    }
}

/// Every start-up step after the fork, in order; the shim, ready to answer
/// (its exit monitor running), or why it could not start.
pub(super) fn setup(opts: ShimOptions) -> Result<Started, RemoteError> {
    let prepared = prepare(!opts.tty)?;
    setup_prepared(opts, prepared)
}

/// The steps of [`setup`] left once the shim is [`prepare`]d (a standby
/// shim, ahead of its options).
pub(super) fn setup_prepared(
    opts: ShimOptions,
    prepared: Prepared,
) -> Result<Started, RemoteError> {
    let paths = opts.paths();
    prepare_dir(&paths)?;
    let Prepared {
        reaper,
        mut workers,
    } = prepared;
    let runtime = runtime(&opts, &reaper);

    let socket = paths.socket();
    let listener = bind_socket(&socket)?;
    let mut undo = Undo {
        runtime: &runtime,
        id: &opts.id,
        socket: &socket,
        created: false,
        armed: true,
    };

    let io = Arc::new(
        ContainerIo::new(opts.log.as_ref())
            .map_err(|e| log_error("opening the container log", e))?,
    );
    let (process_io, ends) = open_stdio(&opts, &paths)?;
    let StdioEnds {
        console,
        stdin,
        outputs,
    } = ends;
    // Counted from now on (the exit monitor waits for them); they copy only
    // once the container runs, so a failed start leaves the pipes unread
    // (the runtime's own complaints never reach the container's log).
    let mut copiers: Vec<Copier> = outputs
        .into_iter()
        .map(|(source, stream)| io.copier(source, stream))
        .collect();
    let launched_at = super::unix_ns(std::time::SystemTime::now());
    let console_path = console.as_ref().map(|c| c.path());
    let pid = launch(&opts, &paths, &runtime, process_io, console_path, &mut undo)?;
    let init = reaper
        .watch(pid)
        .map_err(|e| internal("watching the container's init", e))?;
    connect_stdin(&io, console, stdin, opts.stdin, &mut copiers)?;
    let ready = assign_copiers(copiers, &mut workers)?;
    let oom = if opts.run_detached {
        OomWatch::Later
    } else {
        OomWatch::before_start(pid)
    };

    undo.armed = false;
    drop(undo);
    let shim = Arc::new(Shim {
        paths,
        runtime,
        reaper,
        io,
        pid,
        life: Mutex::new(initial_life(opts.run_detached, launched_at)),
        changed: Condvar::new(),
        seq: AtomicU64::new(0),
        start_reported: AtomicBool::new(false),
        listener,
        opts,
    });
    start_monitor(&shim, init, oom, workers.monitor.take())?;
    Ok(Started {
        shim,
        copiers: ready,
    })
}

/// The runtime the shim drives, as its options say; its children are
/// spawned through the reaper, so no exit is lost to it.
fn runtime(opts: &ShimOptions, reaper: &Arc<Reaper>) -> Runtime {
    Runtime::new(&opts.runtime, &opts.runtime_root)
        .with_timeout(opts.runtime_timeout)
        .with_systemd_cgroup(opts.systemd_cgroup)
        .with_global_args(opts.runtime_args.clone())
        .with_spawner(Arc::new(ReaperSpawner(reaper.clone())))
}

/// Hands the container's stdin to its IO: this side's end of the pipe, or
/// with a terminal the master the runtime sent (when `want_stdin`), whose
/// output gets a copier of its own.
fn connect_stdin(
    io: &Arc<ContainerIo>,
    console: Option<ConsoleSocket>,
    stdin: Option<File>,
    want_stdin: bool,
    copiers: &mut Vec<Copier>,
) -> Result<(), RemoteError> {
    let stdin = match console {
        Some(console) => {
            let (copier, stdin) = connect_terminal(io, console, want_stdin)?;
            copiers.push(copier);
            stdin
        }
        None => stdin,
    };
    if let Some(w) = stdin {
        io.set_stdin(w);
    }
    Ok(())
}

/// Gives each copier the thread started ahead for its stream. Copiers with
/// a thread of their own waiting start after the answer; one without (its
/// thread could not be started ahead) starts now, so that failing to start
/// it still fails the start-up.
fn assign_copiers(
    copiers: Vec<Copier>,
    workers: &mut Workers,
) -> Result<Vec<(Copier, Worker)>, RemoteError> {
    let mut ready = Vec::with_capacity(copiers.len());
    for copier in copiers {
        match workers.copier(copier.stream()) {
            Some(worker) => ready.push((copier, worker)),
            None => copier
                .start(None)
                .map_err(|e| internal("starting an output copier", e))?,
        }
    }
    Ok(ready)
}

/// The container's state as the shim starts: running after `run
/// --detach` (started at `launched_at`), else created.
fn initial_life(run_detached: bool, launched_at: i64) -> Life {
    Life {
        status: if run_detached {
            ContainerStatus::Running
        } else {
            ContainerStatus::Created
        },
        exit: None,
        started_at_ns: run_detached.then_some(launched_at),
    }
}

/// The shim's directory, and its stdio (see [`redirect_stdio`]).
fn prepare_dir(paths: &ShimPaths) -> Result<(), RemoteError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(paths.dir())
        .map_err(|e| internal(format_args!("creating {}", paths.dir().display()), e))?;
    redirect_stdio(paths);
    Ok(())
}

/// Readies this process before any thread exists: SIGCHLD blocked (so
/// every thread inherits the mask), child subreaper, one malloc arena.
fn prepare_process() -> Result<(), RemoteError> {
    // Before any thread exists, so every thread inherits the mask.
    reaper::sigchld_set()
        .thread_block()
        .map_err(|e| internal("blocking SIGCHLD", e))?;
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| internal("becoming child subreaper", e))?;
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator. One arena: fewer pages for
    // the shim's few threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    Ok(())
}

/// Binds the shim's socket at `socket` (a stale one removed first), for
/// root only.
fn bind_socket(socket: &Path) -> Result<UnixListener, RemoteError> {
    let _ = std::fs::remove_file(socket);
    UnixListener::bind(socket)
        .and_then(|l| {
            // Only root talks to a shim.
            std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
            Ok(l)
        })
        .map_err(|e| internal(format_args!("binding {}", socket.display()), e))
}

/// The container's stdio: with a terminal, a console socket for it; else
/// pipes (stdin only if asked for). What the runtime gets, and this side's
/// ends.
fn open_stdio(
    opts: &ShimOptions,
    paths: &ShimPaths,
) -> Result<(ProcessIo, StdioEnds), RemoteError> {
    let pipe = || sys::pipe().map_err(|e| internal("creating a pipe", e));
    let mut process_io = ProcessIo::default();
    let mut outputs = Vec::new();
    let mut stdin_writer = None;
    let console = if opts.tty {
        let path = paths.console_socket("init");
        Some(ConsoleSocket::bind(&path).map_err(|e| internal("binding the console socket", e))?)
    } else {
        if opts.stdin {
            let (r, w) = pipe()?;
            process_io.stdin = Some(r);
            stdin_writer = Some(File::from(w));
        }
        let (r, w) = pipe()?;
        process_io.stdout = Some(w);
        outputs.push((File::from(r), Stream::Stdout));
        let (r, w) = pipe()?;
        process_io.stderr = Some(w);
        outputs.push((File::from(r), Stream::Stderr));
        None
    };
    let ends = StdioEnds {
        console,
        stdin: stdin_writer,
        outputs,
    };
    Ok((process_io, ends))
}

/// `runtime create` of the container (`run --detach` when it is run at
/// once) with `process_io` and the `console` socket; the pid of its init.
/// `undo` learns whether a container may be left to delete.
fn launch(
    opts: &ShimOptions,
    paths: &ShimPaths,
    runtime: &Runtime,
    process_io: ProcessIo,
    console: Option<&Path>,
    undo: &mut Undo<'_>,
) -> Result<u32, RemoteError> {
    let pid_file = paths.pid_file();
    let _ = std::fs::remove_file(&pid_file);
    let create_log = paths.runtime_log("create");
    let create = CreateOptions {
        bundle: &opts.bundle,
        pid_file: &pid_file,
        console_socket: console,
        log_file: &create_log,
        io: process_io,
    };
    undo.created = true;
    let launched = if opts.run_detached {
        runtime.run_detached(&opts.id, create)
    } else {
        runtime.create(&opts.id, create)
    };
    launched.map_err(|e| {
        // A create that failed cleaned up after itself (and may have failed
        // because another container has this id: leave that one alone); one
        // killed at its timeout may have left a container behind.
        undo.created = e.is_timeout();
        RemoteError::from(e)
    })?;
    read_pid_file(&pid_file).map_err(|e| internal("reading the pid file", e))
}

/// The container's terminal, once the runtime sent its master: kept in
/// `io` for resizes, its copier (as stdout), and with `stdin` a writer for
/// the container's stdin.
fn connect_terminal(
    io: &Arc<ContainerIo>,
    console: ConsoleSocket,
    stdin: bool,
) -> Result<(Copier, Option<File>), RemoteError> {
    let master = console
        .receive(CONSOLE_WAIT)
        .map_err(|e| internal("receiving the container's terminal", e))?;
    let clone = || {
        master
            .try_clone()
            .map_err(|e| internal("duplicating the terminal", e))
    };
    let stdin_writer = if stdin { Some(clone()?) } else { None };
    io.set_terminal(clone()?);
    Ok((io.copier(master, Stream::Stdout), stdin_writer))
}

/// The OOM kill counter of the container's memory cgroup, or when it is
/// to be found.
pub(super) enum OomWatch {
    /// Found before the container runs (created now, started later), with
    /// its value then.
    Found(Option<(OomCounter, u64)>),
    /// Run at once: found from the spec's cgroup by the exit monitor once
    /// the container has exited ([`OomWatch::resolve`]), off the start's
    /// path: where the hierarchy is not at its usual mount point, finding
    /// it reads the whole mount table, which costs every mount of the
    /// host (hundreds of overlays on a full node).
    /// The cgroup is new, so its count before is 0, and it stays until
    /// the runtime deletes the container, after the exit is recorded.
    Later,
}

impl OomWatch {
    /// Before a created container is started: the counter of the cgroup
    /// its process is in, and its value then, to tell a later OOM kill
    /// apart.
    pub(super) fn before_start(pid: u32) -> OomWatch {
        let counter = found(OomCounter::for_pid(pid), format_args!("pid {pid}"));
        OomWatch::Found(counter.and_then(|c| c.read().ok().map(|base| (c, base))))
    }

    /// The counter and its value before the container ran. Found later,
    /// it is the cgroup of the bundle's `spec` only: the exited init's pid
    /// may be another process's by then.
    pub(super) fn resolve(self, spec: Option<&serde_json::Value>) -> Option<(OomCounter, u64)> {
        match self {
            OomWatch::Found(found) => found,
            OomWatch::Later => {
                let cgroups_path = spec.and_then(|s| s["linux"]["cgroupsPath"].as_str());
                let Some(path) = cgroups_path else {
                    log(format_args!(
                        "no linux.cgroupsPath in the spec: no OOM kill counter"
                    ));
                    return None;
                };
                found(OomCounter::for_cgroups_path(path), path).map(|c| (c, 0))
            }
        }
    }
}

/// The counter found for `of`, if any (`None`: none found, or why not,
/// logged).
fn found(
    counter: std::io::Result<Option<OomCounter>>,
    of: impl std::fmt::Display,
) -> Option<OomCounter> {
    counter.unwrap_or_else(|e| {
        log(format_args!("no memory cgroup for {of}: {e}"));
        None
    })
}

/// Has the thread that waits for the container's init and records its
/// exit ([`Shim::monitor`]) start: `worker`, started ahead, or a new one;
/// if it cannot start, the container is deleted.
fn start_monitor(
    shim: &Arc<Shim>,
    init: Subscription,
    oom: OomWatch,
    worker: Option<Worker>,
) -> Result<(), RemoteError> {
    let s = shim.clone();
    run_on(worker, "monitor", SMALL_STACK, move || s.monitor(init, oom)).map_err(|e| {
        let _ = shim.runtime.delete(&shim.opts.id, true);
        internal("starting the exit monitor", e)
    })
}

/// stdin from /dev/null, stderr to `shim.log`, working directory `/`.
fn redirect_stdio(paths: &ShimPaths) {
    if let Ok(null) = std::fs::File::open("/dev/null") {
        // SAFETY: dup2 onto fd 0, which we own.
        unsafe { libc::dup2(null.as_raw_fd(), 0) };
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(paths.shim_log());
    if let Ok(log) = log {
        // SAFETY: dup2 onto fd 2, which we own.
        unsafe { libc::dup2(log.as_raw_fd(), 2) };
    }
    let _ = std::env::set_current_dir("/");
}
