//! RuntimeService.PodSandboxStatus.

use std::collections::HashMap;

use cri_api::{prepacked, v1};

use super::{encode, verbose, Cri};
use crate::error::Error;
use crate::sandbox::Sandbox;

impl Cri {
    /// The answer as the socket sends it: the pod's status from its kept
    /// encoding (see `encode::Statuses`) and the verbose info. No
    /// containers' statuses and no timestamp, as containerd 2.4: kubelet
    /// 1.37 with EventedPLEG takes a timestamped answer's containers as the
    /// pod's whole state and misses its init containers' progress (it made
    /// them again); without one it lists the containers itself.
    pub async fn pod_sandbox_status_packed(
        &self,
        req: v1::PodSandboxStatusRequest,
    ) -> Result<prepacked::Encoded, Error> {
        let sandbox = self.core.sandbox(&req.pod_sandbox_id)?;
        let pod = self
            .statuses
            .pod_encoded(&self.wire.sandbox_statuses, &sandbox);
        let mut answer = prepacked::Encoded {
            bytes: Vec::with_capacity(pod.1.len() + 16),
        };
        answer.put_message(1, &pod.1);
        if req.verbose {
            answer.put_fields(&v1::PodSandboxStatusResponse {
                info: self.pod_info(&sandbox).await,
                ..Default::default()
            });
        }
        Ok(answer)
    }

    /// The same answer as a message, encoded now (the generated service
    /// trait's method; not on the socket's path).
    pub async fn pod_sandbox_status(
        &self,
        req: v1::PodSandboxStatusRequest,
    ) -> Result<v1::PodSandboxStatusResponse, Error> {
        let sandbox = self.core.sandbox(&req.pod_sandbox_id)?;
        let status = sandbox.status();
        let info = match req.verbose {
            true => self.pod_info(&sandbox).await,
            false => HashMap::new(),
        };
        Ok(v1::PodSandboxStatusResponse {
            status: Some(encode::sandbox_status(&sandbox.meta, &status)),
            info,
            ..Default::default()
        })
    }

    /// The verbose info of a pod: berth's facts, and containerd's keys
    /// whose meaning carries over (`config`, `netNamespaceClosed`, and for a
    /// pod with a pause `runtimeSpec` and `runtimeOptions`).
    async fn pod_info(&self, sandbox: &Sandbox) -> HashMap<String, String> {
        let status = sandbox.status();
        let id = &sandbox.meta.id;
        let pause = !sandbox.meta.facts().pinned;
        let spec = match pause {
            true => verbose::runtime_spec(self.layout.sandbox_files(id).bundle()).await,
            false => None,
        };
        let closed = verbose::netns_closed(sandbox.meta.netns.clone()).await;
        let runtime = self.core.runtime_binary(&sandbox.meta.runtime_handler);
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
            "runtimeHandler": sandbox.meta.reported_handler(),
            "runtimeHandlerResolved": sandbox.meta.runtime_handler,
            "shimSocket": status.shim_socket,
            "notes": status.info,
            "resources": status.resources.as_ref().map(|r| r.to_json()),
            "config": verbose::cri_json("PodSandboxConfig", &sandbox.meta.config),
            "netNamespaceClosed": closed,
            "runtimeSpec": spec,
            "runtimeOptions": pause.then(|| self.runtime_options(&runtime)),
        });
        HashMap::from([("info".to_string(), verbose.to_string())])
    }
}
