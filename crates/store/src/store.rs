//! A store of objects (sandboxes, containers): metadata fixed at creation,
//! status behind its own lock, every change persisted as one record before
//! it is visible, names reserved, ids found by unique prefix.

use berth_lock::RwLockExt;
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::record::make_private_dir;
use crate::{
    Durability, IdIndex, LookupError, RecordDir, RecordError, Registrar, Reserved, StatusCell,
};

/// Metadata of a stored object.
pub trait Meta: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The object's id (also its record's file name).
    fn id(&self) -> &str;
    /// The name reserved for it.
    fn name(&self) -> &str;
    /// The group it belongs to (a container's pod), listed by
    /// [`Store::in_group`] without a walk over every object.
    fn group(&self) -> Option<&str> {
        None
    }
}

/// What is written to disk for one object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record<M, S> {
    pub meta: M,
    pub status: S,
}

/// One stored object.
#[derive(Debug)]
pub struct Object<M, S> {
    pub meta: M,
    status: StatusCell<S>,
    records: Arc<RecordDir<Record<M, S>>>,
    /// Serialises life-cycle operations (start, stop, remove) on the object.
    pub lifecycle: Arc<tokio::sync::Mutex<()>>,
    /// Set once the record is deleted: updates are refused from then on,
    /// so a deleted record never comes back on disk.
    deleted: AtomicBool,
    /// The store's count of changes ([`Store::changes`]).
    changes: Arc<AtomicU64>,
}

impl<M: Meta, S: Clone + Serialize + DeserializeOwned> Object<M, S> {
    /// A copy of the current status.
    pub fn status(&self) -> S {
        self.status.get()
    }

    /// `f` of the current status, without copying it.
    pub fn with_status<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        self.status.with(f)
    }

    /// Changes the status: written to disk (synced) first, then visible.
    pub fn update(&self, change: impl FnOnce(&mut S)) -> Result<S, RecordError> {
        self.update_with(Durability::Synced, change)
    }

    /// [`Object::update`] with a record write that is not fsynced (see
    /// [`Durability::Volatile`]): only for changes recovery observes again.
    pub fn update_volatile(&self, change: impl FnOnce(&mut S)) -> Result<S, RecordError> {
        self.update_with(Durability::Volatile, change)
    }

    /// Changes the status: written to disk with `durability` first, then
    /// visible.
    pub fn update_with(
        &self,
        durability: Durability,
        change: impl FnOnce(&mut S),
    ) -> Result<S, RecordError> {
        let updated = self.status.update(
            |status| {
                change(status);
                Ok(())
            },
            |status| {
                if self.deleted.load(Ordering::Acquire) {
                    return Err(RecordError::Deleted(self.meta.id().to_string()));
                }
                self.records.write(
                    self.meta.id(),
                    &Record {
                        meta: self.meta.clone(),
                        status: status.clone(),
                    },
                    durability,
                )
            },
        );
        if updated.is_ok() {
            // After the new status is visible (see [`Store::changes`]).
            self.changes.fetch_add(1, Ordering::Release);
        }
        updated
    }
}

/// A new object and its held lifecycle lock.
pub type Locked<M, S> = (Arc<Object<M, S>>, tokio::sync::OwnedMutexGuard<()>);

/// A record that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The id its file is named after.
    pub id: String,
    /// Why it could not be loaded.
    pub problem: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.problem)
    }
}

/// All objects of one kind.
#[derive(Debug)]
pub struct Store<M, S> {
    records: Arc<RecordDir<Record<M, S>>>,
    objects: RwLock<HashMap<String, Arc<Object<M, S>>>>,
    names: Registrar,
    index: IdIndex,
    /// Ids of the objects of each group.
    groups: RwLock<HashMap<String, BTreeSet<String>>>,
    /// Counts the changes of what is stored: each object added or deleted,
    /// each status update, counted once it is visible.
    changes: Arc<AtomicU64>,
}

impl<M: Meta, S: Clone + Serialize + DeserializeOwned> Store<M, S> {
    /// Opens the store in `dir` and loads every record. Records that cannot
    /// be loaded (damaged, of an unknown version, or holding a name another
    /// record holds) are returned with their ids and stay on disk: whatever
    /// they own must not be taken for an orphan.
    pub fn open(dir: &Path) -> io::Result<(Store<M, S>, Vec<Broken>)> {
        let store: Store<M, S> = Store {
            records: Arc::new(RecordDir::open(dir)?),
            objects: RwLock::default(),
            names: Registrar::default(),
            index: IdIndex::default(),
            groups: RwLock::default(),
            changes: Arc::default(),
        };
        let mut broken = Vec::new();
        for loaded in store.records.load_all()? {
            match loaded.record {
                Ok(record) => {
                    if let Err(e) = store.names.reserve(record.meta.name(), record.meta.id()) {
                        broken.push(Broken {
                            problem: format!("record {}: {e}", loaded.id),
                            id: loaded.id,
                        });
                        continue;
                    }
                    store.add(record.meta, record.status);
                }
                Err(e) => broken.push(Broken {
                    id: loaded.id,
                    problem: e.to_string(),
                }),
            }
        }
        Ok((store, broken))
    }

