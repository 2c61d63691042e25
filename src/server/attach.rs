//! RuntimeService.Attach: a URL of the streaming server.

use cri_api::v1;

use super::streaming::{invalid, running};
use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn attach(&self, req: v1::AttachRequest) -> Result<v1::AttachResponse, Error> {
        let mut request = berth_streaming::AttachRequest {
            container_id: req.container_id,
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        };
        request.validate().map_err(invalid)?;
        let container = running(self, &request.container_id)?;
        if request.stdin && !container.meta.config().stdin {
            return Err(Error::FailedPrecondition(format!(
                "container {} was not created with stdin: it cannot be attached to with stdin",
                container.meta.id
            )));
        }
        request.container_id = container.meta.id.clone();
        let url = self
            .streaming_server()?
            .get_attach_url(request)
            .map_err(invalid)?;
        Ok(v1::AttachResponse { url })
    }
}
