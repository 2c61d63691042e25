//! RuntimeService.ReopenContainerLog (the container's shim reopens it:
//! `core/container_exec.rs`).

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn reopen_container_log(
        &self,
        req: v1::ReopenContainerLogRequest,
    ) -> Result<v1::ReopenContainerLogResponse, Error> {
        self.core.reopen_log(&req.container_id).await?;
        Ok(v1::ReopenContainerLogResponse {})
    }
}
