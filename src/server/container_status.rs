//! RuntimeService.ContainerStatus.

use std::collections::HashMap;

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use crate::objects::StoreExt;

impl Cri {
    pub async fn container_status(
        &self,
        req: v1::ContainerStatusRequest,
    ) -> Result<v1::ContainerStatusResponse, Error> {
        let container = self.core.containers.lookup(&req.container_id)?;
        let status = self.encode_container_status(&container);
        let mut info = HashMap::new();
        if req.verbose {
            let current = container.status();
            let details = serde_json::json!({
                "id": container.meta.id,
                "name": container.meta.name,
                "sandboxID": container.meta.sandbox_id,
                "pid": current.pid,
                "runtime": container.meta.runtime,
                "bundle": self.core.layout.container_dirs(&container.meta.id).bundle,
                "state": format!("{:?}", current.state),
            });
            info.insert("info".to_string(), details.to_string());
        }
        Ok(v1::ContainerStatusResponse {
            status: Some(status),
            info,
        })
    }
}
