//! ImageService.ImageStatus.

use std::collections::HashMap;

use cri_api::v1;

use super::pull_image::image_name;
use super::{encode, Cri};
use crate::error::Error;

impl Cri {
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
            image: Some(encode::image(&image)),
            info,
        })
    }
}
