//! The events the runtime sends to plugins. Each goes to the subscribed
//! plugins one after the other in index order, under the event lock; each
//! request is bounded by the request timeout, and a plugin that times out or
//! disconnects is dropped without failing the event. A plugin that answers
//! with an error fails the event, with its name in the error.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use protobuf::MessageField;

use crate::api::{self, Event};
use crate::events::event_name;
use crate::merge::{CreateMerge, UpdateMerge};
use crate::nri::Nri;
use crate::plugin::{Call, Plugin};
use crate::{CreateResult, Error, UpdateResult};

type Rpc = Box<dyn Fn(Arc<Plugin>) -> BoxFuture<'static, ttrpc::Result<()>> + Send + Sync>;

macro_rules! rpc {
    ($method:ident, $req:expr) => {{
        let req = $req;
        Box::new(move |p: Arc<Plugin>| {
            let req = req.clone();
            async move { p.client().$method(p.context(), &req).await.map(|_| ()) }.boxed()
        }) as Rpc
    }};
}

fn some<T>(v: &T) -> MessageField<T>
where
    T: Clone,
{
    MessageField::some(v.clone())
}

impl Nri {
    /// Sends a notification-only event; plugins without the dedicated RPC
    /// get it as StateChange (NRI's compatibility with older plugins).
    async fn notify(
        &self,
        event: Event,
        pod: &api::PodSandbox,
        ctr: Option<&api::Container>,
        rpc: Rpc,
    ) -> Result<(), Error> {
        let name = event_name(event);
        let _g = self.inner.event_lock.lock().await;
        for p in self.active() {
            if !p.subscribed(event) {
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

    pub async fn run_pod_sandbox(&self, pod: &api::PodSandbox) -> Result<(), Error> {
        let req = api::RunPodSandboxRequest {
            pod: some(pod),
            ..Default::default()
        };
        let rpc = rpc!(run_pod_sandbox, req);
        self.notify(Event::RUN_POD_SANDBOX, pod, None, rpc).await
    }

    pub async fn post_update_pod_sandbox(&self, pod: &api::PodSandbox) -> Result<(), Error> {
        let req = api::PostUpdatePodSandboxRequest {
            pod: some(pod),
            ..Default::default()
        };
        let rpc = rpc!(post_update_pod_sandbox, req);
        self.notify(Event::POST_UPDATE_POD_SANDBOX, pod, None, rpc)
            .await
    }

    pub async fn stop_pod_sandbox(&self, pod: &api::PodSandbox) -> Result<(), Error> {
        let req = api::StopPodSandboxRequest {
            pod: some(pod),
            ..Default::default()
        };
        let rpc = rpc!(stop_pod_sandbox, req);
        self.notify(Event::STOP_POD_SANDBOX, pod, None, rpc).await
    }

    pub async fn remove_pod_sandbox(&self, pod: &api::PodSandbox) -> Result<(), Error> {
        let req = api::RemovePodSandboxRequest {
            pod: some(pod),
            ..Default::default()
        };
        let rpc = rpc!(remove_pod_sandbox, req);
        self.notify(Event::REMOVE_POD_SANDBOX, pod, None, rpc).await
    }

    pub async fn post_create_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<(), Error> {
        let req = api::PostCreateContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        };
        let rpc = rpc!(post_create_container, req);
        self.notify(Event::POST_CREATE_CONTAINER, pod, Some(ctr), rpc)
            .await
    }

    pub async fn start_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<(), Error> {
        let req = api::StartContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        };
        let rpc = rpc!(start_container, req);
        self.notify(Event::START_CONTAINER, pod, Some(ctr), rpc)
            .await
    }

    pub async fn post_start_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<(), Error> {
        let req = api::PostStartContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        };
        let rpc = rpc!(post_start_container, req);
        self.notify(Event::POST_START_CONTAINER, pod, Some(ctr), rpc)
            .await
    }

    pub async fn post_update_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<(), Error> {
        let req = api::PostUpdateContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        };
        let rpc = rpc!(post_update_container, req);
        self.notify(Event::POST_UPDATE_CONTAINER, pod, Some(ctr), rpc)
            .await
    }

    pub async fn remove_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<(), Error> {
        let req = api::RemoveContainerRequest {
            pod: some(pod),
            container: some(ctr),
            ..Default::default()
        };
        let rpc = rpc!(remove_container, req);
        self.notify(Event::REMOVE_CONTAINER, pod, Some(ctr), rpc)
            .await
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
        let _g = self.inner.event_lock.lock().await;
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
        let _g = self.inner.event_lock.lock().await;
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
        let _g = self.inner.event_lock.lock().await;
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
        let _g = self.inner.event_lock.lock().await;
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
