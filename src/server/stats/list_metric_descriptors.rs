//! RuntimeService.ListMetricDescriptors.

use cri_api::v1;

use super::descriptors::{BASE_LABELS, DESCRIPTORS};
use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn list_metric_descriptors(
        &self,
        _req: v1::ListMetricDescriptorsRequest,
    ) -> Result<v1::ListMetricDescriptorsResponse, Error> {
        Ok(v1::ListMetricDescriptorsResponse {
            descriptors: DESCRIPTORS
                .iter()
                .map(|d| v1::MetricDescriptor {
                    name: d.name.to_string(),
                    help: d.help.to_string(),
                    label_keys: BASE_LABELS
                        .iter()
                        .chain(d.extra_labels)
                        .map(|k| k.to_string())
                        .collect(),
                })
                .collect(),
        })
    }
}
