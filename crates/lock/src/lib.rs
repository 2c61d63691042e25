//! Locks taken whatever a panicking holder left: berth's locks guard data
//! that stays consistent between statements (maps, counters, queues), so a
//! panic elsewhere must not turn every later `lock()` into a second panic.
//!
//! ```
//! use berth_lock::MutexExt;
//! let m = std::sync::Mutex::new(1);
//! *m.lock_unpoisoned() += 1;
//! assert_eq!(*m.lock_unpoisoned(), 2);
//! ```

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], poisoned or not.
pub trait MutexExt<T: ?Sized> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`], poisoned or not.
pub trait RwLockExt<T: ?Sized> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_value() {
        let m = std::sync::Arc::new(Mutex::new(5));
        let rw = std::sync::Arc::new(RwLock::new(7));
        let (m2, rw2) = (m.clone(), rw.clone());
        let _ = std::thread::spawn(move || {
            let _a = m2.lock().unwrap();
            let _b = rw2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && rw.is_poisoned());
        assert_eq!(*m.lock_unpoisoned(), 5);
        assert_eq!(*rw.read_unpoisoned(), 7);
        *rw.write_unpoisoned() = 8;
        assert_eq!(*rw.read_unpoisoned(), 8);
    }
}
