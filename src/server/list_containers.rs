//! RuntimeService.ListContainers: half of kubelet's relist, every second.
//!
//! The answer is assembled from entries encoded once per container
//! (`encode::listed_container`: everything but the state, which is written
//! as it is at each call) into one buffer, the whole gRPC message: no
//! message is built and no allocation is made per container. The
//! unfiltered answer (kubelet's relist) is kept until a container changes
//! (`relist.rs` serves it as it is). ListContainerStats and
//! StreamContainers select the same containers in the same order
//! ([`Cri::select_containers`]); so does [`Cri::list_containers`], the
//! same answer as messages.

use std::sync::Arc;

use cri_api::{prepacked, v1};
use prost::bytes::Bytes;

use super::list_pod_sandbox::labels_match;
use super::{encode, Cri};
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
        let make = || containers_message(&self.select_containers(&filter));
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
        let candidates = if filter.id.is_empty() {
            self.core.all_containers()
        } else {
            self.core
                .container(&filter.id)
                .map(|c| vec![c])
                .unwrap_or_default()
        };
        let sandbox_id = if filter.pod_sandbox_id.is_empty() {
            None
        } else {
            // A sandbox id filter may be a prefix too; unknown means no match.
            match self.core.sandbox(&filter.pod_sandbox_id) {
                Ok(s) => Some(s.meta.id.clone()),
                Err(_) => return Vec::new(),
            }
        };
        let mut selected: Vec<(Arc<Container>, ContainerState)> = candidates
            .into_iter()
            .filter(|c| sandbox_id.as_ref().is_none_or(|s| &c.meta.sandbox_id == s))
            .filter(|c| labels_match(&filter.label_selector, &c.meta.config().labels))
            .map(|c| {
                let state = c.with_status(|s| s.state);
                (c, state)
            })
            // One being created is not listed until it is (as containerd).
            .filter(|(_, state)| *state != ContainerState::Unknown)
            .filter(|(_, state)| {
                filter
                    .state
                    .as_ref()
                    .is_none_or(|s| s.state == encode::container_state(*state) as i32)
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

/// The ListContainersResponse holding `selected` as one gRPC message.
pub(super) fn containers_message(
    selected: &[(Arc<Container>, ContainerState)],
) -> Result<Bytes, Error> {
    let entries = selected.iter().map(|(c, s)| {
        let state = encode::container_state(*s) as i32;
        (encode::listed_container(&c.meta), state)
    });
    super::relist::framed(prepacked::pack_grpc_message(
        entries,
        encode::CONTAINER_STATE_KEY,
    ))
}
