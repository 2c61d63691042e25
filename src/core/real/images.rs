//! The image store, and no images at all for a dry run.

use std::path::PathBuf;

use tonic::async_trait;

use crate::core::mechanisms::Images;
use crate::error::Error;

#[async_trait]
impl Images for berth_oci_image::ImageStore {
    async fn collect_garbage(&self) -> Result<(), Error> {
        Ok(self.gc().await?)
    }
    fn get(&self, name: &str) -> Option<berth_oci_image::Image> {
        berth_oci_image::ImageStore::get(self, name)
    }
    fn snapshot_dirs(&self, chain_ids: &[String]) -> Vec<PathBuf> {
        berth_oci_image::ImageStore::snapshot_dirs(self, chain_ids)
    }
}

/// No images at all: for a dry run, which must not open the image store.
pub struct NoImages;

#[async_trait]
impl Images for NoImages {
    async fn collect_garbage(&self) -> Result<(), Error> {
        Ok(())
    }
    fn get(&self, _name: &str) -> Option<berth_oci_image::Image> {
        None
    }
    fn snapshot_dirs(&self, _chain_ids: &[String]) -> Vec<PathBuf> {
        Vec::new()
    }
}
