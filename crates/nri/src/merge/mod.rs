//! Merging the replies of several plugins into one result, with NRI's
//! per-field ownership rules (containerd/nri `pkg/adaptation/result.go`).
//!
//! Plugins are consulted in order and each sees the container as adjusted by
//! the plugins before it, so the merge also keeps the request's container up
//! to date. Compound fields (annotations, mounts, env, devices, sysctls, net
//! devices, namespaces) are owned entry by entry, and an entry whose key
//! carries the removal marker (`-key`) removes that entry: the marker stays
//! in the merged adjustment so that the runtime removes it from the spec.

pub mod owners;
pub mod resources;
#[cfg(test)]
mod tests;
mod update;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use protobuf::MessageField;

use crate::api::{self, Field};
pub use owners::{is_marked_for_removal, mark_for_removal, Conflict, Owners};
pub use update::UpdateMerge;

/// Why replies could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Conflict(#[from] Conflict),
    /// A plugin asked to update the container being created (it must adjust
    /// it instead).
    #[error("plugin \"{plugin}\" asked update of \"{container}\" during its creation")]
    UpdateOfCreated { plugin: String, container: String },
}

/// The merge of CreateContainer replies.
#[derive(Debug, Clone)]
pub struct CreateMerge {
    /// The request, its container adjusted by the replies merged so far: the
    /// next plugin is sent this.
    pub request: api::CreateContainerRequest,
    /// The merged adjustment.
    pub adjust: api::ContainerAdjustment,
    /// Updates to other containers.
    pub updates: UpdateMerge,
    /// Requested evictions, in order.
    pub evict: Vec<api::ContainerEviction>,
}

impl CreateMerge {
    /// Starts merging for `request`.
    pub fn new(request: api::CreateContainerRequest) -> Self {
        let id = request.container.id.clone();
        CreateMerge {
            request,
            adjust: api::ContainerAdjustment::new(),
            updates: UpdateMerge::new(Some(id), None),
            evict: Vec::new(),
        }
    }

    /// The container id being created.
    pub fn id(&self) -> String {
        self.request.container.id.clone()
    }

    /// Field ownership so far.
    pub fn owners(&self) -> &Owners {
        &self.updates.owners
    }

    /// Merges one plugin's reply.
    pub fn apply(
        &mut self,
        reply: &api::CreateContainerResponse,
        plugin: &str,
    ) -> Result<(), MergeError> {
        if let Some(adj) = reply.adjust.as_ref() {
            self.apply_adjustment(adj, plugin)?;
        }
        self.updates.apply(&reply.update, plugin)?;
        self.evict.extend(reply.evict.iter().cloned());
        Ok(())
    }

    fn apply_adjustment(
        &mut self,
        adj: &api::ContainerAdjustment,
        plugin: &str,
    ) -> Result<(), MergeError> {
        let id = self.id();
        let o = &mut self.updates.owners;
        let ctr = self.request.container.mut_or_insert_default();
        merge_map(
            o,
            &id,
            Field::Annotations,
            plugin,
            &adj.annotations,
            &mut ctr.annotations,
            &mut self.adjust.annotations,
        )?;
        merge_mounts(o, &id, plugin, &adj.mounts, ctr, &mut self.adjust)?;
        merge_env(o, &id, plugin, &adj.env, ctr, &mut self.adjust)?;
        merge_args(o, &id, plugin, &adj.args, ctr, &mut self.adjust)?;
        if let Some(h) = adj.hooks.as_ref() {
            merge_hooks(o, &id, plugin, h, ctr, &mut self.adjust);
        }
        if let Some(l) = adj.linux.as_ref() {
            self.apply_linux(l, plugin)?;
        }
        let id = self.id();
        let o = &mut self.updates.owners;
        let ctr = self.request.container.mut_or_insert_default();
        for l in &adj.rlimits {
            o.claim_entry(&id, Field::Rlimits, &l.type_, plugin)?;
            ctr.rlimits.retain(|r| r.type_ != l.type_);
            ctr.rlimits.push(l.clone());
            self.adjust.rlimits.push(l.clone());
        }
        for d in &adj.CDI_devices {
            o.claim_entry(&id, Field::CdiDevices, &d.name, plugin)?;
            self.adjust.CDI_devices.push(d.clone());
        }
        Ok(())
    }

