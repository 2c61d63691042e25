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
        if !req.verbose {
            // Under the store's lock, the CRI fields only: the stored image
            // (config, layers, manifests) is not copied.
            return Ok(v1::ImageStatusResponse {
                image: self.images().with(name, encode::image),
                info: HashMap::new(),
            });
        }
        // An absent image is an empty answer, not an error.
        let Some(image) = self.images().get(name) else {
            return Ok(v1::ImageStatusResponse::default());
        };
        let mut details = serde_json::json!({
            "id": image.id,
            "chainIDs": image.chain_ids(),
            "layers": image.layers,
            "config": image.config,
            "lowerdirs": self.images().lowerdirs(&image),
        });
        // An OCI artifact: what it is (its config is a blob of its type).
        if let Some(a) = &image.artifact {
            details["artifactType"] = a.artifact_type.clone().into();
            details["artifactConfig"] = a.config.clone().into();
        }
        let info = HashMap::from([("info".to_string(), details.to_string())]);
        Ok(v1::ImageStatusResponse {
            image: Some(encode::image(&image)),
            info,
        })
    }
}
