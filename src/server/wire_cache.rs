//! The server's encodings of records, kept beside the stores rather than in
//! their records (which hold only state): each record's list entry (encoded
//! once but for its state) and its encoded status (encoded again once what
//! it shows has changed). kubelet asks for them all the time (its relist
//! every second, a status call per pod and container), so each costs a
//! lookup and a comparison rather than an encoding.

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use cri_api::prepacked::Entry;

use crate::container::{Container, ContainerStatus};
use crate::sandbox::{Sandbox, SandboxState};

/// What the server keeps per record.
#[derive(Default)]
pub(super) struct WireCache {
    pub container_entries: PerRecord<Container, Entry>,
    pub sandbox_entries: PerRecord<Sandbox, Entry>,
    pub container_statuses: PerRecord<Container, ContainerStatusBytes>,
    pub sandbox_statuses: PerRecord<Sandbox, SandboxStatusBytes>,
}

/// A container's `ContainerStatus` encoded, with the status and the image's
/// repo digest it was encoded from.
pub(super) type ContainerStatusBytes = ((ContainerStatus, Option<String>), Vec<u8>);

/// A sandbox's `PodSandboxStatus` encoded, with the state and IPs (all of
/// its status that is in it) it was encoded from.
pub(super) type SandboxStatusBytes = ((SandboxState, Vec<String>), Vec<u8>);

/// A value made from each record of one store, kept by the record (the
/// object in memory, not its id: a record loaded again is another).
pub(super) struct PerRecord<T, V>(Mutex<Kept<T, V>>);

struct Kept<T, V> {
    /// By the address of the record, whose allocation the `Weak` keeps (so
    /// no other record is made at that address while it is kept).
    values: HashMap<usize, (Weak<T>, Arc<V>)>,
    /// When there are this many, those of records gone are dropped.
    sweep_at: usize,
}

/// The fewest values kept before those of records gone are dropped.
const MIN_SWEEP: usize = 64;

impl<T, V> Default for PerRecord<T, V> {
    fn default() -> Self {
        PerRecord(Mutex::new(Kept {
            values: HashMap::new(),
            sweep_at: MIN_SWEEP,
        }))
    }
}

fn key<T>(record: &Arc<T>) -> usize {
    Arc::as_ptr(record) as usize
}

impl<T, V> PerRecord<T, V> {
    /// The value kept for `record` if `same` accepts it, else `make`'s
    /// (made without the lock held, then kept).
    pub fn get(
        &self,
        record: &Arc<T>,
        same: impl FnOnce(&V) -> bool,
        make: impl FnOnce() -> V,
    ) -> Arc<V> {
        if let Some((_, kept)) = self.0.lock_unpoisoned().values.get(&key(record)) {
            if same(kept) {
                return kept.clone();
            }
        }
        let made = Arc::new(make());
        self.0.lock_unpoisoned().keep(record, made.clone());
        made
    }

    /// The value of each of `records`, those not kept yet made by `make`
    /// (under the lock: a list call's records, taken at once).
    pub fn each<'a>(
        &self,
        records: impl Iterator<Item = &'a Arc<T>>,
        make: impl Fn(&T) -> V,
    ) -> Vec<Arc<V>>
    where
        T: 'a,
    {
        let mut kept = self.0.lock_unpoisoned();
        records
            .map(|record| match kept.values.get(&key(record)) {
                Some((_, value)) => value.clone(),
                None => {
                    let made = Arc::new(make(record));
                    kept.keep(record, made.clone());
                    made
                }
            })
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock_unpoisoned().values.len()
    }
}

impl<T, V> Kept<T, V> {
    fn keep(&mut self, record: &Arc<T>, value: Arc<V>) {
        if self.values.len() >= self.sweep_at {
            self.values
                .retain(|_, (record, _)| record.strong_count() > 0);
            self.sweep_at = (2 * self.values.len()).max(MIN_SWEEP);
        }
        self.values
            .insert(key(record), (Arc::downgrade(record), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_again_only_when_it_is_not_the_same() {
        let cache: PerRecord<u32, String> = Default::default();
        let record = Arc::new(1);
        let mut made = 0;
        let mut get = |want: &str| {
            cache
                .get(
                    &record,
                    |v| v == want,
                    || {
                        made += 1;
                        want.to_string()
                    },
                )
                .to_string()
        };
        assert_eq!(get("a"), "a");
        assert_eq!(get("a"), "a");
        assert_eq!(get("b"), "b");
        assert_eq!(get("b"), "b");
        assert_eq!(get("a"), "a");
        assert_eq!(made, 3);
    }

    #[test]
    fn each_record_has_its_own_and_those_of_records_gone_are_dropped() {
        let cache: PerRecord<u32, u32> = Default::default();
        let mut records: Vec<Arc<u32>> = (0..10).map(Arc::new).collect();
        let values = cache.each(records.iter(), |n| n * 10);
        assert_eq!(
            values.iter().map(|v| **v).collect::<Vec<_>>(),
            (0..10).map(|n| n * 10).collect::<Vec<_>>()
        );
        // Kept: not made again.
        let again = cache.each(records.iter(), |_| unreachable!());
        assert!(values.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)));
        // A record loaded again (the same value, another object) is another.
        records[0] = Arc::new(0);
        assert_eq!(*cache.each(records.iter().take(1), |_| 7)[0], 7);
        // Records come and go: what is kept stays bounded.
        for round in 0..50 {
            records = (0..10).map(|n| Arc::new(round * 100 + n)).collect();
            cache.each(records.iter(), |n| *n);
        }
        assert!(cache.len() <= 2 * MIN_SWEEP, "{}", cache.len());
    }
}
