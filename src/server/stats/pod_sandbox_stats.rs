//! RuntimeService.PodSandboxStats.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use crate::sandbox::SandboxState;

impl Cri {
    pub async fn pod_sandbox_stats(
        self: &Arc<Self>,
        req: v1::PodSandboxStatsRequest,
    ) -> Result<v1::PodSandboxStatsResponse, Error> {
        let sandbox = self.core.sandbox(&req.pod_sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {} is not ready: it has no stats",
                sandbox.meta.id
            )));
        }
        let stats = self
            .blocking(move |cri| cri.pod_stats_now(&sandbox))
            .await?;
        Ok(v1::PodSandboxStatsResponse { stats: Some(stats) })
    }
}