    /// Moves the record file of `id` (one that could not be loaded) into
    /// `dir`, out of the way of later starts; where it went.
    pub fn move_aside(&self, id: &str, dir: &Path) -> io::Result<std::path::PathBuf> {
        let from = self.records.path(id).map_err(io::Error::other)?;
        make_private_dir(dir)?;
        let to = dir.join(from.file_name().unwrap_or_default());
        std::fs::rename(&from, &to)?;
        Ok(to)
    }

    /// Reserves `name` for `id`.
    pub fn reserve_name(&self, name: &str, id: &str) -> Result<(), Reserved> {
        self.names.reserve(name, id)
    }

    /// Frees `name`.
    pub fn release_name(&self, name: &str) {
        self.names.release(name);
    }

    /// Frees `name` if `id` holds it.
    pub fn release_name_of(&self, name: &str, id: &str) {
        self.names.release_if(name, id);
    }

    /// Persists a new object, then makes it visible.
    pub fn create(&self, meta: M, status: S) -> Result<Arc<Object<M, S>>, RecordError> {
        self.create_locked(meta, status).map(|(object, _)| object)
    }

    /// [`Store::create`], with the object's lifecycle lock already held when
    /// it becomes visible: no other call can act on it until the guard goes.
    pub fn create_locked(&self, meta: M, status: S) -> Result<Locked<M, S>, RecordError> {
        self.records.save(
            meta.id(),
            &Record {
                meta: meta.clone(),
                status: status.clone(),
            },
        )?;
        Ok(self.add(meta, status))
    }

    fn add(&self, meta: M, status: S) -> Locked<M, S> {
        let id = meta.id().to_string();
        let object = Arc::new(Object {
            meta,
            status: StatusCell::new(status),
            records: self.records.clone(),
            lifecycle: Arc::new(tokio::sync::Mutex::new(())),
            deleted: AtomicBool::new(false),
            changes: self.changes.clone(),
        });
        // Nobody else can know the object yet: the lock is free.
        let guard = object
            .lifecycle
            .clone()
            .try_lock_owned()
            .expect("a new object's lock is free");
        self.index.add(&id);
        if let Some(group) = object.meta.group() {
            self.groups
                .write_unpoisoned()
                .entry(group.to_string())
                .or_default()
                .insert(id.clone());
        }
        self.objects.write_unpoisoned().insert(id, object.clone());
        self.changes.fetch_add(1, Ordering::Release);
        (object, guard)
    }

