//! A status value behind its own lock, changed only through a closure whose
//! result is persisted before it becomes visible in memory.

use std::sync::{Mutex, MutexGuard};

/// Holds a status `S`.
#[derive(Debug, Default)]
pub struct StatusCell<S> {
    inner: Mutex<S>,
}

impl<S: Clone> StatusCell<S> {
    pub fn new(status: S) -> StatusCell<S> {
        StatusCell {
            inner: Mutex::new(status),
        }
    }

    /// A copy of the current status.
    pub fn get(&self) -> S {
        self.lock().clone()
    }

    /// Applies `change` to a copy, hands the copy to `persist`, and only if
    /// both succeed makes it the current status. Returns the new status.
    pub fn update<E>(
        &self,
        change: impl FnOnce(&mut S) -> Result<(), E>,
        persist: impl FnOnce(&S) -> Result<(), E>,
    ) -> Result<S, E> {
        let mut current = self.lock();
        let mut next = current.clone();
        change(&mut next)?;
        persist(&next)?;
        *current = next.clone();
        Ok(next)
    }

    /// Runs `f` under the status lock: no update persists while it runs.
    pub fn exclusive<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, S> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
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
}
