//! ImageService.ImageFsInfo: the image store's filesystem, and (as CRI-O
//! reports it) the filesystem of the containers' writable layers.
//!
//! Both trees are walked, so the work runs on the blocking pool. kubelet
//! finds out whether the two are split by the device of each mountpoint;
//! here both are directories under the same root, which it reads as one
//! filesystem unless an operator mounts `root/containers` elsewhere.

use cri_api::v1;

use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn image_fs_info(
        &self,
        _req: v1::ImageFsInfoRequest,
    ) -> Result<v1::ImageFsInfoResponse, Error> {
        let images = self.images().clone();
        let (core, layout) = (self.core.clone(), self.layout.clone());
        let (image, layers) = tokio::task::spawn_blocking(move || {
            let image = images.fs_info();
            // The writable layers (overlay upper dirs) of every container.
            let mut layers = berth_cgroup_stats::DiskUsage::default();
            for container in core.all_containers() {
                if let Some(u) = super::stats::writable_layer(&layout, &container.meta.id) {
                    layers.bytes += u.bytes;
                    layers.inodes += u.inodes;
                }
            }
            (image, layers)
        })
        .await
        .map_err(Error::join)?;
        let timestamp = crate::core::now_nanos();
        let usage = |mountpoint: String, bytes: u64, inodes: u64| v1::FilesystemUsage {
            timestamp,
            fs_id: Some(v1::FilesystemIdentifier { mountpoint }),
            used_bytes: Some(v1::UInt64Value { value: bytes }),
            inodes_used: Some(v1::UInt64Value { value: inodes }),
        };
        Ok(v1::ImageFsInfoResponse {
            image_filesystems: vec![usage(
                image.path.display().to_string(),
                image.used_bytes,
                image.inodes_used,
            )],
            container_filesystems: vec![usage(
                self.layout.containers_root().display().to_string(),
                layers.bytes,
                layers.inodes,
            )],
        })
    }
}
