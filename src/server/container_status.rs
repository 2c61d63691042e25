//! RuntimeService.ContainerStatus: on the socket from the container's
//! status encoded once per change (`container_status_packed`, see
//! `relist.rs`); as a message for the generated service trait.

use std::collections::HashMap;

use cri_api::{prepacked, v1};

use super::{verbose, Cri};
use crate::container::Container;
use crate::error::Error;

impl Cri {
    /// The answer as the socket sends it: the status's kept encoding (see
    /// `encode::Statuses::container_encoded`), and the verbose info.
    pub async fn container_status_packed(
        &self,
        req: v1::ContainerStatusRequest,
    ) -> Result<prepacked::Encoded, Error> {
        let container = self.core.container(&req.container_id)?;
        let kept = self
            .statuses
            .container_encoded(&self.wire.container_statuses, &container);
        let mut answer = prepacked::Encoded {
            bytes: Vec::with_capacity(kept.1.len() + 4),
        };
        answer.put_message(1, &kept.1);
        if req.verbose {
            answer.put_fields(&v1::ContainerStatusResponse {
                status: None,
                info: self.container_info(&container).await,
            });
        }
        Ok(answer)
    }

    /// The same answer as a message, encoded now (the generated service
    /// trait's method; not on the socket's path).
    pub async fn container_status(
        &self,
        req: v1::ContainerStatusRequest,
    ) -> Result<v1::ContainerStatusResponse, Error> {
        let container = self.core.container(&req.container_id)?;
        let status = self.encode_container_status(&container);
        let info = match req.verbose {
            true => self.container_info(&container).await,
            false => HashMap::new(),
        };
        Ok(v1::ContainerStatusResponse {
            status: Some(status),
            info,
        })
    }

    /// The verbose info of a container: berth's facts, and containerd's
    /// keys whose meaning carries over (`config`, `runtimeSpec`,
    /// `runtimeOptions`, `snapshotter`) with CRI-O's `privileged`.
    async fn container_info(&self, container: &Container) -> HashMap<String, String> {
        let current = container.status();
        let meta = &container.meta;
        let bundle = self.layout.container_dirs(&meta.id).bundle;
        let privileged = meta
            .config()
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .is_some_and(|s| s.privileged);
        let details = serde_json::json!({
            "id": meta.id,
            "name": meta.name,
            "sandboxID": meta.sandbox_id,
            "pid": current.pid,
            "runtime": meta.runtime,
            "bundle": bundle,
            "state": format!("{:?}", current.state),
            "privileged": privileged,
            "snapshotter": "overlayfs",
            "runtimeOptions": self.runtime_options(&meta.runtime),
            "config": verbose::cri_json("ContainerConfig", &meta.config),
            "runtimeSpec": verbose::runtime_spec(bundle).await,
        });
        HashMap::from([("info".to_string(), details.to_string())])
    }

    /// containerd's `runtimeOptions` (its runc shim's options, as Go writes
    /// them) for the runtime `binary`.
    pub(super) fn runtime_options(&self, binary: &str) -> serde_json::Value {
        let mut options = serde_json::json!({
            "binary_name": binary,
            "root": self.layout.runtime_root(),
        });
        if self.core.spec_options().cgroup_driver_systemd {
            options["systemd_cgroup"] = true.into();
        }
        options
    }
}
