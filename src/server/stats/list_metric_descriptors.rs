//! RuntimeService.ListMetricDescriptors.

use cri_api::v1;

use super::descriptors::offered;
use super::Cri;
use crate::error::Error;

impl Cri {
    pub async fn list_metric_descriptors(
        &self,
        _req: v1::ListMetricDescriptorsRequest,
    ) -> Result<v1::ListMetricDescriptorsResponse, Error> {
        Ok(v1::ListMetricDescriptorsResponse {
            descriptors: offered(&self.stats.host)
                .map(|d| v1::MetricDescriptor {
                    name: d.name.to_string(),
                    help: d.help.to_string(),
                    label_keys: d.label_keys(),
                })
                .collect(),
        })
    }
}
