//! RuntimeService.Version.

use cri_api::v1;

use super::Cri;
use crate::error::Error;

/// The CRI API version berth speaks.
pub const RUNTIME_API_VERSION: &str = "v1";

impl Cri {
    pub async fn version(&self, _req: v1::VersionRequest) -> Result<v1::VersionResponse, Error> {
        Ok(v1::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "berth".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: RUNTIME_API_VERSION.into(),
        })
    }
}
