//! RuntimeService.UpdateRuntimeConfig: the pod CIDR kubelet gives, kept for
//! Status.

use berth_lock::MutexExt;
use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn update_runtime_config(
        &self,
        req: v1::UpdateRuntimeConfigRequest,
    ) -> Result<v1::UpdateRuntimeConfigResponse, Error> {
        let cidr = req
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        if !cidr.is_empty() {
            for part in cidr.split(',') {
                validate_cidr(part.trim())?;
            }
        }
        let mut current = self.pod_cidr.lock_unpoisoned();
        if *current != cidr {
            tracing::info!(old = %current, new = %cidr, "pod CIDR updated");
            *current = cidr;
        }
        Ok(v1::UpdateRuntimeConfigResponse {})
    }

    /// The pod CIDR from the last UpdateRuntimeConfig, empty if none.
    pub fn pod_cidr(&self) -> String {
        self.pod_cidr.lock_unpoisoned().clone()
    }
}

fn validate_cidr(cidr: &str) -> Result<(), Error> {
    let bad = || Error::InvalidArgument(format!("pod CIDR {cidr:?} is not an IP network"));
    let (addr, len) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate_cidr;

    #[test]
    fn cidrs() {
        assert!(validate_cidr("10.88.0.0/16").is_ok());
        assert!(validate_cidr("fd00::/64").is_ok());
        assert!(validate_cidr("10.88.0.0/33").is_err());
        assert!(validate_cidr("10.88.0.0").is_err());
        assert!(validate_cidr("pods/16").is_err());
    }
}
