//! RuntimeService.ListPodSandbox (the other half of kubelet's relist).
//!
//! The answer is assembled from entries encoded once per sandbox, as
//! ListContainers' is (see `list_containers.rs`).

use std::sync::Arc;

use cri_api::v1;
use prost::bytes::Bytes;

use super::wire_cache::WireCache;
use super::{encode, listing, Cri};
use crate::error::Error;
use crate::sandbox::{Sandbox, SandboxState};

impl Cri {
    /// The answer as the socket sends it (see
    /// [`Cri::list_containers_wire`]): the answer to no filter or an empty
    /// one, kubelet's relist, is kept until a pod changes.
    pub async fn list_pod_sandbox_wire(
        &self,
        req: v1::ListPodSandboxRequest,
    ) -> Result<Bytes, Error> {
        let filter = req.filter.unwrap_or_default();
        let make = || sandboxes_message(&self.wire, &self.select_sandboxes(&filter));
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
        let candidates = match filter.id.as_str() {
            "" => self.core.all_sandboxes(),
            // An id or a unique prefix; no match is an empty list.
            id => self.core.sandbox(id).into_iter().collect(),
        };
        let state = filter.state.as_ref().map(|s| s.state);
        listing::select(candidates, &filter.label_selector, state)
    }
}

/// The ListPodSandboxResponse holding `selected` as one gRPC message.
pub(super) fn sandboxes_message(
    wire: &WireCache,
    selected: &[(Arc<Sandbox>, SandboxState)],
) -> Result<Bytes, Error> {
    listing::message(&wire.sandbox_entries, selected)
}
