//! The plugins' merged CreateContainer adjustment applied to the OCI spec
//! (as JSON, so every OCI field is reachable): annotations, env, args,
//! mounts, OCI hooks, devices, device cgroup rules, CDI devices, rlimits,
//! resources, cgroups path, OOM score, RDT class (and its removal), sysctls,
//! seccomp and namespaces. What cannot be applied is refused naming the
//! plugin that asked and the field: a blockio class (none is configured),
//! and what the OCI runtime berth drives (runc 1.1, runtime-spec 1.0.2)
//! would drop without a word, as Go's JSON decoding ignores fields it does
//! not know: the I/O priority, the scheduler, network devices, the memory
//! policy, RDT schemata and monitoring, the kernel memory limit (ignored
//! since runc 1.0) and turning memory hierarchy off.

use std::path::PathBuf;

use berth_nri::api::{self, Field};
use berth_nri::merge::{is_marked_for_removal, Owners};
use oci_spec::runtime::Spec;
use serde_json::{json, Map, Value};

use crate::error::Error;

/// Applies `adjust` (owned as `owners` says) to container `id`'s spec.
pub fn apply(
    id: &str,
    spec: &mut Spec,
    adjust: &api::ContainerAdjustment,
    owners: &api::OwningPlugins,
    cdi_dirs: &[PathBuf],
) -> Result<(), Error> {
    // Nothing asked: the spec stays as it is, without its round trip
    // through JSON (0.13 ms).
    if *adjust == api::ContainerAdjustment::default() {
        return Ok(());
    }
    let owners = Owners(owners.clone());
    let refuse = |field: Field, why: String| {
        let plugin = owner(&owners, id, field);
        Error::InvalidArgument(format!(
            "NRI plugin {plugin:?}: adjustment of container {id} cannot be applied: {why}"
        ))
    };
    let mut v = serde_json::to_value(&*spec).map_err(|e| Error::Internal(e.to_string()))?;
    let o = v.as_object_mut().expect("a spec is an object");
    map(obj(o, "annotations"), &adjust.annotations);
    let process = obj(o, "process");
    env(arr(process, "env"), &adjust.env);
    if !adjust.args.is_empty() {
        process.insert("args".into(), json!(adjust.args));
    }
    rlimits(arr(process, "rlimits"), &adjust.rlimits);
    mounts(arr(o, "mounts"), &adjust.mounts);
    if let Some(h) = adjust.hooks.as_ref() {
        hooks(obj(o, "hooks"), h);
    }
    if let Some(l) = adjust.linux.as_ref() {
        if let Some(p) = l.oom_score_adj.as_ref() {
            obj(o, "process").insert("oomScoreAdj".into(), json!(p.value));
        }
        linux(obj(o, "linux"), l).map_err(|(f, why)| refuse(f, why))?;
    }
    let mut adjusted: Spec = serde_json::from_value(v)
        .map_err(|e| refuse(Field::None, format!("the adjusted spec is not valid: {e}")))?;
    let names: Vec<String> = adjust.CDI_devices.iter().map(|d| d.name.clone()).collect();
    if !names.is_empty() {
        berth_spec::apply_cdi_devices(id, &names, cdi_dirs, &mut adjusted)
            .map_err(|e| refuse(Field::CdiDevices, e.to_string()))?;
    }
    *spec = adjusted;
    Ok(())
}

/// Who set `field` of container `id`: the owner of a simple field, or the
/// owners of a compound field's entries.
fn owner(owners: &Owners, id: &str, field: Field) -> String {
    if let Some(p) = owners.owner(id, field) {
        return p.to_string();
    }
    let mut plugins: Vec<String> = owners
        .entries(id, field)
        .into_iter()
        .map(|(_, p)| is_marked_for_removal(&p).0.to_string())
        .collect();
    plugins.dedup();
    match plugins.is_empty() {
        true => "an NRI plugin".into(),
        false => plugins.join(","),
    }
}

