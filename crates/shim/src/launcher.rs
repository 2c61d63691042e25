//! How the daemon starts its shims: from a standby shim started ahead when
//! one is ready, else afresh ([`ShimClient::spawn`]).
//!
//! A [`ShimLauncher`] keeps at most one spare: `berth-shim --standby
//! --state-root DIR` (see the shim's `standby` module), which has forked,
//! left the daemon's session and done all of a shim's start-up that needs
//! no container, and waits for its options on its stdin. [`spawn`] takes
//! it, writes it the options (the shim's command line, in one frame:
//! [`args_frame`]), closes the pipe and reads the answer as from a fresh
//! shim. The next spare is started in the background once the call is done
//! (one start in flight at most), never on a caller's path; so the first
//! call of a launcher starts its shim afresh.
//!
//! Behaviour never depends on the spare: with none ready, with one found
//! gone (the write of its options fails) or whose executable was replaced
//! since it started, the shim is started afresh. A spare that had its
//! options and ended without answering is the caller's error, as a fresh
//! shim's death is: it may have acted on them.
//! Options the spare refuses are the caller's error, as they would be on a
//! command line.
//!
//! The daemon holds the only write end of a spare's stdin (close-on-exec,
//! so no runtime, plugin or other shim it starts inherits it): dropping the
//! launcher, or the daemon's end, ends the spare (EOF, exit 0). Each spare's
//! first process (which forks the spare and exits) is waited for in the
//! background start; the spare itself is re-parented to init, as a shim is.
//!
//! [`spawn`]: ShimLauncher::spawn

use berth_lock::MutexExt;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, ChildStdout};

use crate::client::{self, ShimClient, SpawnOptions};
use crate::error::Error;
use crate::options::{args_frame, ShimOptions};

/// How long a spare's first process may take to fork the spare and exit.
const FIRST_PROCESS: Duration = Duration::from_secs(10);

/// After a spare failed to start, how long before another is tried.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Something the daemon may want in its log.
#[derive(Debug)]
pub enum LaunchNotice<'a> {
    /// A spare could not be started (none is tried for a while).
    SpareFailed(&'a std::io::Error),
    /// The spare taken was gone or stale: the shim was started afresh.
    SpareLost(&'a str),
}

impl fmt::Display for LaunchNotice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchNotice::SpareFailed(e) => write!(f, "starting a standby shim: {e}"),
            LaunchNotice::SpareLost(why) => {
                write!(f, "the standby shim {why}: starting the shim afresh")
            }
        }
    }
}

type Notify = Arc<dyn Fn(LaunchNotice<'_>) + Send + Sync>;

/// Counts of what a launcher did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Spares started (ready to be taken).
    pub spares_started: u64,
    /// Shims that were a spare.
    pub from_spare: u64,
    /// Shims started afresh (no spare ready, or it was lost).
    pub fresh: u64,
    /// Spares found gone or stale when taken.
    pub spares_lost: u64,
}

/// Starts shims. See the module docs.
pub struct ShimLauncher {
    inner: Arc<Inner>,
}

struct Inner {
    binary: PathBuf,
    state_root: PathBuf,
    standby: bool,
    notify: Option<Notify>,
    spare: Mutex<Option<Spare>>,
    /// A spare is being started.
    refilling: AtomicBool,
    /// When a spare last failed to start.
    failed_at: Mutex<Option<Instant>>,
    spares_started: AtomicU64,
    from_spare: AtomicU64,
    fresh: AtomicU64,
    spares_lost: AtomicU64,
}

/// A standby shim waiting for its options: the daemon's ends of its stdin
/// and stdout.
struct Spare {
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// The executable it was started from, as it was then.
    binary: Option<FileId>,
}

/// Which file an executable is, to notice it was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

fn file_id(path: &Path) -> Option<FileId> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}

/// Why a handover did not give a shim.
enum Handover {
    /// The spare is gone: start the shim afresh.
    Lost(String),
    /// The spare answered (or failed to, in time) as the shim: the caller's.
    Failed(Error),
}

