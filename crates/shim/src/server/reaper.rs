//! The shim's one reaper. The shim is a child subreaper, so every process of
//! its container that loses its parent becomes its child; one thread waits
//! for SIGCHLD (blocked in every thread) and reaps with `waitpid(-1)`, and
//! hands each exit to whoever subscribed to that pid.
//!
//! Nothing else in the shim waits for a process, so nothing is stolen
//! (containerd #2855): runtime invocations are spawned through
//! [`Reaper::spawn`], which subscribes under the reaper's lock before the
//! reaper can see the child; pids learnt later (the container's init, exec'd
//! processes) are subscribed with [`Reaper::watch`], which also finds an exit
//! that came first. Exits nobody asked for (zombies of double-forking
//! processes) are reaped and a bounded number kept for late subscribers.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use nix::sys::signal::{SigSet, Signal};

use crate::runc::{Spawned, Spawner};
use crate::sys;

/// Exits of pids nobody subscribed to that are kept for a late [`Reaper::watch`].
const MAX_ORPHANS: usize = 256;

/// A reaped process.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub status: ExitStatus,
    /// When it was reaped.
    pub at: SystemTime,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<u32, Slot>,
    orphans: VecDeque<(u32, Exit)>,
}

struct Slot {
    exit: Option<Exit>,
    notify: File,
}

/// See the module docs.
#[derive(Default)]
pub struct Reaper {
    inner: Mutex<Inner>,
}

/// The blocked signal set the reaper waits on.
pub fn sigchld_set() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    set
}

impl Reaper {
    /// Starts the reaper thread. SIGCHLD must already be blocked in the
    /// calling thread (and so in every thread started after it).
    pub fn start() -> io::Result<Arc<Reaper>> {
        let reaper = Arc::new(Reaper::default());
        let r = reaper.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let set = sigchld_set();
                loop {
                    r.reap_all();
                    // Only SIGCHLD is in the set; an error means try again.
                    let _ = set.wait();
                }
            })?;
        Ok(reaper)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reaps every child that has exited.
    fn reap_all(&self) {
        let mut inner = self.lock();
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into our local.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            use std::os::unix::process::ExitStatusExt;
            let exit = Exit {
                status: ExitStatus::from_raw(status),
                at: SystemTime::now(),
            };
            let pid = pid as u32;
            match inner.slots.get_mut(&pid) {
                Some(slot) => {
                    slot.exit = Some(exit);
                    let _ = slot.notify.write(&[1]);
                }
                None => {
                    if inner.orphans.len() >= MAX_ORPHANS {
                        inner.orphans.pop_front();
                    }
                    inner.orphans.push_back((pid, exit));
                }
            }
        }
    }

    fn subscribe(self: &Arc<Self>, inner: &mut Inner, pid: u32) -> io::Result<Subscription> {
        let (read, write) = sys::pipe()?;
        let mut slot = Slot {
            exit: None,
            notify: File::from(write),
        };
        if let Some(i) = inner.orphans.iter().position(|(p, _)| *p == pid) {
            let (_, exit) = inner.orphans.remove(i).unwrap_or((pid, exit_unknown()));
            slot.exit = Some(exit);
            slot.notify.write_all(&[1])?;
        }
        inner.slots.insert(pid, slot);
        Ok(Subscription {
            pid,
            reaper: self.clone(),
            read,
        })
    }

    /// Subscribes to the exit of `pid`, a child (or re-parented orphan) of the
    /// shim, including an exit already reaped.
    pub fn watch(self: &Arc<Self>, pid: u32) -> io::Result<Subscription> {
        let mut inner = self.lock();
        self.subscribe(&mut inner, pid)
    }

    /// Spawns `cmd` and subscribes to its exit before the reaper can reap it.
    pub fn spawn(self: &Arc<Self>, cmd: &mut Command) -> io::Result<Subscription> {
        let mut inner = self.lock();
        let child = cmd.spawn()?;
        // The Child is dropped without waiting: the reaper does that.
        self.subscribe(&mut inner, child.id())
    }
}

fn exit_unknown() -> Exit {
    use std::os::unix::process::ExitStatusExt;
    Exit {
        status: ExitStatus::from_raw(255 << 8),
        at: SystemTime::now(),
    }
}

/// Interest in one pid's exit; dropping it forgets the pid.
pub struct Subscription {
    pid: u32,
    reaper: Arc<Reaper>,
    read: OwnedFd,
}

impl Subscription {
    /// The pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Readable once the process has exited.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// The exit, once reaped.
    pub fn exit(&self) -> Option<Exit> {
        self.reaper.lock().slots.get(&self.pid).and_then(|s| s.exit)
    }

    /// Waits up to `timeout` (`None`: for ever) for the exit.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Exit> {
        use std::os::fd::AsRawFd;
        let mut fds = [sys::pollin(self.read.as_raw_fd())];
        let _ = sys::poll(&mut fds, timeout);
        self.exit()
    }

    /// Sends `signal` unless the process has been reaped (then its pid may
    /// belong to someone else).
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        let inner = self.reaper.lock();
        if inner.slots.get(&self.pid).is_some_and(|s| s.exit.is_some()) {
            return Ok(());
        }
        // SAFETY: kill takes a pid and a signal number.
        if unsafe { libc::kill(self.pid as libc::pid_t, signal) } < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(err);
            }
        }
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.reaper.lock().slots.remove(&self.pid);
    }
}

impl Spawned for Subscription {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd())
    }
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        Ok(self.exit().map(|e| e.status))
    }
    fn kill(&mut self) -> io::Result<()> {
        self.signal(libc::SIGKILL)
    }
}

/// Spawns the runtime through the reaper.
pub struct ReaperSpawner(pub Arc<Reaper>);

impl Spawner for ReaperSpawner {
    fn spawn(&self, cmd: &mut Command) -> io::Result<Box<dyn Spawned>> {
        Ok(Box::new(self.0.spawn(cmd)?))
    }
}
