//! Daemon start-up and shutdown: directories, the single-instance lock, the
//! CRI socket, the gRPC server, and signals.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use nix::fcntl::{Flock, FlockArg};
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::config::Config;
use crate::server::metrics_endpoint;

/// How long in-flight calls may run on after SIGTERM or SIGINT.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// glibc malloc settings for the daemon, as `(mallopt parameter, value,
/// the environment variable that overrides it)`. berth's allocations are
/// small and short-lived, but spread over the tokio workers and many
/// blocking threads (record writes, runtime execs): glibc gives each thread
/// that allocates its own arena (up to 8 per core) and keeps what each has
/// freed, so the RSS grows with the number of threads that ever ran, not
/// with what is in use. Two arenas hold berth's working set; a fixed mmap
/// threshold sends large buffers (manifests, layer I/O) to mmap, returned
/// at free, instead of raising the threshold on each large free as glibc
/// does by default.
const MALLOC_SETTINGS: &[(i32, i32, &str)] = &[
    (M_ARENA_MAX, 2, "MALLOC_ARENA_MAX"),
    (M_MMAP_THRESHOLD, 256 * 1024, "MALLOC_MMAP_THRESHOLD_"),
    (M_TRIM_THRESHOLD, 1024 * 1024, "MALLOC_TRIM_THRESHOLD_"),
];
const M_ARENA_MAX: i32 = -8;
const M_MMAP_THRESHOLD: i32 = -3;
const M_TRIM_THRESHOLD: i32 = -1;

/// The [`MALLOC_SETTINGS`] whose variable `env` does not name (an operator's
/// `MALLOC_ARENA_MAX=…` wins, as glibc reads it itself).
fn malloc_settings(env: impl Fn(&str) -> bool) -> Vec<(i32, i32)> {
    MALLOC_SETTINGS
        .iter()
        .filter(|(_, _, var)| !env(var))
        .map(|&(param, value, _)| (param, value))
        .collect()
}

/// Applies [`malloc_settings`] (glibc only; other C libraries have their own).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (param, value) in malloc_settings(|var| std::env::var_os(var).is_some()) {
        // SAFETY: mallopt only sets allocator parameters; 0 means refused.
        if unsafe { libc::mallopt(param, value) } == 0 {
            tracing::warn!(param, value, "mallopt refused a setting");
        }
    }
}

/// How often the idle trimmer looks at the count of calls that change state.
const TRIM_TICK: std::time::Duration = std::time::Duration::from_secs(4);

/// When to give freed memory back: after a tick that saw calls that change
/// state (pod and container life cycles, pulls, execs: what allocates),
/// the first tick that sees none, however many read-only calls (kubelet's
/// relists and status polls) it saw. The heap a burst of calls grew (two arenas, each
/// keeping up to the trim threshold at its top and whatever is free below
/// its top chunk) is freed but stays resident until glibc is asked;
/// `malloc_trim` returns every free page of every arena, so that an idle
/// daemon's RSS is what it holds, not the high-water mark of its last
/// burst. Once per burst, not per tick: an idle daemon does nothing.
#[derive(Debug, Default)]
struct IdleTrim {
    calls: u64,
    busy: bool,
}

impl IdleTrim {
    /// Whether to trim now, `calls` being the count of changing calls so far.
    fn tick(&mut self, calls: u64) -> bool {
        if calls != self.calls {
            self.calls = calls;
            self.busy = true;
            return false;
        }
        std::mem::take(&mut self.busy)
    }
}