/// The refusal of a field the OCI runtime would silently drop.
fn dropped(field: Field, what: &str) -> Refused {
    (
        field,
        format!(
            "{what} (NRI field {field:?}) is not supported by the OCI runtime \
             (runc 1.1 would silently ignore it)"
        ),
    )
}

fn obj<'a>(o: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let e = o.entry(key).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("an object")
}

fn arr<'a>(o: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let e = o.entry(key).or_insert_with(|| json!([]));
    if !e.is_array() {
        *e = json!([]);
    }
    e.as_array_mut().expect("an array")
}

/// A string map with removal markers (`-key`).
fn map(o: &mut Map<String, Value>, adjust: &std::collections::HashMap<String, String>) {
    let mut keys: Vec<_> = adjust.keys().collect();
    keys.sort();
    for k in keys {
        match is_marked_for_removal(k) {
            (key, true) => o.remove(key),
            (key, false) => o.insert(key.into(), json!(adjust[k])),
        };
    }
}

fn env(list: &mut Vec<Value>, adjust: &[api::KeyValue]) {
    for kv in adjust {
        let (key, removed) = is_marked_for_removal(&kv.key);
        let prefix = format!("{key}=");
        list.retain(|e| !e.as_str().is_some_and(|s| s.starts_with(&prefix)));
        if !removed {
            list.push(json!(format!("{key}={}", kv.value)));
        }
    }
}

fn rlimits(list: &mut Vec<Value>, adjust: &[api::POSIXRlimit]) {
    for r in adjust {
        list.retain(|e| e["type"].as_str() != Some(r.type_.as_str()));
        list.push(json!({"type": r.type_, "hard": r.hard, "soft": r.soft}));
    }
}

fn mounts(list: &mut Vec<Value>, adjust: &[api::Mount]) {
    for m in adjust {
        let (dest, removed) = is_marked_for_removal(&m.destination);
        list.retain(|e| e["destination"].as_str() != Some(dest));
        if !removed {
            list.push(json!({
                "destination": dest, "type": m.type_, "source": m.source, "options": m.options,
            }));
        }
    }
}

fn hooks(o: &mut Map<String, Value>, h: &api::Hooks) {
    for (key, list) in [
        ("prestart", &h.prestart),
        ("createRuntime", &h.create_runtime),
        ("createContainer", &h.create_container),
        ("startContainer", &h.start_container),
        ("poststart", &h.poststart),
        ("poststop", &h.poststop),
    ] {
        for hook in list {
            let mut v = json!({"path": hook.path, "args": hook.args, "env": hook.env});
            if let Some(t) = hook.timeout.as_ref() {
                v["timeout"] = json!(t.value);
            }
            arr(o, key).push(v);
        }
    }
}

type Refused = (Field, String);

