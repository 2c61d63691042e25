//! berth's records and specs as NRI's types, and NRI's resources back as
//! CRI's (for the core's update path).

use cri_api::v1;
use oci_spec::runtime::Spec;
use protobuf::MessageField;

use berth_nri::api;

use crate::container::{Container, ContainerState};
use crate::sandbox::Sandbox;

/// A pod as plugins see it.
pub fn pod(sandbox: &Sandbox) -> api::PodSandbox {
    let config = sandbox.meta.config();
    let md = config.metadata.clone().unwrap_or_default();
    let status = sandbox.status();
    let facts = sandbox.meta.facts();
    let mut linux = api::LinuxPodSandbox::new();
    linux.cgroup_parent = facts.cgroup_parent.clone();
    if let Some(netns) = &sandbox.meta.netns {
        let mut ns = api::LinuxNamespace::new();
        ns.type_ = "network".into();
        ns.path = netns.display().to_string();
        linux.namespaces.push(ns);
    }
    api::PodSandbox {
        id: sandbox.meta.id.clone(),
        name: md.name,
        uid: md.uid,
        namespace: md.namespace,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: sandbox.meta.reported_handler().to_string(),
        linux: MessageField::some(linux),
        pid: status.pid.unwrap_or_default(),
        ips: status.ips.clone(),
        ..Default::default()
    }
}

/// What plugins see of a container's OCI spec: its args, env, mounts,
/// resources and cgroups path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecView {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub mounts: Vec<api::Mount>,
    pub linux: api::LinuxContainer,
}

impl SpecView {
    /// The view of an OCI spec, read from its typed fields (no JSON).
    pub fn of(spec: &Spec) -> SpecView {
        let process = spec.process().as_ref();
        let strings = |v: Option<&Vec<String>>| v.cloned().unwrap_or_default();
        let mut linux = api::LinuxContainer::new();
        let spec_linux = spec.linux().as_ref();
        linux.resources = MessageField::some(resources_of(
            spec_linux.and_then(|l| l.resources().as_ref()),
        ));
        linux.cgroups_path = spec_linux
            .and_then(|l| l.cgroups_path().as_ref())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        SpecView {
            args: strings(process.and_then(|p| p.args().as_ref())),
            env: strings(process.and_then(|p| p.env().as_ref())),
            mounts: spec.mounts().iter().flatten().map(mount).collect(),
            linux,
        }
    }
}

