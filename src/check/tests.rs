//! Unit tests of `check`.

use super::*;
use berth_host::fake::FakeHost;
use berth_host::Ran;
use std::path::Path;

/// This CI machine's shape: root, cgroup v1 hybrid, overlay, runc, crun,
/// the CNI plugins in /usr/lib/cni, no systemd, no LSM.
fn debian() -> FakeHost {
    let mut host = FakeHost {
        kernel: "6.1.0-18-amd64".into(),
        path: vec![
            "/usr/local/bin".into(),
            "/usr/sbin".into(),
            "/usr/bin".into(),
        ],
        exe_dir: Some("/usr/bin".into()),
        ..FakeHost::default()
    };
    host.file(
        "/proc/self/mountinfo",
        "25 1 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
         26 25 0:24 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
         27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
    );
    host.file(
        "/proc/cgroups",
        "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
         cpuset\t2\t1\t1\ncpu\t3\t1\t1\ncpuacct\t3\t1\t1\nmemory\t4\t1\t1\n\
         devices\t5\t1\t1\npids\t6\t1\t1\nhugetlb\t7\t1\t1\n",
    );
    host.file(
        "/proc/filesystems",
        "nodev\tcgroup2\n\text4\nnodev\toverlay\n",
    );
    host.file("/proc/sys/net/ipv4/ip_forward", "1\n");
    host.file("/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n");
    host.exe("/usr/sbin/runc", Ran::Ok("runc version 1.1.5+ds1".into()));
    host.exe("/usr/bin/crun", Ran::Ok("crun version 1.8.1".into()));
    host.exe("/usr/bin/berth-shim", Ran::Ok(String::new()));
    for plugin in ["bridge", "host-local", "portmap", "loopback"] {
        host.exe(&format!("/usr/lib/cni/{plugin}"), Ran::Ok(String::new()));
    }
    host
}

fn find<'a>(items: &'a [Item], name: &str) -> &'a Item {
    items
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no item {name:?} in {items:#?}"))
}

#[test]
fn a_complete_host_passes() {
    let items = run(&Config::default(), &debian());
    assert!(passed(&items), "{}", render(&items));
    let runc = find(&items, "runtime runc");
    assert_eq!(runc.status, Status::Ok);
    assert_eq!(
        items[1].name, "runtime runc",
        "the default handler comes first"
    );
    assert!(
        runc.detail
            .contains("/usr/sbin/runc: runc version 1.1.5+ds1"),
        "{runc:?}"
    );
    assert!(runc.detail.contains("default handler"), "{runc:?}");
    assert_eq!(find(&items, "berth-shim").detail, "/usr/bin/berth-shim");
    assert!(find(&items, "cgroup mode").detail.starts_with("v1 (hybrid"));
    assert_eq!(
        find(&items, "cni plugin bridge").detail,
        "/usr/lib/cni/bridge"
    );
    assert_eq!(find(&items, "overlayfs").status, Status::Ok);
    assert_eq!(find(&items, "idmapped mounts").status, Status::Ok);
    assert_eq!(find(&items, "apparmor").detail, "not present");
    assert!(render(&items).ends_with("0 missing\n"));
}

#[test]
fn missing_default_runtime_fails_but_a_missing_extra_handler_only_warns() {
    let mut host = debian();
    host.executables.remove(Path::new("/usr/bin/crun"));
    let items = run(&Config::default(), &host);
    assert!(passed(&items));
    let crun = find(&items, "runtime crun");
    assert_eq!(crun.status, Status::Warn);
    assert!(crun
        .fix
        .as_deref()
        .unwrap()
        .contains("apt-get install crun"));

    host.executables.remove(Path::new("/usr/sbin/runc"));
    let items = run(&Config::default(), &host);
    assert!(!passed(&items));
    assert_eq!(find(&items, "runtime runc").status, Status::Missing);
}

#[test]
fn a_runtime_that_does_not_run_is_missing() {
    let mut host = debian();
    host.exe("/usr/sbin/runc", Ran::Failed("exec format error".into()));
    let items = run(&Config::default(), &host);
    let runc = find(&items, "runtime runc");
    assert_eq!(runc.status, Status::Missing);
    assert!(runc.detail.contains("exec format error"), "{runc:?}");
}

