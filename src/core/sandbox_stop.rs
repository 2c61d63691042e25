//! StopPodSandbox and RemovePodSandbox: idempotent teardown. A step that
//! fails leaves the sandbox recorded (NotReady), so the next call retries
//! what is left: a pod whose CNI DEL failed never wedges and never leaks
//! its IP.

use std::sync::Arc;

use super::mechanisms::{EventKind, PodEvent};
use super::sandbox_run::attachment;
use super::{timed, Core};
use crate::error::Error;
use crate::failpoint;
use crate::objects::{self, StoreExt};
use crate::sandbox::{Sandbox, SandboxState};

impl Core {
    /// StopPodSandbox: gone is fine.
    pub async fn stop_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<(), Error> {
        let sandbox = match self.sandboxes.lookup(id) {
            Ok(s) => s,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _lifecycle = sandbox.lifecycle.lock().await;
        self.stop_sandbox(&sandbox).await
    }

    /// RemovePodSandbox: forced (a ready sandbox is stopped first, its
    /// containers removed); gone is fine.
    pub async fn remove_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<(), Error> {
        let sandbox = match self.sandboxes.lookup(id) {
            Ok(s) => s,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _lifecycle = sandbox.lifecycle.lock().await;
        self.remove_sandbox(&sandbox).await
    }

    /// Removes a sandbox whose lifecycle lock the caller holds.
    pub(super) async fn remove_sandbox(
        self: &Arc<Self>,
        sandbox: &Arc<Sandbox>,
    ) -> Result<(), Error> {
        self.stop_sandbox(sandbox).await?;
        for container in self.sandbox_containers(&sandbox.meta.id) {
            let _lifecycle = container.lifecycle.lock().await;
            self.remove(&container).await?;
        }
        let id = sandbox.meta.id.clone();
        self.mech
            .pod_files
            .remove_pod_files(&id, &self.layout.sandbox_files(&id))
            .await?;
        self.mech
            .files
            .remove_dir(&id, &self.layout.shim_dir(&id))
            .await?;
        failpoint::hit("remove_pod_sandbox:before_delete");
        self.notify_pod(PodEvent::Remove, sandbox).await;
        objects::delete(self.sandboxes.clone(), sandbox).await?;
        self.sandbox_event(&id, EventKind::Deleted).await;
        tracing::info!(pod = %id, "pod sandbox removed");
        Ok(())
    }

    /// Stops the containers and the pause (or unpins the namespaces of a pod
    /// without one), tears down the network and shm;
    /// each step is skipped when already done, so this can run any number
    /// of times.
    async fn stop_sandbox(self: &Arc<Self>, sandbox: &Arc<Sandbox>) -> Result<(), Error> {
        let id = &sandbox.meta.id;
        let status = sandbox.status();
        let runtime = self.runtime_binary(&sandbox.meta.runtime_handler);

        // Its containers go first, forcibly, as kubelet expects.
        for container in self.sandbox_containers(id) {
            let _lifecycle = container.lifecycle.lock().await;
            self.stop(&container).await?;
            self.container_event(&container, EventKind::Stopped).await;
        }
        failpoint::hit("stop_pod_sandbox:after_containers");
        // Plugins hear of it once, while it is still there (and listed).
        if status.state == SandboxState::Ready {
            self.notify_pod(PodEvent::Stop, sandbox).await;
        }
        if sandbox.meta.facts().pinned {
            timed(
                "ns.unpin",
                self.mech.namespaces.unpin(id, &self.layout.pod_ns(id)),
            )
            .await?;
        } else {
            timed("pause.destroy", self.destroy_pause(id, &runtime)).await?;
        }
        failpoint::hit("stop_pod_sandbox:after_pause");
        if status.pid.is_some() || status.state == SandboxState::Ready {
            // Not synced: with the pause (or pins) gone, recovery marks the
            // pod not ready again if a power cut loses this write.
            objects::save_volatile(sandbox, move |s| {
                s.pid = None;
                // Not ready from now on, whatever fails next.
                if s.state == SandboxState::Ready {
                    s.state = SandboxState::NotReady;
                }
            })
            .await?;
        }

        if let Some(netns) = &sandbox.meta.netns {
            if status.network_attached {
                // DEL runs even when the netns is already gone.
                let attachment = attachment(id, netns, sandbox.meta.config());
                timed("cni.del", self.mech.network.del(id, &attachment)).await?;
                objects::save(sandbox, move |s| s.network_attached = false).await?;
                failpoint::hit("stop_pod_sandbox:after_cni");
            }
            timed("netns.remove", self.mech.namespaces.remove_netns(id, netns)).await?;
        }

        self.mech
            .pod_files
            .unmount_shm(id, &self.layout.sandbox_files(id))
            .await?;

        if status.state != SandboxState::NotReady || status.shm_mounted {
            objects::save(sandbox, move |s| {
                s.state = SandboxState::NotReady;
                s.shm_mounted = false;
            })
            .await?;
            self.sandbox_event(id, EventKind::Stopped).await;
            tracing::info!(pod = %id, "pod sandbox stopped");
        }
        Ok(())
    }
}
