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
        // Neither waits for a pull or a removal: the store hands out a
        // snapshot of its images (one `Arc`), not a copy.
        let images = match filter {
            Some(name) => self
                .images()
                .with(&name, encode::image)
                .into_iter()
                .collect(),
            None => self.images().list().iter().map(encode::image).collect(),
        };
        Ok(v1::ListImagesResponse { images })
    }
}
