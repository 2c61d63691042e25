//! RuntimeService.ListPodSandboxStats, and the ready sandboxes a filter
//! selects (ListPodSandboxMetrics lists them too).

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use crate::sandbox::Sandbox;

impl Cri {
    /// The ready sandboxes ListPodSandbox would list for these filter fields.
    pub(super) async fn filtered_sandboxes(
        &self,
        filter: v1::PodSandboxStatsFilter,
    ) -> Result<Vec<Arc<Sandbox>>, Error> {
        let selected = self.select_sandboxes(&v1::PodSandboxFilter {
            id: filter.id,
            label_selector: filter.label_selector,
            state: Some(v1::PodSandboxStateValue {
                state: v1::PodSandboxState::SandboxReady as i32,
            }),
        });
        Ok(selected.into_iter().map(|(s, _)| s).collect())
    }

    pub async fn list_pod_sandbox_stats(
        self: &Arc<Self>,
        req: v1::ListPodSandboxStatsRequest,
    ) -> Result<v1::ListPodSandboxStatsResponse, Error> {
        let sandboxes = self
            .filtered_sandboxes(req.filter.unwrap_or_default())
            .await?;
        let stats = self
            .blocking(move |cri| sandboxes.iter().map(|s| cri.pod_stats_now(s)).collect())
            .await?;
        Ok(v1::ListPodSandboxStatsResponse { stats })
    }
}
