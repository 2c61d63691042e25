//! ImageService: PullImage, ImageStatus, ListImages, RemoveImage, ImageFsInfo.

use std::collections::HashMap;

use cri_api::v1;

use super::Cri;
use crate::error::Error;

/// The CRI view of a stored image.
fn cri_image(image: &berth_oci_image::Image) -> v1::Image {
    v1::Image {
        id: image.id.clone(),
        repo_tags: image.repo_tags.clone(),
        repo_digests: image.repo_digests.clone(),
        size: image.size,
        uid: image.uid.map(|value| v1::Int64Value { value }),
        username: image.username.clone(),
        spec: Some(v1::ImageSpec {
            image: image.id.clone(),
            ..Default::default()
        }),
        pinned: image.pinned,
    }
}

/// The image named by an `ImageSpec`, which must be present and non-empty.
fn image_name(spec: Option<&v1::ImageSpec>) -> Result<&str, Error> {
    spec.map(|s| s.image.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::InvalidArgument("image is required".into()))
}

impl Cri {
    pub async fn pull_image(
        &self,
        req: v1::PullImageRequest,
    ) -> Result<v1::PullImageResponse, Error> {
        let name = image_name(req.image.as_ref())?;
        let auth = req.auth.map(|a| berth_oci_image::Auth {
            username: a.username,
            password: a.password,
            auth: a.auth,
            server_address: a.server_address,
            identity_token: a.identity_token,
            registry_token: a.registry_token,
        });
        let image = self.images.pull(name, auth).await?;
        tracing::info!(image = %name, id = %image.id, "pulled");
        Ok(v1::PullImageResponse {
            image_ref: image.id,
        })
    }

    pub async fn image_status(
        &self,
        req: v1::ImageStatusRequest,
    ) -> Result<v1::ImageStatusResponse, Error> {
        let name = image_name(req.image.as_ref())?;
        // An absent image is an empty answer, not an error.
        let Some(image) = self.images.get(name) else {
            return Ok(v1::ImageStatusResponse::default());
        };
        let mut info = HashMap::new();
        if req.verbose {
            let details = serde_json::json!({
                "id": image.id,
                "chainIDs": image.chain_ids(),
                "layers": image.layers,
                "config": image.config,
                "lowerdirs": self.images.lowerdirs(&image),
            });
            info.insert("info".to_string(), details.to_string());
        }
        Ok(v1::ImageStatusResponse {
            image: Some(cri_image(&image)),
            info,
        })
    }

    pub async fn list_images(
        &self,
        req: v1::ListImagesRequest,
    ) -> Result<v1::ListImagesResponse, Error> {
        let filter = req
            .filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        let images = match filter {
            Some(name) => self.images.get(&name).into_iter().collect(),
            None => self.images.list(),
        };
        Ok(v1::ListImagesResponse {
            images: images.iter().map(cri_image).collect(),
        })
    }

    pub async fn remove_image(
        &self,
        req: v1::RemoveImageRequest,
    ) -> Result<v1::RemoveImageResponse, Error> {
        let name = image_name(req.image.as_ref())?;
        // Removing an absent image is not an error.
        if self.images.remove(name).await? {
            tracing::info!(image = %name, "removed");
        }
        Ok(v1::RemoveImageResponse {})
    }

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
