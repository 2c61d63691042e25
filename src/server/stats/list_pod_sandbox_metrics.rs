//! RuntimeService.ListPodSandboxMetrics.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn list_pod_sandbox_metrics(
        self: &Arc<Self>,
        _req: v1::ListPodSandboxMetricsRequest,
    ) -> Result<v1::ListPodSandboxMetricsResponse, Error> {
        let sandboxes = self
            .filtered_sandboxes(v1::PodSandboxStatsFilter::default())
            .await?;
        let pod_metrics = self
            .blocking(move |cri| sandboxes.iter().map(|s| cri.pod_metrics_now(s)).collect())
            .await?;
        Ok(v1::ListPodSandboxMetricsResponse { pod_metrics })
    }
}