    fn apply_linux(
        &mut self,
        l: &api::LinuxContainerAdjustment,
        plugin: &str,
    ) -> Result<(), MergeError> {
        let id = self.id();
        let o = &mut self.updates.owners;
        let ctr = self
            .request
            .container
            .mut_or_insert_default()
            .linux
            .mut_or_insert_default();
        let out = self.adjust.linux.mut_or_insert_default();
        merge_devices(
            o,
            &id,
            plugin,
            &l.devices,
            &mut ctr.devices,
            &mut out.devices,
        )?;
        if let Some(r) = l.resources.as_ref() {
            resources::merge_resources(
                o,
                &id,
                plugin,
                r,
                &mut [
                    ctr.resources.mut_or_insert_default(),
                    out.resources.mut_or_insert_default(),
                ],
            )?;
        }
        if !l.cgroups_path.is_empty() {
            o.claim(&id, Field::CgroupsPath, plugin)?;
            ctr.cgroups_path = l.cgroups_path.clone();
            out.cgroups_path = l.cgroups_path.clone();
        }
        macro_rules! simple {
            ($($name:ident => $field:expr),+) => {$(
                if let Some(v) = l.$name.as_ref() {
                    o.claim(&id, $field, plugin)?;
                    out.$name = MessageField::some(v.clone());
                    ctr.$name = MessageField::some(v.clone());
                }
            )+};
        }
        simple!(oom_score_adj => Field::OomScoreAdj, io_priority => Field::IoPriority,
            seccomp_policy => Field::SeccompPolicy, scheduler => Field::LinuxSched);
        if let Some(v) = l.memory_policy.as_ref() {
            o.claim(&id, Field::MemoryPolicy, plugin)?;
            out.memory_policy = MessageField::some(v.clone());
        }
        merge_namespaces(o, &id, plugin, &l.namespaces, ctr, out)?;
        merge_map(
            o,
            &id,
            Field::Sysctl,
            plugin,
            &l.sysctl,
            &mut ctr.sysctl,
            &mut out.sysctl,
        )?;
        merge_net_devices(o, &id, plugin, &l.net_devices, ctr, out)?;
        if let Some(rdt) = l.rdt.as_ref() {
            merge_rdt(o, &id, plugin, rdt, out)?;
        }
        Ok(())
    }

    /// The merged reply: adjustment, updates of other containers, evictions.
    pub fn into_response(self) -> api::CreateContainerResponse {
        api::CreateContainerResponse {
            adjust: MessageField::some(self.adjust),
            update: self.updates.into_updates(),
            evict: self.evict,
            ..Default::default()
        }
    }
}

/// Removal-marked keys of `keys`, and the others, in sorted order.
fn split_marked<'a>(keys: impl Iterator<Item = &'a str>) -> (BTreeSet<String>, Vec<String>) {
    let mut del = BTreeSet::new();
    let mut add = Vec::new();
    for k in keys {
        match is_marked_for_removal(k) {
            (key, true) => {
                del.insert(key.to_string());
            }
            (key, false) => add.push(key.to_string()),
        }
    }
    (del, add)
}

/// Merges a string map (annotations, sysctls) with removal markers.
fn merge_map(
    o: &mut Owners,
    id: &str,
    field: Field,
    plugin: &str,
    src: &HashMap<String, String>,
    ctr: &mut HashMap<String, String>,
    out: &mut HashMap<String, String>,
) -> Result<(), Conflict> {
    let sorted: BTreeMap<&String, &String> = src.iter().collect();
    let (del, _) = split_marked(sorted.keys().map(|k| k.as_str()));
    for key in &del {
        o.clear_entry(id, field, key, plugin);
        ctr.remove(key);
        out.remove(key);
        out.insert(mark_for_removal(key), String::new());
    }
    for (k, v) in sorted {
        if is_marked_for_removal(k).1 {
            continue;
        }
        o.claim_entry(id, field, k, plugin)?;
        out.remove(&mark_for_removal(k));
        ctr.insert(k.clone(), v.clone());
        out.insert(k.clone(), v.clone());
    }
    Ok(())
}

