//! Threads started ahead of their work. Creating a thread costs the shim
//! tens of microseconds of its start-up; the exit monitor and the output
//! copiers are started before `runtime run` (a standby shim starts them
//! before it even knows its container) and given their work once the
//! container runs, so that nothing but the answer is left to do after the
//! runtime exits.

use std::io;
use std::sync::mpsc::{sync_channel, SyncSender};

use crate::crilog::Stream;

/// One unit of work for a [`Worker`].
type Job = Box<dyn FnOnce() + Send>;

/// A thread waiting for one job; dropped without one, it ends.
pub struct Worker {
    name: &'static str,
    stack: usize,
    tx: SyncSender<Job>,
}

impl Worker {
    /// Starts thread `name` with a `stack`-byte stack, waiting for its job.
    pub fn spawn(name: &'static str, stack: usize) -> io::Result<Worker> {
        let (tx, rx) = sync_channel::<Job>(1);
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(stack)
            .spawn(move || {
                if let Ok(job) = rx.recv() {
                    job();
                }
            })?;
        Ok(Worker { name, stack, tx })
    }

    /// Runs `job` on this worker's thread (on a new one, should the thread
    /// be gone).
    pub fn run(self, job: impl FnOnce() + Send + 'static) -> io::Result<()> {
        match self.tx.send(Box::new(job)) {
            Ok(()) => Ok(()),
            Err(back) => spawn_now(self.name, self.stack, back.0),
        }
    }
}

/// Runs `job` on `worker`, or on a thread started now when there is none.
pub fn run_on(
    worker: Option<Worker>,
    name: &'static str,
    stack: usize,
    job: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    match worker {
        Some(w) => w.run(job),
        None => spawn_now(name, stack, Box::new(job)),
    }
}

fn spawn_now(name: &'static str, stack: usize, job: Job) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack)
        .spawn(job)
        .map(drop)
}

/// Stack of the copiers and the exit monitor.
pub const SMALL_STACK: usize = 64 * 1024;

/// The threads a container needs from its start on, started ahead: the
/// exit monitor and a copier per output stream. One that cannot be
/// started now is started when its work comes (as it was before workers).
#[derive(Default)]
pub struct Workers {
    pub monitor: Option<Worker>,
    pub stdout: Option<Worker>,
    pub stderr: Option<Worker>,
}

impl Workers {
    /// Starts them; `stderr`: a stderr copier too (a terminal has one
    /// output only).
    pub fn start(stderr: bool) -> Workers {
        let spawn = |name| Worker::spawn(name, SMALL_STACK).ok();
        Workers {
            monitor: spawn("monitor"),
            stdout: spawn("copy-stdout"),
            stderr: if stderr { spawn("copy-stderr") } else { None },
        }
    }

    /// The copier worker for `stream`.
    pub fn copier(&mut self, stream: Stream) -> Option<Worker> {
        match stream {
            Stream::Stdout => self.stdout.take(),
            Stream::Stderr => self.stderr.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn runs_its_job_on_its_own_thread() {
        let w = Worker::spawn("w-test", SMALL_STACK).unwrap();
        let (tx, rx) = channel();
        w.run(move || {
            tx.send(std::thread::current().name().map(String::from))
                .unwrap()
        })
        .unwrap();
        let name = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(name.as_deref(), Some("w-test"));
        let (tx, rx) = channel();
        run_on(None, "w-now", SMALL_STACK, move || tx.send(1).unwrap()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
    }
}
