//! RuntimeService.RemovePodSandbox.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn remove_pod_sandbox(
        self: &Arc<Self>,
        req: v1::RemovePodSandboxRequest,
    ) -> Result<v1::RemovePodSandboxResponse, Error> {
        self.core.remove_pod_sandbox(&req.pod_sandbox_id).await?;
        Ok(v1::RemovePodSandboxResponse {})
    }
}
