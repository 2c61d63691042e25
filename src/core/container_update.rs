//! UpdateContainerResources and UpdatePodSandboxResources: new resources
//! checked, applied to a running container through its shim, kept in the
//! bundle's spec for a later start and in the record for ContainerStatus;
//! a pod's recorded (kubelet owns the pod cgroup, as with CRI-O). Each runs
//! under the object's lifecycle lock, so a concurrent Stop or Remove waits.

use std::sync::Arc;

use cri_api::v1;

use super::mechanisms::{ContainerEvent, PodEvent};
use super::{now_nanos, timed, Core};
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::objects::{self, StoreExt};
use crate::sandbox::PodResources;

impl Core {
    /// Applies `linux` to container `id`: checked, offered to the NRI
    /// plugins (which may change it), then through its shim when it runs
    /// (a failure there changes nothing), into its bundle's spec and its
    /// record. `None` changes nothing.
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: Option<v1::LinuxContainerResources>,
    ) -> Result<(), Error> {
        let container = self.containers.lookup(id)?;
        let _lifecycle = container.lifecycle.lock().await;
        let Some(mut linux) = linux else {
            return Ok(());
        };
        berth_spec::linux_resources(&container.meta.id, &linux, &self.spec_options)?;
        let sandbox = self.sandboxes.lookup(&container.meta.sandbox_id)?;
        timed(
            "nri.update_container",
            self.mech
                .plugins
                .update_container(&sandbox, &container, &mut linux),
        )
        .await?;
        self.apply_resources(&container, linux).await?;
        self.notify_container(ContainerEvent::PostUpdate, &sandbox, &container)
            .await;
        Ok(())
    }

    /// An update an NRI plugin asked for (unsolicited, or in a reply about
    /// another container): the same path as UpdateContainerResources, with
    /// no plugin hooks of its own.
    pub async fn update_container_for_plugin(
        &self,
        id: &str,
        linux: v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        let container = self.containers.lookup(id)?;
        let _lifecycle = container.lifecycle.lock().await;
        self.apply_resources(&container, linux).await
    }

    /// The resources a container has now: the last applied, else its
    /// config's.
    pub fn current_resources(&self, container: &Container) -> v1::LinuxContainerResources {
        let applied = container.status().resources;
        if !applied.is_empty() {
            if let Ok(r) = <v1::LinuxContainerResources as prost::Message>::decode(&applied[..]) {
                return r;
            }
        }
        container
            .meta
            .config()
            .linux
            .as_ref()
            .and_then(|l| l.resources.clone())
            .unwrap_or_default()
    }

    /// Applies `linux` to a container whose lifecycle lock the caller holds.
    async fn apply_resources(
        &self,
        container: &Arc<Container>,
        linux: v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        let id = container.meta.id.clone();
        let resources = berth_spec::linux_resources(&id, &linux, &self.spec_options)?;
        // runc keeps no OOM score in its resources: set on the processes
        // (and in the spec below) when it changes, as kubelet asks when an
        // in-place resize moves a Burstable pod's memory request.
        let floor = self.spec_options.oom_score_adj_floor;
        let oom = berth_spec::oom_score_adj(&id, linux.oom_score_adj, floor)?;
        let old_oom = self.current_resources(container).oom_score_adj;
        let old_oom = berth_spec::oom_score_adj(&id, old_oom, floor).unwrap_or(None);
        let oom_changes = oom != old_oom;
        // Kept for ContainerStatus once applied.
        let applied = prost::Message::encode_to_vec(&linux);
        match container.status().state {
            ContainerState::Running => {
                let task = self.shim_of(&id).await?;
                if oom_changes {
                    // Unset: what the container would have had at its start.
                    let value = match oom {
                        Some(v) => v,
                        None => self.inherited_oom_score_adj(&id)?,
                    };
                    task.set_oom_score_adj(value).await?;
                }
                task.update(&resources).await?
            }
            ContainerState::Created => {}
            state => {
                return Err(Error::ContainerState {
                    id,
                    state: format!("{state:?}"),
                    why: "its resources cannot change",
                })
            }
        }
        // The bundle's spec keeps the new values, for a later start.
        // Replaced atomically (ExecSync reads it without the lock).
        let path = self.layout.container_dirs(&id).spec();
        let mut spec = self.mech.files.read_spec(&id, &path).await?;
        if oom_changes {
            if let Some(process) = spec.process_mut() {
                process.set_oom_score_adj(oom);
            }
        }
        if let Some(linux) = spec.linux_mut() {
            let mut merged = resources;
            if let Some(old) = linux.resources() {
                merged.set_devices(old.devices().clone());
            }
            linux.set_resources(Some(merged));
        }
        self.mech.files.write_spec(&id, &path, &spec).await?;
        objects::save(container, move |s| s.resources = applied).await?;
        Ok(())
    }

    /// The OOM score adjustment a container with none asked for starts
    /// with: the floor berth is configured with, else berth's own.
    fn inherited_oom_score_adj(&self, id: &str) -> Result<i32, Error> {
        match self.spec_options.oom_score_adj_floor {
            Some(f) => Ok(f),
            None => berth_spec::current_oom_score_adj().map_err(Error::io(
                id,
                "reading",
                "/proc/self/oom_score_adj",
            )),
        }
    }

    /// Records the pod-level resources kubelet has just applied to pod
    /// `id`'s cgroup (overhead and the sum of its containers'), checked as
    /// a container's are.
    pub async fn update_pod_resources(
        &self,
        id: &str,
        overhead: Option<v1::LinuxContainerResources>,
        resources: Option<v1::LinuxContainerResources>,
    ) -> Result<(), Error> {
        let sandbox = self.sandboxes.lookup(id)?;
        let _lifecycle = sandbox.lifecycle.lock().await;
        let id = sandbox.meta.id.clone();
        for r in [&overhead, &resources].into_iter().flatten() {
            berth_spec::linux_resources(&id, r, &self.spec_options)?;
        }
        timed(
            "nri.update_pod_sandbox",
            self.mech
                .plugins
                .update_pod(&sandbox, overhead.as_ref(), resources.as_ref()),
        )
        .await?;
        let encode = |r: &Option<v1::LinuxContainerResources>| {
            r.as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default()
        };
        let recorded = PodResources {
            overhead: encode(&overhead),
            resources: encode(&resources),
            updated_at: now_nanos(),
        };
        objects::save(&sandbox, move |s| s.resources = Some(recorded)).await?;
        self.notify_pod(PodEvent::PostUpdate, &sandbox).await;
        Ok(())
    }
}
