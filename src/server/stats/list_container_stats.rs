//! RuntimeService.ListContainerStats.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::container::Container;
use crate::error::Error;

impl Cri {
    /// The containers ListContainers would list for these filter fields.
    async fn filtered_containers(
        &self,
        filter: v1::ContainerStatsFilter,
    ) -> Result<Vec<Arc<Container>>, Error> {
        let selected = self.select_containers(&v1::ContainerFilter {
            id: filter.id,
            pod_sandbox_id: filter.pod_sandbox_id,
            label_selector: filter.label_selector,
            state: None,
        });
        Ok(selected.into_iter().map(|(c, _)| c).collect())
    }

    pub async fn list_container_stats(
        self: &Arc<Self>,
        req: v1::ListContainerStatsRequest,
    ) -> Result<v1::ListContainerStatsResponse, Error> {
        let containers = self
            .filtered_containers(req.filter.unwrap_or_default())
            .await?;
        let stats = self
            .blocking(move |cri| {
                containers
                    .iter()
                    .map(|c| cri.container_stats_now(c))
                    .collect()
            })
            .await?;
        Ok(v1::ListContainerStatsResponse { stats })
    }
}