    /// How many changes the store has seen (objects added or deleted,
    /// statuses updated). Each is counted after it is visible, so what was
    /// read after this count was taken is at least as new as the count: a
    /// view made then and kept with the count is current while the count
    /// stays the same.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// The object whose id is, or uniquely starts with, `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Object<M, S>>, LookupError> {
        let full = self.index.get(id)?;
        self.objects
            .read_unpoisoned()
            .get(&full)
            .cloned()
            .ok_or(LookupError::NotFound(full))
    }

    /// The objects of `group`, by id.
    pub fn in_group(&self, group: &str) -> Vec<Arc<Object<M, S>>> {
        let groups = self.groups.read_unpoisoned();
        let Some(ids) = groups.get(group) else {
            return Vec::new();
        };
        let objects = self.objects.read_unpoisoned();
        ids.iter()
            .filter_map(|id| objects.get(id).cloned())
            .collect()
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<Object<M, S>>> {
        self.objects.read_unpoisoned().values().cloned().collect()
    }

    /// Forgets an object: its record first, then memory, then its name.
    pub fn delete(&self, object: &Object<M, S>) -> Result<(), RecordError> {
        let id = object.meta.id();
        // Under the status lock: an update racing this one is refused.
        object.status.exclusive(|_| {
            self.records.remove(id)?;
            object.deleted.store(true, Ordering::Release);
            Ok::<(), RecordError>(())
        })?;
        self.objects.write_unpoisoned().remove(id);
        self.index.remove(id);
        if let Some(group) = object.meta.group() {
            let mut groups = self.groups.write_unpoisoned();
            if let Some(ids) = groups.get_mut(group) {
                ids.remove(id);
                if ids.is_empty() {
                    groups.remove(group);
                }
            }
        }
        self.names.release_if(object.meta.name(), id);
        self.changes.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct M {
        id: String,
        name: String,
    }

    impl Meta for M {
        fn id(&self) -> &str {
            &self.id
        }
        fn name(&self) -> &str {
            &self.name
        }
        fn group(&self) -> Option<&str> {
            self.name.split_once('/').map(|(group, _)| group)
        }
    }

    #[test]
    fn groups_list_their_objects_and_forget_deleted_ones() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
            let a1 = store.create(meta("a1", "pod-a/x"), 0).unwrap();
            store.create(meta("a2", "pod-a/y"), 0).unwrap();
            store.create(meta("b1", "pod-b/x"), 0).unwrap();
            store.create(meta("n", "none"), 0).unwrap();
            let ids = |g: &str| -> Vec<String> {
                store
                    .in_group(g)
                    .iter()
                    .map(|o| o.meta.id.clone())
                    .collect()
            };
            assert_eq!(ids("pod-a"), ["a1", "a2"]);
            assert_eq!(ids("pod-b"), ["b1"]);
            assert!(ids("pod-c").is_empty());
            store.delete(&a1).unwrap();
            assert_eq!(ids("pod-a"), ["a2"]);
        }
        // Reloaded records are grouped too.
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        assert_eq!(store.in_group("pod-a").len(), 1);
        assert_eq!(store.in_group("pod-b").len(), 1);
    }

    fn meta(id: &str, name: &str) -> M {
        M {
            id: id.into(),
            name: name.into(),
        }
    }

    #[test]
    fn create_update_reload_delete() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, broken) = Store::<M, u32>::open(dir.path()).unwrap();
            assert!(broken.is_empty());
            store.reserve_name("a", "id1").unwrap();
            let obj = store.create(meta("id1", "a"), 0).unwrap();
            obj.update(|s| *s = 7).unwrap();
            assert!(store.reserve_name("a", "id2").is_err());
            assert_eq!(store.get("id").unwrap().status(), 7);
        }
        // A restart finds the object, its status and its name.
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        let obj = store.get("id1").unwrap();
        assert_eq!(obj.status(), 7);
        assert!(store.reserve_name("a", "id2").is_err());
        store.delete(&obj).unwrap();
        assert!(matches!(store.get("id1"), Err(LookupError::NotFound(_))));
        store.reserve_name("a", "id2").unwrap();
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        assert!(store.list().is_empty());
    }

    #[test]
    fn a_volatile_update_is_read_back_as_a_synced_one() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
            let obj = store.create(meta("id1", "a"), 0).unwrap();
            assert_eq!(obj.update_volatile(|s| *s = 5).unwrap(), 5);
            assert_eq!(obj.status(), 5);
        }
        let (store, broken) = Store::<M, u32>::open(dir.path()).unwrap();
        assert!(broken.is_empty());
        assert_eq!(store.get("id1").unwrap().status(), 5);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["id1.json"], "a temp file left");
    }

    #[test]
    fn a_deleted_object_is_never_saved_again() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        let obj = store.create(meta("id1", "a"), 0).unwrap();
        store.delete(&obj).unwrap();
        assert!(matches!(
            obj.update(|s| *s = 1),
            Err(RecordError::Deleted(_))
        ));
        assert!(matches!(
            obj.update_volatile(|s| *s = 1),
            Err(RecordError::Deleted(_))
        ));
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        assert!(store.list().is_empty());
    }

    /// Every visible change moves the count, and nothing else does.
    #[test]
    fn changes_count_what_is_added_updated_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        let at = |n| assert_eq!(store.changes(), n);
        at(0);
        let obj = store.create(meta("id1", "a"), 0).unwrap();
        at(1);
        obj.update(|s| *s = 1).unwrap();
        obj.update_volatile(|s| *s = 2).unwrap();
        at(3);
        let _ = (store.list(), store.get("id1"), obj.status());
        at(3);
        store.delete(&obj).unwrap();
        at(4);
        assert!(obj.update(|s| *s = 3).is_err());
        at(4);
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        assert_eq!(store.changes(), 0, "nothing loaded");
    }

    #[test]
    fn duplicate_names_on_disk_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        store.create(meta("id1", "a"), 0).unwrap();
        store.create(meta("id2", "a"), 0).unwrap();
        let (store, broken) = Store::<M, u32>::open(dir.path()).unwrap();
        assert_eq!(store.list().len(), 1);
        assert_eq!(broken.len(), 1);
        let kept = store.list()[0].meta.id.clone();
        assert_ne!(broken[0].id, kept);
        let aside = dir.path().join("aside");
        let moved = store.move_aside(&broken[0].id, &aside).unwrap();
        assert!(moved.exists());
        let (_, broken) = Store::<M, u32>::open(dir.path()).unwrap();
        assert!(broken.is_empty());
    }
}
