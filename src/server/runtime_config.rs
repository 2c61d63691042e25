//! RuntimeService.RuntimeConfig.

use cri_api::v1;

use super::Cri;
use crate::config::CgroupDriver;
use crate::error::Error;

impl Cri {
    pub async fn runtime_config(
        &self,
        _req: v1::RuntimeConfigRequest,
    ) -> Result<v1::RuntimeConfigResponse, Error> {
        let driver = match self.config.runtime.cgroup_driver {
            CgroupDriver::Cgroupfs => v1::CgroupDriver::Cgroupfs,
            CgroupDriver::Systemd => v1::CgroupDriver::Systemd,
        };
        Ok(v1::RuntimeConfigResponse {
            linux: Some(v1::LinuxRuntimeConfiguration {
                cgroup_driver: driver as i32,
            }),
        })
    }
}
