//! The fake NRI plugins: each hook is a step (`nri.<Event>`) that can be
//! failed or delayed; CreateContainer adds the env the test sets; each hook
//! records the state its object was in (what List would have seen).

use cri_api::v1;
use oci_spec::runtime::Spec;
use tonic::async_trait;

use super::Fake;
use crate::container::Container;
use crate::core::mechanisms::{ContainerEvent, Plugins, PodEvent, SyncBlock};
use crate::error::Error;
use crate::sandbox::Sandbox;

impl Fake {
    fn seen(&self, step: &str, state: String) {
        self.hook_states
            .lock()
            .unwrap()
            .push((step.to_string(), state));
    }
}

#[async_trait]
impl Plugins for Fake {
    async fn block_sync(&self) -> SyncBlock {
        self.log.lock().unwrap().push("nri.block_sync -".into());
        Box::new(())
    }
    async fn pod_event(&self, event: PodEvent, pod: &Sandbox) -> Result<(), Error> {
        let step = format!("nri.{event:?}PodSandbox");
        self.seen(&step, format!("{:?}", pod.status().state));
        self.call(&step, &pod.meta.id).await
    }
    async fn update_pod(
        &self,
        pod: &Sandbox,
        _overhead: Option<&v1::LinuxContainerResources>,
        _resources: Option<&v1::LinuxContainerResources>,
    ) -> Result<(), Error> {
        self.call("nri.UpdatePodSandbox", &pod.meta.id).await
    }
    async fn create_container(
        &self,
        _pod: &Sandbox,
        container: &Container,
        spec: &mut Spec,
    ) -> Result<(), Error> {
        let step = "nri.CreateContainer";
        self.seen(step, format!("{:?}", container.status().state));
        self.call(step, &container.meta.id).await?;
        let add = self.nri_env.lock().unwrap().clone();
        if let Some(process) = spec.process_mut() {
            let mut env = process.env().clone().unwrap_or_default();
            env.extend(add);
            process.set_env(Some(env));
        }
        Ok(())
    }
    async fn update_container(
        &self,
        _pod: &Sandbox,
        container: &Container,
        resources: &mut v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        self.call("nri.UpdateContainer", &container.meta.id).await?;
        if let Some(shares) = *self.nri_cpu_shares.lock().unwrap() {
            resources.cpu_shares = shares;
        }
        Ok(())
    }
    async fn container_event(
        &self,
        event: ContainerEvent,
        _pod: &Sandbox,
        container: &Container,
    ) -> Result<(), Error> {
        let step = match event {
            ContainerEvent::PostCreate => "nri.PostCreateContainer",
            ContainerEvent::Start => "nri.StartContainer",
            ContainerEvent::PostStart => "nri.PostStartContainer",
            ContainerEvent::PostUpdate => "nri.PostUpdateContainer",
            ContainerEvent::Stop => "nri.StopContainer",
            ContainerEvent::Remove => "nri.RemoveContainer",
        };
        self.seen(step, format!("{:?}", container.status().state));
        self.call(step, &container.meta.id).await
    }
}
