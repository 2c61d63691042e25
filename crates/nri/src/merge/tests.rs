use protobuf::MessageField;

use super::*;

fn request() -> api::CreateContainerRequest {
    let mut c = api::Container::new();
    c.id = "ctr".into();
    c.env = vec!["KEEP=1".into(), "DROP=2".into(), "MOD=old".into()];
    c.annotations.insert("keep".into(), "1".into());
    c.annotations.insert("drop".into(), "2".into());
    let mut m = api::Mount::new();
    m.destination = "/old".into();
    c.mounts.push(m);
    let mut d = api::LinuxDevice::new();
    d.path = "/dev/old".into();
    c.linux.mut_or_insert_default().devices.push(d);
    api::CreateContainerRequest {
        container: MessageField::some(c),
        ..Default::default()
    }
}

fn reply(adjust: api::ContainerAdjustment) -> api::CreateContainerResponse {
    api::CreateContainerResponse {
        adjust: MessageField::some(adjust),
        ..Default::default()
    }
}

fn kv(k: &str, v: &str) -> api::KeyValue {
    api::KeyValue {
        key: k.into(),
        value: v.into(),
        ..Default::default()
    }
}

fn mount(dst: &str) -> api::Mount {
    api::Mount {
        destination: dst.into(),
        source: "/src".into(),
        type_: "bind".into(),
        ..Default::default()
    }
}

fn device(path: &str) -> api::LinuxDevice {
    api::LinuxDevice {
        path: path.into(),
        type_: "c".into(),
        ..Default::default()
    }
}

#[test]
fn env_add_modify_and_remove() {
    let mut m = CreateMerge::new(request());
    let mut a = api::ContainerAdjustment::new();
    a.env = vec![kv("NEW", "x"), kv("MOD", "new"), kv("-DROP", "")];
    m.apply(&reply(a), "10-a").unwrap();
    let env = &m.request.container.env;
    assert!(env.contains(&"KEEP=1".to_string()));
    assert!(env.contains(&"MOD=new".to_string()));
    assert!(!env.iter().any(|e| e.starts_with("DROP=") || e == "MOD=old"));
    let keys: Vec<&str> = m.adjust.env.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, vec!["NEW", "MOD", "-DROP"]);
    // A second plugin setting the same variable conflicts, naming both.
    let mut b = api::ContainerAdjustment::new();
    b.env = vec![kv("NEW", "y")];
    let e = m.apply(&reply(b), "20-b").unwrap_err();
    assert_eq!(
        e.to_string(),
        "plugins \"20-b\" and \"10-a\" both tried to set Env NEW"
    );
}

#[test]
fn removal_then_readd_by_same_plugin_is_a_replacement() {
    let mut m = CreateMerge::new(request());
    let mut a = api::ContainerAdjustment::new();
    a.env = vec![kv("-MOD", ""), kv("MOD", "re")];
    m.apply(&reply(a), "10-a").unwrap();
    let keys: Vec<&str> = m.adjust.env.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, vec!["MOD"]);
    // Another plugin removing what the first one set is refused later on
    // when it tries to set it.
    let mut b = api::ContainerAdjustment::new();
    b.env = vec![kv("MOD", "other")];
    assert!(m.apply(&reply(b), "20-b").is_err());
}

#[test]
fn annotations_with_markers() {
    let mut m = CreateMerge::new(request());
    let mut a = api::ContainerAdjustment::new();
    a.annotations.insert("new".into(), "v".into());
    a.annotations.insert("-drop".into(), "".into());
    m.apply(&reply(a), "10-a").unwrap();
    let c = &m.request.container;
    assert_eq!(c.annotations.get("new").map(String::as_str), Some("v"));
    assert!(!c.annotations.contains_key("drop"));
    assert!(m.adjust.annotations.contains_key("-drop"));
    let mut b = api::ContainerAdjustment::new();
    b.annotations.insert("drop".into(), "again".into());
    let e = m.apply(&reply(b), "20-b").unwrap_err();
    assert!(e.to_string().contains("Annotations drop"), "{e}");
    assert!(e.to_string().contains("10-a") && e.to_string().contains("20-b"));
}

