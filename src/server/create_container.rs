//! RuntimeService.CreateContainer.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::core::ContainerRequest;
use crate::error::Error;

impl Cri {
    pub async fn create_container(
        self: &Arc<Self>,
        req: v1::CreateContainerRequest,
    ) -> Result<v1::CreateContainerResponse, Error> {
        let config = req
            .config
            .ok_or_else(|| Error::InvalidArgument("CreateContainer needs a config".into()))?;
        // The pod's config is the one recorded at RunPodSandbox, not the
        // copy kubelet sends along.
        let container_id = self
            .core
            .create_container(ContainerRequest {
                sandbox_id: req.pod_sandbox_id,
                config,
            })
            .await?;
        Ok(v1::CreateContainerResponse { container_id })
    }
}
