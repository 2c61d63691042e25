//! The NRI mechanism: [`crate::core::mechanisms::Plugins`] over berth-nri.
//! Built empty by the composition root (the core needs it before NRI can
//! read the core), started once the core has recovered; until then (and
//! with NRI disabled) every hook is a no-op. NRI keeps no state a restart
//! needs: plugins reconnect (pre-installed ones are relaunched) and are
//! synchronized from the records.

mod adjust;
pub mod convert;
mod host;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use berth_nri::Nri;
use cri_api::v1;
use oci_spec::runtime::Spec;
use tonic::async_trait;

use crate::container::Container;
use crate::core::mechanisms::{ContainerEvent, Plugins, PodEvent, SyncBlock};
use crate::core::Core;
use crate::error::Error;
use crate::sandbox::Sandbox;
pub use host::NriHost;

/// NRI plugins, once started.
pub struct NriPlugins {
    nri: OnceLock<Nri>,
    core: OnceLock<std::sync::Weak<Core>>,
    cdi_dirs: Vec<PathBuf>,
}

fn failed(e: berth_nri::Error) -> Error {
    Error::Internal(format!("NRI: {e}"))
}

impl NriPlugins {
    pub fn new(cdi_dirs: Vec<PathBuf>) -> Arc<NriPlugins> {
        Arc::new(NriPlugins {
            nri: OnceLock::new(),
            core: OnceLock::new(),
            cdi_dirs,
        })
    }

    /// Starts NRI over `core`: pre-installed plugins launched and
    /// synchronized, the socket open for the others.
    pub async fn start(&self, cfg: berth_nri::Config, core: &Arc<Core>) -> Result<(), Error> {
        let _ = self.core.set(Arc::downgrade(core));
        let host = Arc::new(NriHost {
            core: Arc::downgrade(core),
        });
        let nri = Nri::start(cfg, host).await.map_err(failed)?;
        let _ = self.nri.set(nri);
        Ok(())
    }

    /// The running NRI, if started.
    pub fn nri(&self) -> Option<&Nri> {
        self.nri.get()
    }

    /// Plugins' updates of other containers, applied off the caller's
    /// locks (the caller may hold the lock of the container an update is
    /// for, or of one whose stop waits for the same plugins).
    fn apply_later(
        &self,
        plugin: &'static str,
        updates: Vec<berth_nri::api::ContainerUpdate>,
        evict: Vec<berth_nri::api::ContainerEviction>,
    ) {
        if updates.is_empty() && evict.is_empty() {
            return;
        }
        let Some(core) = self.core.get().and_then(|c| c.upgrade()) else {
            return;
        };
        tokio::spawn(async move {
            host::apply(&core, plugin, updates, evict).await;
        });
    }

    fn spec_of(&self, id: &str) -> Option<serde_json::Value> {
        let core = self.core.get()?.upgrade()?;
        host::read_spec(&core, id)
    }
}

#[async_trait]
impl Plugins for NriPlugins {
    async fn block_sync(&self) -> SyncBlock {
        match self.nri() {
            Some(nri) => Box::new(nri.block_plugin_sync().await),
            None => Box::new(()),
        }
    }

    async fn pod_event(&self, event: PodEvent, pod: &Sandbox) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let p = convert::pod(pod);
        match event {
            PodEvent::Run => nri.run_pod_sandbox(&p).await,
            PodEvent::Stop => nri.stop_pod_sandbox(&p).await,
            PodEvent::Remove => nri.remove_pod_sandbox(&p).await,
            PodEvent::PostUpdate => nri.post_update_pod_sandbox(&p).await,
        }
        .map_err(failed)
    }

    async fn update_pod(
        &self,
        pod: &Sandbox,
        overhead: Option<&v1::LinuxContainerResources>,
        resources: Option<&v1::LinuxContainerResources>,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let overhead = overhead.map(convert::resources_from_cri);
        let resources = resources.map(convert::resources_from_cri);
        nri.update_pod_sandbox(&convert::pod(pod), overhead.as_ref(), resources.as_ref())
            .await
            .map_err(failed)
    }

    async fn create_container(
        &self,
        pod: &Sandbox,
        container: &Container,
        spec: &mut Spec,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let json = serde_json::to_value(&*spec).ok();
        let c = convert::container(container, json.as_ref());
        let result = nri
            .create_container(&convert::pod(pod), &c)
            .await
            .map_err(failed)?;
        adjust::apply(
            &container.meta.id,
            spec,
            &result.adjust,
            &result.owners,
            &self.cdi_dirs,
        )?;
        self.apply_later("CreateContainer", result.updates, result.evict);
        Ok(())
    }

    async fn update_container(
        &self,
        pod: &Sandbox,
        container: &Container,
        resources: &mut v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let c = convert::container(container, self.spec_of(&container.meta.id).as_ref());
        let asked = convert::resources_from_cri(resources);
        let result = nri
            .update_container(&convert::pod(pod), &c, &asked)
            .await
            .map_err(failed)?;
        *resources = convert::overlay_cri(resources.clone(), &result.resources);
        self.apply_later("UpdateContainer", result.updates, result.evict);
        Ok(())
    }

    async fn container_event(
        &self,
        event: ContainerEvent,
        pod: &Sandbox,
        container: &Container,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let (p, c) = (
            convert::pod(pod),
            convert::container(container, self.spec_of(&container.meta.id).as_ref()),
        );
        match event {
            ContainerEvent::PostCreate => nri.post_create_container(&p, &c).await,
            ContainerEvent::Start => nri.start_container(&p, &c).await,
            ContainerEvent::PostStart => nri.post_start_container(&p, &c).await,
            ContainerEvent::PostUpdate => nri.post_update_container(&p, &c).await,
            ContainerEvent::Remove => nri.remove_container(&p, &c).await,
            ContainerEvent::Stop => {
                let updates = nri.stop_container(&p, &c).await.map_err(failed)?;
                self.apply_later("StopContainer", updates, Vec::new());
                Ok(())
            }
        }
        .map_err(failed)
    }
}
