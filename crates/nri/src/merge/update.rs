//! Merging the container updates that plugins request (in CreateContainer,
//! UpdateContainer, StopContainer and Synchronize replies): one update per
//! container, its resources claimed field by field across plugins.

use std::collections::HashMap;

use protobuf::MessageField;

use super::resources::merge_resources;
use super::{MergeError, Owners};
use crate::api;

/// Accumulated updates.
#[derive(Debug, Clone)]
pub struct UpdateMerge {
    /// Field ownership (shared with the adjustment when merging a creation).
    pub owners: Owners,
    /// The container being created, which plugins may not update.
    creating: Option<String>,
    /// The container being updated (UpdateContainer) and its requested
    /// resources, which plugins may change.
    target: Option<(String, api::LinuxResources)>,
    order: Vec<String>,
    updates: HashMap<String, api::ContainerUpdate>,
}

impl UpdateMerge {
    /// A merge that refuses updates of `creating` and that starts the
    /// resources of `target` (id, requested resources) from the request.
    pub fn new(creating: Option<String>, target: Option<(String, api::LinuxResources)>) -> Self {
        UpdateMerge {
            owners: Owners::default(),
            creating,
            target,
            order: Vec::new(),
            updates: HashMap::new(),
        }
    }

    /// Merges one plugin's requested updates.
    pub fn apply(
        &mut self,
        updates: &[api::ContainerUpdate],
        plugin: &str,
    ) -> Result<(), MergeError> {
        for u in updates {
            let id = u.container_id.clone();
            if self.creating.as_deref() == Some(id.as_str()) {
                return Err(MergeError::UpdateOfCreated {
                    plugin: plugin.to_string(),
                    container: id,
                });
            }
            let Some(res) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            // Merge into a copy: an update whose failure is to be ignored
            // must not leave half of itself behind.
            let mut owners = self.owners.clone();
            let mut merged = self.current(&id);
            let result = merge_resources(&mut owners, &id, plugin, res, &mut [&mut merged]);
            match result {
                Ok(()) => {
                    self.owners = owners;
                    self.store(&id, merged, u.ignore_failure);
                }
                Err(_) if u.ignore_failure => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn current(&self, id: &str) -> api::LinuxResources {
        if let Some((t, r)) = &self.target {
            if t == id {
                return r.clone();
            }
        }
        self.updates
            .get(id)
            .and_then(|u| u.linux.as_ref())
            .and_then(|l| l.resources.as_ref())
            .cloned()
            .unwrap_or_default()
    }

    fn store(&mut self, id: &str, res: api::LinuxResources, ignore_failure: bool) {
        if let Some((t, r)) = &mut self.target {
            if t == id {
                *r = res;
                return;
            }
        }
        let u = self.updates.entry(id.to_string()).or_insert_with(|| {
            self.order.push(id.to_string());
            api::ContainerUpdate {
                container_id: id.to_string(),
                ignore_failure,
                ..Default::default()
            }
        });
        u.ignore_failure &= ignore_failure;
        u.linux.mut_or_insert_default().resources = MessageField::some(res);
    }

    /// The resources of the target container after the merge, if any.
    pub fn target_resources(&self) -> Option<&api::LinuxResources> {
        self.target.as_ref().map(|(_, r)| r)
    }

    /// The merged updates of the other containers, in first-request order.
    pub fn into_updates(mut self) -> Vec<api::ContainerUpdate> {
        self.order
            .iter()
            .filter_map(|id| self.updates.remove(id))
            .collect()
    }
}
