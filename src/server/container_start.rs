//! RuntimeService.StartContainer, StopContainer and RemoveContainer, and the
//! task that records a container's exit.

use std::sync::Arc;
use std::time::Duration;

use berth_shim::{ExitInfo, ShimClient, ShimOptions, SpawnOptions};
use cri_api::v1;

use super::sandbox_run::now_nanos;
use super::Cri;
use crate::container::rootfs::ContainerDirs;
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::failpoint;
use crate::objects::StoreExt;
use crate::sandbox::SandboxState;

/// How long a SIGKILLed container may take to be reaped.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);

fn shim_error(id: &str, what: &str) -> impl Fn(berth_shim::Error) -> Error {
    let prefix = format!("container {id}: {what}");
    move |e| Error::Internal(format!("{prefix}: {e}"))
}

impl Cri {
    pub async fn start_container(
        self: &Arc<Self>,
        req: v1::StartContainerRequest,
    ) -> Result<v1::StartContainerResponse, Error> {
        let container = self.containers.lookup(&req.container_id)?;
        let _lifecycle = container.lifecycle.lock().await;
        let id = container.meta.id.clone();
        let state = container.status().state;
        if state != ContainerState::Created {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is {state:?}, not Created"
            )));
        }
        let sandbox = self.sandboxes.lookup(&container.meta.sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {} of container {id} is not ready",
                sandbox.meta.id
            )));
        }
        match self.spawn_container(&container).await {
            Ok((client, pid, started_at)) => {
                failpoint::hit("start_container:after_start");
                container.update(|s| {
                    s.state = ContainerState::Running;
                    s.pid = Some(pid);
                    s.started_at = started_at;
                })?;
                self.container_started(&container).await;
                self.watch_exit(container.clone(), client);
                tracing::info!(container = %id, pid, "container started");
                Ok(v1::StartContainerResponse {})
            }
            Err(e) => {
                // The container is not running and never will: say why.
                let message = e.to_string();
                let _ = self.destroy_shim(&container).await;
                container.update(|s| {
                    s.state = ContainerState::Exited;
                    s.exit_code = 128;
                    s.finished_at = now_nanos();
                    s.reason = "StartError".into();
                    s.message = message;
                })?;
                self.container_stopped(&container).await;
                Err(e)
            }
        }
    }

    /// Creates and starts the container under a new shim: the client, the
    /// container's pid and when it was started.
    async fn spawn_container(
        &self,
        container: &Container,
    ) -> Result<(ShimClient, u32, i64), Error> {
        let id = &container.meta.id;
        let config = container.meta.config();
        let dirs = ContainerDirs::new(&self.config.root, &self.config.state, id);
        let mut opts = ShimOptions::new(id, &dirs.bundle, self.shim_dir(id));
        opts.runtime = container.meta.runtime.clone().into();
        opts.runtime_root = self.runtime_root();
        opts.stdin = config.stdin;
        opts.stdin_once = config.stdin_once;
        opts.tty = config.tty;
        if !container.meta.log_path.as_os_str().is_empty() {
            if let Some(dir) = container.meta.log_path.parent() {
                tokio::fs::create_dir_all(dir).await.map_err(|e| {
                    Error::Internal(format!("container {id}: creating {}: {e}", dir.display()))
                })?;
            }
            opts.log_path = Some(container.meta.log_path.clone());
        }
        let client = ShimClient::spawn(&SpawnOptions::new(self.shim_binary(), opts))
            .await
            .map_err(shim_error(id, "creating the container"))?;
        let started_at = now_nanos();
        let pid = client
            .start()
            .await
            .map_err(shim_error(id, "starting the container"))?;
        Ok((client, pid, started_at))
    }

    /// Records the container's exit when its shim reports it, then deletes
    /// it from the runtime (its shim exits), as containerd does at exit: what
    /// RemoveContainer has left to do is its files and its record.
    pub fn watch_exit(self: &Arc<Self>, container: Arc<Container>, client: ShimClient) {
        let cri = self.clone();
        tokio::spawn(async move {
            let info = match client.wait().await {
                Ok(info) => Some(info),
                Err(e) => {
                    tracing::warn!(container = %container.meta.id, error = %e, "lost the shim while waiting for the exit");
                    berth_shim::read_exit_file(client.exit_file())
                        .ok()
                        .flatten()
                }
            };
            // After a stop or remove that holds it has done its own part.
            let _lifecycle = container.lifecycle.lock().await;
            if cri.containers.lookup(&container.meta.id).is_err() {
                return;
            }
            if let Some(info) = info {
                if let Err(e) = record_exit(&container, &info) {
                    tracing::error!(container = %container.meta.id, error = %e, "recording the exit");
                }
            }
            if container.status().state == ContainerState::Exited {
                cri.release_exited(&container).await;
            }
            cri.container_stopped(&container).await;
        });
    }

    pub async fn stop_container(
        self: &Arc<Self>,
        req: v1::StopContainerRequest,
    ) -> Result<v1::StopContainerResponse, Error> {
        let container = match self.containers.lookup(&req.container_id) {
            Ok(c) => c,
            // Already gone: stopping is idempotent.
            Err(Error::NotFound { .. }) => return Ok(v1::StopContainerResponse {}),
            Err(e) => return Err(e),
        };
        let _lifecycle = container.lifecycle.lock().await;
        self.stop(&container, Duration::from_secs(req.timeout.max(0) as u64))
            .await?;
        self.container_stopped(&container).await;
        Ok(v1::StopContainerResponse {})
    }

    /// Stop signal, up to `grace` to exit, then SIGKILL; the exit recorded,
    /// the container is deleted from the runtime. Idempotent.
    pub async fn stop(&self, container: &Container, grace: Duration) -> Result<(), Error> {
        if container.status().state != ContainerState::Running {
            return Ok(());
        }
        self.signal_until_exit(container, grace).await?;
        failpoint::hit("stop_container:before_release");
        self.release_exited(container).await;
        Ok(())
    }

    /// Deletes an exited container from the runtime (its shim exits) and
    /// unmounts its rootfs, as containerd does at exit. What fails here is
    /// done again, and reported, by RemoveContainer.
    pub async fn release_exited(&self, container: &Container) {
        let id = &container.meta.id;
        if let Err(e) = self.destroy_shim(container).await {
            tracing::warn!(container = %id, error = %e, "deleting the exited container from the runtime");
            return;
        }
        let dirs = ContainerDirs::new(&self.config.root, &self.config.state, id);
        let unmounted = tokio::task::spawn_blocking(move || dirs.unmount())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = unmounted {
            tracing::warn!(container = %id, error = %e, "unmounting the rootfs");
        }
    }

    /// Stop signal, up to `grace` to exit, then SIGKILL; records the exit.
    async fn signal_until_exit(&self, container: &Container, grace: Duration) -> Result<(), Error> {
        let id = &container.meta.id;
        let socket = berth_shim::ShimPaths::new(self.shim_dir(id)).socket();
        let client = match ShimClient::connect(&socket).await {
            Ok(c) => c,
            Err(e) => {
                // No shim: the exit file tells how it ended, if it did.
                let exit = berth_shim::read_exit_file(
                    &berth_shim::ShimPaths::new(self.shim_dir(id)).exit_file(),
                )
                .ok()
                .flatten();
                return match exit {
                    Some(info) => record_exit(container, &info),
                    None => Err(Error::Internal(format!(
                        "container {id}: its shim does not answer: {e}"
                    ))),
                };
            }
        };
        if !grace.is_zero() {
            let _ = client.kill(container.meta.stop_signal, false).await;
            if let Ok(Ok(info)) = tokio::time::timeout(grace, client.wait()).await {
                return record_exit(container, &info);
            }
        }
        if let Err(e) = client.kill(libc::SIGKILL, true).await {
            tracing::debug!(container = %id, error = %e, "SIGKILL (may have exited)");
        }
        match tokio::time::timeout(KILL_TIMEOUT, client.wait()).await {
            Ok(Ok(info)) => record_exit(container, &info),
            Ok(Err(e)) => Err(shim_error(id, "waiting for the exit")(e)),
            Err(_) => Err(Error::DeadlineExceeded(format!(
                "container {id} did not exit {KILL_TIMEOUT:?} after SIGKILL"
            ))),
        }
    }

    pub async fn remove_container(
        self: &Arc<Self>,
        req: v1::RemoveContainerRequest,
    ) -> Result<v1::RemoveContainerResponse, Error> {
        let container = match self.containers.lookup(&req.container_id) {
            Ok(c) => c,
            Err(Error::NotFound { .. }) => return Ok(v1::RemoveContainerResponse {}),
            Err(e) => return Err(e),
        };
        let _lifecycle = container.lifecycle.lock().await;
        self.remove(&container).await?;
        Ok(v1::RemoveContainerResponse {})
    }

    /// Kills (if running), deletes and forgets a container.
    pub async fn remove(&self, container: &Container) -> Result<(), Error> {
        let id = container.meta.id.clone();
        self.stop(container, Duration::ZERO).await?;
        self.container_stopped(container).await;
        self.destroy_shim(container).await?;
        let dirs = ContainerDirs::new(&self.config.root, &self.config.state, &id);
        let shim_dir = self.shim_dir(&id);
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            dirs.remove()?;
            match std::fs::remove_dir_all(&shim_dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Internal(format!("container {id}: removing its files: {e}")))?;
        self.containers.delete(container)?;
        self.container_deleted(container).await;
        tracing::info!(container = %id, "container removed");
        Ok(())
    }

    /// Deletes the runtime's container and lets its shim exit; cheap when
    /// that was done at exit.
    async fn destroy_shim(&self, container: &Container) -> Result<(), Error> {
        let id = &container.meta.id;
        let runtime = berth_shim::runc::Runtime::new(&container.meta.runtime, self.runtime_root());
        berth_shim::delete_container(&self.shim_dir(id), &runtime, id)
            .await
            .map_err(shim_error(id, "deleting the container"))
    }
}

/// Writes how the container ended, once.
pub fn record_exit(container: &Container, info: &ExitInfo) -> Result<(), Error> {
    if container.status().state == ContainerState::Exited {
        return Ok(());
    }
    container.update(|s| {
        s.state = ContainerState::Exited;
        s.exit_code = info.exit_code;
        s.finished_at = info.exited_at_ns;
        s.pid = None;
        s.reason = if info.oom_killed {
            "OOMKilled"
        } else if info.exit_code == 0 {
            "Completed"
        } else {
            "Error"
        }
        .into();
    })?;
    tracing::info!(container = %container.meta.id, exit_code = info.exit_code, oom = info.oom_killed, "container exited");
    Ok(())
}
