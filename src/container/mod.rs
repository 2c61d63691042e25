//! Containers: their records and store, and their root filesystems.

pub mod record;
pub mod rootfs;

use berth_store::{Meta, Object, Store};

pub use record::{ContainerMeta, ContainerState, ContainerStatus, RunAs};

use crate::objects::Kind;

impl Meta for ContainerMeta {
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    /// Containers are grouped by their pod.
    fn group(&self) -> Option<&str> {
        Some(&self.sandbox_id)
    }
}

impl Kind for ContainerMeta {
    const KIND: &'static str = "container";
}

/// One container.
pub type Container = Object<ContainerMeta, ContainerStatus>;

/// All containers.
pub type ContainerStore = Store<ContainerMeta, ContainerStatus>;