/// A container as plugins see it: its record, and what its OCI spec says
/// (args, env, mounts, resources) when it has one.
pub fn container(container: &Container, spec: Option<&SpecView>) -> api::Container {
    let config = container.meta.config();
    let status = container.status();
    let state = match status.state {
        ContainerState::Created => api::ContainerState::CONTAINER_CREATED,
        ContainerState::Running => api::ContainerState::CONTAINER_RUNNING,
        ContainerState::Exited => api::ContainerState::CONTAINER_STOPPED,
        _ => api::ContainerState::CONTAINER_UNKNOWN,
    };
    let mut c = api::Container {
        id: container.meta.id.clone(),
        pod_sandbox_id: container.meta.sandbox_id.clone(),
        name: config.metadata.clone().unwrap_or_default().name,
        state: state.into(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        pid: status.pid.unwrap_or_default(),
        created_at: container.meta.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        status_reason: status.reason.clone(),
        status_message: status.message.clone(),
        ..Default::default()
    };
    if let Some(spec) = spec {
        c.args = spec.args.clone();
        c.env = spec.env.clone();
        c.mounts = spec.mounts.clone();
        c.linux = MessageField::some(spec.linux.clone());
    }
    c
}

fn mount(m: &oci_spec::runtime::Mount) -> api::Mount {
    api::Mount {
        destination: m.destination().display().to_string(),
        type_: m.typ().clone().unwrap_or_default(),
        source: m
            .source()
            .as_ref()
            .map(|s| s.display().to_string())
            .unwrap_or_default(),
        options: m.options().clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn opt_i64(v: Option<i64>) -> MessageField<api::OptionalInt64> {
    MessageField::from_option(v.map(|value| api::OptionalInt64 {
        value,
        ..Default::default()
    }))
}

fn opt_u64(v: Option<u64>) -> MessageField<api::OptionalUInt64> {
    MessageField::from_option(v.map(|value| api::OptionalUInt64 {
        value,
        ..Default::default()
    }))
}

/// OCI `linux.resources` as NRI's resources.
fn resources_of(r: Option<&oci_spec::runtime::LinuxResources>) -> api::LinuxResources {
    let mut out = api::LinuxResources::new();
    let (mem, cpu) = (
        r.and_then(|r| r.memory().as_ref()),
        r.and_then(|r| r.cpu().as_ref()),
    );
    let mut m = api::LinuxMemory::new();
    m.limit = opt_i64(mem.and_then(|m| m.limit()));
    m.reservation = opt_i64(mem.and_then(|m| m.reservation()));
    m.swap = opt_i64(mem.and_then(|m| m.swap()));
    out.memory = MessageField::some(m);
    let mut c = api::LinuxCPU::new();
    c.shares = opt_u64(cpu.and_then(|c| c.shares()));
    c.quota = opt_i64(cpu.and_then(|c| c.quota()));
    c.period = opt_u64(cpu.and_then(|c| c.period()));
    c.cpus = cpu.and_then(|c| c.cpus().clone()).unwrap_or_default();
    c.mems = cpu.and_then(|c| c.mems().clone()).unwrap_or_default();
    out.cpu = MessageField::some(c);
    if let Some(u) = r.and_then(|r| r.unified().as_ref()) {
        out.unified = u.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    }
    out
}

/// CRI resources as NRI's.
pub fn resources_from_cri(r: &v1::LinuxContainerResources) -> api::LinuxResources {
    let mut out = api::LinuxResources::new();
    let i64f = |value: i64| {
        (value != 0).then(|| api::OptionalInt64 {
            value,
            ..Default::default()
        })
    };
    let u64f = |value: i64| {
        (value > 0).then(|| api::OptionalUInt64 {
            value: value as u64,
            ..Default::default()
        })
    };
    let mut m = api::LinuxMemory::new();
    m.limit = i64f(r.memory_limit_in_bytes).into();
    m.swap = i64f(r.memory_swap_limit_in_bytes).into();
    out.memory = MessageField::some(m);
    let mut c = api::LinuxCPU::new();
    c.shares = u64f(r.cpu_shares).into();
    c.quota = i64f(r.cpu_quota).into();
    c.period = u64f(r.cpu_period).into();
    c.cpus = r.cpuset_cpus.clone();
    c.mems = r.cpuset_mems.clone();
    out.cpu = MessageField::some(c);
    out.hugepage_limits = r
        .hugepage_limits
        .iter()
        .map(|h| api::HugepageLimit {
            page_size: h.page_size.clone(),
            limit: h.limit,
            ..Default::default()
        })
        .collect();
    out.unified = r.unified.clone();
    out
}

/// `base` with what NRI's `r` sets laid over it.
pub fn overlay_cri(
    mut base: v1::LinuxContainerResources,
    r: &api::LinuxResources,
) -> v1::LinuxContainerResources {
    if let Some(m) = r.memory.as_ref() {
        if let Some(v) = m.limit.as_ref() {
            base.memory_limit_in_bytes = v.value;
        }
        if let Some(v) = m.swap.as_ref() {
            base.memory_swap_limit_in_bytes = v.value;
        }
    }
    if let Some(c) = r.cpu.as_ref() {
        if let Some(v) = c.shares.as_ref() {
            base.cpu_shares = v.value as i64;
        }
        if let Some(v) = c.quota.as_ref() {
            base.cpu_quota = v.value;
        }
        if let Some(v) = c.period.as_ref() {
            base.cpu_period = v.value as i64;
        }
        if !c.cpus.is_empty() {
            base.cpuset_cpus = c.cpus.clone();
        }
        if !c.mems.is_empty() {
            base.cpuset_mems = c.mems.clone();
        }
    }
    for h in &r.hugepage_limits {
        base.hugepage_limits.retain(|o| o.page_size != h.page_size);
        base.hugepage_limits.push(v1::HugepageLimit {
            page_size: h.page_size.clone(),
            limit: h.limit,
        });
    }
    base.unified.extend(r.unified.clone());
    base
}

/// The fields `r` sets that CRI's resources cannot carry, so that the
/// update path (which applies CRI resources) would drop them: an update
/// setting any is refused instead.
pub fn beyond_cri(r: &api::LinuxResources) -> Vec<api::Field> {
    use api::Field;
    let mut out = Vec::new();
    if let Some(m) = r.memory.as_ref() {
        for (set, field) in [
            (m.reservation.is_some(), Field::MemReservation),
            (m.kernel.is_some(), Field::MemKernelLimit),
            (m.kernel_tcp.is_some(), Field::MemTCPLimit),
            (m.swappiness.is_some(), Field::MemSwappiness),
            (m.disable_oom_killer.is_some(), Field::MemDisableOomKiller),
            (m.use_hierarchy.is_some(), Field::MemUseHierarchy),
        ] {
            if set {
                out.push(field);
            }
        }
    }
    if let Some(c) = r.cpu.as_ref() {
        if c.realtime_runtime.is_some() {
            out.push(Field::CPURealtimeRuntime);
        }
        if c.realtime_period.is_some() {
            out.push(Field::CPURealtimePeriod);
        }
    }
    for (set, field) in [
        (r.pids.is_some(), Field::PidsLimit),
        (r.blockio_class.is_some(), Field::BlockioClass),
        (r.rdt_class.is_some(), Field::RdtClass),
        (!r.devices.is_empty(), Field::Devices),
    ] {
        if set {
            out.push(field);
        }
    }
    out
}

/// Who set `fields` of container `id`, per `owners` ("an NRI plugin" where
/// no owner is recorded).
pub fn owners_of(owners: &api::OwningPlugins, id: &str, fields: &[api::Field]) -> String {
    let mut plugins: Vec<&str> = fields
        .iter()
        .filter_map(|f| {
            owners
                .owners
                .get(id)
                .and_then(|o| o.simple.get(&(*f as i32)))
                .map(String::as_str)
        })
        .collect();
    plugins.sort();
    plugins.dedup();
    match plugins.is_empty() {
        true => "an NRI plugin".into(),
        false => plugins.join(","),
    }
}

/// Why an update setting `fields` is refused.
pub fn refusal(plugin: &str, id: &str, fields: &[api::Field]) -> String {
    format!(
        "NRI plugin {plugin:?}: update of container {id} sets {fields:?}, which berth's update \
         path (CRI resources) cannot apply"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view reads a spec's typed fields as the JSON did: what is set
    /// shows, what is unset stays unset (an absent limit is no limit).
    #[test]
    fn a_spec_view_shows_what_the_spec_sets_and_nothing_else() {
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh", "-c", "true"], "env": ["A=1", "B=2"], "cwd": "/",
                        "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/data", "type": "bind", "source": "/srv/d",
                 "options": ["rbind", "ro"]}
            ],
            "linux": {
                "cgroupsPath": "/kubepods/pod1/c1",
                "resources": {
                    "memory": {"limit": 1048576},
                    "cpu": {"shares": 512, "quota": 5000, "cpus": "0-1"},
                    "unified": {"memory.high": "900000"}
                }
            }
        }))
        .unwrap();
        let view = SpecView::of(&spec);
        assert_eq!(view.args, ["sh", "-c", "true"]);
        assert_eq!(view.env, ["A=1", "B=2"]);
        let mounts: Vec<_> = view
            .mounts
            .iter()
            .map(|m| {
                (
                    &m.destination[..],
                    &m.type_[..],
                    &m.source[..],
                    m.options.clone(),
                )
            })
            .collect();
        assert_eq!(
            mounts,
            [
                ("/proc", "proc", "proc", vec![]),
                (
                    "/data",
                    "bind",
                    "/srv/d",
                    vec!["rbind".to_string(), "ro".into()]
                )
            ]
        );
        assert_eq!(view.linux.cgroups_path, "/kubepods/pod1/c1");
        let r = view.linux.resources.as_ref().unwrap();
        assert_eq!(r.memory.limit.value, 1048576);
        assert!(r.memory.reservation.is_none() && r.memory.swap.is_none());
        assert_eq!((r.cpu.shares.value, r.cpu.quota.value), (512, 5000));
        assert!(r.cpu.period.is_none());
        assert_eq!((&r.cpu.cpus[..], &r.cpu.mems[..]), ("0-1", ""));
        assert_eq!(
            r.unified.get("memory.high").map(String::as_str),
            Some("900000")
        );

        let bare: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2", "root": {"path": "rootfs"}
        }))
        .unwrap();
        let view = SpecView::of(&bare);
        assert!(view.args.is_empty() && view.env.is_empty() && view.mounts.is_empty());
        let r = view.linux.resources.as_ref().unwrap();
        assert!(r.memory.limit.is_none() && r.cpu.shares.is_none() && r.unified.is_empty());
    }

    #[test]
    fn fields_cri_resources_cannot_carry_are_named() {
        let mut r = resources_from_cri(&v1::LinuxContainerResources {
            memory_limit_in_bytes: 1 << 20,
            cpu_quota: 5000,
            cpuset_cpus: "0".into(),
            ..Default::default()
        });
        assert!(beyond_cri(&r).is_empty(), "CRI's own fields pass");
        r.pids = MessageField::some(api::LinuxPids {
            limit: 10,
            ..Default::default()
        });
        r.memory.mut_or_insert_default().swappiness = MessageField::some(Default::default());
        r.cpu.mut_or_insert_default().realtime_period = MessageField::some(Default::default());
        assert_eq!(
            beyond_cri(&r),
            [
                api::Field::MemSwappiness,
                api::Field::CPURealtimePeriod,
                api::Field::PidsLimit
            ]
        );
        let mut owners = api::OwningPlugins::new();
        owners
            .owners
            .entry("c".into())
            .or_default()
            .simple
            .insert(api::Field::PidsLimit as i32, "10-x".into());
        assert_eq!(owners_of(&owners, "c", &beyond_cri(&r)), "10-x");
        let e = refusal("10-x", "c", &[api::Field::PidsLimit]);
        assert!(e.contains("\"10-x\"") && e.contains("PidsLimit"), "{e}");
    }
}
