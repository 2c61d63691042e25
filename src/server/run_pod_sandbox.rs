//! RuntimeService.RunPodSandbox.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::core::SandboxRequest;
use crate::error::Error;

impl Cri {
    pub async fn run_pod_sandbox(
        self: &Arc<Self>,
        req: v1::RunPodSandboxRequest,
    ) -> Result<v1::RunPodSandboxResponse, Error> {
        let config = req
            .config
            .ok_or_else(|| Error::InvalidArgument("RunPodSandbox needs a config".into()))?;
        let pod_sandbox_id = self
            .core
            .run_pod_sandbox(SandboxRequest {
                config,
                runtime_handler: req.runtime_handler,
            })
            .await?;
        Ok(v1::RunPodSandboxResponse { pod_sandbox_id })
    }
}
