//! How the stores' errors become RPC errors, per kind of object.

use std::sync::Arc;

use berth_store::{Durability, Locked, LookupError, Meta, Object, Store};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;

/// The name of a kind of object, for error messages.
pub trait Kind {
    const KIND: &'static str;
}

/// Store calls with RPC errors.
pub trait StoreExt<M, S> {
    /// The object whose id is or uniquely starts with `id`.
    fn lookup(&self, id: &str) -> Result<Arc<Object<M, S>>, Error>;
}

impl<M: Meta + Kind, S: Clone + Serialize + DeserializeOwned> StoreExt<M, S> for Store<M, S> {
    fn lookup(&self, id: &str) -> Result<Arc<Object<M, S>>, Error> {
        self.get(id).map_err(|e| match e {
            LookupError::Empty => Error::InvalidArgument(format!("{} id is empty", M::KIND)),
            LookupError::Ambiguous(p) => {
                Error::InvalidArgument(format!("{} id prefix {p:?} is ambiguous", M::KIND))
            }
            LookupError::NotFound(id) => Error::NotFound { kind: M::KIND, id },
        })
    }
}

/// Changes an object's status off the async workers: its record is written
/// and fsynced under the object's status lock, so on a blocking thread,
/// never on a tokio worker. For every change recovery cannot observe again
/// (see [`save_volatile`] for the others).
pub async fn save<M, S>(
    object: &Arc<Object<M, S>>,
    change: impl FnOnce(&mut S) + Send + 'static,
) -> Result<S, Error>
where
    M: Meta + Send + Sync + 'static,
    S: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    write(object, Durability::Synced, "record.save", change).await
}

/// [`save`] without the fsyncs (temp file and rename: never torn, kept when
/// berth dies, possibly lost in a power cut). Only for a change recovery
/// derives again from what it observes, so that losing it loses nothing:
/// a container's start (its shim's state) or exit (its shim's exit file),
/// and a pod becoming not ready (its pause or pins gone). docs/architecture.md,
/// *Which writes are synced*, lists each write and why.
pub async fn save_volatile<M, S>(
    object: &Arc<Object<M, S>>,
    change: impl FnOnce(&mut S) + Send + 'static,
) -> Result<S, Error>
where
    M: Meta + Send + Sync + 'static,
    S: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    write(object, Durability::Volatile, "record.save_volatile", change).await
}

/// A status change written with `durability` on a blocking thread (the
/// status lock is a std mutex), timed as `step`.
async fn write<M, S>(
    object: &Arc<Object<M, S>>,
    durability: Durability,
    step: &'static str,
    change: impl FnOnce(&mut S) + Send + 'static,
) -> Result<S, Error>
where
    M: Meta + Send + Sync + 'static,
    S: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let object = object.clone();
    crate::counters::timed(
        step,
        tokio::task::spawn_blocking(move || object.update_with(durability, change)),
    )
    .await
    .map_err(Error::join)?
    .map_err(Error::from)
}

/// [`Store::create_locked`] on a blocking thread.
pub async fn create<M, S>(
    store: Arc<Store<M, S>>,
    meta: M,
    status: S,
) -> Result<Locked<M, S>, Error>
where
    M: Meta + Send + Sync + 'static,
    S: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let create = tokio::task::spawn_blocking(move || store.create_locked(meta, status));
    crate::counters::timed("record.create", create)
        .await
        .map_err(Error::join)?
        .map_err(Error::from)
}

/// [`Store::delete`] on a blocking thread.
pub async fn delete<M, S>(store: Arc<Store<M, S>>, object: &Arc<Object<M, S>>) -> Result<(), Error>
where
    M: Meta + Send + Sync + 'static,
    S: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let object = object.clone();
    crate::counters::timed(
        "record.delete",
        tokio::task::spawn_blocking(move || store.delete(&object)),
    )
    .await
    .map_err(Error::join)?
    .map_err(Error::from)
}
