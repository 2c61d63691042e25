//! RuntimeService.StopPodSandbox and RemovePodSandbox: idempotent teardown.

use std::sync::Arc;

use cri_api::v1;

use super::sandbox_run::remove_netns;
use super::Cri;
use crate::error::Error;
use crate::failpoint;
use crate::objects::StoreExt;
use crate::sandbox::files::SandboxFiles;
use crate::sandbox::{pause, Sandbox, SandboxState};

impl Cri {
    pub async fn stop_pod_sandbox(
        self: &Arc<Self>,
        req: v1::StopPodSandboxRequest,
    ) -> Result<v1::StopPodSandboxResponse, Error> {
        let sandbox = match self.sandboxes.lookup(&req.pod_sandbox_id) {
            Ok(s) => s,
            // Already gone: stopping is idempotent.
            Err(Error::NotFound { .. }) => return Ok(v1::StopPodSandboxResponse {}),
            Err(e) => return Err(e),
        };
        let _lifecycle = sandbox.lifecycle.lock().await;
        self.stop_sandbox(&sandbox).await?;
        Ok(v1::StopPodSandboxResponse {})
    }

    pub async fn remove_pod_sandbox(
        self: &Arc<Self>,
        req: v1::RemovePodSandboxRequest,
    ) -> Result<v1::RemovePodSandboxResponse, Error> {
        let sandbox = match self.sandboxes.lookup(&req.pod_sandbox_id) {
            Ok(s) => s,
            Err(Error::NotFound { .. }) => return Ok(v1::RemovePodSandboxResponse {}),
            Err(e) => return Err(e),
        };
        let _lifecycle = sandbox.lifecycle.lock().await;
        // Force: a ready sandbox is stopped first, its containers removed.
        self.stop_sandbox(&sandbox).await?;
        for container in self.sandbox_containers(&sandbox.meta.id) {
            let _lifecycle = container.lifecycle.lock().await;
            self.remove(&container).await?;
        }
        let id = sandbox.meta.id.clone();
        let files = SandboxFiles::new(&self.config.root, &self.config.state, &id);
        let paths = self.pause_paths(&id);
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            files.remove()?;
            match std::fs::remove_dir_all(&paths.shim_dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Internal(format!("sandbox {id}: removing its files: {e}")))?;
        failpoint::hit("remove_pod_sandbox:before_delete");
        self.sandboxes.delete(&sandbox)?;
        self.sandbox_deleted(&id).await;
        tracing::info!(pod = %id, "pod sandbox removed");
        Ok(v1::RemovePodSandboxResponse {})
    }

    /// Stops the pause process, tears down the network and shm; each step is
    /// skipped when already done, so this can run any number of times.
    async fn stop_sandbox(self: &Arc<Self>, sandbox: &Sandbox) -> Result<(), Error> {
        let id = &sandbox.meta.id;
        let status = sandbox.status();
        let handler = self
            .config
            .runtime
            .handlers
            .get(&sandbox.meta.runtime_handler)
            .map(|h| h.binary.clone())
            .unwrap_or_else(|| self.config.default_runtime_handler().binary.clone());

        // Its containers go first, forcibly, as kubelet expects.
        for container in self.sandbox_containers(id) {
            let _lifecycle = container.lifecycle.lock().await;
            self.stop(&container, std::time::Duration::ZERO).await?;
            self.container_stopped(&container).await;
        }
        failpoint::hit("stop_pod_sandbox:after_containers");
        pause::destroy(&self.pause_paths(id), &handler).await?;
        failpoint::hit("stop_pod_sandbox:after_pause");
        if status.pid.is_some() {
            sandbox.update(|s| s.pid = None)?;
        }

        if let Some(netns) = &sandbox.meta.netns {
            if status.network_attached {
                // DEL runs even when the netns is already gone.
                let attachment = self.attachment(id, netns, sandbox.meta.config());
                self.cni.del(&attachment).await.map_err(|e| {
                    Error::Internal(format!("sandbox {id}: tearing down the pod network: {e}"))
                })?;
                sandbox.update(|s| s.network_attached = false)?;
                failpoint::hit("stop_pod_sandbox:after_cni");
            }
            remove_netns(netns.clone()).await?;
        }

        let files = SandboxFiles::new(&self.config.root, &self.config.state, id);
        tokio::task::spawn_blocking(move || files.unmount_shm())
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(|e| Error::Internal(format!("sandbox {id}: unmounting /dev/shm: {e}")))?;

        if status.state != SandboxState::NotReady || status.shm_mounted {
            sandbox.update(|s| {
                s.state = SandboxState::NotReady;
                s.shm_mounted = false;
            })?;
            self.sandbox_stopped(id).await;
            tracing::info!(pod = %id, "pod sandbox stopped");
        }
        Ok(())
    }
}
