//! RuntimeService.PodSandboxStatus and ListPodSandbox.

use std::collections::HashMap;

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::{Sandbox, SandboxState};

/// The CRI state of a sandbox (a half-made one is not ready).
fn cri_state(state: SandboxState) -> v1::PodSandboxState {
    match state {
        SandboxState::Ready => v1::PodSandboxState::SandboxReady,
        SandboxState::NotReady | SandboxState::Unknown => v1::PodSandboxState::SandboxNotready,
    }
}

/// The ListPodSandbox entry of a sandbox.
fn summary(sandbox: &Sandbox) -> v1::PodSandbox {
    let config = sandbox.meta.config();
    v1::PodSandbox {
        id: sandbox.meta.id.clone(),
        metadata: config.metadata.clone(),
        state: cri_state(sandbox.status().state) as i32,
        created_at: sandbox.meta.created_at,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: sandbox.meta.runtime_handler.clone(),
    }
}

/// Whether every `selector` label is on `labels` with the same value.
pub fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Cri {
    pub async fn pod_sandbox_status(
        &self,
        req: v1::PodSandboxStatusRequest,
    ) -> Result<v1::PodSandboxStatusResponse, Error> {
        let sandbox = self.core.sandboxes.lookup(&req.pod_sandbox_id)?;
        let mut containers_statuses = Vec::new();
        for container in self.core.sandbox_containers(&sandbox.meta.id) {
            let req = v1::ContainerStatusRequest {
                container_id: container.meta.id.clone(),
                verbose: false,
            };
            // A container removed meanwhile is simply not listed.
            if let Ok(resp) = self.container_status(req).await {
                containers_statuses.extend(resp.status);
            }
        }
        let status = sandbox.status();
        let config = sandbox.meta.config();
        let namespace_options = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        let network = (!status.ips.is_empty()).then(|| v1::PodSandboxNetworkStatus {
            ip: status.ips[0].clone(),
            additional_ips: status.ips[1..]
                .iter()
                .map(|ip| v1::PodIp { ip: ip.clone() })
                .collect(),
        });
        let mut info = HashMap::new();
        if req.verbose {
            let verbose = serde_json::json!({
                "id": sandbox.meta.id,
                "name": sandbox.meta.name,
                "state": format!("{:?}", status.state),
                "pid": status.pid,
                "netns": sandbox.meta.netns,
                "ips": status.ips,
                "runtimeHandler": sandbox.meta.runtime_handler,
                "shimSocket": status.shim_socket,
                "notes": status.info,
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        Ok(v1::PodSandboxStatusResponse {
            status: Some(v1::PodSandboxStatus {
                id: sandbox.meta.id.clone(),
                metadata: config.metadata.clone(),
                state: cri_state(status.state) as i32,
                created_at: sandbox.meta.created_at,
                network,
                linux: Some(v1::LinuxPodSandboxStatus {
                    namespaces: Some(v1::Namespace {
                        options: namespace_options,
                    }),
                }),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
                runtime_handler: sandbox.meta.runtime_handler.clone(),
            }),
            info,
            // For kubelet's evented PLEG: the pod's containers, as of now.
            containers_statuses,
            timestamp: crate::core::now_nanos(),
        })
    }

    pub async fn list_pod_sandbox(
        &self,
        req: v1::ListPodSandboxRequest,
    ) -> Result<v1::ListPodSandboxResponse, Error> {
        let filter = req.filter.unwrap_or_default();
        let candidates = if filter.id.is_empty() {
            self.core.sandboxes.list()
        } else {
            // An id filter is an id or a unique prefix; no match is an empty list.
            self.core
                .sandboxes
                .get(&filter.id)
                .map(|s| vec![s])
                .unwrap_or_default()
        };
        let mut items: Vec<v1::PodSandbox> = candidates
            .iter()
            .map(|s| summary(s))
            .filter(|s| filter.state.as_ref().is_none_or(|st| st.state == s.state))
            .filter(|s| labels_match(&filter.label_selector, &s.labels))
            .collect();
        items.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        Ok(v1::ListPodSandboxResponse { items })
    }
}
