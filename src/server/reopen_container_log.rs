//! RuntimeService.ReopenContainerLog.

use std::sync::Arc;

use cri_api::v1;

use super::Cri;
use crate::container::ContainerState;
use crate::error::Error;
use crate::objects::StoreExt;

impl Cri {
    pub async fn reopen_container_log(
        self: &Arc<Self>,
        req: v1::ReopenContainerLogRequest,
    ) -> Result<v1::ReopenContainerLogResponse, Error> {
        let container = self.core.containers.lookup(&req.container_id)?;
        let id = &container.meta.id;
        if container.status().state != ContainerState::Running {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is not running"
            )));
        }
        self.shim_of(&container)
            .await?
            .reopen_log()
            .await
            .map_err(|e| Error::Internal(format!("container {id}: reopening its log: {e}")))?;
        Ok(v1::ReopenContainerLogResponse {})
    }
}