/// What the Status RPC found (crun claims no feature there) `berth check`
/// says too: crun runs nothing on a hybrid host whose cgroup2 mount has
/// controllers.
#[test]
fn crun_on_a_hybrid_host_with_v2_controllers_is_named() {
    let mut host = debian();
    let items = run(&Config::default(), &host);
    assert_eq!(find(&items, "runtime crun").status, Status::Ok);
    host.file("/sys/fs/cgroup/unified/cgroup.controllers", "memory pids\n");
    let items = run(&Config::default(), &host);
    assert!(passed(&items), "runc still runs pods: {items:#?}");
    let crun = find(&items, "runtime crun");
    assert_eq!(crun.status, Status::Warn);
    assert!(
        crun.detail.contains("crun refuses cgroup v1 hybrid hosts"),
        "{crun:?}"
    );
    assert!(
        crun.fix.as_deref().unwrap().contains("use runc"),
        "{crun:?}"
    );
}

#[test]
fn absolute_handler_paths_are_not_looked_up_in_path() {
    let mut config = Config::default();
    config.runtime.handlers.get_mut("runc").unwrap().binary = "/opt/runc/runc".into();
    let items = run(&config, &debian());
    assert_eq!(find(&items, "runtime runc").status, Status::Missing);
}

#[test]
fn shim_from_config_or_path() {
    let mut host = debian();
    host.executables.remove(Path::new("/usr/bin/berth-shim"));
    assert_eq!(
        find(&run(&Config::default(), &host), "berth-shim").status,
        Status::Missing
    );
    host.exe("/usr/local/bin/berth-shim", Ran::Ok(String::new()));
    assert_eq!(
        find(&run(&Config::default(), &host), "berth-shim").detail,
        "/usr/local/bin/berth-shim"
    );
    let mut config = Config::default();
    config.runtime.shim_binary = "/opt/berth/berth-shim".into();
    assert_eq!(
        find(&run(&config, &host), "berth-shim").status,
        Status::Missing
    );
}

#[test]
fn cgroup_modes_and_controllers() {
    let v2 = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    let mut host = debian();
    host.file("/proc/self/mountinfo", v2);
    host.file(
        "/sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu io memory\n",
    );
    let items = run(&Config::default(), &host);
    let controllers = find(&items, "cgroup controllers");
    assert_eq!(controllers.status, Status::Missing);
    assert!(
        controllers.detail.starts_with("pids not enabled"),
        "{controllers:?}"
    );

    host.file(
        "/sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu io memory pids\n",
    );
    assert!(passed(&run(&Config::default(), &host)));

    let mut host = debian();
    host.file("/proc/cgroups", "memory\t4\t1\t0\ncpu\t3\t1\t1\n");
    let items = run(&Config::default(), &host);
    let controllers = find(&items, "cgroup controllers");
    assert!(
        controllers
            .detail
            .contains("cpuacct, memory, pids, devices"),
        "{controllers:?}"
    );
}

#[test]
fn systemd_driver_needs_systemd_as_init() {
    let mut config = Config::default();
    config.runtime.cgroup_driver = CgroupDriver::Systemd;
    let mut host = debian();
    let items = run(&config, &host);
    assert_eq!(find(&items, "cgroup driver").status, Status::Missing);
    host.dirs.insert("/run/systemd/system".into());
    let items = run(&config, &host);
    assert_eq!(find(&items, "cgroup driver").status, Status::Ok);
    assert!(passed(&items));
}

#[test]
fn overlay_missing_says_modprobe() {
    let mut host = debian();
    host.file("/proc/filesystems", "\text4\n");
    host.dirs
        .insert("/lib/modules/6.1.0-18-amd64/kernel/fs/overlayfs".into());
    let items = run(&Config::default(), &host);
    let overlay = find(&items, "overlayfs");
    assert_eq!(overlay.status, Status::Missing);
    assert!(overlay.detail.contains("module is there"));
    assert!(overlay
        .fix
        .as_deref()
        .unwrap()
        .starts_with("modprobe overlay"));
}

#[test]
fn cni_plugins_of_the_configured_network() {
    let mut host = debian();
    host.file(
        "/etc/cni/net.d/10-flannel.conflist",
        r#"{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel","delegate":{}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#,
    );
    let items = run(&Config::default(), &host);
    assert!(find(&items, "cni network").detail.contains("\"cbr0\""));
    let flannel = find(&items, "cni plugin flannel");
    assert_eq!(flannel.status, Status::Missing);
    assert!(
        flannel.detail.contains("/usr/lib/cni, /opt/cni/bin"),
        "{flannel:?}"
    );
    assert_eq!(find(&items, "cni plugin portmap").status, Status::Ok);
    assert!(!items.iter().any(|i| i.name == "cni plugin bridge"));

    host.exe("/opt/cni/bin/flannel", Ran::Ok(String::new()));
    assert!(passed(&run(&Config::default(), &host)));
}

