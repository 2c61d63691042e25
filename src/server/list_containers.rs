//! RuntimeService.ListContainers: half of kubelet's relist, every second.
//!
//! The answer is assembled from entries encoded once per container
//! (`encode::container_entry`: everything but the state, which is written
//! as it is at each call) into one buffer, the whole gRPC message: no
//! message is built and no allocation is made per container. The
//! unfiltered answer (kubelet's relist) is kept until a container changes
//! (`relist.rs` serves it as it is). ListContainerStats and
//! StreamContainers select the same containers in the same order
//! ([`Cri::select_containers`]); so does [`Cri::list_containers`], the
//! same answer as messages.

use std::sync::Arc;

use cri_api::v1;
use prost::bytes::Bytes;

use super::wire_cache::WireCache;
use super::{encode, listing, Cri};
use crate::container::{Container, ContainerState};
use crate::error::Error;

impl Cri {
    /// The answer as the socket sends it, one gRPC message made of the
    /// entries' cached bytes (`relist.rs`). The answer to an empty filter,
    /// kubelet's relist, is kept until a container changes.
    pub async fn list_containers_wire(
        &self,
        req: v1::ListContainersRequest,
    ) -> Result<Bytes, Error> {
        let filter = req.filter.unwrap_or_default();
        let make = || containers_message(&self.wire, &self.select_containers(&filter));
        if filter != v1::ContainerFilter::default() {
            return make();
        }
        let changes = self.core.container_changes();
        self.kept_lists.containers.get(changes, make)
    }

    /// The same answer as messages, encoded now (the generated service
    /// trait's method; not on the socket's path).
    pub async fn list_containers(
        &self,
        req: v1::ListContainersRequest,
    ) -> Result<v1::ListContainersResponse, Error> {
        let selected = self.select_containers(&req.filter.unwrap_or_default());
        Ok(v1::ListContainersResponse {
            containers: selected
                .iter()
                .map(|(c, state)| encode::container(&c.meta, *state))
                .collect(),
        })
    }

    /// The containers ListContainers answers for `filter`, newest first,
    /// each with the state it is listed in (read once).
    pub(super) fn select_containers(
        &self,
        filter: &v1::ContainerFilter,
    ) -> Vec<(Arc<Container>, ContainerState)> {
        let mut candidates = match filter.id.as_str() {
            "" => self.core.all_containers(),
            id => self.core.container(id).into_iter().collect(),
        };
        if !filter.pod_sandbox_id.is_empty() {
            // A sandbox id filter may be a prefix too; unknown means no match.
            match self.core.sandbox(&filter.pod_sandbox_id) {
                Ok(s) => candidates.retain(|c| c.meta.sandbox_id == s.meta.id),
                Err(_) => return Vec::new(),
            }
        }
        let state = filter.state.as_ref().map(|s| s.state);
        listing::select(candidates, &filter.label_selector, state)
    }
}

/// The ListContainersResponse holding `selected` as one gRPC message.
pub(super) fn containers_message(
    wire: &WireCache,
    selected: &[(Arc<Container>, ContainerState)],
) -> Result<Bytes, Error> {
    listing::message(&wire.container_entries, selected)
}
