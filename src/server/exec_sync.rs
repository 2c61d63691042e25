//! RuntimeService.ExecSync, and the process an exec runs (shared with the
//! streaming server's exec).

use std::sync::Arc;
use std::time::Duration;

use cri_api::v1;

use super::Cri;
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::objects::StoreExt;

/// The answer must fit kubelet's 16 MiB gRPC message limit.
const MAX_OUTPUT: usize = 16 * 1024 * 1024 - 64 * 1024;

impl Cri {
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
        let client = self.shim_of(&container).await?;
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