impl ShimLauncher {
    /// Starts `binary` as shims, keeping a spare whose command line names
    /// `state_root` (where the shims' state dirs are).
    pub fn new(binary: impl Into<PathBuf>, state_root: impl Into<PathBuf>) -> ShimLauncher {
        ShimLauncher {
            inner: Arc::new(Inner {
                binary: binary.into(),
                state_root: state_root.into(),
                standby: true,
                notify: None,
                spare: Mutex::new(None),
                refilling: AtomicBool::new(false),
                failed_at: Mutex::new(None),
                spares_started: AtomicU64::new(0),
                from_spare: AtomicU64::new(0),
                fresh: AtomicU64::new(0),
                spares_lost: AtomicU64::new(0),
            }),
        }
    }

    fn inner_mut(&mut self) -> &mut Inner {
        Arc::get_mut(&mut self.inner).expect("configured before it is shared or used")
    }

    /// `false`: no spare, every shim started afresh.
    pub fn with_standby(mut self, on: bool) -> ShimLauncher {
        self.inner_mut().standby = on;
        self
    }

    /// Tells `notify` what the daemon may want to log.
    pub fn with_notify(
        mut self,
        notify: impl Fn(LaunchNotice<'_>) + Send + Sync + 'static,
    ) -> ShimLauncher {
        self.inner_mut().notify = Some(Arc::new(notify));
        self
    }

    /// The `berth-shim` executable.
    pub fn binary(&self) -> &Path {
        &self.inner.binary
    }

    /// What it did so far.
    pub fn stats(&self) -> LaunchStats {
        let i = &self.inner;
        LaunchStats {
            spares_started: i.spares_started.load(Ordering::Relaxed),
            from_spare: i.from_spare.load(Ordering::Relaxed),
            fresh: i.fresh.load(Ordering::Relaxed),
            spares_lost: i.spares_lost.load(Ordering::Relaxed),
        }
    }

    /// Starts a shim with `shim` (which creates the container); returns
    /// once it is created, or with the runtime's error, as
    /// [`ShimClient::spawn`] does.
    pub async fn spawn(&self, shim: ShimOptions) -> Result<ShimClient, Error> {
        client::validate(&shim)?;
        // The next spare is started when this call is done, or dropped.
        let _refill = Refill(self);
        // A frame that cannot be made (an argument with a NUL, over 64 KiB)
        // goes to a fresh shim's command line, which says what it says.
        let handover = match args_frame(&shim.to_args()) {
            Ok(frame) => self.take().map(|spare| (spare, frame)),
            Err(_) => None,
        };
        if let Some((spare, frame)) = handover {
            match spare.hand_over(&shim, &frame).await {
                Ok(client) => {
                    self.inner.from_spare.fetch_add(1, Ordering::Relaxed);
                    return Ok(client);
                }
                Err(Handover::Failed(e)) => return Err(e),
                Err(Handover::Lost(why)) => self.lost(&why),
            }
        }
        self.inner.fresh.fetch_add(1, Ordering::Relaxed);
        ShimClient::spawn(&SpawnOptions::new(&self.inner.binary, shim)).await
    }

    /// Starts a spare now unless one is ready (or waits for the one being
    /// started); whether one is ready. `false`: standby is off, or the
    /// spare could not be started.
    pub async fn prestart(&self) -> bool {
        if !self.inner.standby {
            return false;
        }
        let until = Instant::now() + FIRST_PROCESS + Duration::from_secs(1);
        loop {
            if self.inner.spare.lock_unpoisoned().is_some() {
                return true;
            }
            if !self.inner.refilling.swap(true, Ordering::SeqCst) {
                return self.inner.clone().refill().await;
            }
            if Instant::now() >= until {
                return false;
            }
            // Another start is under way (it is bounded by FIRST_PROCESS).
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The spare, if one is ready and still of the current executable (as
    /// far as can be told: a name looked up in PATH cannot be).
    fn take(&self) -> Option<Spare> {
        let spare = self.inner.spare.lock_unpoisoned().take()?;
        if spare.binary != file_id(&self.inner.binary) {
            // Dropped: its stdin closes and it exits.
            self.lost("was started from an executable since replaced");
            return None;
        }
        Some(spare)
    }

    fn lost(&self, why: &str) {
        self.inner.spares_lost.fetch_add(1, Ordering::Relaxed);
        self.inner.notify(LaunchNotice::SpareLost(why));
    }

    /// Starts the next spare in the background, unless one is ready or
    /// starting, standby is off, or a start failed lately.
    fn refill_in_background(&self) {
        let inner = &self.inner;
        if !inner.standby || inner.spare.lock_unpoisoned().is_some() {
            return;
        }
        if inner
            .failed_at
            .lock_unpoisoned()
            .is_some_and(|t| t.elapsed() < RETRY_AFTER)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if inner.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        runtime.spawn(inner.clone().refill());
    }
}

/// Starts the next spare when dropped.
struct Refill<'a>(&'a ShimLauncher);

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        self.0.refill_in_background();
    }
}

impl Inner {
    fn notify(&self, notice: LaunchNotice<'_>) {
        if let Some(notify) = &self.notify {
            notify(notice);
        }
    }