fn merge_mounts(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &[api::Mount],
    ctr: &mut api::Container,
    out: &mut api::ContainerAdjustment,
) -> Result<(), Conflict> {
    let (del, _) = split_marked(src.iter().map(|m| m.destination.as_str()));
    for key in &del {
        o.clear_entry(id, Field::Mounts, key, plugin);
        out.mounts.retain(|m| &m.destination != key);
        ctr.mounts.retain(|m| &m.destination != key);
    }
    for m in src
        .iter()
        .filter(|m| !is_marked_for_removal(&m.destination).1)
    {
        o.claim_entry(id, Field::Mounts, &m.destination, plugin)?;
        ctr.mounts.retain(|c| c.destination != m.destination);
        ctr.mounts.push(m.clone());
        out.mounts.push(m.clone());
    }
    for key in del {
        if !src.iter().any(|m| m.destination == key) {
            let mut marker = api::Mount::new();
            marker.destination = mark_for_removal(&key);
            out.mounts.push(marker);
        }
    }
    Ok(())
}

fn env_key(e: &str) -> &str {
    e.split_once('=').map(|(k, _)| k).unwrap_or(e)
}

fn merge_env(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &[api::KeyValue],
    ctr: &mut api::Container,
    out: &mut api::ContainerAdjustment,
) -> Result<(), Conflict> {
    let (del, _) = split_marked(src.iter().map(|e| e.key.as_str()));
    for key in &del {
        o.clear_entry(id, Field::Env, key, plugin);
        out.env.retain(|e| &e.key != key);
        ctr.env.retain(|e| env_key(e) != key);
    }
    for e in src.iter().filter(|e| !is_marked_for_removal(&e.key).1) {
        o.claim_entry(id, Field::Env, &e.key, plugin)?;
        ctr.env.retain(|c| env_key(c) != e.key);
        ctr.env.push(format!("{}={}", e.key, e.value));
        out.env.push(e.clone());
    }
    for key in del {
        if !src.iter().any(|e| e.key == key) {
            let mut marker = api::KeyValue::new();
            marker.key = mark_for_removal(&key);
            out.env.push(marker);
        }
    }
    Ok(())
}

/// Args replace the whole command line; a leading empty string first clears
/// the previous owner's claim (NRI's way to override).
fn merge_args(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &[String],
    ctr: &mut api::Container,
    out: &mut api::ContainerAdjustment,
) -> Result<(), Conflict> {
    let Some(first) = src.first() else {
        return Ok(());
    };
    let args = if first.is_empty() {
        o.clear(id, Field::Args, plugin);
        &src[1..]
    } else {
        src
    };
    o.claim(id, Field::Args, plugin)?;
    out.args = args.to_vec();
    ctr.args = args.to_vec();
    Ok(())
}

fn merge_hooks(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &api::Hooks,
    ctr: &mut api::Container,
    out: &mut api::ContainerAdjustment,
) {
    let c = ctr.hooks.mut_or_insert_default();
    let r = out.hooks.mut_or_insert_default();
    let mut any = false;
    for (from, a, b) in [
        (&src.prestart, &mut c.prestart, &mut r.prestart),
        (
            &src.create_runtime,
            &mut c.create_runtime,
            &mut r.create_runtime,
        ),
        (
            &src.create_container,
            &mut c.create_container,
            &mut r.create_container,
        ),
        (
            &src.start_container,
            &mut c.start_container,
            &mut r.start_container,
        ),
        (&src.poststart, &mut c.poststart, &mut r.poststart),
        (&src.poststop, &mut c.poststop, &mut r.poststop),
    ] {
        any |= !from.is_empty();
        a.extend(from.iter().cloned());
        b.extend(from.iter().cloned());
    }
    if any {
        o.accumulate(id, Field::OciHooks, plugin);
    }
}

