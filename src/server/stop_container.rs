//! RuntimeService.StopContainer.

use std::sync::Arc;
use std::time::Duration;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn stop_container(
        self: &Arc<Self>,
        req: v1::StopContainerRequest,
    ) -> Result<v1::StopContainerResponse, Error> {
        let grace = Duration::from_secs(req.timeout.max(0) as u64);
        self.core.stop_container(&req.container_id, grace).await?;
        Ok(v1::StopContainerResponse {})
    }
}
