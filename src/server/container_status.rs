//! RuntimeService.ContainerStatus, ListContainers and ExecSync.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use berth_shim::ShimClient;
use cri_api::v1;

use super::sandbox_status::labels_match;
use super::Cri;
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::objects::StoreExt;

fn cri_state(state: ContainerState) -> v1::ContainerState {
    match state {
        ContainerState::Created => v1::ContainerState::ContainerCreated,
        ContainerState::Running => v1::ContainerState::ContainerRunning,
        ContainerState::Exited => v1::ContainerState::ContainerExited,
        ContainerState::Unknown => v1::ContainerState::ContainerUnknown,
    }
}

impl Cri {
    /// The image reference kubelet shows: a repo digest when there is one.
    fn image_ref(&self, container: &Container) -> String {
        self.images
            .with(&container.meta.image_id, |i| {
                i.repo_digests.first().cloned()
            })
            .flatten()
            .unwrap_or_else(|| container.meta.image_id.clone())
    }

    fn summary(&self, container: &Container) -> v1::Container {
        let config = container.meta.config();
        v1::Container {
            id: container.meta.id.clone(),
            pod_sandbox_id: container.meta.sandbox_id.clone(),
            metadata: config.metadata.clone(),
            image: config.image.clone(),
            image_ref: self.image_ref(container),
            state: cri_state(container.status().state) as i32,
            created_at: container.meta.created_at,
            labels: config.labels.clone(),
            annotations: config.annotations.clone(),
            image_id: container.meta.image_id.clone(),
        }
    }

    pub async fn container_status(
        &self,
        req: v1::ContainerStatusRequest,
    ) -> Result<v1::ContainerStatusResponse, Error> {
        let container = self.core.containers.lookup(&req.container_id)?;
        let status = container.status();
        let config = container.meta.config();
        let resources = status.resources(&container.meta);
        let mut info = HashMap::new();
        if req.verbose {
            let details = serde_json::json!({
                "id": container.meta.id,
                "name": container.meta.name,
                "sandboxID": container.meta.sandbox_id,
                "pid": status.pid,
                "runtime": container.meta.runtime,
                "bundle": self.core.layout.container_dirs(&container.meta.id).bundle,
                "state": format!("{:?}", status.state),
            });
            info.insert("info".to_string(), details.to_string());
        }
        Ok(v1::ContainerStatusResponse {
            status: Some(v1::ContainerStatus {
                id: container.meta.id.clone(),
                metadata: config.metadata.clone(),
                state: cri_state(status.state) as i32,
                created_at: container.meta.created_at,
                started_at: status.started_at,
                finished_at: status.finished_at,
                exit_code: status.exit_code,
                image: config.image.clone(),
                image_ref: self.image_ref(&container),
                reason: status.reason,
                message: status.message,
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
                mounts: config.mounts.clone(),
                log_path: container.meta.log_path.display().to_string(),
                image_id: container.meta.image_id.clone(),
                resources: resources.map(|linux| v1::ContainerResources {
                    linux: Some(linux),
                    windows: None,
                }),
                ..Default::default()
            }),
            info,
        })
    }

    pub async fn list_containers(
        &self,
        req: v1::ListContainersRequest,
    ) -> Result<v1::ListContainersResponse, Error> {
        let filter = req.filter.unwrap_or_default();
        let candidates = if filter.id.is_empty() {
            self.core.containers.list()
        } else {
            self.core
                .containers
                .get(&filter.id)
                .map(|c| vec![c])
                .unwrap_or_default()
        };
        let sandbox_id = if filter.pod_sandbox_id.is_empty() {
            None
        } else {
            // A sandbox id filter may be a prefix too; unknown means no match.
            match self.core.sandboxes.get(&filter.pod_sandbox_id) {
                Ok(s) => Some(s.meta.id.clone()),
                Err(_) => return Ok(v1::ListContainersResponse::default()),
            }
        };
        let mut containers: Vec<v1::Container> = candidates
            .iter()
            .filter(|c| sandbox_id.as_ref().is_none_or(|s| &c.meta.sandbox_id == s))
            .map(|c| self.summary(c))
            .filter(|c| filter.state.as_ref().is_none_or(|s| s.state == c.state))
            .filter(|c| labels_match(&filter.label_selector, &c.labels))
            .collect();
        containers.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        Ok(v1::ListContainersResponse { containers })
    }

    /// The container's own process, running `cmd`: an exec runs with the
    /// container's user, environment and working directory.
    pub async fn exec_process(
        &self,
        container: &Container,
        cmd: Vec<String>,
        tty: bool,
    ) -> Result<oci_spec::runtime::Process, Error> {
        let id = container.meta.id.clone();
        let spec_path = self.core.layout.container_dirs(&id).spec();
        let spec = tokio::task::spawn_blocking(move || oci_spec::runtime::Spec::load(&spec_path))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(|e| Error::Internal(format!("container {id}: reading its spec: {e}")))?;
        let mut process = spec.process().clone().unwrap_or_default();
        process.set_args(Some(cmd));
        process.set_terminal(Some(tty));
        Ok(process)
    }

    pub async fn exec_sync(
        self: &Arc<Self>,
        req: v1::ExecSyncRequest,
    ) -> Result<v1::ExecSyncResponse, Error> {
        let container = self.core.containers.lookup(&req.container_id)?;
        let id = &container.meta.id;
        if req.cmd.is_empty() {
            return Err(Error::InvalidArgument("ExecSync needs a command".into()));
        }
        if container.status().state != ContainerState::Running {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is not running"
            )));
        }
        let process = self
            .exec_process(&container, req.cmd.clone(), false)
            .await?;
        let socket = self.shim_socket(id);
        let client = ShimClient::connect(&socket)
            .await
            .map_err(|e| Error::FailedPrecondition(format!("container {id}: {e}")))?;
        let timeout = (req.timeout > 0).then(|| Duration::from_secs(req.timeout as u64));
        let out = client
            .exec_sync(&process, timeout)
            .await
            .map_err(|e| Error::Internal(format!("container {id}: exec: {e}")))?;
        if out.timed_out {
            return Err(Error::DeadlineExceeded(format!(
                "command {:?} in container {id} timed out after {}s",
                req.cmd, req.timeout
            )));
        }
        // The answer must fit kubelet's 16 MiB gRPC message limit.
        const MAX_OUTPUT: usize = 16 * 1024 * 1024 - 64 * 1024;
        if out.truncated || out.stdout.len() + out.stderr.len() > MAX_OUTPUT {
            return Err(Error::ResourceExhausted(format!(
                "output of {:?} in container {id} exceeds the 16 MiB ExecSync limit",
                req.cmd
            )));
        }
        Ok(v1::ExecSyncResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        })
    }
}
