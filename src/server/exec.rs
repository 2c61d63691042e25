//! RuntimeService.Exec: a URL of the streaming server.

use cri_api::v1;

use super::streaming::{invalid, running};
use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn exec(&self, req: v1::ExecRequest) -> Result<v1::ExecResponse, Error> {
        let mut request = berth_streaming::ExecRequest {
            container_id: req.container_id,
            cmd: req.cmd,
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        };
        request.validate().map_err(invalid)?;
        request.container_id = running(self, &request.container_id)?.meta.id.clone();
        let url = self
            .streaming_server()?
            .get_exec_url(request)
            .map_err(invalid)?;
        Ok(v1::ExecResponse { url })
    }
}
