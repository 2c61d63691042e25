//! How the stores' errors become RPC errors, per kind of object.

use std::sync::Arc;

use berth_store::{LookupError, Meta, Object, Store};
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
