//! ImageService.ImageFsInfo.

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn image_fs_info(
        &self,
        _req: v1::ImageFsInfoRequest,
    ) -> Result<v1::ImageFsInfoResponse, Error> {
        let usage = self.images.fs_info();
        let timestamp = crate::core::now_nanos();
        Ok(v1::ImageFsInfoResponse {
            image_filesystems: vec![v1::FilesystemUsage {
                timestamp,
                fs_id: Some(v1::FilesystemIdentifier {
                    mountpoint: usage.path.display().to_string(),
                }),
                used_bytes: Some(v1::UInt64Value {
                    value: usage.used_bytes,
                }),
                inodes_used: Some(v1::UInt64Value {
                    value: usage.inodes_used,
                }),
            }],
            container_filesystems: Vec::new(),
        })
    }
}