    /// Starts a spare and keeps it (the caller set `refilling`); whether
    /// one is ready.
    async fn refill(self: Arc<Self>) -> bool {
        // One may have been made ready since the caller looked.
        if self.spare.lock_unpoisoned().is_some() {
            self.refilling.store(false, Ordering::SeqCst);
            return true;
        }
        let started = Spare::start(&self.binary, &self.state_root).await;
        let ready = match started {
            Ok(spare) => {
                *self.spare.lock_unpoisoned() = Some(spare);
                *self.failed_at.lock_unpoisoned() = None;
                self.spares_started.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                *self.failed_at.lock_unpoisoned() = Some(Instant::now());
                self.notify(LaunchNotice::SpareFailed(&e));
                false
            }
        };
        self.refilling.store(false, Ordering::SeqCst);
        ready
    }
}

impl Spare {
    /// Starts `berth-shim --standby` and waits for its first process, which
    /// forks the spare and exits.
    async fn start(binary: &Path, state_root: &Path) -> std::io::Result<Spare> {
        let id = file_id(binary);
        let mut child = tokio::process::Command::new(binary)
            .arg("--standby")
            .arg("--state-root")
            .arg(state_root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Until the options name its shim.log.
            .stderr(Stdio::null())
            .kill_on_drop(false)
            .spawn()?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let status = match tokio::time::timeout(FIRST_PROCESS, child.wait()).await {
            Ok(status) => status?,
            Err(_) => {
                // Dropped after the kill: tokio reaps it in the background.
                let _ = child.start_kill();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("its first process did not exit in {FIRST_PROCESS:?}"),
                ));
            }
        };
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "{} --standby: {status}",
                binary.display()
            )));
        }
        match (stdin, stdout) {
            (Some(stdin), Some(stdout)) => Ok(Spare {
                stdin,
                stdout,
                binary: id,
            }),
            _ => Err(std::io::Error::other("its stdio are not pipes")),
        }
    }

    /// Gives the spare its options (`frame`, from `shim`) and reads its
    /// answer.
    async fn hand_over(self, shim: &ShimOptions, frame: &[u8]) -> Result<ShimClient, Handover> {
        let Spare {
            mut stdin,
            mut stdout,
            ..
        } = self;
        // The whole frame fits the pipe: a write that fails finds the
        // spare gone (EPIPE).
        if let Err(e) = stdin.write_all(frame).await {
            return Err(Handover::Lost(format!("is gone ({e})")));
        }
        drop(stdin);
        let timeout = client::start_timeout(shim, None);
        let answer = tokio::time::timeout(timeout, client::read_frame(&mut stdout))
            .await
            .map_err(|_| {
                Handover::Failed(Error::Timeout {
                    id: shim.id.clone(),
                    what: "shim start-up",
                    timeout,
                })
            })?;
        let frame = answer.map_err(|e| {
            Handover::Failed(Error::Protocol {
                id: shim.id.clone(),
                message: format!(
                    "reading the shim's answer: {e}; {}",
                    client::log_tail(&shim.paths().shim_log())
                ),
            })
        })?;
        // It had its options (the write went through): it may have acted on
        // them (a container created), so a fresh shim is not tried; this is
        // a shim that ended without answering, as a fresh one can.
        let Some((kind, payload)) = frame else {
            return Err(Handover::Failed(Error::Protocol {
                id: shim.id.clone(),
                message: format!(
                    "the standby shim ended without answering; {}",
                    client::log_tail(&shim.paths().shim_log())
                ),
            }));
        };
        ShimClient::created(shim, kind, &payload).map_err(Handover::Failed)
    }
}
