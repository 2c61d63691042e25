//! RuntimeService.UpdatePodSandboxResources: kubelet tells the runtime the
//! pod-level resources (overhead and the sum of the containers') it has
//! just applied to the pod's cgroup during an in-place resize.
//!
//! As CRI-O does, berth does not write the pod cgroup itself (kubelet owns
//! it); it checks the values as it checks a container's, records them in
//! the sandbox's record, and shows them in verbose PodSandboxStatus.

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::PodResources;

impl Cri {
    pub async fn update_pod_sandbox_resources(
        &self,
        req: v1::UpdatePodSandboxResourcesRequest,
    ) -> Result<v1::UpdatePodSandboxResourcesResponse, Error> {
        let sandbox = self.core.sandboxes.lookup(&req.pod_sandbox_id)?;
        let _lifecycle = sandbox.lifecycle.lock().await;
        let id = sandbox.meta.id.clone();
        for resources in [&req.overhead, &req.resources].into_iter().flatten() {
            berth_spec::linux_resources(&id, resources, &self.core.spec_options)?;
        }
        let encode = |r: &Option<v1::LinuxContainerResources>| {
            r.as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default()
        };
        let recorded = PodResources {
            overhead: encode(&req.overhead),
            resources: encode(&req.resources),
            updated_at: crate::core::now_nanos(),
        };
        crate::objects::save(&sandbox, move |s| s.resources = Some(recorded)).await?;
        Ok(v1::UpdatePodSandboxResourcesResponse {})
    }
}
