//! RuntimeService.StartContainer.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn start_container(
        self: &Arc<Self>,
        req: v1::StartContainerRequest,
    ) -> Result<v1::StartContainerResponse, Error> {
        self.core.start_container(&req.container_id).await?;
        Ok(v1::StartContainerResponse {})
    }
}
