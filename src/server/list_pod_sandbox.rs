//! RuntimeService.ListPodSandbox, and the label selector shared with
//! ListContainers.

use std::collections::HashMap;

use cri_api::v1;

use super::{encode, Cri};
use crate::error::Error;

/// Whether every `selector` label is on `labels` with the same value.
pub fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Cri {
    pub async fn list_pod_sandbox(
        &self,
        req: v1::ListPodSandboxRequest,
    ) -> Result<v1::ListPodSandboxResponse, Error> {
        let filter = req.filter.unwrap_or_default();
        let candidates = if filter.id.is_empty() {
            self.core.sandboxes.list()
        } else {
            // An id filter is an id or a unique prefix; no match is an empty list.
            self.core
                .sandboxes
                .get(&filter.id)
                .map(|s| vec![s])
                .unwrap_or_default()
        };
        // Filtered on the records, so that only what is answered is encoded.
        let mut items: Vec<v1::PodSandbox> = candidates
            .iter()
            .filter(|s| labels_match(&filter.label_selector, &s.meta.config().labels))
            .map(|s| (s, s.status()))
            // One being created is not listed until it is (as containerd): a
            // kubelet GC pass never sees, nor removes, a pod half made.
            .filter(|(_, status)| status.state != crate::sandbox::SandboxState::Unknown)
            .filter(|(_, status)| {
                filter
                    .state
                    .as_ref()
                    .is_none_or(|st| st.state == encode::sandbox_state(status.state) as i32)
            })
            .map(|(s, status)| encode::sandbox(&s.meta, &status))
            .collect();
        items.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        Ok(v1::ListPodSandboxResponse { items })
    }
}