#[test]
fn no_cni_network_is_fine_only_when_berth_writes_its_own() {
    let mut config = Config::default();
    let host = debian();
    let items = run(&config, &host);
    assert_eq!(find(&items, "cni network").status, Status::Ok);
    assert_eq!(find(&items, "cni plugin host-local").status, Status::Ok);

    config.cni.write_default_network = false;
    let items = run(&config, &host);
    assert_eq!(find(&items, "cni network").status, Status::Missing);

    config.cni.write_default_network = true;
    config.cni.network_name = "calico".into();
    let items = run(&config, &host);
    assert_eq!(find(&items, "cni network").status, Status::Missing);
}

#[test]
fn a_broken_cni_file_warns() {
    let mut host = debian();
    host.file("/etc/cni/net.d/00-broken.conf", "{ not json");
    let items = run(&Config::default(), &host);
    assert_eq!(find(&items, "cni config").status, Status::Warn);
    assert!(passed(&items));
}

#[test]
fn sysctls_only_warn() {
    let mut host = debian();
    host.file("/proc/sys/net/ipv4/ip_forward", "0\n");
    host.files
        .remove(Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables"));
    let items = run(&Config::default(), &host);
    assert!(passed(&items));
    let forward = find(&items, "ip_forward");
    assert_eq!(forward.status, Status::Warn);
    assert!(forward.detail.contains("= 0"));
    assert!(find(&items, "bridge-nf-call-iptables")
        .fix
        .as_deref()
        .unwrap()
        .contains("br_netfilter"));
}

#[test]
fn an_old_kernel_has_no_idmapped_mounts() {
    let mut host = debian();
    host.kernel = "5.10.0-28-amd64".into();
    assert_eq!(
        find(&run(&Config::default(), &host), "idmapped mounts").status,
        Status::Info
    );
}

#[test]
fn security_modules_are_reported() {
    let mut host = debian();
    host.file("/sys/module/apparmor/parameters/enabled", "Y\n");
    host.file("/sys/fs/selinux/enforce", "1");
    let items = run(&Config::default(), &host);
    assert!(find(&items, "apparmor").detail.starts_with("enabled"));
    assert!(find(&items, "selinux").detail.starts_with("enforcing"));
    assert!(find(&items, "apparmor").detail.contains("not loaded"));
    // berth's default profile: its mode, by exact name.
    for (list, says) in [
        (
            "berth-default (enforce)\n",
            "berth-default loaded (enforce)",
        ),
        (
            "berth-default (complain)\n",
            "complain mode (berth replaces it",
        ),
        ("berth-default-old (enforce)\n", "not loaded"),
    ] {
        host.file("/sys/kernel/security/apparmor/profiles", list);
        let items = run(&Config::default(), &host);
        let detail = &find(&items, "apparmor").detail;
        assert!(detail.contains(says), "{list}: {detail}");
    }
}

#[test]
fn not_root_is_missing() {
    let mut host = debian();
    host.euid = 1000;
    let items = run(&Config::default(), &host);
    assert!(!passed(&items));
    assert!(render(&items).contains("fix: run berth"));
}

#[test]
fn nri_socket_and_plugins() {
    let mut host = debian();
    let mut config = Config::default();
    let nri = |config: &Config, host: &FakeHost| -> Vec<(Status, String)> {
        run(config, host)
            .into_iter()
            .filter(|i| i.name.starts_with("nri"))
            .map(|i| (i.status, i.detail))
            .collect()
    };
    let items = nri(&config, &host);
    assert_eq!(items[0].0, Status::Ok);
    assert!(items[0].1.contains("/var/run/nri/nri.sock"), "{items:?}");
    assert!(items[1].1.contains("no pre-installed plugins"), "{items:?}");
    host.dirs.insert("/opt/nri/plugins".into());
    host.file("/opt/nri/plugins/10-resources", "");
    host.exe("/opt/nri/plugins/10-resources", Ran::Ok(String::new()));
    host.file("/opt/nri/plugins/README", "");
    let items = nri(&config, &host);
    assert!(
        items[1].1.contains("1 pre-installed plugin(s)") && items[1].1.contains("10-resources"),
        "{items:?}"
    );
    assert_eq!(items[2].0, Status::Warn);
    assert!(items[2].1.contains("README"));
    config.nri.enable = false;
    assert_eq!(
        nri(&config, &host),
        [(Status::Info, "disabled ([nri] enable = false)".to_string())]
    );
}
