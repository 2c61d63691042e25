//! RuntimeService.PodSandboxStatus.

use std::collections::HashMap;

use cri_api::{prepacked, v1};

use super::{encode, Cri};
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::Sandbox;

impl Cri {
    /// The answer as the socket sends it: the pod's and its containers'
    /// statuses from their kept encodings (see `encode::Statuses`), the
    /// verbose info, and the time.
    pub async fn pod_sandbox_status_packed(
        &self,
        req: v1::PodSandboxStatusRequest,
    ) -> Result<prepacked::Encoded, Error> {
        let sandbox = self.core.sandboxes.lookup(&req.pod_sandbox_id)?;
        let pod = self.statuses.pod_encoded(&sandbox);
        // For kubelet's evented PLEG: the pod's containers, as of now.
        let containers: Vec<_> =
            crate::container::oldest_first(self.core.containers.in_group(&sandbox.meta.id))
                .iter()
                .map(|c| self.statuses.container_encoded(c))
                .collect();
        let len = pod.1.len() + containers.iter().map(|c| c.1.len() + 4).sum::<usize>();
        let mut answer = prepacked::Encoded {
            bytes: Vec::with_capacity(len + 16),
        };
        answer.put_message(1, &pod.1);
        if req.verbose {
            answer.put_fields(&v1::PodSandboxStatusResponse {
                info: self.pod_info(&sandbox),
                ..Default::default()
            });
        }
        for c in &containers {
            answer.put_message(3, &c.1);
        }
        answer.put_fields(&v1::PodSandboxStatusResponse {
            timestamp: crate::core::now_nanos(),
            ..Default::default()
        });
        Ok(answer)
    }

    /// The same answer as a message, encoded now (the generated service
    /// trait's method; not on the socket's path).
    pub async fn pod_sandbox_status(
        &self,
        req: v1::PodSandboxStatusRequest,
    ) -> Result<v1::PodSandboxStatusResponse, Error> {
        let sandbox = self.core.sandboxes.lookup(&req.pod_sandbox_id)?;
        // For kubelet's evented PLEG: the pod's containers, as of now.
        let containers_statuses = self.encode_pod_container_statuses(&sandbox.meta.id);
        let status = sandbox.status();
        let info = match req.verbose {
            true => self.pod_info(&sandbox),
            false => HashMap::new(),
        };
        Ok(v1::PodSandboxStatusResponse {
            status: Some(encode::sandbox_status(&sandbox.meta, &status)),
            info,
            containers_statuses,
            timestamp: crate::core::now_nanos(),
        })
    }

    /// The verbose info of a pod.
    fn pod_info(&self, sandbox: &Sandbox) -> HashMap<String, String> {
        let status = sandbox.status();
        let verbose = serde_json::json!({
            "id": sandbox.meta.id,
            "name": sandbox.meta.name,
            "state": format!("{:?}", status.state),
            "pid": status.pid,
            "netns": sandbox.meta.netns,
            // A pod without a pause: its pinned UTS and IPC namespaces.
            "pinnedNamespaces": sandbox.meta.facts().pinned.then(|| {
                let pins = self.core.pod_pins(sandbox);
                serde_json::json!({ "uts": pins.uts, "ipc": pins.ipc })
            }),
            "ips": status.ips,
            "runtimeHandler": sandbox.meta.runtime_handler,
            "shimSocket": status.shim_socket,
            "notes": status.info,
            "resources": status.resources.as_ref().map(|r| r.to_json()),
        });
        HashMap::from([("info".to_string(), verbose.to_string())])
    }
}
