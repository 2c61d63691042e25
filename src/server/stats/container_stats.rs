//! RuntimeService.ContainerStats.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn container_stats(
        self: &Arc<Self>,
        req: v1::ContainerStatsRequest,
    ) -> Result<v1::ContainerStatsResponse, Error> {
        let container = self.core.container(&req.container_id)?;
        let stats = self
            .blocking(move |cri| cri.container_stats_now(&container))
            .await?;
        Ok(v1::ContainerStatsResponse { stats: Some(stats) })
    }
}
