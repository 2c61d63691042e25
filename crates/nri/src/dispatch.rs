//! The events the runtime sends to plugins. Each goes to the subscribed
//! plugins one after the other in index order, under the event lock; each
//! request is bounded by the request timeout, and a plugin that times out or
//! disconnects is dropped without failing the event. A plugin that answers
//! with an error fails the event, with its name in the error.
//!
//! Post-events (PostCreateContainer, PostStartContainer,
//! PostUpdateContainer, PostUpdatePodSandbox) report what is done and
//! nothing waits for their answer: unlike containerd (whose CRI plugin
//! sends them under NRI's lock and answers the call only once every plugin
//! has replied), they are queued and the call answers at once. The queue is
//! delivered, in order, by whoever takes the event lock next (any event
//! first delivers what is queued) or by a task spawned for it, so that a
//! plugin still sees every post-event before the next event, as it would
//! with containerd. Each goes to the plugins that were subscribed when it
//! was posted. The queue is bounded ([`MAX_POSTED`]): past it, a post waits
//! for its delivery as the other events do.

use berth_lock::MutexExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use protobuf::MessageField;
use tokio::sync::MutexGuard;

use crate::api::{self, Event};
use crate::events::event_name;
use crate::merge::{CreateMerge, UpdateMerge};
use crate::nri::Nri;
use crate::plugin::{Call, Plugin};
use crate::{CreateResult, Error, UpdateResult};

type Rpc = Box<dyn Fn(Arc<Plugin>) -> BoxFuture<'static, ttrpc::Result<()>> + Send + Sync>;

/// Post-events queued and not yet delivered, at most.
pub const MAX_POSTED: usize = 256;

macro_rules! rpc {
    ($method:ident, $req:expr) => {{
        let req = $req;
        Box::new(move |p: Arc<Plugin>| {
            let req = req.clone();
            async move { p.client().$method(p.context(), &req).await.map(|_| ()) }.boxed()
        }) as Rpc
    }};
}

