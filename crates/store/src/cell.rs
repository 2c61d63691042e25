//! A status value behind its own lock, changed only through a closure whose
//! result is persisted before it becomes visible in memory.
//!
//! Writers are serialised by a lock of their own, held while the new status
//! is persisted (a record write and its fsyncs); the visible status sits
//! behind another, held only to copy or replace it. A reader (ContainerStatus
//! on an async worker) never waits for a writer's fsync: it sees the status
//! before the update until the update is persisted, then the new one.

use berth_lock::{MutexExt, RwLockExt};
use std::sync::{Mutex, MutexGuard, RwLock};

/// Holds a status `S`.
#[derive(Debug, Default)]
pub struct StatusCell<S> {
    /// Held by a writer from reading the current status to publishing the
    /// next: updates (and [`StatusCell::exclusive`]) run one at a time.
    writer: Mutex<()>,
    current: RwLock<S>,
}

impl<S: Clone> StatusCell<S> {
    pub fn new(status: S) -> StatusCell<S> {
        StatusCell {
            writer: Mutex::new(()),
            current: RwLock::new(status),
        }
    }

    /// A copy of the current status; never waits for a persist.
    pub fn get(&self) -> S {
        self.current.read_unpoisoned().clone()
    }

    /// `f` of the current status, without copying it; never waits for a
    /// persist (for a reader that needs one field, many times over).
    pub fn with<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.current.read_unpoisoned())
    }

    /// Applies `change` to a copy, hands the copy to `persist`, and only if
    /// both succeed makes it the current status. Returns the new status.
    pub fn update<E>(
        &self,
        change: impl FnOnce(&mut S) -> Result<(), E>,
        persist: impl FnOnce(&S) -> Result<(), E>,
    ) -> Result<S, E> {
        let _writer = self.writer();
        let mut next = self.get();
        change(&mut next)?;
        persist(&next)?;
        *self.current.write_unpoisoned() = next.clone();
        Ok(next)
    }

    /// Runs `f` on the current status while no update runs: none persists
    /// until it returns.
    pub fn exclusive<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        let _writer = self.writer();
        f(&self.current.read_unpoisoned())
    }

    fn writer(&self) -> MutexGuard<'_, ()> {
        self.writer.lock_unpoisoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_persist_changes_nothing() {
        let cell = StatusCell::new(1u32);
        let err = cell.update(
            |s| {
                *s = 2;
                Ok(())
            },
            |_| Err("disk full"),
        );
        assert_eq!(err, Err("disk full"));
        assert_eq!(cell.get(), 1);
        let next = cell
            .update(
                |s| {
                    *s += 10;
                    Ok::<(), ()>(())
                },
                |s| {
                    assert_eq!(*s, 11);
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(next, 11);
        assert_eq!(cell.get(), 11);
    }

    #[test]
    fn failed_change_changes_nothing() {
        let cell = StatusCell::new(1u32);
        let r: Result<u32, &str> = cell.update(|_| Err("refused"), |_| Ok(()));
        assert!(r.is_err());
        assert_eq!(cell.get(), 1);
    }

    #[test]
    fn a_reader_does_not_wait_for_a_slow_persist() {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};
        let cell = std::sync::Arc::new(StatusCell::new(1u32));
        let (persisting, started) = mpsc::channel();
        let writer = {
            let cell = cell.clone();
            std::thread::spawn(move || {
                cell.update(
                    |s| {
                        *s = 2;
                        Ok::<(), ()>(())
                    },
                    |_| {
                        persisting.send(()).unwrap();
                        // A slow fsync.
                        std::thread::sleep(Duration::from_millis(500));
                        Ok(())
                    },
                )
            })
        };
        started.recv().unwrap();
        let t = Instant::now();
        assert_eq!(
            cell.get(),
            1,
            "the update is visible before it is persisted"
        );
        assert!(
            t.elapsed() < Duration::from_millis(250),
            "get waited for the persist"
        );
        writer.join().unwrap().unwrap();
        assert_eq!(cell.get(), 2);
    }
}
