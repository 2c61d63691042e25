//! RuntimeService.UpdateContainerResources (the work is the core's:
//! `core/container_update.rs`).

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn update_container_resources(
        &self,
        req: v1::UpdateContainerResourcesRequest,
    ) -> Result<v1::UpdateContainerResourcesResponse, Error> {
        self.core
            .update_container_resources(&req.container_id, req.linux)
            .await?;
        Ok(v1::UpdateContainerResourcesResponse {})
    }
}
