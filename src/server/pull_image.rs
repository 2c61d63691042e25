//! ImageService.PullImage, counted in berth's metrics.

use cri_api::v1;

use super::Cri;
use crate::error::Error;

/// The image named by an `ImageSpec`, which must be present and non-empty.
pub fn image_name(spec: Option<&v1::ImageSpec>) -> Result<&str, Error> {
    image_name_str(spec.map_or("", |s| s.image.as_str()))
}

/// `name`, which must not be empty.
pub fn image_name_str(name: &str) -> Result<&str, Error> {
    Some(name)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::InvalidArgument("image is required".into()))
}

impl Cri {
    pub async fn pull_image(
        &self,
        req: v1::PullImageRequest,
    ) -> Result<v1::PullImageResponse, Error> {
        let result = self.pull(req).await;
        match &result {
            Ok(image) => crate::counters::image_pulled(Some(image.size)),
            Err(_) => crate::counters::image_pulled(None),
        }
        Ok(v1::PullImageResponse {
            image_ref: result?.id,
        })
    }

    async fn pull(&self, req: v1::PullImageRequest) -> Result<berth_oci_image::Image, Error> {
        let name = image_name(req.image.as_ref())?;
        let auth = req.auth.map(|a| berth_oci_image::Auth {
            username: a.username,
            password: a.password,
            auth: a.auth,
            server_address: a.server_address,
            identity_token: a.identity_token,
            registry_token: a.registry_token,
        });
        let image = self.images().pull(name, auth).await?;
        tracing::info!(image = %name, id = %image.id, "pulled");
        Ok(image)
    }
}
