//! The NRI hooks the core calls (see [`super::mechanisms::Plugins`]): the
//! ones that may fail their RPC (RunPodSandbox, CreateContainer,
//! StartContainer, the updates) return the plugin's error; the others are
//! notifications whose failure is logged, as containerd does.

use berth_lock::MutexExt;
use std::sync::Arc;

use super::mechanisms::{ContainerEvent, PodEvent};
use super::rollback::Rollback;
use super::{timed, Core};
use crate::container::Container;
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::Sandbox;

impl Core {
    /// RunPodSandbox's hook, once the pod is set up and before it is ready
    /// (listed): a failure fails the call, and the plugins that heard of
    /// the pod hear it is removed as it is undone.
    pub(super) async fn run_pod_hook(
        &self,
        undo: &mut Rollback,
        sandbox: &Arc<Sandbox>,
    ) -> Result<(), Error> {
        undo.push(
            "tell NRI plugins the pod is gone",
            sandbox.clone(),
            |core, _, sandbox| async move {
                core.notify_pod(PodEvent::Remove, &sandbox).await;
                Ok(())
            },
        );
        timed(
            "nri.run_pod_sandbox",
            self.mech.plugins.pod_event(PodEvent::Run, sandbox),
        )
        .await
    }

    /// CreateContainer's hook, between the spec and the bundle: the
    /// plugins' adjustment applied to `spec`. As it is undone, the plugins
    /// hear the container is stopped and removed (containerd's
    /// UndoCreateContainer).
    pub(super) async fn create_container_hook(
        &self,
        undo: &mut Rollback,
        sandbox: &Sandbox,
        container: &Arc<Container>,
        spec: &mut oci_spec::runtime::Spec,
    ) -> Result<(), Error> {
        let sandbox_id = sandbox.meta.id.clone();
        undo.push(
            "tell NRI plugins the container is gone",
            container.clone(),
            |core, _, container| async move {
                if let Ok(sandbox) = core.sandboxes.lookup(&sandbox_id) {
                    for event in [ContainerEvent::Stop, ContainerEvent::Remove] {
                        core.notify_container(event, &sandbox, &container).await;
                    }
                }
                Ok(())
            },
        );
        timed(
            "nri.create_container",
            self.mech.plugins.create_container(sandbox, container, spec),
        )
        .await
    }

    /// A pod notification; a plugin's failure is logged.
    pub(super) async fn notify_pod(&self, event: PodEvent, sandbox: &Sandbox) {
        if let Err(e) = self.mech.plugins.pod_event(event, sandbox).await {
            tracing::warn!(pod = %sandbox.meta.id, ?event, error = %e, "NRI pod event failed");
        }
    }

    /// A container notification; a plugin's failure is logged.
    pub(super) async fn notify_container(
        &self,
        event: ContainerEvent,
        sandbox: &Sandbox,
        container: &Container,
    ) {
        if let Err(e) = self
            .mech
            .plugins
            .container_event(event, sandbox, container)
            .await
        {
            tracing::warn!(container = %container.meta.id, ?event, error = %e, "NRI container event failed");
        }
    }

    /// A container notification where the caller has no pod at hand.
    pub(super) async fn notify_container_of_pod(
        &self,
        event: ContainerEvent,
        container: &Container,
    ) {
        match self.sandboxes.lookup(&container.meta.sandbox_id) {
            Ok(sandbox) => self.notify_container(event, &sandbox, container).await,
            Err(e) => {
                tracing::debug!(container = %container.meta.id, error = %e, "no pod for an NRI event")
            }
        }
    }

    /// StopContainer's notification: once per exit of a container (a
    /// StopContainer after the exit, or a second release, says nothing).
    pub(super) async fn container_stopped_hook(&self, container: &Container) {
        if let Some(deferred) = self.deferred_stops.lock_unpoisoned().as_mut() {
            if !deferred.contains(&container.meta.id) {
                deferred.push(container.meta.id.clone());
            }
            return;
        }
        let first = self
            .plugin_stopped
            .lock_unpoisoned()
            .insert(container.meta.id.clone());
        if first {
            self.notify_container_of_pod(ContainerEvent::Stop, container)
                .await;
        }
    }

    /// From now until [`Core::plugins_started`], StopContainer
    /// notifications wait for the plugins.
    pub(super) fn defer_plugin_stops(&self) {
        let mut d = self.deferred_stops.lock_unpoisoned();
        d.get_or_insert_with(Vec::new);
    }

    /// The plugins are started and synchronized (or NRI is off): each
    /// container that exited meanwhile (or while berth was down) gets its
    /// StopContainer notification, once.
    pub async fn plugins_started(&self) {
        let deferred = self
            .deferred_stops
            .lock_unpoisoned()
            .take()
            .unwrap_or_default();
        for id in deferred {
            match self.containers.lookup(&id) {
                Ok(container) => self.container_stopped_hook(&container).await,
                Err(e) => tracing::debug!(container = %id, error = %e, "gone before its NRI stop"),
            }
        }
    }
}
