//! RuntimeService.ExecSync (run through the container's shim by the core:
//! `core/container_exec.rs`).

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn exec_sync(&self, req: v1::ExecSyncRequest) -> Result<v1::ExecSyncResponse, Error> {
        let out = self
            .core
            .exec_sync(&req.container_id, req.cmd, req.timeout)
            .await?;
        Ok(v1::ExecSyncResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        })
    }
}
