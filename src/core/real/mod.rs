//! The mechanisms of [`super::mechanisms`] over berth's crates: CNI,
//! netns, the shim and the OCI runtime, the image store, and the host's
//! files and mounts. Thin: each call moves blocking work (mounts, fsync,
//! runtime execs, setns) off the tokio workers and keeps the cause of a
//! failure with the object's id.

mod files;
mod images;
mod mounts;
mod net;
mod shims;

use tonic::async_trait;

use crate::error::Error;
pub use images::NoImages;
pub use net::{Cni, NetNs};
pub use shims::Shims;

/// Runs blocking work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(Error::join)?
}

/// The host's files and mounts: [`super::mechanisms::PodFiles`],
/// [`super::mechanisms::ContainerMounts`], [`super::mechanisms::Binds`] and
/// [`super::mechanisms::Files`].
pub struct Host;

/// Events nobody hears: for a dry run.
pub struct NoEvents;

#[async_trait]
impl super::mechanisms::EventSink for NoEvents {
    async fn emit(&self, _kind: super::mechanisms::EventKind, _id: &str, _sandbox_id: &str) {}
}
