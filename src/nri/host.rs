//! What NRI reads of berth and asks of it: the snapshot a new plugin is
//! synchronized with (read from the record stores NRI is given when built),
//! and the updates and evictions plugins ask for, which go through the
//! core's update path (as UpdateContainerResources does). That path is a
//! port, [`ContainerUpdates`], reached through a channel: NRI is built
//! before the core (the core calls it), so the composition root serves the
//! channel with the core's port once the core is built.

use std::sync::Arc;

use berth_nri::api;
use cri_api::v1;
use tokio::sync::{mpsc, oneshot};

use super::convert;
use crate::container::{ContainerState, ContainerStore};
use crate::error::Error;
use crate::layout::Layout;
use crate::sandbox::{SandboxState, SandboxStore};

/// The core's update path, as NRI's plugins use it on containers.
#[tonic::async_trait]
pub trait ContainerUpdates: Send + Sync {
    /// The full id (`id` may be a unique prefix) and the resources now of
    /// container `id`.
    fn resources(&self, id: &str) -> Result<(String, v1::LinuxContainerResources), Error>;
    /// Applies `resources` to container `id`, as UpdateContainerResources
    /// does (without NRI's own UpdateContainer hook).
    async fn update(&self, id: &str, resources: v1::LinuxContainerResources) -> Result<(), Error>;
    /// Stops container `id` at once.
    async fn evict(&self, id: &str) -> Result<(), Error>;
}

/// At most this many plugins' requests wait for the task that applies them.
const PENDING_UPDATES: usize = 64;

/// One plugin's updates and evictions, and where the failed updates go.
struct Request {
    plugin: String,
    updates: Vec<api::ContainerUpdate>,
    evict: Vec<api::ContainerEviction>,
    failed: oneshot::Sender<Vec<api::ContainerUpdate>>,
}

/// Where NRI sends plugins' updates and evictions.
#[derive(Clone)]
pub struct UpdateSender(mpsc::Sender<Request>);

/// What [`serve_updates`] applies.
pub struct UpdateRequests(mpsc::Receiver<Request>);

/// The channel between NRI and the core's update path.
pub fn update_channel() -> (UpdateSender, UpdateRequests) {
    let (tx, rx) = mpsc::channel(PENDING_UPDATES);
    (UpdateSender(tx), UpdateRequests(rx))
}

/// Applies each request through `port`, each on a task of its own (one
/// stuck behind a container's lock holds up no other), until every sender
/// is gone.
pub async fn serve_updates(mut requests: UpdateRequests, port: Arc<dyn ContainerUpdates>) {
    while let Some(req) = requests.0.recv().await {
        let port = port.clone();
        tokio::spawn(async move {
            let failed = apply(&*port, &req.plugin, req.updates, req.evict).await;
            let _ = req.failed.send(failed);
        });
    }
}

