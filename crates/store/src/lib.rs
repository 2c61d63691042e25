//! The building blocks of berth's sandbox and container stores:
//! atomic, versioned record files on disk ([`RecordDir`]), a name registrar
//! ([`Registrar`]), an index that finds ids by unique prefix ([`IdIndex`]),
//! and a status cell that persists a change before it is visible
//! ([`StatusCell`]), and the [`Store`] built from them.

mod cell;
mod index;
mod record;
mod registrar;
mod store;

pub use cell::StatusCell;
pub use index::{IdIndex, LookupError};
pub use record::{Durability, LoadedRecord, RecordDir, RecordError};
pub use registrar::{Registrar, Reserved};
pub use store::{Broken, Locked, Meta, Object, Record, Store};