/// Trims the heap once a burst of changes has stopped ([`IdleTrim`]). On the worker
/// itself: `malloc_trim` makes no I/O (madvise calls over a few MiB of
/// heap, well under a millisecond), and a blocking thread started for it
/// would outlive it by ten seconds.
async fn trim_when_idle() {
    let mut trim = IdleTrim::default();
    let mut tick = tokio::time::interval(TRIM_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if trim.tick(crate::counters::changes()) {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            {
                let started = std::time::Instant::now();
                // SAFETY: malloc_trim only returns free pages to the system.
                let released = unsafe { libc::malloc_trim(0) };
                tracing::debug!(released, took = ?started.elapsed(), "changes stopped: trimmed the heap");
            }
        }
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(config: Config) -> anyhow::Result<()> {
    // Before anything is made: not the umask of whatever started berth.
    let inherited = crate::host_dirs::set_umask();
    if inherited != crate::host_dirs::UMASK {
        tracing::info!(
            inherited = format_args!("{inherited:04o}"),
            umask = format_args!("{:04o}", crate::host_dirs::UMASK),
            "set the daemon's umask"
        );
    }
    tune_malloc();
    // Local users may cross root and state (the socket may live in state)
    // but read nothing in them: every subtree is 0700, set explicitly, not
    // left to the umask (records and bundles hold the pods' secrets; writable
    // layers and snapshots may hold setuid binaries).
    let layout = crate::compose::layout(&config);
    for dir in [&config.root, &config.state] {
        make_dir(dir, 0o711)?;
        set_mode(dir, 0o711)?;
    }
    for dir in layout.private_dirs() {
        make_dir(&dir, 0o700)?;
        set_mode(&dir, 0o700)?;
    }
    let socket_dir = config
        .socket
        .parent()
        .context("socket path has no parent directory")?;
    crate::host_dirs::make_dirs(socket_dir, 0o711)
        .with_context(|| format!("creating directory {}", socket_dir.display()))?;

    // Held for the life of the daemon: a second berth on the same socket or root refuses to start.
    let _socket_lock = lock(&lock_path(&config.socket))?;
    let _root_lock = lock(&layout.lock_file())?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("berth-worker")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(serve(config, layout))
}

async fn serve(config: Config, layout: crate::layout::Layout) -> anyhow::Result<()> {
    let listener = bind(&config.socket)?;
    let metrics_listener = metrics_endpoint::bind(&config.metrics.address).await?;
    let socket = config.socket.clone();
    let node = crate::compose::daemon(config, layout).await?;

    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = sigterm.recv() => "SIGTERM",
            _ = sigint.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
        let _ = stop_tx.send(true);
    });
    let mut server_stop = stop_rx.clone();
    let shutdown = async move {
        let _ = server_stop.wait_for(|stop| *stop).await;
    };

    // Clients that send the socket path as :authority (gRPC C-core,
    // grpc-java, older grpc-go) are served: see berth-h2-authority.
    let routes = crate::server::grpc::routes(node.cri());
    let server = crate::server::grpc::serve(listener, routes, shutdown);
    let server = tokio::spawn(server);

    // Start-up work (recovery) runs here, while the gate answers Unavailable.
    node.start(metrics_listener)
        .await
        .context("starting berth")?;
    tokio::spawn(trim_when_idle());
    tracing::info!(socket = %socket.display(), version = env!("CARGO_PKG_VERSION"), "berth is serving CRI v1");
    // systemd (Type=notify): recovery has finished and the socket serves.
    crate::sd_notify::ready();

    // Graceful: in-flight calls get SHUTDOWN_GRACE to finish, then berth exits anyway
    // (a client that never closes its connection must not keep the daemon up).
    let mut server = server;
    let result = tokio::select! {
        result = &mut server => Some(result),
        _ = async {
            let _ = stop_rx.wait_for(|stop| *stop).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => None,
    };
    remove_socket(&socket);
    node.stop().await;
    match result {
        Some(result) => result.context("server task failed")?,
        None => tracing::warn!(
            grace_secs = SHUTDOWN_GRACE.as_secs(),
            "connections still open after the shutdown grace period; exiting anyway"
        ),
    }
    tracing::info!("stopped");
    Ok(())
}

fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn make_dir(dir: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .with_context(|| format!("creating directory {}", dir.display()))
}

/// Sets the mode of one of berth's own dirs, whatever it was made with.
fn set_mode(dir: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting mode {mode:o} on {}", dir.display()))
}

/// How long a lock whose writer is dead may still be held: by a child the
/// dead berth forked and that has not reached its exec yet (the lock's file
/// is close-on-exec), which a SIGKILL in the middle of a spawn leaves.
const DEAD_HOLDER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Takes an exclusive lock on `path`, or says which live process holds it.
fn lock(path: &Path) -> anyhow::Result<Flock<File>> {
    lock_within(path, DEAD_HOLDER_GRACE)
}

fn lock_within(path: &Path, grace: std::time::Duration) -> anyhow::Result<Flock<File>> {
    let started = std::time::Instant::now();
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("opening lock file {}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut locked) => {
                locked.set_len(0)?;
                writeln!(locked, "{}", std::process::id())?;
                return Ok(locked);
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = std::fs::read_to_string(path).unwrap_or_default();
                let holder = holder.trim();
                // The berth that wrote the file is alive: a second daemon.
                // Dead: wait a little for what it forked to exec or exit.
                let alive = holder
                    .parse::<i32>()
                    .is_ok_and(|pid| pid > 0 && Path::new(&format!("/proc/{pid}")).exists());
                if alive || started.elapsed() >= grace {
                    bail!(
                        "another berth (pid {holder}{}) holds {}: refusing to start a second one",
                        if alive {
                            ""
                        } else {
                            ", gone, but the lock still held"
                        },
                        path.display()
                    )
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err((_, e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
    }
}

/// Binds the CRI socket, replacing a stale socket file of a dead daemon.
fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "{} is served by a live process: refusing to start a second runtime on it",
                path.display()
            );
        }
        tracing::info!(socket = %path.display(), "removing stale socket");
        std::fs::remove_file(path)
            .with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("setting mode 0660 on {}", path.display()))?;
    Ok(listener)
}

fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(socket = %path.display(), error = %e, "removing socket");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock file of a berth that is gone (a pid that is no process),
    /// held through another open file, as by a child forked before a
    /// SIGKILL: waited for (refused only after the grace), and taken once
    /// that lets go; one of a live berth: refused at once.
    #[test]
    fn a_lock_held_after_its_berth_died_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.sock.lock");
        let held = Flock::lock(File::create(&path).unwrap(), FlockArg::LockExclusive).unwrap();
        std::fs::write(&path, "999999999\n").unwrap();
        let grace = std::time::Duration::from_millis(300);
        let t = std::time::Instant::now();
        let e = lock_within(&path, grace).unwrap_err();
        assert!(t.elapsed() >= grace, "refused after {:?}", t.elapsed());
        assert!(
            e.to_string().contains("gone, but the lock still held"),
            "{e}"
        );
        // Let go while a taker tries: it takes it.
        let taker = {
            let path = path.clone();
            std::thread::spawn(move || lock_within(&path, std::time::Duration::from_secs(30)))
        };
        drop(held);
        let locked = taker.join().unwrap().unwrap();
        drop(locked);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().trim(),
            std::process::id().to_string()
        );

        // A live holder (this process's pid): refused without waiting.
        let held = Flock::lock(File::create(&path).unwrap(), FlockArg::LockExclusive).unwrap();
        std::fs::write(&path, format!("{}\n", std::process::id())).unwrap();
        let t = std::time::Instant::now();
        let e = lock_within(&path, std::time::Duration::from_secs(30)).unwrap_err();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
        assert!(
            e.to_string().contains("refusing to start a second one"),
            "{e}"
        );
        drop(held);
    }

    #[test]
    fn the_heap_is_trimmed_once_after_calls_stop() {
        let mut trim = IdleTrim::default();
        // Idle from the start: nothing to give back.
        assert!(!trim.tick(0));
        assert!(!trim.tick(0));
        // Calls on two ticks, then none: one trim, then nothing.
        assert!(!trim.tick(5));
        assert!(!trim.tick(9));
        assert!(trim.tick(9));
        assert!(!trim.tick(9));
        assert!(!trim.tick(9));
        // Another burst.
        assert!(!trim.tick(10));
        assert!(trim.tick(10));
    }

    #[test]
    fn malloc_settings_leave_what_the_operator_set() {
        let all = malloc_settings(|_| false);
        assert_eq!(
            all,
            vec![
                (M_ARENA_MAX, 2),
                (M_MMAP_THRESHOLD, 256 * 1024),
                (M_TRIM_THRESHOLD, 1024 * 1024)
            ]
        );
        let some = malloc_settings(|var| var == "MALLOC_ARENA_MAX");
        assert!(!some.iter().any(|(p, _)| *p == M_ARENA_MAX), "{some:?}");
        assert_eq!(some.len(), 2);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn malloc_parameters_are_glibcs() {
        assert_eq!(M_ARENA_MAX, libc::M_ARENA_MAX);
        assert_eq!(M_MMAP_THRESHOLD, libc::M_MMAP_THRESHOLD);
        assert_eq!(M_TRIM_THRESHOLD, libc::M_TRIM_THRESHOLD);
    }
}
