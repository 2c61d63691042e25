//! RuntimeService.UpdateContainerResources.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::container::ContainerState;
use crate::error::Error;
use crate::objects::StoreExt;

impl Cri {
    pub async fn update_container_resources(
        self: &Arc<Self>,
        req: v1::UpdateContainerResourcesRequest,
    ) -> Result<v1::UpdateContainerResourcesResponse, Error> {
        let container = self.core.containers.lookup(&req.container_id)?;
        let _lifecycle = container.lifecycle.lock().await;
        let id = container.meta.id.clone();
        let Some(linux) = req.linux else {
            return Ok(v1::UpdateContainerResourcesResponse {});
        };
        let resources = berth_spec::linux_resources(&id, &linux, &self.core.spec_options)?;
        // Kept for ContainerStatus once applied.
        let applied = prost::Message::encode_to_vec(&linux);
        match container.status().state {
            ContainerState::Running => {
                self.shim_of(&container)
                    .await?
                    .update(&resources)
                    .await
                    .map_err(|e| Error::Internal(format!("container {id}: update: {e}")))?;
            }
            ContainerState::Created => {}
            state => {
                return Err(Error::FailedPrecondition(format!(
                    "container {id} is {state:?}: its resources cannot change"
                )))
            }
        }
        // The bundle's spec keeps the new values, for a later start.
        // Replaced atomically (ExecSync reads it without the lock).
        let path = self.core.layout.container_dirs(&id).spec();
        let load = path.clone();
        let mut spec = tokio::task::spawn_blocking(move || oci_spec::runtime::Spec::load(&load))
            .await
            .map_err(Error::join)?
            .map_err(|e| Error::Internal(format!("container {id}: reading its spec: {e}")))?;
        if let Some(linux) = spec.linux_mut() {
            let mut merged = resources;
            if let Some(old) = linux.resources() {
                merged.set_devices(old.devices().clone());
            }
            linux.set_resources(Some(merged));
        }
        self.core.mech.files.write_spec(&id, &path, &spec).await?;
        crate::objects::save(&container, move |s| s.resources = applied).await?;
        Ok(v1::UpdateContainerResourcesResponse {})
    }
}