fn linux(o: &mut Map<String, Value>, l: &api::LinuxContainerAdjustment) -> Result<(), Refused> {
    for d in &l.devices {
        let (path, removed) = is_marked_for_removal(&d.path);
        arr(o, "devices").retain(|e| e["path"].as_str() != Some(path));
        if removed {
            continue;
        }
        if !matches!(d.type_.as_str(), "c" | "b" | "p" | "u") {
            return Err((Field::Devices, format!("device {path}: type {:?}", d.type_)));
        }
        arr(obj(o, "resources"), "devices").push(json!({"allow": true, "type": d.type_, "major": d.major, "minor": d.minor, "access": "rwm"}));
        let mut dev = json!({"path": path, "type": d.type_, "major": d.major, "minor": d.minor});
        if let Some(m) = d.file_mode.as_ref() {
            dev["fileMode"] = json!(m.value);
        }
        if let Some(u) = d.uid.as_ref() {
            dev["uid"] = json!(u.value);
        }
        if let Some(g) = d.gid.as_ref() {
            dev["gid"] = json!(g.value);
        }
        arr(o, "devices").push(dev);
    }
    if !l.cgroups_path.is_empty() {
        o.insert("cgroupsPath".into(), json!(l.cgroups_path));
    }
    map(obj(o, "sysctl"), &l.sysctl);
    for n in &l.namespaces {
        let (typ, removed) = is_marked_for_removal(&n.type_);
        arr(o, "namespaces").retain(|e| e["type"].as_str() != Some(typ));
        if !removed {
            let mut ns = json!({"type": typ});
            if !n.path.is_empty() {
                ns["path"] = json!(n.path);
            }
            arr(o, "namespaces").push(ns);
        }
    }
    if let Some(s) = l.seccomp_policy.as_ref() {
        o.insert("seccomp".into(), seccomp(s));
    }
    if let Some(r) = l.resources.as_ref() {
        resources(o, r)?;
    }
    if let Some(rdt) = l.rdt.as_ref() {
        if rdt.remove {
            o.remove("intelRdt");
        }
        if let Some(c) = rdt.clos_id.as_ref() {
            obj(o, "intelRdt").insert("closID".into(), json!(c.value));
        }
        if rdt.schemata.as_ref().is_some_and(|s| !s.value.is_empty()) {
            return Err(dropped(Field::RdtSchemata, "an RDT schemata"));
        }
        if rdt.enable_monitoring.as_ref().is_some_and(|m| m.value) {
            return Err(dropped(Field::RdtEnableMonitoring, "RDT monitoring"));
        }
    }
    if l.io_priority.is_some() {
        return Err(dropped(Field::IoPriority, "an I/O priority"));
    }
    if l.scheduler.is_some() {
        return Err(dropped(Field::LinuxSched, "a scheduler policy"));
    }
    if l.memory_policy.is_some() {
        return Err(dropped(Field::MemoryPolicy, "a memory policy"));
    }
    let mut added: Vec<&str> = l
        .net_devices
        .keys()
        .filter(|k| !is_marked_for_removal(k).1)
        .map(String::as_str)
        .collect();
    if !added.is_empty() {
        added.sort();
        let what = format!("network device {}", added.join(", "));
        return Err(dropped(Field::LinuxNetDevices, &what));
    }
    Ok(())
}

fn seccomp(s: &api::LinuxSeccomp) -> Value {
    let mut v = json!({
        "defaultAction": s.default_action, "architectures": s.architectures, "flags": s.flags,
        "syscalls": s.syscalls.iter().map(|c| {
            let mut sc = json!({"names": c.names, "action": c.action, "args": c.args.iter().map(|a| json!({
                "index": a.index, "value": a.value, "valueTwo": a.value_two, "op": a.op,
            })).collect::<Vec<_>>()});
            if let Some(e) = c.errno_ret.as_ref() { sc["errnoRet"] = json!(e.value); }
            sc
        }).collect::<Vec<_>>(),
    });
    if let Some(e) = s.default_errno.as_ref() {
        v["defaultErrnoRet"] = json!(e.value);
    }
    if !s.listener_path.is_empty() {
        v["listenerPath"] = json!(s.listener_path);
        v["listenerMetadata"] = json!(s.listener_metadata);
    }
    v
}

