//! The mechanisms of [`super::mechanisms`] over berth's crates: CNI,
//! netns, the shim and the OCI runtime, the image store, and the host's
//! files and mounts. Thin: each call moves blocking work (mounts, fsync,
//! runtime execs, setns) off the tokio workers and keeps the cause of a
//! failure with the object's id.

mod cgroup_warmup;
mod files;
mod images;
mod mounts;
mod net;
mod shims;
mod trash;

use tonic::async_trait;

use crate::error::Error;
pub use cgroup_warmup::CgroupWarmup;
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

/// NRI disabled (and the dry run): every hook is a no-op.
pub struct NoPlugins;

#[async_trait]
impl super::mechanisms::Plugins for NoPlugins {
    async fn block_sync(&self) -> super::mechanisms::SyncBlock {
        Box::new(())
    }
    async fn pod_event(
        &self,
        _event: super::mechanisms::PodEvent,
        _pod: &crate::sandbox::Sandbox,
    ) -> Result<(), Error> {
        Ok(())
    }
    async fn update_pod(
        &self,
        _pod: &crate::sandbox::Sandbox,
        _overhead: Option<&cri_api::v1::LinuxContainerResources>,
        _resources: Option<&cri_api::v1::LinuxContainerResources>,
    ) -> Result<(), Error> {
        Ok(())
    }
    async fn create_container(
        &self,
        _pod: &crate::sandbox::Sandbox,
        _container: &crate::container::Container,
        _spec: &mut oci_spec::runtime::Spec,
    ) -> Result<(), Error> {
        Ok(())
    }
    async fn update_container(
        &self,
        _pod: &crate::sandbox::Sandbox,
        _container: &crate::container::Container,
        _resources: &mut cri_api::v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        Ok(())
    }
    async fn container_event(
        &self,
        _event: super::mechanisms::ContainerEvent,
        _pod: &crate::sandbox::Sandbox,
        _container: &crate::container::Container,
    ) -> Result<(), Error> {
        Ok(())
    }
}
