//! What NRI reads of berth and asks of it: the snapshot a new plugin is
//! synchronized with, and the updates and evictions plugins ask for, which
//! go through the core's update path (as UpdateContainerResources does).

use std::sync::{Arc, Weak};
use std::time::Duration;

use berth_nri::api;

use super::convert;
use crate::container::ContainerState;
use crate::core::Core;
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::SandboxState;

/// berth, as NRI sees it.
pub struct NriHost {
    pub core: Weak<Core>,
}

/// What NRI shows of a container's spec, when its bundle has one.
pub fn read_spec(core: &Core, id: &str) -> Option<convert::SpecView> {
    let text = std::fs::read(core.layout.container_dirs(id).spec()).ok()?;
    let spec: oci_spec::runtime::Spec = serde_json::from_slice(&text).ok()?;
    Some(convert::SpecView::of(&spec))
}

#[tonic::async_trait]
impl berth_nri::Host for NriHost {
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let Some(core) = self.core.upgrade() else {
            return Default::default();
        };
        tokio::task::spawn_blocking(move || {
            // What is being made is not there yet (its maker holds the
            // sync block): only what List shows.
            let pods = core
                .sandboxes
                .list()
                .iter()
                .filter(|s| s.status().state != SandboxState::Unknown)
                .map(|s| convert::pod(s))
                .collect();
            let containers = core
                .containers
                .list()
                .iter()
                .filter(|c| c.status().state != ContainerState::Unknown)
                .map(|c| convert::container(c, read_spec(&core, &c.meta.id).as_ref()))
                .collect();
            (pods, containers)
        })
        .await
        .unwrap_or_default()
    }

    async fn update_containers(
        &self,
        plugin: &str,
        updates: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate> {
        match self.core.upgrade() {
            Some(core) => apply(&core, plugin, updates, evict).await,
            None => updates,
        }
    }
}

/// Applies a plugin's updates (through the core's update path) and
/// evictions (a stop); the updates that failed.
pub async fn apply(
    core: &Arc<Core>,
    plugin: &str,
    updates: Vec<api::ContainerUpdate>,
    evict: Vec<api::ContainerEviction>,
) -> Vec<api::ContainerUpdate> {
    let mut failed = Vec::new();
    for u in updates {
        let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
            continue;
        };
        let beyond = convert::beyond_cri(r);
        let result = match core.containers.lookup(&u.container_id) {
            _ if !beyond.is_empty() => Err(Error::InvalidArgument(convert::refusal(
                plugin,
                &u.container_id,
                &beyond,
            ))),
            Ok(c) => {
                let linux = convert::overlay_cri(core.current_resources(&c), r);
                core.update_container_for_plugin(&c.meta.id, linux).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(%plugin, container = %u.container_id, error = %e, "NRI plugin's update failed");
            if !u.ignore_failure {
                failed.push(u);
            }
        }
    }
    for e in evict {
        tracing::info!(%plugin, container = %e.container_id, reason = %e.reason, "NRI plugin evicts a container");
        if let Err(err) = core.stop_container(&e.container_id, Duration::ZERO).await {
            tracing::warn!(%plugin, container = %e.container_id, error = %err, "evicting");
        }
    }
    failed
}
