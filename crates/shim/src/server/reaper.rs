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
//!
//! A runtime invocation's waiter need not wait for the reaper thread to be
//! scheduled: it polls a pidfd of its child, which turns readable at the
//! exit, and then reaps that one pid itself, under the reaper's lock (so
//! the reaper and it never both see the exit). That takes one wake-up (the
//! reaper's, then the waiter's through the notify pipe) off the start-up's
//! path after `runtime run` exits.

use berth_lock::MutexExt;
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
        self.inner.lock_unpoisoned()
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
            pidfd: None,
        })
    }

    /// Subscribes to the exit of `pid`, a child (or re-parented orphan) of the
    /// shim, including an exit already reaped.
    pub fn watch(self: &Arc<Self>, pid: u32) -> io::Result<Subscription> {
        let mut inner = self.lock();
        self.subscribe(&mut inner, pid)
    }

    /// Spawns `cmd` and subscribes to its exit before the reaper can reap
    /// it; with a pidfd of the child (where the kernel has them), so that
    /// [`Spawned::exit_fd`] wakes its waiter directly.
    pub fn spawn(self: &Arc<Self>, cmd: &mut Command) -> io::Result<Subscription> {
        let mut inner = self.lock();
        let child = cmd.spawn()?;
        // Not reaped before the lock is released: the pid is still this child's.
        let pidfd = sys::pidfd_open(child.id());
        // The Child is dropped without waiting: the reaper (or try_wait) does that.
        let mut sub = self.subscribe(&mut inner, child.id())?;
        sub.pidfd = pidfd;
        Ok(sub)
    }

    /// The exit of subscribed child `pid`: recorded by the reaper, or reaped
    /// here if it has exited (under the lock, as the reaper reaps).
    fn reap_one(&self, pid: u32) -> Option<Exit> {
        let mut inner = self.lock();
        let slot = inner.slots.get_mut(&pid)?;
        if slot.exit.is_some() {
            return slot.exit;
        }
        let mut status = 0;
        // SAFETY: waitpid writes the status into our local. The pid is a
        // child of ours nobody reaped (its slot has no exit, and only the
        // reaper, under this lock, reaps), so it is still the same process.
        let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if reaped != pid as libc::pid_t {
            return None;
        }
        use std::os::unix::process::ExitStatusExt;
        slot.exit = Some(Exit {
            status: ExitStatus::from_raw(status),
            at: SystemTime::now(),
        });
        let _ = slot.notify.write(&[1]);
        slot.exit
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
    /// A child spawned through [`Reaper::spawn`]: its pidfd.
    pidfd: Option<OwnedFd>,
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
        Some(
            self.pidfd
                .as_ref()
                .map_or_else(|| self.fd(), |fd| fd.as_fd()),
        )
    }
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let exit = match self.pidfd {
            Some(_) => self.reaper.reap_one(self.pid),
            None => self.exit(),
        };
        Ok(exit.map(|e| e.status))
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
