//! StartContainer, and the task that records a container's exit.

use std::sync::Arc;

use berth_shim::{ExitInfo, ShimOptions};

use super::mechanisms::{ContainerEvent, EventKind, Task};
use super::{now_nanos, timed, Core};
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::failpoint;
use crate::objects::{self, StoreExt};
use crate::sandbox::{Sandbox, SandboxState};

impl Core {
    /// Starts a created container under a new shim.
    pub async fn start_container(self: &Arc<Self>, id: &str) -> Result<(), Error> {
        let container = self.containers.lookup(id)?;
        let sandbox = self.sandboxes.lookup(&container.meta.sandbox_id)?;
        // Before the locks: the runtime's cgroup move is the slowest step.
        self.mech.runtime.warm_up(&container.meta.id);
        // The pod's lock, then the container's (the order Stop and
        // RemovePodSandbox take them in): a pod being stopped is seen as
        // not ready here, never half torn down under a starting container
        // (runc then failed against the killed pause's namespaces).
        let _pod = sandbox.lifecycle.lock().await;
        let _lifecycle = container.lifecycle.lock().await;
        let id = container.meta.id.clone();
        // Removed (with its pod) while this call waited.
        self.containers.lookup(&id)?;
        let state = container.status().state;
        if state != ContainerState::Created {
            return Err(Error::ContainerState {
                id,
                state: format!("{state:?}"),
                why: "only a Created container starts",
            });
        }
        if self.sandboxes.lookup(&sandbox.meta.id).is_err()
            || sandbox.status().state != SandboxState::Ready
        {
            return Err(Error::PodNotReady {
                id: sandbox.meta.id.clone(),
                container: Some(id),
            });
        }
        // Plugins hear of it before it runs; one that fails fails the start.
        let hooked = timed(
            "nri.start_container",
            self.mech
                .plugins
                .container_event(ContainerEvent::Start, &sandbox, &container),
        )
        .await;
        let spawned = match hooked {
            Ok(()) => self.spawn_container(&container, &sandbox).await,
            Err(e) => Err(e),
        };
        match spawned {
            Ok((task, pid, started_at)) => {
                failpoint::hit("start_container:after_start");
                // Not synced: recovery finds the started container through
                // its shim (pid, start time) if a power cut loses this.
                objects::save_volatile(&container, move |s| {
                    s.state = ContainerState::Running;
                    s.pid = Some(pid);
                    s.started_at = started_at;
                })
                .await?;
                self.container_event(&container, EventKind::Started).await;
                self.watch_exit(container.clone(), task);
                tracing::info!(container = %id, pid, "container started");
                self.notify_container(ContainerEvent::PostStart, &sandbox, &container)
                    .await;
                Ok(())
            }
            Err(e) => {
                // The container is not running and never will: say why.
                let message = e.to_string();
                if let Err(cleanup) = self.delete_from_runtime(&container).await {
                    tracing::warn!(container = %id, error = %cleanup, "deleting a container that failed to start");
                }
                objects::save(&container, move |s| {
                    s.state = ContainerState::Exited;
                    s.exit_code = 128;
                    s.finished_at = now_nanos();
                    s.reason = "StartError".into();
                    s.message = message;
                })
                .await?;
                self.container_event(&container, EventKind::Stopped).await;
                Err(e)
            }
        }
    }

    /// Runs the container under a new shim: the shim, the container's pid
    /// and when it was started.
    async fn spawn_container(
        &self,
        container: &Container,
        sandbox: &Sandbox,
    ) -> Result<(Arc<dyn Task>, u32, i64), Error> {
        let id = &container.meta.id;
        let config = container.meta.config();
        let dirs = self.layout.container_dirs(id);
        let mut opts = ShimOptions::new(id, &dirs.bundle, self.layout.shim_dir(id));
        opts.runtime = container.meta.runtime.clone().into();
        opts.runtime_root = self.layout.runtime_root();
        opts.systemd_cgroup = self.spec_options.cgroup_driver_systemd;
        opts.stdin = config.stdin;
        opts.stdin_once = config.stdin_once;
        opts.tty = config.tty;
        // The shim opens the log from the pod's log directory, through no
        // symlink, and makes the directories missing on the way (0755).
        if !container.meta.log_path.as_os_str().is_empty() {
            opts.log = super::container_create::log_target(
                &sandbox.meta.config().log_directory,
                &config.log_path,
            )?;
        }
        // One runtime exec (`run --detach`) instead of create + start: the
        // container runs as its shim comes up; Start only reports it.
        opts.run_detached = true;
        let started_at = now_nanos();
        let task = timed("container.shim", self.mech.runtime.create(opts)).await?;
        let pid = timed("container.start", task.start()).await?;
        Ok((task, pid, started_at))
    }

    /// Records the container's exit when its shim reports it, then deletes
    /// it from the runtime (its shim exits), as containerd does at exit: what
    /// RemoveContainer has left to do is its files and its record.
    pub fn watch_exit(self: &Arc<Self>, container: Arc<Container>, task: Arc<dyn Task>) {
        let core = self.clone();
        tokio::spawn(async move {
            let info = match task.wait().await {
                Ok(info) => Some(info),
                Err(e) => {
                    tracing::warn!(container = %container.meta.id, error = %e, "lost the shim while waiting for the exit");
                    None
                }
            };
            // After a stop or remove that holds it has done its own part.
            let _lifecycle = container.lifecycle.lock().await;
            if core.containers.lookup(&container.meta.id).is_err() {
                return;
            }
            match info {
                Some(info) => {
                    if let Err(e) = record_exit(&container, &info).await {
                        tracing::error!(container = %container.meta.id, error = %e, "recording the exit");
                    }
                }
                None => core.record_lost_exit(&container).await,
            }
            if container.status().state == ContainerState::Exited {
                core.release_exited(&container).await;
            }
            core.container_event(&container, EventKind::Stopped).await;
        });
    }

    /// A running container whose shim is gone: the exit its shim recorded,
    /// or an unknown exit (never left Running forever).
    pub(super) async fn record_lost_exit(&self, container: &Arc<Container>) {
        let shim_dir = self.layout.shim_dir(&container.meta.id);
        let result = match self.mech.runtime.exit_file(&shim_dir) {
            Some(info) => record_exit(container, &info).await,
            None if container.status().state == ContainerState::Running => {
                objects::save(container, move |s| {
                    s.state = ContainerState::Exited;
                    s.exit_code = 255;
                    s.finished_at = now_nanos();
                    s.pid = None;
                    s.reason = "Unknown".into();
                    s.message = "the container's shim was gone before it reported the exit".into();
                })
                .await
                .map(|_| ())
            }
            None => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(container = %container.meta.id, error = %e, "recording a lost exit");
        }
    }
}

/// Writes how the container ended, once. Not synced: all of it comes from
/// the shim's exit info, which recovery reads again (from the shim, or its
/// exit file) if a power cut loses this write.
pub async fn record_exit(container: &Arc<Container>, info: &ExitInfo) -> Result<(), Error> {
    if container.status().state == ContainerState::Exited {
        return Ok(());
    }
    let info = *info;
    objects::save_volatile(container, move |s| {
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
    })
    .await?;
    tracing::info!(container = %container.meta.id, exit_code = info.exit_code, oom = info.oom_killed, "container exited");
    Ok(())
}
