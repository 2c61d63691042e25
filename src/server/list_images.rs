//! ImageService.ListImages.

use cri_api::v1;

use super::{encode, Cri};
use crate::error::Error;

impl Cri {
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
            images: images.iter().map(encode::image).collect(),
        })
    }
}
