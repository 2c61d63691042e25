//! RuntimeService.PodSandboxStatus.

use std::collections::HashMap;

use cri_api::v1;

use super::{encode, Cri};
use crate::error::Error;
use crate::objects::StoreExt;

impl Cri {
    pub async fn pod_sandbox_status(
        &self,
        req: v1::PodSandboxStatusRequest,
    ) -> Result<v1::PodSandboxStatusResponse, Error> {
        let sandbox = self.core.sandboxes.lookup(&req.pod_sandbox_id)?;
        // For kubelet's evented PLEG: the pod's containers, as of now.
        let containers_statuses = self.encode_pod_container_statuses(&sandbox.meta.id);
        let status = sandbox.status();
        let mut info = HashMap::new();
        if req.verbose {
            let verbose = serde_json::json!({
                "id": sandbox.meta.id,
                "name": sandbox.meta.name,
                "state": format!("{:?}", status.state),
                "pid": status.pid,
                "netns": sandbox.meta.netns,
                // A pod without a pause: its pinned UTS and IPC namespaces.
                "pinnedNamespaces": sandbox.meta.facts().pinned.then(|| {
                    let pins = self.core.pod_pins(&sandbox);
                    serde_json::json!({ "uts": pins.uts, "ipc": pins.ipc })
                }),
                "ips": status.ips,
                "runtimeHandler": sandbox.meta.runtime_handler,
                "shimSocket": status.shim_socket,
                "notes": status.info,
                "resources": status.resources.as_ref().map(|r| r.to_json()),
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        Ok(v1::PodSandboxStatusResponse {
            status: Some(encode::sandbox_status(&sandbox.meta, &status)),
            info,
            containers_statuses,
            timestamp: crate::core::now_nanos(),
        })
    }
}
