//! What ListContainers and ListPodSandbox share: the selection of records
//! (labels, state, newest first) and the answer as one gRPC message made of
//! each record's entry, encoded once but for its state (`encode::*_entry`,
//! kept in `wire_cache.rs`), which is written as it is at each call.

use std::collections::HashMap;
use std::sync::Arc;

use cri_api::prepacked::{self, Entry};
use prost::bytes::Bytes;

use super::encode;
use super::wire_cache::PerRecord;
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::sandbox::{Sandbox, SandboxState};

/// A record kind a list call answers with.
pub(super) trait Listed {
    /// Its state as berth keeps it.
    type State: Copy + PartialEq;
    /// The state of one being created.
    const CREATING: Self::State;
    /// The key of the state's field in the listed message.
    const STATE_KEY: u8;
    /// Its CRI state.
    fn wire_state(state: Self::State) -> i32;
    fn state(&self) -> Self::State;
    fn labels(&self) -> &HashMap<String, String>;
    fn created_at(&self) -> i64;
    fn id(&self) -> &str;
    /// Its entry, but for its state, encoded now.
    fn entry(&self) -> Entry;
}

impl Listed for Container {
    type State = ContainerState;
    const CREATING: ContainerState = ContainerState::Unknown;
    const STATE_KEY: u8 = encode::CONTAINER_STATE_KEY;
    fn wire_state(state: ContainerState) -> i32 {
        encode::container_state(state) as i32
    }
    fn state(&self) -> ContainerState {
        self.with_status(|s| s.state)
    }
    fn labels(&self) -> &HashMap<String, String> {
        &self.meta.config().labels
    }
    fn created_at(&self) -> i64 {
        self.meta.created_at
    }
    fn id(&self) -> &str {
        &self.meta.id
    }
    fn entry(&self) -> Entry {
        encode::container_entry(&self.meta)
    }
}

impl Listed for Sandbox {
    type State = SandboxState;
    const CREATING: SandboxState = SandboxState::Unknown;
    const STATE_KEY: u8 = encode::SANDBOX_STATE_KEY;
    fn wire_state(state: SandboxState) -> i32 {
        encode::sandbox_state(state) as i32
    }
    fn state(&self) -> SandboxState {
        self.with_status(|s| s.state)
    }
    fn labels(&self) -> &HashMap<String, String> {
        &self.meta.config().labels
    }
    fn created_at(&self) -> i64 {
        self.meta.created_at
    }
    fn id(&self) -> &str {
        &self.meta.id
    }
    fn entry(&self) -> Entry {
        encode::sandbox_entry(&self.meta)
    }
}

/// Whether every `selector` label is on `labels` with the same value.
pub fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// What a list call answers of `candidates`: those with the `selector`'s
/// labels and in the CRI `state` when one is asked for, newest first, each
/// with the state it is listed in (read once). One being created is not
/// listed until it is (as containerd): a kubelet GC pass never sees, nor
/// removes, a pod or container half made.
pub(super) fn select<T: Listed>(
    candidates: Vec<Arc<T>>,
    selector: &HashMap<String, String>,
    state: Option<i32>,
) -> Vec<(Arc<T>, T::State)> {
    let mut selected: Vec<(Arc<T>, T::State)> = candidates
        .into_iter()
        .filter(|r| labels_match(selector, r.labels()))
        .map(|r| {
            let state = r.state();
            (r, state)
        })
        .filter(|(_, s)| *s != T::CREATING)
        .filter(|(_, s)| state.is_none_or(|wanted| wanted == T::wire_state(*s)))
        .collect();
    selected.sort_by(|(a, _), (b, _)| b.created_at().cmp(&a.created_at()).then(a.id().cmp(b.id())));
    selected
}

/// The list response holding `selected` as one gRPC message, of their
/// entries as `kept` has them.
pub(super) fn message<T: Listed>(
    kept: &PerRecord<T, Entry>,
    selected: &[(Arc<T>, T::State)],
) -> Result<Bytes, Error> {
    let entries = kept.each(selected.iter().map(|(r, _)| r), T::entry);
    let states = selected.iter().map(|(_, s)| T::wire_state(*s));
    let entries = entries.iter().map(|e| &**e).zip(states);
    super::relist::framed(prepacked::pack_grpc_message(entries, T::STATE_KEY))
}