#[test]
fn mounts_and_devices_with_markers() {
    let mut m = CreateMerge::new(request());
    let mut a = api::ContainerAdjustment::new();
    a.mounts = vec![mount("/new"), mount("-/old")];
    a.linux.mut_or_insert_default().devices = vec![device("/dev/new"), device("-/dev/old")];
    m.apply(&reply(a), "10-a").unwrap();
    let c = &m.request.container;
    let dsts: Vec<&str> = c.mounts.iter().map(|m| m.destination.as_str()).collect();
    assert_eq!(dsts, vec!["/new"]);
    let out: Vec<&str> = m
        .adjust
        .mounts
        .iter()
        .map(|m| m.destination.as_str())
        .collect();
    assert_eq!(out, vec!["/new", "-/old"]);
    let devs: Vec<&str> = c.linux.devices.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(devs, vec!["/dev/new"]);
    let out: Vec<&str> = m
        .adjust
        .linux
        .devices
        .iter()
        .map(|d| d.path.as_str())
        .collect();
    assert_eq!(out, vec!["/dev/new", "-/dev/old"]);
    let mut b = api::ContainerAdjustment::new();
    b.mounts = vec![mount("/new")];
    assert!(m
        .apply(&reply(b), "20-b")
        .unwrap_err()
        .to_string()
        .contains("Mounts /new"));
    let mut b = api::ContainerAdjustment::new();
    b.linux.mut_or_insert_default().devices = vec![device("/dev/new")];
    assert!(m
        .apply(&reply(b), "20-b")
        .unwrap_err()
        .to_string()
        .contains("Devices /dev/new"));
}

#[test]
fn hooks_accumulate_across_plugins() {
    let mut m = CreateMerge::new(request());
    for p in ["10-a", "20-b"] {
        let mut a = api::ContainerAdjustment::new();
        let h = a.hooks.mut_or_insert_default();
        h.prestart.push(api::Hook {
            path: format!("/bin/{p}"),
            ..Default::default()
        });
        m.apply(&reply(a), p).unwrap();
    }
    assert_eq!(m.adjust.hooks.prestart.len(), 2);
    assert_eq!(m.request.container.hooks.prestart.len(), 2);
    assert_eq!(m.owners().owner("ctr", Field::OciHooks), Some("10-a,20-b"));
}

#[test]
fn simple_linux_fields_and_resources() {
    let mut m = CreateMerge::new(request());
    let mut a = api::ContainerAdjustment::new();
    let l = a.linux.mut_or_insert_default();
    l.oom_score_adj = MessageField::some(api::OptionalInt {
        value: -500,
        ..Default::default()
    });
    l.cgroups_path = "/x".into();
    let r = l.resources.mut_or_insert_default();
    r.cpu.mut_or_insert_default().shares = MessageField::some(api::OptionalUInt64 {
        value: 512,
        ..Default::default()
    });
    r.unified.insert("memory.high".into(), "100M".into());
    a.rlimits.push(api::POSIXRlimit {
        type_: "RLIMIT_NOFILE".into(),
        hard: 10,
        soft: 5,
        ..Default::default()
    });
    a.args = vec!["/bin/sh".into()];
    m.apply(&reply(a), "10-a").unwrap();
    let c = &m.request.container;
    assert_eq!(c.linux.oom_score_adj.value, -500);
    assert_eq!(c.linux.resources.cpu.shares.value, 512);
    assert_eq!(c.args, vec!["/bin/sh".to_string()]);
    assert_eq!(m.adjust.linux.resources.unified["memory.high"], "100M");
    assert_eq!(m.adjust.rlimits.len(), 1);
    let mut b = api::ContainerAdjustment::new();
    b.linux.mut_or_insert_default().oom_score_adj = MessageField::some(api::OptionalInt::new());
    let e = m.apply(&reply(b), "20-b").unwrap_err();
    assert!(e.to_string().contains("OomScoreAdj"), "{e}");
    let mut b = api::ContainerAdjustment::new();
    b.rlimits.push(api::POSIXRlimit {
        type_: "RLIMIT_NOFILE".into(),
        ..Default::default()
    });
    assert!(m
        .apply(&reply(b), "20-b")
        .unwrap_err()
        .to_string()
        .contains("Rlimits"));
    // Args can be overridden with the leading-empty-string convention.
    let mut b = api::ContainerAdjustment::new();
    b.args = vec!["".into(), "/bin/true".into()];
    m.apply(&reply(b), "20-b").unwrap();
    assert_eq!(m.adjust.args, vec!["/bin/true".to_string()]);
}

