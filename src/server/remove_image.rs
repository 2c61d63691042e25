//! ImageService.RemoveImage.

use cri_api::v1;

use super::pull_image::image_name;
use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn remove_image(
        &self,
        req: v1::RemoveImageRequest,
    ) -> Result<v1::RemoveImageResponse, Error> {
        let name = image_name(req.image.as_ref())?;
        // Removing an absent image is not an error.
        if self.images().remove(name).await? {
            tracing::info!(image = %name, "removed");
        }
        Ok(v1::RemoveImageResponse {})
    }
}