/// Notification events about a pod: each builds its request, then is sent
/// (`notify`) or queued (`post`).
macro_rules! pod_events {
    ($($(#[$doc:meta])* $method:ident: $req:ident, $event:ident, $how:ident;)*) => {$(
        $(#[$doc])*
        pub async fn $method(&self, pod: &api::PodSandbox) -> Result<(), Error> {
            let req = api::$req {
                pod: some(pod),
                ..Default::default()
            };
            self.$how(Event::$event, pod, None, rpc!($method, req)).await
        }
    )*};
}

/// Notification events about a container of a pod, as [`pod_events`].
macro_rules! container_events {
    ($($(#[$doc:meta])* $method:ident: $req:ident, $event:ident, $how:ident;)*) => {$(
        $(#[$doc])*
        pub async fn $method(
            &self,
            pod: &api::PodSandbox,
            ctr: &api::Container,
        ) -> Result<(), Error> {
            let req = api::$req {
                pod: some(pod),
                container: some(ctr),
                ..Default::default()
            };
            self.$how(Event::$event, pod, Some(ctr), rpc!($method, req)).await
        }
    )*};
}

fn some<T>(v: &T) -> MessageField<T>
where
    T: Clone,
{
    MessageField::some(v.clone())
}

/// A queued post-event.
pub(crate) struct Posted {
    event: Event,
    pod: api::PodSandbox,
    ctr: Option<api::Container>,
    rpc: Rpc,
    /// The plugins subscribed to it when it was posted.
    plugins: Vec<Arc<Plugin>>,
}

/// Sends one notification to `plugins`, in order; plugins without the
/// dedicated RPC get it as StateChange (NRI's compatibility with older
/// plugins). The caller holds the event lock.
async fn deliver(
    event: Event,
    pod: &api::PodSandbox,
    ctr: Option<&api::Container>,
    rpc: &Rpc,
    plugins: Vec<Arc<Plugin>>,
) -> Result<(), Error> {
    let name = event_name(event);
    for p in plugins {
        if p.is_closed() {
            continue;
        }
        if let Call::Unimplemented = p.call(name, rpc(p.clone())).await? {
            let ev = api::StateChangeEvent {
                event: event.into(),
                pod: some(pod),
                container: ctr.map(some).unwrap_or_default(),
                ..Default::default()
            };
            let fut = p.client().state_change(p.context(), &ev);
            p.call(name, fut).await?;
        }
    }
    Ok(())
}

impl Nri {
    /// Whether any connected plugin is subscribed to `event` (the caller
    /// may then skip building the event: an event nobody listens to costs
    /// nothing).
    pub fn wants(&self, event: Event) -> bool {
        self.active().iter().any(|p| p.subscribed(event))
    }

    /// The connected plugins subscribed to `event`, in index order.
    fn subscribers(&self, event: Event) -> Vec<Arc<Plugin>> {
        self.active()
            .into_iter()
            .filter(|p| p.subscribed(event))
            .collect()
    }

    /// Whether a CreateContainer has anything to do here: a plugin
    /// subscribed to it or to the validation, or the default validator
    /// (which checks required plugins even when none is connected).
    /// Without any, [`Nri::create_container`] would answer nothing to
    /// adjust, and the caller may skip building its request.
    pub fn wants_create(&self) -> bool {
        self.inner.cfg.validator.enable
            || self.active().iter().any(|p| {
                p.subscribed(Event::CREATE_CONTAINER)
                    || p.subscribed(Event::VALIDATE_CONTAINER_ADJUSTMENT)
            })
    }

    /// Takes the event lock, first delivering the queued post-events: every
    /// event goes through here, so none overtakes a post-event queued
    /// before it.
    pub(crate) async fn lock_events(&self) -> MutexGuard<'_, ()> {
        let guard = self.inner.event_lock.lock().await;
        self.deliver_posted().await;
        guard
    }

    /// Delivers the queued post-events, in order; the caller holds the
    /// event lock.
    async fn deliver_posted(&self) {
        loop {
            let next = self.inner.posted.lock_unpoisoned().pop_front();
            let Some(posted) = next else { break };
            let (pod, ctr) = (&posted.pod, posted.ctr.as_ref());
            if let Err(e) = deliver(posted.event, pod, ctr, &posted.rpc, posted.plugins).await {
                tracing::warn!(
                    event = event_name(posted.event),
                    pod = %pod.id,
                    container = ctr.map(|c| c.id.as_str()),
                    error = %e,
                    "NRI post-event failed"
                );
            }
        }
    }

    /// Queues a post-event for the plugins subscribed to it now, and makes
    /// sure a task will deliver it; returns at once (unless the queue is
    /// full: then it is delivered before this returns).
    async fn post(
        &self,
        event: Event,
        pod: &api::PodSandbox,
        ctr: Option<&api::Container>,
        rpc: Rpc,
    ) -> Result<(), Error> {
        let plugins = self.subscribers(event);
        if plugins.is_empty() {
            return Ok(());
        }
        let posted = Posted {
            event,
            pod: pod.clone(),
            ctr: ctr.cloned(),
            rpc,
            plugins,
        };
        let queued = {
            let mut q = self.inner.posted.lock_unpoisoned();
            if q.len() < MAX_POSTED {
                q.push_back(posted);
                None
            } else {
                Some(posted)
            }
        };
        if let Some(posted) = queued {
            // Full: deliver the queue, then this one, before answering.
            let _g = self.lock_events().await;
            let ctr = posted.ctr.as_ref();
            return deliver(event, &posted.pod, ctr, &posted.rpc, posted.plugins).await;
        }
        // The drainer clears the flag before it drains: a post that finds
        // it set is delivered by that drainer, or by the next one spawned
        // by a post that finds it clear.
        if !self.inner.drain_scheduled.swap(true, Ordering::AcqRel) {
            let nri = self.clone();
            tokio::spawn(async move {
                let _g = nri.inner.event_lock.lock().await;
                nri.inner.drain_scheduled.store(false, Ordering::Release);
                nri.deliver_posted().await;
            });
        }
        Ok(())
    }

    /// Sends a notification-only event to the plugins subscribed to it.
    async fn notify(
        &self,
        event: Event,
        pod: &api::PodSandbox,
        ctr: Option<&api::Container>,
        rpc: Rpc,
    ) -> Result<(), Error> {
        let _g = self.lock_events().await;
        deliver(event, pod, ctr, &rpc, self.subscribers(event)).await
    }

    pod_events! {
        run_pod_sandbox: RunPodSandboxRequest, RUN_POD_SANDBOX, notify;
        /// Queued (see the module's doc): answers at once.
        post_update_pod_sandbox: PostUpdatePodSandboxRequest, POST_UPDATE_POD_SANDBOX, post;
        stop_pod_sandbox: StopPodSandboxRequest, STOP_POD_SANDBOX, notify;
        remove_pod_sandbox: RemovePodSandboxRequest, REMOVE_POD_SANDBOX, notify;
    }

    container_events! {
        /// Queued (see the module's doc): answers at once.
        post_create_container: PostCreateContainerRequest, POST_CREATE_CONTAINER, post;
        start_container: StartContainerRequest, START_CONTAINER, notify;
        /// Queued (see the module's doc): answers at once.
        post_start_container: PostStartContainerRequest, POST_START_CONTAINER, post;
        /// Queued (see the module's doc): answers at once.
        post_update_container: PostUpdateContainerRequest, POST_UPDATE_CONTAINER, post;
        remove_container: RemoveContainerRequest, REMOVE_CONTAINER, notify;
    }

    /// UpdatePodSandbox (no StateChange fallback in NRI: a plugin without it
    /// simply does not see it).
    pub async fn update_pod_sandbox(
        &self,
        pod: &api::PodSandbox,
        overhead: Option<&api::LinuxResources>,
        resources: Option<&api::LinuxResources>,
    ) -> Result<(), Error> {
        let event = Event::UPDATE_POD_SANDBOX;
        let req = api::UpdatePodSandboxRequest {
            pod: some(pod),
            overhead_linux_resources: overhead.map(some).unwrap_or_default(),
            linux_resources: resources.map(some).unwrap_or_default(),
            ..Default::default()
        };
        let _g = self.lock_events().await;
        for p in self.active() {
            if p.subscribed(event) {
                let fut = p.client().update_pod_sandbox(p.context(), &req);
                p.call(event_name(event), fut).await?;
            }
        }
        Ok(())
    }

    /// CreateContainer: every subscribed plugin may adjust the container
    /// (each seeing the adjustments before it), update others or evict;
    /// the merge is then validated.
    pub async fn create_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<CreateResult, Error> {
        let event = Event::CREATE_CONTAINER;
        let name = event_name(event);
        let _g = self.lock_events().await;
        let mut merge = CreateMerge::new(api::CreateContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        });
        let active = self.active();
        for p in &active {
            if !p.subscribed(event) {
                continue;
            }
            let req = merge.request.clone();
            let fut = p.client().create_container(p.context(), &req);
            if let Call::Done(rpl) = p.call(name, fut).await? {
                merge
                    .apply(&rpl, &p.full_name())
                    .map_err(|source| Error::Merge {
                        event: name,
                        source,
                    })?;
            }
        }
        crate::validate::validate(self, &active, pod, ctr, &merge).await?;
        let owners = merge.owners().clone();
        let rpl = merge.into_response();
        Ok(CreateResult {
            adjust: rpl.adjust.unwrap_or_default(),
            updates: rpl.update,
            evict: rpl.evict,
            owners: owners.0,
        })
    }

    /// UpdateContainer: plugins may change the requested resources of the
    /// container and update or evict others.
    pub async fn update_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
        resources: &api::LinuxResources,
    ) -> Result<UpdateResult, Error> {
        let event = Event::UPDATE_CONTAINER;
        let name = event_name(event);
        let _g = self.lock_events().await;
        let mut merge = UpdateMerge::new(None, Some((ctr.id.clone(), resources.clone())));
        let mut evict = Vec::new();
        for p in self.active() {
            if !p.subscribed(event) {
                continue;
            }
            let req = api::UpdateContainerRequest {
                pod: some(pod),
                container: some(ctr),
                linux_resources: merge.target_resources().map(some).unwrap_or_default(),
                ..Default::default()
            };
            let fut = p.client().update_container(p.context(), &req);
            if let Call::Done(rpl) = p.call(name, fut).await? {
                merge
                    .apply(&rpl.update, &p.full_name())
                    .map_err(|source| Error::Merge {
                        event: name,
                        source,
                    })?;
                evict.extend(rpl.evict);
            }
        }
        let resources = merge.target_resources().cloned().unwrap_or_default();
        let owners = merge.owners.0.clone();
        Ok(UpdateResult {
            resources,
            updates: merge.into_updates(),
            evict,
            owners,
        })
    }

    /// StopContainer: plugins may update the remaining containers.
    pub async fn stop_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<UpdateResult, Error> {
        let event = Event::STOP_CONTAINER;
        let name = event_name(event);
        let _g = self.lock_events().await;
        let mut merge = UpdateMerge::new(None, None);
        let req = api::StopContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        };
        for p in self.active() {
            if !p.subscribed(event) {
                continue;
            }
            let fut = p.client().stop_container(p.context(), &req);
            if let Call::Done(rpl) = p.call(name, fut).await? {
                merge
                    .apply(&rpl.update, &p.full_name())
                    .map_err(|source| Error::Merge {
                        event: name,
                        source,
                    })?;
            }
        }
        let owners = merge.owners.0.clone();
        Ok(UpdateResult {
            updates: merge.into_updates(),
            owners,
            ..Default::default()
        })
    }
}
