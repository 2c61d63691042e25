//! A store of objects (sandboxes, containers): metadata fixed at creation,
//! status behind its own lock, every change persisted as one record before
//! it is visible, names reserved, ids found by unique prefix.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, RwLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{IdIndex, LookupError, RecordDir, RecordError, Registrar, Reserved, StatusCell};

/// Metadata of a stored object.
pub trait Meta: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The object's id (also its record's file name).
    fn id(&self) -> &str;
    /// The name reserved for it.
    fn name(&self) -> &str;
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
    pub lifecycle: tokio::sync::Mutex<()>,
}

impl<M: Meta, S: Clone + Serialize + DeserializeOwned> Object<M, S> {
    /// A copy of the current status.
    pub fn status(&self) -> S {
        self.status.get()
    }

    /// Changes the status: written to disk first, then visible.
    pub fn update(&self, change: impl FnOnce(&mut S)) -> Result<S, RecordError> {
        self.status.update(
            |status| {
                change(status);
                Ok(())
            },
            |status| {
                self.records.save(
                    self.meta.id(),
                    &Record {
                        meta: self.meta.clone(),
                        status: status.clone(),
                    },
                )
            },
        )
    }
}

/// All objects of one kind.
#[derive(Debug)]
pub struct Store<M, S> {
    records: Arc<RecordDir<Record<M, S>>>,
    objects: RwLock<HashMap<String, Arc<Object<M, S>>>>,
    names: Registrar,
    index: IdIndex,
}

impl<M: Meta, S: Clone + Serialize + DeserializeOwned> Store<M, S> {
    /// Opens the store in `dir` and loads every record. Records that cannot
    /// be loaded are described in the returned list and stay on disk.
    pub fn open(dir: &Path) -> io::Result<(Store<M, S>, Vec<String>)> {
        let store: Store<M, S> = Store {
            records: Arc::new(RecordDir::open(dir)?),
            objects: RwLock::default(),
            names: Registrar::default(),
            index: IdIndex::default(),
        };
        let mut broken = Vec::new();
        for loaded in store.records.load_all()? {
            match loaded.record {
                Ok(record) => {
                    if let Err(e) = store.names.reserve(record.meta.name(), record.meta.id()) {
                        broken.push(format!("record {}: {e}", loaded.id));
                        continue;
                    }
                    store.add(record.meta, record.status);
                }
                Err(e) => broken.push(e.to_string()),
            }
        }
        Ok((store, broken))
    }

    /// Reserves `name` for `id`.
    pub fn reserve_name(&self, name: &str, id: &str) -> Result<(), Reserved> {
        self.names.reserve(name, id)
    }

    /// Frees `name`.
    pub fn release_name(&self, name: &str) {
        self.names.release(name);
    }

    /// Persists a new object, then makes it visible.
    pub fn create(&self, meta: M, status: S) -> Result<Arc<Object<M, S>>, RecordError> {
        self.records.save(
            meta.id(),
            &Record {
                meta: meta.clone(),
                status: status.clone(),
            },
        )?;
        Ok(self.add(meta, status))
    }

    fn add(&self, meta: M, status: S) -> Arc<Object<M, S>> {
        let id = meta.id().to_string();
        let object = Arc::new(Object {
            meta,
            status: StatusCell::new(status),
            records: self.records.clone(),
            lifecycle: tokio::sync::Mutex::new(()),
        });
        self.index.add(&id);
        self.objects
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, object.clone());
        object
    }

    /// The object whose id is, or uniquely starts with, `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Object<M, S>>, LookupError> {
        let full = self.index.get(id)?;
        self.objects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&full)
            .cloned()
            .ok_or(LookupError::NotFound(full))
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<Object<M, S>>> {
        self.objects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Forgets an object: its record first, then memory, then its name.
    pub fn delete(&self, object: &Object<M, S>) -> Result<(), RecordError> {
        let id = object.meta.id();
        self.records.remove(id)?;
        self.objects
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        self.index.remove(id);
        self.names.release(object.meta.name());
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
    fn duplicate_names_on_disk_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::<M, u32>::open(dir.path()).unwrap();
        store.create(meta("id1", "a"), 0).unwrap();
        store.create(meta("id2", "a"), 0).unwrap();
        let (store, broken) = Store::<M, u32>::open(dir.path()).unwrap();
        assert_eq!(store.list().len(), 1);
        assert_eq!(broken.len(), 1);
    }
}
