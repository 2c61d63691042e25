//! StopContainer and RemoveContainer, and the release of an exited
//! container (runtime delete, rootfs unmount).

use berth_lock::MutexExt;
use std::sync::Arc;
use std::time::Duration;

use berth_shim::ExitInfo;

use super::container_start::record_exit;
use super::mechanisms::{ContainerEvent, EventKind};
use super::Core;
use crate::container::{Container, ContainerState};
use crate::counters::timed;
use crate::error::Error;
use crate::failpoint;
use crate::objects::{self, StoreExt};

/// How long a SIGKILLed container may take to be reaped.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a container whose SIGKILL failed may still take to be seen
/// exited (it may have exited already) before the kill's error is returned.
const KILL_FAILED_WAIT: Duration = Duration::from_secs(2);

impl Core {
    /// StopContainer: gone or already stopped is fine. The grace period is
    /// waited out without the container's lifecycle lock, so a forced stop
    /// that comes meanwhile (a shorter grace, StopPodSandbox, a removal)
    /// kills at once instead of queueing behind the grace: kubelet shortens
    /// a grace that way, and gives up on a pod stop that waits.
    pub async fn stop_container(self: &Arc<Self>, id: &str, grace: Duration) -> Result<(), Error> {
        let container = match self.containers.lookup(id) {
            Ok(c) => c,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let exited = if grace.is_zero() {
            None
        } else {
            self.signal_and_wait(&container, grace).await
        };
        let _lifecycle = container.lifecycle.lock().await;
        if self.containers.lookup(id).is_err() {
            // Removed while the grace ran: nothing left to stop.
            return Ok(());
        }
        if let Some(info) = exited {
            if container.status().state == ContainerState::Running {
                record_exit(&container, &info).await?;
                self.release_exited(&container).await;
            }
        }
        self.stop(&container).await?;
        self.container_event(&container, EventKind::Stopped).await;
        Ok(())
    }

    /// RemoveContainer: forced; gone is fine.
    pub async fn remove_container(self: &Arc<Self>, id: &str) -> Result<(), Error> {
        let container = match self.containers.lookup(id) {
            Ok(c) => c,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _lifecycle = container.lifecycle.lock().await;
        self.remove(&container).await
    }

    /// Sends a running container its stop signal (under its lifecycle
    /// lock) and waits up to `grace` for its exit (without the lock); the
    /// exit, if it came. What fails here is left to the forced stop after.
    async fn signal_and_wait(
        &self,
        container: &Arc<Container>,
        grace: Duration,
    ) -> Option<ExitInfo> {
        let id = &container.meta.id;
        let task = {
            let _lifecycle = container.lifecycle.lock().await;
            if container.status().state != ContainerState::Running {
                return None;
            }
            let task = self.shim_of(id).await.ok()?;
            let signal = container.meta.stop_signal;
            if let Err(e) = task.kill(signal, false).await {
                tracing::debug!(container = %id, error = %e, "stop signal (may have exited)");
            }
            tracing::info!(container = %id, signal, grace_secs = grace.as_secs(), "stop signal sent");
            task
        };
        tokio::time::timeout(grace, task.wait()).await.ok()?.ok()
    }

    /// SIGKILL, the exit recorded, the container deleted from the runtime.
    /// Idempotent.
    pub(super) async fn stop(&self, container: &Arc<Container>) -> Result<(), Error> {
        if container.status().state != ContainerState::Running {
            return Ok(());
        }
        self.kill_until_exit(container).await?;
        failpoint::hit("stop_container:before_release");
        self.release_exited(container).await;
        Ok(())
    }

    /// Deletes an exited container from the runtime (its shim exits) and
    /// unmounts its rootfs, as containerd does at exit. What fails here is
    /// done again, and reported, by RemoveContainer.
    pub(super) async fn release_exited(&self, container: &Container) {
        let id = &container.meta.id;
        self.container_stopped_hook(container).await;
        if let Err(e) = self.delete_from_runtime(container).await {
            tracing::warn!(container = %id, error = %e, "deleting the exited container from the runtime");
            return;
        }
        if let Err(e) = self
            .mech
            .mounts
            .unmount_rootfs(id, &self.layout.container_dirs(id))
            .await
        {
            tracing::warn!(container = %id, error = %e, "unmounting the rootfs");
        }
    }

    /// SIGKILL; records the exit.
    async fn kill_until_exit(&self, container: &Arc<Container>) -> Result<(), Error> {
        let id = &container.meta.id;
        let task = match self.shim_of(id).await {
            Ok(task) => task,
            Err(e) => {
                // No shim: the exit file tells how it ended, if it did; else
                // the exit is unknown, and releasing it kills what is left.
                tracing::warn!(container = %id, error = %e, "its shim does not answer");
                self.record_lost_exit(container).await;
                return Ok(());
            }
        };
        let kill_failed = task.kill(libc::SIGKILL, true).await.err();
        if let Some(e) = &kill_failed {
            tracing::debug!(container = %id, error = %e, "SIGKILL (may have exited)");
        }
        // A kill that failed (the runtime missing or broken) gets no long wait.
        let limit = if kill_failed.is_some() {
            KILL_FAILED_WAIT
        } else {
            KILL_TIMEOUT
        };
        match tokio::time::timeout(limit, task.wait()).await {
            Ok(Ok(info)) => record_exit(container, &info).await,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(kill_failed.unwrap_or_else(|| {
                Error::DeadlineExceeded(format!(
                    "container {id} did not exit {KILL_TIMEOUT:?} after SIGKILL"
                ))
            })),
        }
    }

    /// Kills (if running), deletes and forgets a container whose lifecycle
    /// lock the caller holds.
    pub(super) async fn remove(self: &Arc<Self>, container: &Arc<Container>) -> Result<(), Error> {
        let id = container.meta.id.clone();
        self.stop(container).await?;
        self.container_event(container, EventKind::Stopped).await;
        timed("container.delete", self.delete_from_runtime(container)).await?;
        // The container's dirs and its shim's are independent trees: removed
        // side by side (each on a blocking thread), both before the record
        // goes, so a failure keeps the record for a retry.
        let (dirs, shim_dir) = (self.layout.container_dirs(&id), self.layout.shim_dir(&id));
        let (files, shim) = tokio::join!(
            timed(
                "container.files.remove",
                self.mech.mounts.remove_container_files(&id, &dirs),
            ),
            timed(
                "container.shim_dir.remove",
                self.mech.files.remove_dir(&id, &shim_dir),
            ),
        );
        files.and(shim)?;
        self.notify_container_of_pod(ContainerEvent::Remove, container)
            .await;
        objects::delete(self.containers.clone(), container).await?;
        self.plugin_stopped.lock_unpoisoned().remove(&id);
        let config = container.meta.config();
        let volumes = config.mounts.iter().filter_map(|m| m.image.as_ref());
        let mut images = std::iter::once(container.meta.image_id.as_str()).chain(
            volumes
                .map(|i| i.image_ref.as_str())
                .filter(|r| !r.is_empty()),
        );
        if images.any(|image| self.mech.images.get(image).is_none()) {
            // Its image, or an image volume's, was removed while it lived:
            // the snapshots it kept may be unused now.
            if let Err(e) = self.mech.images.collect_garbage().await {
                tracing::warn!(container = %id, error = %e, "collecting the removed image's content");
            }
        }
        self.container_event(container, EventKind::Deleted).await;
        tracing::info!(container = %id, "container removed");
        Ok(())
    }

    /// Deletes the runtime's container and lets its shim exit; cheap when
    /// that was done at exit.
    pub(super) async fn delete_from_runtime(&self, container: &Container) -> Result<(), Error> {
        let id = &container.meta.id;
        self.mech
            .runtime
            .delete(id, &self.layout.shim_dir(id), &container.meta.runtime)
            .await
    }
}