#[test]
fn sysctl_namespaces_net_devices() {
    let mut m = CreateMerge::new(request());
    let mut a = api::ContainerAdjustment::new();
    let l = a.linux.mut_or_insert_default();
    l.sysctl.insert("net.ipv4.ip_forward".into(), "1".into());
    l.namespaces.push(api::LinuxNamespace {
        type_: "network".into(),
        path: "/proc/1/ns/net".into(),
        ..Default::default()
    });
    l.net_devices
        .insert("eth1".into(), api::LinuxNetDevice::new());
    m.apply(&reply(a), "10-a").unwrap();
    let c = &m.request.container.linux;
    assert_eq!(c.sysctl["net.ipv4.ip_forward"], "1");
    assert_eq!(c.namespaces.len(), 1);
    assert!(c.net_devices.contains_key("eth1"));
    let mut b = api::ContainerAdjustment::new();
    b.linux
        .mut_or_insert_default()
        .namespaces
        .push(api::LinuxNamespace {
            type_: "-network".into(),
            ..Default::default()
        });
    let e = m.apply(&reply(b), "20-b").unwrap_err();
    assert!(e.to_string().contains("Namespace network"), "{e}");
}

#[test]
fn updates_merge_and_conflict() {
    let mut m = CreateMerge::new(request());
    let upd = |id: &str, limit: i64, ignore: bool| {
        let mut u = api::ContainerUpdate::new();
        u.container_id = id.into();
        u.ignore_failure = ignore;
        let r = u
            .linux
            .mut_or_insert_default()
            .resources
            .mut_or_insert_default();
        r.memory.mut_or_insert_default().limit = MessageField::some(api::OptionalInt64 {
            value: limit,
            ..Default::default()
        });
        u
    };
    let mut r = api::CreateContainerResponse::new();
    r.update = vec![upd("other", 100, false)];
    m.apply(&r, "10-a").unwrap();
    // A conflicting update marked ignore_failure is dropped, not an error.
    r.update = vec![upd("other", 200, true)];
    m.apply(&r, "20-b").unwrap();
    r.update = vec![upd("other", 300, false)];
    let e = m.apply(&r, "20-b").unwrap_err();
    assert!(e.to_string().contains("MemLimit"));
    // Updating the container being created is refused.
    r.update = vec![upd("ctr", 1, false)];
    assert!(matches!(
        m.apply(&r, "20-b"),
        Err(MergeError::UpdateOfCreated { .. })
    ));
    let out = m.into_response();
    assert_eq!(out.update.len(), 1);
    assert_eq!(out.update[0].linux.resources.memory.limit.value, 100);
}

#[test]
fn update_container_target_resources() {
    let mut req = api::LinuxResources::new();
    req.cpu.mut_or_insert_default().cpus = "0".into();
    let mut m = UpdateMerge::new(None, Some(("t".into(), req)));
    let mut u = api::ContainerUpdate::new();
    u.container_id = "t".into();
    let r = u
        .linux
        .mut_or_insert_default()
        .resources
        .mut_or_insert_default();
    r.cpu.mut_or_insert_default().mems = "1".into();
    m.apply(&[u], "10-a").unwrap();
    let t = m.target_resources().unwrap();
    assert_eq!((t.cpu.cpus.as_str(), t.cpu.mems.as_str()), ("0", "1"));
    assert!(m.into_updates().is_empty());
}
