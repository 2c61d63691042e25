//! RuntimeService.UpdatePodSandboxResources: kubelet tells the runtime the
//! pod-level resources (overhead and the sum of the containers') it has
//! just applied to the pod's cgroup during an in-place resize.
//!
//! As CRI-O does, berth does not write the pod cgroup itself (kubelet owns
//! it); the core checks the values as it checks a container's, records them
//! in the sandbox's record (`core/container_update.rs`), and verbose
//! PodSandboxStatus shows them.

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn update_pod_sandbox_resources(
        &self,
        req: v1::UpdatePodSandboxResourcesRequest,
    ) -> Result<v1::UpdatePodSandboxResourcesResponse, Error> {
        self.core
            .update_pod_resources(&req.pod_sandbox_id, req.overhead, req.resources)
            .await?;
        Ok(v1::UpdatePodSandboxResourcesResponse {})
    }
}
