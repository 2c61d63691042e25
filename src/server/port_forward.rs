//! RuntimeService.PortForward: a URL of the streaming server.

use cri_api::v1;

use super::streaming::invalid;
use super::Cri;
use crate::error::Error;
use crate::sandbox::SandboxState;

impl Cri {
    pub async fn port_forward(
        &self,
        req: v1::PortForwardRequest,
    ) -> Result<v1::PortForwardResponse, Error> {
        let ports = req
            .port
            .iter()
            .map(|&p| {
                u16::try_from(p)
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| Error::InvalidArgument(format!("invalid port {p}")))
            })
            .collect::<Result<Vec<u16>, Error>>()?;
        let mut request = berth_streaming::PortForwardRequest {
            pod_sandbox_id: req.pod_sandbox_id,
            ports,
        };
        request.validate().map_err(invalid)?;
        let sandbox = self.core.sandbox(&request.pod_sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.meta.id
            )));
        }
        request.pod_sandbox_id = sandbox.meta.id.clone();
        let url = self
            .streaming_server()?
            .get_port_forward_url(request)
            .map_err(invalid)?;
        Ok(v1::PortForwardResponse { url })
    }
}