fn resources(o: &mut Map<String, Value>, r: &api::LinuxResources) -> Result<(), Refused> {
    if let Some(c) = r.rdt_class.as_ref() {
        obj(o, "intelRdt").insert("closID".into(), json!(c.value));
    }
    if r.blockio_class.is_some() {
        return Err((
            Field::BlockioClass,
            "blockio classes are not configured in berth".into(),
        ));
    }
    let res = obj(o, "resources");
    for d in &r.devices {
        let mut rule = json!({"allow": d.allow, "type": d.type_, "access": d.access});
        if let Some(m) = d.major.as_ref() {
            rule["major"] = json!(m.value);
        }
        if let Some(m) = d.minor.as_ref() {
            rule["minor"] = json!(m.value);
        }
        arr(res, "devices").push(rule);
    }
    if let Some(m) = r.memory.as_ref() {
        if m.kernel.is_some() {
            return Err(dropped(Field::MemKernelLimit, "a kernel memory limit"));
        }
        // Hierarchical accounting is what the kernel does (cgroup v2
        // always, v1 by default): only turning it off would be dropped.
        if m.use_hierarchy.as_ref().is_some_and(|h| !h.value) {
            return Err(dropped(
                Field::MemUseHierarchy,
                "memory.use_hierarchy=false",
            ));
        }
        let mem = obj(res, "memory");
        for (k, v) in [
            ("limit", &m.limit),
            ("reservation", &m.reservation),
            ("swap", &m.swap),
            ("kernelTCP", &m.kernel_tcp),
        ] {
            if let Some(v) = v.as_ref() {
                mem.insert(k.into(), json!(v.value));
            }
        }
        if let Some(v) = m.swappiness.as_ref() {
            mem.insert("swappiness".into(), json!(v.value));
        }
        if let Some(v) = m.disable_oom_killer.as_ref() {
            mem.insert("disableOOMKiller".into(), json!(v.value));
        }
    }
    if let Some(c) = r.cpu.as_ref() {
        let cpu = obj(res, "cpu");
        for (k, v) in [
            ("shares", &c.shares),
            ("period", &c.period),
            ("realtimePeriod", &c.realtime_period),
        ] {
            if let Some(v) = v.as_ref() {
                cpu.insert(k.into(), json!(v.value));
            }
        }
        for (k, v) in [
            ("quota", &c.quota),
            ("realtimeRuntime", &c.realtime_runtime),
        ] {
            if let Some(v) = v.as_ref() {
                cpu.insert(k.into(), json!(v.value));
            }
        }
        for (k, v) in [("cpus", &c.cpus), ("mems", &c.mems)] {
            if !v.is_empty() {
                cpu.insert(k.into(), json!(v));
            }
        }
    }
    if let Some(p) = r.pids.as_ref() {
        obj(res, "pids").insert("limit".into(), json!(p.limit));
    }
    for h in &r.hugepage_limits {
        let list = arr(res, "hugepageLimits");
        list.retain(|e| e["pageSize"].as_str() != Some(h.page_size.as_str()));
        list.push(json!({"pageSize": h.page_size, "limit": h.limit}));
    }
    map(obj(res, "unified"), &r.unified);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        serde_json::from_value(json!({
            "ociVersion": "1.0.2",
            "process": {"cwd": "/", "args": ["sh"], "env": ["PATH=/bin", "OLD=1"], "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "annotations": {"gone": "x"},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network", "path": "/run/netns/x"}]}
        }))
        .unwrap()
    }

    #[test]
    fn an_empty_adjustment_leaves_the_spec_as_it_is() {
        let mut s = spec();
        let adjust = api::ContainerAdjustment::new();
        apply("c1", &mut s, &adjust, &Default::default(), &[]).unwrap();
        assert_eq!(s, spec());
        // One field set is not empty: it is applied.
        let mut adjust = api::ContainerAdjustment::new();
        adjust.annotations.insert("k".into(), "v".into());
        apply("c1", &mut s, &adjust, &Default::default(), &[]).unwrap();
        assert_eq!(s.annotations().as_ref().unwrap().get("k").unwrap(), "v");
    }

    #[test]
    fn an_adjustment_lands_in_the_spec_with_its_removals() {
        let mut a = api::ContainerAdjustment::new();
        a.annotations.insert("-gone".into(), String::new());
        a.annotations.insert("new".into(), "y".into());
        for (k, v) in [("-OLD", ""), ("NRI", "1")] {
            a.env.push(api::KeyValue {
                key: k.into(),
                value: v.into(),
                ..Default::default()
            });
        }
        a.rlimits.push(api::POSIXRlimit {
            type_: "RLIMIT_NOFILE".into(),
            hard: 10,
            soft: 5,
            ..Default::default()
        });
        let mut l = api::LinuxContainerAdjustment::new();
        l.devices.push(api::LinuxDevice {
            path: "/dev/x".into(),
            type_: "c".into(),
            major: 1,
            minor: 3,
            ..Default::default()
        });
        l.namespaces.push(api::LinuxNamespace {
            type_: "-network".into(),
            ..Default::default()
        });
        l.oom_score_adj = protobuf::MessageField::some(api::OptionalInt {
            value: 5,
            ..Default::default()
        });
        let mut r = api::LinuxResources::new();
        r.rdt_class = protobuf::MessageField::some(api::OptionalString {
            value: "gold".into(),
            ..Default::default()
        });
        r.unified.insert("memory.high".into(), "1M".into());
        l.resources = protobuf::MessageField::some(r);
        a.linux = protobuf::MessageField::some(l);
        let mut s = spec();
        apply("c1", &mut s, &a, &Default::default(), &[]).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["annotations"], json!({"new": "y"}));
        assert_eq!(v["process"]["env"], json!(["PATH=/bin", "NRI=1"]));
        assert_eq!(v["process"]["rlimits"][0]["type"], "RLIMIT_NOFILE");
        assert_eq!(v["process"]["oomScoreAdj"], 5);
        assert_eq!(v["linux"]["devices"][0]["path"], "/dev/x");
        assert_eq!(v["linux"]["resources"]["devices"][0]["access"], "rwm");
        assert_eq!(v["linux"]["namespaces"], json!([{"type": "pid"}]));
        assert_eq!(v["linux"]["intelRdt"]["closID"], "gold");
        assert_eq!(v["linux"]["resources"]["unified"]["memory.high"], "1M");
    }

    #[test]
    fn what_cannot_be_applied_is_refused_naming_the_plugin() {
        let mut r = api::LinuxResources::new();
        r.blockio_class = protobuf::MessageField::some(api::OptionalString {
            value: "slow".into(),
            ..Default::default()
        });
        let mut l = api::LinuxContainerAdjustment::new();
        l.resources = protobuf::MessageField::some(r);
        let mut a = api::ContainerAdjustment::new();
        a.linux = protobuf::MessageField::some(l);
        let mut owners = Owners(Default::default());
        owners.claim("c1", Field::BlockioClass, "10-io").unwrap();
        let mut s = spec();
        let before = serde_json::to_value(&s).unwrap();
        let e = apply("c1", &mut s, &a, &owners.0, &[]).unwrap_err();
        assert!(
            e.to_string().contains("10-io") && e.to_string().contains("blockio"),
            "{e}"
        );
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            before,
            "the spec is unchanged"
        );
        let mut a = api::ContainerAdjustment::new();
        a.CDI_devices.push(api::CDIDevice {
            name: "vendor.com/gpu=0".into(),
            ..Default::default()
        });
        assert!(apply("c1", &mut s, &a, &Default::default(), &[]).is_err());
    }

    fn with_linux(l: api::LinuxContainerAdjustment) -> api::ContainerAdjustment {
        let mut a = api::ContainerAdjustment::new();
        a.linux = protobuf::MessageField::some(l);
        a
    }

    /// `l` claimed by plugin "10-x" for `field` is refused naming the
    /// plugin and the field, and the spec is left as it was.
    fn assert_refused(l: api::LinuxContainerAdjustment, field: Field, entry: Option<&str>) {
        let mut owners = Owners(Default::default());
        match entry {
            Some(e) => owners.claim_entry("c1", field, e, "10-x").unwrap(),
            None => owners.claim("c1", field, "10-x").unwrap(),
        }
        let mut s = spec();
        let before = serde_json::to_value(&s).unwrap();
        let e = apply("c1", &mut s, &with_linux(l), &owners.0, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"10-x\"") && e.contains(&format!("{field:?}")) && e.contains("runc"),
            "{e}"
        );
        assert_eq!(serde_json::to_value(&s).unwrap(), before, "{field:?}");
    }

    #[test]
    fn fields_runc_would_drop_are_refused_naming_plugin_and_field() {
        let mut l = api::LinuxContainerAdjustment::new();
        l.scheduler.mut_or_insert_default().priority = 5;
        assert_refused(l, Field::LinuxSched, None);
        let mut l = api::LinuxContainerAdjustment::new();
        l.io_priority.mut_or_insert_default().priority = 3;
        assert_refused(l, Field::IoPriority, None);
        let mut l = api::LinuxContainerAdjustment::new();
        l.memory_policy.mut_or_insert_default().nodes = "0".into();
        assert_refused(l, Field::MemoryPolicy, None);
        let mut l = api::LinuxContainerAdjustment::new();
        l.net_devices.insert("eth1".into(), Default::default());
        assert_refused(l, Field::LinuxNetDevices, Some("eth1"));
        let mut l = api::LinuxContainerAdjustment::new();
        l.rdt.mut_or_insert_default().schemata =
            protobuf::MessageField::some(api::OptionalRepeatedString {
                value: vec!["L3:0=f".into()],
                ..Default::default()
            });
        assert_refused(l, Field::RdtSchemata, None);
        let mut l = api::LinuxContainerAdjustment::new();
        l.rdt.mut_or_insert_default().enable_monitoring =
            protobuf::MessageField::some(api::OptionalBool {
                value: true,
                ..Default::default()
            });
        assert_refused(l, Field::RdtEnableMonitoring, None);
        let mut l = api::LinuxContainerAdjustment::new();
        let mem = l
            .resources
            .mut_or_insert_default()
            .memory
            .mut_or_insert_default();
        mem.kernel = protobuf::MessageField::some(api::OptionalInt64 {
            value: 1 << 20,
            ..Default::default()
        });
        assert_refused(l, Field::MemKernelLimit, None);
        let mut l = api::LinuxContainerAdjustment::new();
        let mem = l
            .resources
            .mut_or_insert_default()
            .memory
            .mut_or_insert_default();
        mem.use_hierarchy = protobuf::MessageField::some(api::OptionalBool::default());
        assert_refused(l, Field::MemUseHierarchy, None);
    }

    #[test]
    fn rdt_removal_clos_id_and_device_rules_are_applied() {
        let mut s = spec();
        let mut v = serde_json::to_value(&s).unwrap();
        v["linux"]["intelRdt"] = json!({"closID": "old", "l3CacheSchema": "L3:0=f"});
        s = serde_json::from_value(v).unwrap();
        let mut l = api::LinuxContainerAdjustment::new();
        let rdt = l.rdt.mut_or_insert_default();
        rdt.remove = true;
        rdt.clos_id = protobuf::MessageField::some(api::OptionalString {
            value: "gold".into(),
            ..Default::default()
        });
        // Removing a network device the spec does not have, and saying
        // hierarchy stays on, change nothing and are not refused.
        l.net_devices.insert("-eth1".into(), Default::default());
        let r = l.resources.mut_or_insert_default();
        r.memory.mut_or_insert_default().use_hierarchy =
            protobuf::MessageField::some(api::OptionalBool {
                value: true,
                ..Default::default()
            });
        r.devices.push(api::LinuxDeviceCgroup {
            allow: false,
            type_: "c".into(),
            major: protobuf::MessageField::some(api::OptionalInt64 {
                value: 10,
                ..Default::default()
            }),
            access: "rwm".into(),
            ..Default::default()
        });
        apply("c1", &mut s, &with_linux(l), &Default::default(), &[]).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["linux"]["intelRdt"], json!({"closID": "gold"}));
        assert_eq!(
            v["linux"]["resources"]["devices"],
            json!([{"allow": false, "type": "c", "major": 10, "access": "rwm"}])
        );
        assert!(v["linux"].get("netDevices").is_none());
    }
}
