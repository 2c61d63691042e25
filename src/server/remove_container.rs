//! RuntimeService.RemoveContainer.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn remove_container(
        self: &Arc<Self>,
        req: v1::RemoveContainerRequest,
    ) -> Result<v1::RemoveContainerResponse, Error> {
        self.core.remove_container(&req.container_id).await?;
        Ok(v1::RemoveContainerResponse {})
    }
}
