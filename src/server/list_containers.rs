//! RuntimeService.ListContainers.

use cri_api::v1;

use super::list_pod_sandbox::labels_match;
use super::{encode, Cri};
use crate::error::Error;

impl Cri {
    pub async fn list_containers(
        &self,
        req: v1::ListContainersRequest,
    ) -> Result<v1::ListContainersResponse, Error> {
        let filter = req.filter.unwrap_or_default();
        let candidates = if filter.id.is_empty() {
            self.core.containers.list()
        } else {
            self.core
                .containers
                .get(&filter.id)
                .map(|c| vec![c])
                .unwrap_or_default()
        };
        let sandbox_id = if filter.pod_sandbox_id.is_empty() {
            None
        } else {
            // A sandbox id filter may be a prefix too; unknown means no match.
            match self.core.sandboxes.get(&filter.pod_sandbox_id) {
                Ok(s) => Some(s.meta.id.clone()),
                Err(_) => return Ok(v1::ListContainersResponse::default()),
            }
        };
        // Filtered on the records, so that only what is answered is encoded.
        let mut containers: Vec<v1::Container> = candidates
            .iter()
            .filter(|c| sandbox_id.as_ref().is_none_or(|s| &c.meta.sandbox_id == s))
            .filter(|c| labels_match(&filter.label_selector, &c.meta.config().labels))
            .map(|c| (c, c.status()))
            // One being created is not listed until it is (as containerd).
            .filter(|(_, status)| status.state != crate::container::ContainerState::Unknown)
            .filter(|(_, status)| {
                filter
                    .state
                    .as_ref()
                    .is_none_or(|s| s.state == encode::container_state(status.state) as i32)
            })
            .map(|(c, status)| encode::container(&c.meta, &status))
            .collect();
        containers.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        Ok(v1::ListContainersResponse { containers })
    }
}
