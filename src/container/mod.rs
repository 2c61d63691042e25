//! Containers: their records and store, their root filesystems and the
//! content of their anonymous volumes.

pub mod record;
pub mod rootfs;
pub mod volumes;

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

/// `containers` oldest first (by creation time, then id).
pub fn oldest_first(
    mut containers: Vec<std::sync::Arc<Container>>,
) -> Vec<std::sync::Arc<Container>> {
    containers.sort_by(|a, b| {
        a.meta
            .created_at
            .cmp(&b.meta.created_at)
            .then(a.meta.id.cmp(&b.meta.id))
    });
    containers
}