fn merge_devices(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &[api::LinuxDevice],
    ctr: &mut Vec<api::LinuxDevice>,
    out: &mut Vec<api::LinuxDevice>,
) -> Result<(), Conflict> {
    let (del, _) = split_marked(src.iter().map(|d| d.path.as_str()));
    for key in &del {
        o.clear_entry(id, Field::Devices, key, plugin);
        out.retain(|d| &d.path != key);
        ctr.retain(|d| &d.path != key);
    }
    for d in src.iter().filter(|d| !is_marked_for_removal(&d.path).1) {
        o.claim_entry(id, Field::Devices, &d.path, plugin)?;
        ctr.retain(|c| c.path != d.path);
        ctr.push(d.clone());
        out.push(d.clone());
    }
    for key in del {
        if !src.iter().any(|d| d.path == key) {
            let mut marker = api::LinuxDevice::new();
            marker.path = mark_for_removal(&key);
            out.push(marker);
        }
    }
    Ok(())
}

fn merge_namespaces(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &[api::LinuxNamespace],
    ctr: &mut api::LinuxContainer,
    out: &mut api::LinuxContainerAdjustment,
) -> Result<(), Conflict> {
    for n in src {
        let (key, removed) = is_marked_for_removal(&n.type_);
        o.claim_entry(id, Field::Namespace, key, plugin)?;
        ctr.namespaces.retain(|c| c.type_ != key);
        if !removed {
            ctr.namespaces.push(n.clone());
        }
        out.namespaces.push(n.clone());
    }
    Ok(())
}

fn merge_net_devices(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &HashMap<String, api::LinuxNetDevice>,
    ctr: &mut api::LinuxContainer,
    out: &mut api::LinuxContainerAdjustment,
) -> Result<(), Conflict> {
    let sorted: BTreeMap<&String, &api::LinuxNetDevice> = src.iter().collect();
    for (k, v) in sorted {
        let (key, removed) = is_marked_for_removal(k);
        if removed {
            o.clear_entry(id, Field::LinuxNetDevices, key, plugin);
            ctr.net_devices.remove(key);
            out.net_devices.remove(key);
            out.net_devices
                .insert(k.clone(), api::LinuxNetDevice::new());
            continue;
        }
        o.claim_entry(id, Field::LinuxNetDevices, key, plugin)?;
        ctr.net_devices.insert(k.clone(), v.clone());
        out.net_devices.insert(k.clone(), v.clone());
    }
    Ok(())
}

fn merge_rdt(
    o: &mut Owners,
    id: &str,
    plugin: &str,
    src: &api::LinuxRdt,
    out: &mut api::LinuxContainerAdjustment,
) -> Result<(), Conflict> {
    let rdt = out.rdt.mut_or_insert_default();
    if src.remove {
        for f in [
            Field::RdtClosID,
            Field::RdtSchemata,
            Field::RdtEnableMonitoring,
        ] {
            o.clear(id, f, plugin);
        }
        *rdt = api::LinuxRdt::new();
        rdt.remove = true;
    }
    if let Some(v) = src.clos_id.as_ref() {
        o.claim(id, Field::RdtClosID, plugin)?;
        rdt.clos_id = MessageField::some(v.clone());
        rdt.remove = false;
    }
    if let Some(v) = src.schemata.as_ref() {
        o.claim(id, Field::RdtSchemata, plugin)?;
        rdt.schemata = MessageField::some(v.clone());
        rdt.remove = false;
    }
    if let Some(v) = src.enable_monitoring.as_ref() {
        o.claim(id, Field::RdtEnableMonitoring, plugin)?;
        rdt.enable_monitoring = MessageField::some(v.clone());
        rdt.remove = false;
    }
    Ok(())
}
