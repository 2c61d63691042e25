//! The fake image store and event sink.

use std::path::PathBuf;

use tonic::async_trait;

use super::Fake;
use crate::core::mechanisms::{EventKind, EventSink, Images};
use crate::error::Error;

#[async_trait]
impl Images for Fake {
    async fn collect_garbage(&self) -> Result<(), Error> {
        self.call("images.gc", "").await
    }
    fn get(&self, name: &str) -> Option<berth_oci_image::Image> {
        self.images.lock().unwrap().get(name).cloned()
    }
    fn snapshot_dirs(&self, chain_ids: &[String]) -> Vec<PathBuf> {
        chain_ids
            .iter()
            .map(|c| PathBuf::from("/snapshots").join(c))
            .collect()
    }
}

#[async_trait]
impl EventSink for Fake {
    async fn emit(&self, kind: EventKind, id: &str, _sandbox_id: &str) {
        self.world
            .lock()
            .unwrap()
            .events
            .push((kind, id.to_string()));
    }
}
