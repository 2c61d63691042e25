//! RuntimeService.ListPodSandbox (the other half of kubelet's relist), and
//! the label selector shared with ListContainers.
//!
//! The answer is assembled from entries encoded once per sandbox, as
//! ListContainers' is (see `list_containers.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use cri_api::{prepacked, v1};
use prost::bytes::Bytes;

use super::{encode, Cri};
use crate::error::Error;
use crate::sandbox::{Sandbox, SandboxState};

/// Whether every `selector` label is on `labels` with the same value.
pub fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Cri {
    /// The answer as the socket sends it (see
    /// [`Cri::list_containers_wire`]): the answer to no filter or an empty
    /// one, kubelet's relist, is kept until a pod changes.
    pub async fn list_pod_sandbox_wire(
        &self,
        req: v1::ListPodSandboxRequest,
    ) -> Result<Bytes, Error> {
        let filter = req.filter.unwrap_or_default();
        let make = || sandboxes_message(&self.select_sandboxes(&filter));
        if filter != v1::PodSandboxFilter::default() {
            return make();
        }
        let changes = self.core.sandbox_changes();
        self.kept_lists.sandboxes.get(changes, make)
    }

    /// The same answer as messages, encoded now (the generated service
    /// trait's method; not on the socket's path).
    pub async fn list_pod_sandbox(
        &self,
        req: v1::ListPodSandboxRequest,
    ) -> Result<v1::ListPodSandboxResponse, Error> {
        let selected = self.select_sandboxes(&req.filter.unwrap_or_default());
        Ok(v1::ListPodSandboxResponse {
            items: selected
                .iter()
                .map(|(s, state)| encode::sandbox(&s.meta, *state))
                .collect(),
        })
    }

    /// The sandboxes ListPodSandbox answers for `filter`, newest first,
    /// each with the state it is listed in (read once).
    pub(super) fn select_sandboxes(
        &self,
        filter: &v1::PodSandboxFilter,
    ) -> Vec<(Arc<Sandbox>, SandboxState)> {
        let candidates = if filter.id.is_empty() {
            self.core.all_sandboxes()
        } else {
            // An id filter is an id or a unique prefix; no match is an empty list.
            self.core
                .sandbox(&filter.id)
                .map(|s| vec![s])
                .unwrap_or_default()
        };
        let mut selected: Vec<(Arc<Sandbox>, SandboxState)> = candidates
            .into_iter()
            .filter(|s| labels_match(&filter.label_selector, &s.meta.config().labels))
            .map(|s| {
                let state = s.with_status(|st| st.state);
                (s, state)
            })
            // One being created is not listed until it is (as containerd): a
            // kubelet GC pass never sees, nor removes, a pod half made.
            .filter(|(_, state)| *state != SandboxState::Unknown)
            .filter(|(_, state)| {
                filter
                    .state
                    .as_ref()
                    .is_none_or(|st| st.state == encode::sandbox_state(*state) as i32)
            })
            .collect();
        selected.sort_by(|(a, _), (b, _)| {
            b.meta
                .created_at
                .cmp(&a.meta.created_at)
                .then(a.meta.id.cmp(&b.meta.id))
        });
        selected
    }
}

/// The ListPodSandboxResponse holding `selected` as one gRPC message.
pub(super) fn sandboxes_message(selected: &[(Arc<Sandbox>, SandboxState)]) -> Result<Bytes, Error> {
    let entries = selected.iter().map(|(p, s)| {
        let state = encode::sandbox_state(*s) as i32;
        (encode::listed_sandbox(&p.meta), state)
    });
    super::relist::framed(prepacked::pack_grpc_message(
        entries,
        encode::SANDBOX_STATE_KEY,
    ))
}
