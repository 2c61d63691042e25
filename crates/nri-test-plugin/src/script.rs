//! The JSON script that drives the test plugin (see the crate README).

use std::collections::BTreeMap;

use protobuf::MessageField;
use serde::Deserialize;

use berth_nri::api;

/// The whole script. Every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Script {
    /// Events to subscribe to (NRI names, e.g. "CreateContainer"); empty
    /// means none, which NRI reads as "all".
    pub subscribe: Vec<String>,
    /// The adjustment returned for every CreateContainer.
    pub adjust: Adjust,
    /// Updates returned with every CreateContainer.
    pub updates: Vec<Update>,
    /// Misbehaviour per event name ("Register", "Configure", "Synchronize",
    /// or any event): "hang", "crash", "oversize", {"error": "msg"}, or
    /// {"delay": MILLISECONDS} (answer normally after that long).
    pub misbehave: BTreeMap<String, Misbehave>,
    /// Unsolicited UpdateContainers sent shortly after Synchronize.
    pub update_after_sync: Vec<Update>,
    /// Validator answer, if subscribed to ValidateContainerAdjustment.
    pub reject: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Misbehave {
    Hang,
    Crash,
    Oversize,
    Error(String),
    Delay(u64),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Adjust {
    pub env: BTreeMap<String, String>,
    pub remove_env: Vec<String>,
    pub annotations: BTreeMap<String, String>,
    pub remove_annotations: Vec<String>,
    pub mounts: Vec<Mount>,
    pub remove_mounts: Vec<String>,
    pub hooks: BTreeMap<String, Vec<Hook>>,
    pub devices: Vec<Device>,
    pub rlimits: Vec<Rlimit>,
    pub args: Vec<String>,
    pub resources: Resources,
    pub oom_score_adj: Option<i64>,
    pub cgroups_path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Mount {
    pub destination: String,
    pub source: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub options: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hook {
    pub path: String,
    pub args: Vec<String>,
    pub env: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Device {
    pub path: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub major: i64,
    pub minor: i64,
    pub file_mode: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub type_: String,
    pub hard: u64,
    pub soft: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Resources {
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    pub memory_limit: Option<i64>,
    pub memory_swap: Option<i64>,
    pub pids_limit: Option<i64>,
    pub unified: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Update {
    pub container_id: String,
    pub resources: Resources,
    pub ignore_failure: bool,
}

fn opt_u64(v: Option<u64>) -> MessageField<api::OptionalUInt64> {
    MessageField::from_option(v.map(|value| api::OptionalUInt64 {
        value,
        ..Default::default()
    }))
}

fn opt_i64(v: Option<i64>) -> MessageField<api::OptionalInt64> {
    MessageField::from_option(v.map(|value| api::OptionalInt64 {
        value,
        ..Default::default()
    }))
}

impl Resources {
    pub fn is_empty(&self) -> bool {
        self.to_api() == api::LinuxResources::new()
    }

    pub fn to_api(&self) -> api::LinuxResources {
        let mut r = api::LinuxResources::new();
        let cpu = api::LinuxCPU {
            shares: opt_u64(self.cpu_shares),
            quota: opt_i64(self.cpu_quota),
            period: opt_u64(self.cpu_period),
            cpus: self.cpuset_cpus.clone().unwrap_or_default(),
            mems: self.cpuset_mems.clone().unwrap_or_default(),
            ..Default::default()
        };
        if cpu != api::LinuxCPU::new() {
            r.cpu = MessageField::some(cpu);
        }
        let mem = api::LinuxMemory {
            limit: opt_i64(self.memory_limit),
            swap: opt_i64(self.memory_swap),
            ..Default::default()
        };
        if mem != api::LinuxMemory::new() {
            r.memory = MessageField::some(mem);
        }
        if let Some(limit) = self.pids_limit {
            r.pids = MessageField::some(api::LinuxPids {
                limit,
                ..Default::default()
            });
        }
        r.unified = self.unified.clone().into_iter().collect();
        r
    }
}

impl Update {
    pub fn to_api(&self) -> api::ContainerUpdate {
        let mut u = api::ContainerUpdate::new();
        u.container_id = self.container_id.clone();
        u.ignore_failure = self.ignore_failure;
        u.linux.mut_or_insert_default().resources = MessageField::some(self.resources.to_api());
        u
    }
}

fn hook(h: &Hook) -> api::Hook {
    api::Hook {
        path: h.path.clone(),
        args: h.args.clone(),
        env: h.env.clone(),
        ..Default::default()
    }
}

impl Adjust {
    pub fn to_api(&self) -> Result<api::ContainerAdjustment, String> {
        let mut a = api::ContainerAdjustment::new();
        for (k, v) in &self.env {
            a.env.push(api::KeyValue {
                key: k.clone(),
                value: v.clone(),
                ..Default::default()
            });
        }
        for k in &self.remove_env {
            a.env.push(api::KeyValue {
                key: format!("-{k}"),
                ..Default::default()
            });
        }
        a.annotations = self.annotations.clone().into_iter().collect();
        for k in &self.remove_annotations {
            a.annotations.insert(format!("-{k}"), String::new());
        }
        for m in &self.mounts {
            a.mounts.push(api::Mount {
                destination: m.destination.clone(),
                source: m.source.clone(),
                type_: m.type_.clone(),
                options: m.options.clone(),
                ..Default::default()
            });
        }
        for d in &self.remove_mounts {
            a.mounts.push(api::Mount {
                destination: format!("-{d}"),
                ..Default::default()
            });
        }
        for (kind, hooks) in &self.hooks {
            let h = a.hooks.mut_or_insert_default();
            let list = match kind.as_str() {
                "prestart" => &mut h.prestart,
                "create_runtime" => &mut h.create_runtime,
                "create_container" => &mut h.create_container,
                "start_container" => &mut h.start_container,
                "poststart" => &mut h.poststart,
                "poststop" => &mut h.poststop,
                other => return Err(format!("unknown hook kind {other:?}")),
            };
            list.extend(hooks.iter().map(hook));
        }
        for r in &self.rlimits {
            a.rlimits.push(api::POSIXRlimit {
                type_: r.type_.clone(),
                hard: r.hard,
                soft: r.soft,
                ..Default::default()
            });
        }
        a.args = self.args.clone();
        let linux = self.linux();
        if linux != api::LinuxContainerAdjustment::new() {
            a.linux = MessageField::some(linux);
        }
        Ok(a)
    }

    fn linux(&self) -> api::LinuxContainerAdjustment {
        let mut l = api::LinuxContainerAdjustment::new();
        for d in &self.devices {
            l.devices.push(api::LinuxDevice {
                path: d.path.clone(),
                type_: d.type_.clone(),
                major: d.major,
                minor: d.minor,
                file_mode: MessageField::from_option(d.file_mode.map(|value| {
                    api::OptionalFileMode {
                        value,
                        ..Default::default()
                    }
                })),
                ..Default::default()
            });
        }
        if !self.resources.is_empty() {
            l.resources = MessageField::some(self.resources.to_api());
        }
        if let Some(value) = self.oom_score_adj {
            l.oom_score_adj = MessageField::some(api::OptionalInt {
                value,
                ..Default::default()
            });
        }
        l.cgroups_path = self.cgroups_path.clone().unwrap_or_default();
        l
    }
}
