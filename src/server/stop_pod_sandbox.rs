//! RuntimeService.StopPodSandbox.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn stop_pod_sandbox(
        self: &Arc<Self>,
        req: v1::StopPodSandboxRequest,
    ) -> Result<v1::StopPodSandboxResponse, Error> {
        self.core.stop_pod_sandbox(&req.pod_sandbox_id).await?;
        Ok(v1::StopPodSandboxResponse {})
    }
}