impl UpdateSender {
    /// Has `plugin`'s updates and evictions applied; the updates that
    /// failed (all of them when nothing serves the channel).
    pub async fn apply(
        &self,
        plugin: &str,
        updates: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate> {
        let (failed, answer) = oneshot::channel();
        let req = Request {
            plugin: plugin.to_string(),
            updates,
            evict,
            failed,
        };
        if let Err(mpsc::error::SendError(req)) = self.0.send(req).await {
            tracing::warn!(%plugin, "NRI plugin's updates: nothing applies them");
            return req.updates;
        }
        answer.await.unwrap_or_default()
    }
}

/// What NRI reads of berth's records.
#[derive(Clone)]
pub struct Records {
    pub sandboxes: Arc<SandboxStore>,
    pub containers: Arc<ContainerStore>,
    pub layout: Layout,
}

impl Records {
    /// What NRI shows of a container's spec, when its bundle has one.
    pub fn read_spec(&self, id: &str) -> Option<convert::SpecView> {
        let text = std::fs::read(self.layout.container_dirs(id).spec()).ok()?;
        let spec: oci_spec::runtime::Spec = serde_json::from_slice(&text).ok()?;
        Some(convert::SpecView::of(&spec))
    }
}

/// berth, as NRI sees it.
pub struct NriHost {
    pub records: Records,
    pub updates: UpdateSender,
}

#[tonic::async_trait]
impl berth_nri::Host for NriHost {
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let records = self.records.clone();
        tokio::task::spawn_blocking(move || {
            // What is being made is not there yet (its maker holds the
            // sync block): only what List shows.
            let pods = records
                .sandboxes
                .list()
                .iter()
                .filter(|s| s.status().state != SandboxState::Unknown)
                .map(|s| convert::pod(s))
                .collect();
            let containers = records
                .containers
                .list()
                .iter()
                .filter(|c| c.status().state != ContainerState::Unknown)
                .map(|c| convert::container(c, records.read_spec(&c.meta.id).as_ref()))
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
        self.updates.apply(plugin, updates, evict).await
    }
}

/// Applies a plugin's updates (through the core's update path) and
/// evictions (a stop); the updates that failed.
async fn apply(
    port: &dyn ContainerUpdates,
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
        let result = match port.resources(&u.container_id) {
            _ if !beyond.is_empty() => Err(Error::InvalidArgument(convert::refusal(
                plugin,
                &u.container_id,
                &beyond,
            ))),
            Ok((id, current)) => port.update(&id, convert::overlay_cri(current, r)).await,
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
        if let Err(err) = port.evict(&e.container_id).await {
            tracing::warn!(%plugin, container = %e.container_id, error = %err, "evicting");
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A port that records what it is asked; container "gone" is unknown.
    #[derive(Default)]
    struct Recording(Mutex<Vec<String>>);

    #[tonic::async_trait]
    impl ContainerUpdates for Recording {
        fn resources(&self, id: &str) -> Result<(String, v1::LinuxContainerResources), Error> {
            match id {
                "gone" => Err(Error::NotFound {
                    kind: "container",
                    id: id.into(),
                }),
                _ => Ok((format!("{id}-full"), Default::default())),
            }
        }

        async fn update(
            &self,
            id: &str,
            resources: v1::LinuxContainerResources,
        ) -> Result<(), Error> {
            let line = format!("update {id} {}", resources.memory_limit_in_bytes);
            self.0.lock().unwrap().push(line);
            Ok(())
        }

        async fn evict(&self, id: &str) -> Result<(), Error> {
            self.0.lock().unwrap().push(format!("evict {id}"));
            Ok(())
        }
    }

    fn update(id: &str, memory: i64) -> api::ContainerUpdate {
        let mut u = api::ContainerUpdate {
            container_id: id.into(),
            ..Default::default()
        };
        let mut r = api::LinuxResources::default();
        r.memory.mut_or_insert_default().limit = protobuf::MessageField::some(api::OptionalInt64 {
            value: memory,
            ..Default::default()
        });
        u.linux.mut_or_insert_default().resources = protobuf::MessageField::some(r);
        u
    }

    /// A plugin's updates and evictions reach the core's port through the
    /// channel, by the container's full id; the update of an unknown
    /// container comes back as failed.
    #[tokio::test]
    async fn updates_and_evictions_go_through_the_port() {
        let port = Arc::new(Recording::default());
        let (sender, requests) = update_channel();
        tokio::spawn(serve_updates(requests, port.clone()));
        let evict = vec![api::ContainerEviction {
            container_id: "c2".into(),
            ..Default::default()
        }];
        let failed = sender
            .apply("p", vec![update("c1", 1 << 20), update("gone", 1)], evict)
            .await;
        assert_eq!(
            failed
                .iter()
                .map(|u| &u.container_id[..])
                .collect::<Vec<_>>(),
            ["gone"]
        );
        assert_eq!(
            *port.0.lock().unwrap(),
            ["update c1-full 1048576", "evict c2"]
        );
    }

    /// Nothing serves the channel: every update is reported failed.
    #[tokio::test]
    async fn updates_nobody_serves_fail() {
        let (sender, requests) = update_channel();
        drop(requests);
        let failed = sender.apply("p", vec![update("c1", 1)], Vec::new()).await;
        assert_eq!(failed.len(), 1);
    }
}
