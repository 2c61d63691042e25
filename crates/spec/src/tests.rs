//! Tests of the whole spec: what each group of CRI fields turns into.

use std::path::Path;

use oci_spec::runtime::{LinuxNamespaceType, Mount};

use super::*;

/// A rootfs and the pod's files in temp dirs.
struct Fixture {
    rootfs: tempfile::TempDir,
    pod: tempfile::TempDir,
    sandbox: SandboxInfo,
    sandbox_config: v1::PodSandboxConfig,
    image: ImageInfo,
}

impl Fixture {
    fn new() -> Fixture {
        let rootfs = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(rootfs.path().join("etc")).unwrap();
        std::fs::write(
            rootfs.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nweb:x:33:33::/var/www:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            rootfs.path().join("etc/group"),
            "root:x:0:\nweb:x:33:\nlog:x:4:web\n",
        )
        .unwrap();
        let pod = tempfile::tempdir().unwrap();
        for f in ["hostname", "hosts", "resolv.conf"] {
            std::fs::write(pod.path().join(f), "x\n").unwrap();
        }
        std::fs::create_dir(pod.path().join("shm")).unwrap();
        let sandbox = SandboxInfo {
            id: "pod1".into(),
            pid: 4242,
            netns: Some("/run/berth/netns/pod1".into()),
            host_ipc: false,
            host_pid: false,
            hostname: "web-0".into(),
            hostname_file: pod.path().join("hostname"),
            hosts_file: pod.path().join("hosts"),
            resolv_conf: pod.path().join("resolv.conf"),
            shm: pod.path().join("shm"),
            cgroup_parent: "/kubepods/besteffort/podabc".into(),
            ..Default::default()
        };
        let sandbox_config = v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: "web-0".into(),
                uid: "uid-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: "web-0".into(),
            ..Default::default()
        };
        let image = ImageInfo {
            name: "registry.local/web:1".into(),
            env: vec!["PATH=/usr/bin:/bin".into(), "LANG=C".into()],
            cmd: vec!["/bin/sh".into()],
            ..Default::default()
        };
        Fixture {
            rootfs,
            pod,
            sandbox,
            sandbox_config,
            image,
        }
    }

    fn spec(&self, config: &v1::ContainerConfig) -> Result<Spec, Error> {
        self.spec_with(config, &opts(), |_| {})
    }

    fn spec_with(
        &self,
        config: &v1::ContainerConfig,
        opts: &SpecOptions,
        tweak: impl FnOnce(&mut SpecRequest<'_>),
    ) -> Result<Spec, Error> {
        let mut req = SpecRequest::new(
            "ctr1",
            config,
            &self.sandbox_config,
            &self.sandbox,
            &self.image,
            self.rootfs.path(),
        );
        tweak(&mut req);
        container_spec(&req, opts)
    }

    fn privileged_pod(&mut self) {
        self.sandbox_config.linux = Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                privileged: true,
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

fn opts() -> SpecOptions {
    SpecOptions {
        oom_score_adj_floor: Some(0),
        all_capabilities: Some(capabilities_from_mask(0x1fffeffffff)),
        ..Default::default()
    }
}

fn config() -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: "sha256:1234".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_sc(f: impl FnOnce(&mut v1::LinuxContainerSecurityContext)) -> v1::ContainerConfig {
    let mut sc = v1::LinuxContainerSecurityContext::default();
    f(&mut sc);
    v1::ContainerConfig {
        linux: Some(v1::LinuxContainerConfig {
            security_context: Some(sc),
            resources: None,
        }),
        ..config()
    }
}

/// The spec of `c` must fail as the caller's fault; returns the message.
fn invalid_argument(f: &Fixture, c: &v1::ContainerConfig) -> String {
    let e = f.spec(c).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("ctr1"), "{e}");
    e.to_string()
}

fn mount_at<'a>(spec: &'a Spec, dest: &str) -> Option<&'a Mount> {
    spec.mounts()
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.destination() == Path::new(dest))
}

fn options(spec: &Spec, dest: &str) -> Vec<String> {
    mount_at(spec, dest).unwrap().options().clone().unwrap()
}

fn linux(spec: &Spec) -> &Linux {
    spec.linux().as_ref().unwrap()
}

fn process(spec: &Spec) -> &Process {
    spec.process().as_ref().unwrap()
}

fn bounding(spec: &Spec) -> HashSet<Capability> {
    process(spec)
        .capabilities()
        .as_ref()
        .unwrap()
        .bounding()
        .clone()
        .unwrap()
}

#[test]
fn plain_container() {
    let f = Fixture::new();
    let spec = f.spec(&config()).unwrap();
    let p = process(&spec);
    assert_eq!(p.args().as_ref().unwrap(), &vec!["/bin/sh".to_string()]);
    assert_eq!(
        p.env().as_ref().unwrap(),
        &vec![
            "PATH=/usr/bin:/bin".to_string(),
            "HOSTNAME=web-0".into(),
            "LANG=C".into()
        ]
    );
    assert_eq!(p.cwd(), Path::new("/"));
    assert_eq!(p.terminal(), Some(false));
    assert_eq!((p.user().uid(), p.user().gid()), (0, 0));
    assert_eq!(p.user().additional_gids().as_ref().unwrap(), &vec![0]);
    assert!(p.rlimits().is_none(), "rlimits are left to the runtime");
    assert!(p.oom_score_adj().is_none());
    assert_eq!(p.no_new_privileges(), Some(false));
    let want: HashSet<_> = DEFAULT_CAPABILITIES.iter().copied().collect();
    assert_eq!(bounding(&spec), want);

    let root = spec.root().as_ref().unwrap();
    assert_eq!(root.path(), f.rootfs.path());
    assert_eq!(root.readonly(), Some(false));
    assert_eq!(spec.hostname().as_deref(), Some("web-0"));

    let l = linux(&spec);
    assert_eq!(
        l.cgroups_path().as_deref(),
        Some(Path::new("/kubepods/besteffort/podabc/ctr1"))
    );
    assert!(l
        .masked_paths()
        .as_ref()
        .unwrap()
        .contains(&"/proc/kcore".to_string()));
    assert!(l
        .readonly_paths()
        .as_ref()
        .unwrap()
        .contains(&"/proc/sys".to_string()));
    assert!(
        l.seccomp().is_none(),
        "no profile named, no default: unconfined"
    );
    assert!(l.rootfs_propagation().is_none());
    assert!(l.sysctl().is_none());
    let rules = l.resources().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert!(!rules[0].allow());

    let a = spec.annotations().as_ref().unwrap();
    assert_eq!(a[annotations::CONTAINER_TYPE], "container");
    assert_eq!(a[annotations::SANDBOX_ID], "pod1");
    assert_eq!(a[annotations::SANDBOX_NAME], "web-0");
    assert_eq!(a[annotations::SANDBOX_NAMESPACE], "default");
    assert_eq!(a[annotations::SANDBOX_UID], "uid-1");
    assert_eq!(a[annotations::CONTAINER_NAME], "app");
    assert_eq!(a[annotations::IMAGE_NAME], "registry.local/web:1");
}

#[test]
fn spec_serializes_and_round_trips() {
    let f = Fixture::new();
    let mut c = with_sc(|sc| {
        sc.seccomp = Some(v1::SecurityProfile {
            profile_type: 0,
            localhost_ref: String::new(),
        });
    });
    c.linux.as_mut().unwrap().resources = Some(v1::LinuxContainerResources {
        memory_limit_in_bytes: 1 << 30,
        ..Default::default()
    });
    let spec = f.spec(&c).unwrap();
    let json = serde_json::to_string(&spec).unwrap();
    let back: Spec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, spec);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    assert!(v["process"].get("rlimits").is_none());
    assert!(v["process"].get("oomScoreAdj").is_none());
}

#[test]
fn annotations_pass_only_when_allowed_and_ours_win() {
    let mut f = Fixture::new();
    f.sandbox_config
        .annotations
        .insert("io.katacontainers.config.x".into(), "pod".into());
    f.sandbox_config
        .annotations
        .insert("run.oci.handler".into(), "krun".into());
    let mut c = config();
    c.annotations.insert("team".into(), "a".into());
    // crun acts on these: a pod author must not reach it by default.
    c.annotations
        .insert("run.oci.keep_original_groups".into(), "1".into());
    c.annotations
        .insert(annotations::CONTAINER_TYPE.into(), "sandbox".into());
    c.image.as_mut().unwrap().user_specified_image = "web:1".into();

    // Default: none of the config's annotations pass (before, all did).
    let spec = f.spec(&c).unwrap();
    let a = spec.annotations().as_ref().unwrap();
    for k in ["team", "run.oci.keep_original_groups", "run.oci.handler"] {
        assert!(!a.contains_key(k), "{k} passed: {a:?}");
    }
    assert_eq!(a[annotations::CONTAINER_TYPE], "container");
    assert_eq!(a[annotations::IMAGE_NAME], "web:1");
    assert!(
        a.keys().all(|k| k.starts_with("io.kubernetes.cri.")),
        "{a:?}"
    );

    // The handler's patterns let some through; berth's keys still win.
    let o = SpecOptions {
        pod_annotations: vec!["io.katacontainers.*".into()],
        container_annotations: vec!["team".into(), "io.kubernetes.cri.*".into()],
        ..opts()
    };
    let spec = f.spec_with(&c, &o, |_| {}).unwrap();
    let a = spec.annotations().as_ref().unwrap();
    assert_eq!(a["team"], "a");
    assert_eq!(a["io.katacontainers.config.x"], "pod");
    assert!(!a.contains_key("run.oci.keep_original_groups"));
    assert!(!a.contains_key("run.oci.handler"));
    assert_eq!(a[annotations::CONTAINER_TYPE], "container");
}

#[test]
fn command_args_env_workdir_tty() {
    let f = Fixture::new();
    let mut c = config();
    c.command = vec!["/bin/echo".into()];
    c.args = vec!["hi".into()];
    c.envs = vec![v1::KeyValue {
        key: "LANG".into(),
        value: "en".into(),
    }];
    c.working_dir = "/tmp".into();
    c.tty = true;
    let spec = f.spec(&c).unwrap();
    let p = process(&spec);
    assert_eq!(
        p.args().as_ref().unwrap(),
        &vec!["/bin/echo".to_string(), "hi".into()]
    );
    assert!(p.env().as_ref().unwrap().contains(&"LANG=en".to_string()));
    assert!(!p.env().as_ref().unwrap().contains(&"LANG=C".to_string()));
    assert_eq!(p.cwd(), Path::new("/tmp"));
    assert_eq!(p.terminal(), Some(true));
}

#[test]
fn user_and_groups_from_the_rootfs() {
    let f = Fixture::new();
    let c = with_sc(|sc| {
        sc.run_as_username = "web".into();
        sc.supplemental_groups = vec![1000];
    });
    let spec = f.spec(&c).unwrap();
    let u = process(&spec).user();
    assert_eq!((u.uid(), u.gid()), (33, 33));
    assert_eq!(u.additional_gids().as_ref().unwrap(), &vec![4, 33, 1000]);

    let mut f = Fixture::new();
    f.image.user = "web".into();
    let spec = f.spec(&config()).unwrap();
    assert_eq!(process(&spec).user().uid(), 33);

    f.image.user = "nobody".into();
    assert!(invalid_argument(&f, &config()).contains("nobody"));
}

#[test]
fn sandbox_files_are_mounted_unless_the_config_covers_them() {
    let f = Fixture::new();
    let spec = f.spec(&config()).unwrap();
    for (dest, file) in [
        ("/etc/hostname", "hostname"),
        ("/etc/hosts", "hosts"),
        ("/etc/resolv.conf", "resolv.conf"),
    ] {
        let m = mount_at(&spec, dest).unwrap();
        assert_eq!(
            m.source().as_deref(),
            Some(f.pod.path().join(file).as_path())
        );
        assert_eq!(m.typ().as_deref(), Some("bind"));
        assert_eq!(options(&spec, dest), vec!["rbind", "rprivate", "rw"]);
    }
    let shm = mount_at(&spec, "/dev/shm").unwrap();
    assert_eq!(
        shm.source().as_deref(),
        Some(f.pod.path().join("shm").as_path())
    );
    assert_eq!(
        spec.mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.destination() == Path::new("/dev/shm"))
            .count(),
        1
    );

    // A CRI mount at /etc/hosts wins.
    let other = tempfile::NamedTempFile::new().unwrap();
    let mut c = config();
    c.mounts = vec![v1::Mount {
        container_path: "/etc/hosts".into(),
        host_path: other.path().to_str().unwrap().into(),
        readonly: true,
        ..Default::default()
    }];
    let spec = f.spec(&c).unwrap();
    let hosts: Vec<_> = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .filter(|m| m.destination() == Path::new("/etc/hosts"))
        .collect();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].source().as_deref(), Some(other.path()));
    assert_eq!(
        options(&spec, "/etc/hosts"),
        vec!["rbind", "rprivate", "ro"]
    );
}

#[test]
fn missing_sandbox_files_fall_back_to_defaults() {
    let mut f = Fixture::new();
    f.sandbox.shm = PathBuf::new();
    f.sandbox.hosts_file = f.pod.path().join("gone");
    let spec = f.spec(&config()).unwrap();
    assert!(mount_at(&spec, "/etc/hosts").is_none());
    assert_eq!(
        mount_at(&spec, "/dev/shm").unwrap().typ().as_deref(),
        Some("tmpfs")
    );
}

#[test]
fn default_mounts() {
    let f = Fixture::new();
    let spec = f.spec(&config()).unwrap();
    let dests: Vec<_> = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.destination().clone())
        .collect();
    for d in [
        "/proc",
        "/dev",
        "/dev/pts",
        "/dev/mqueue",
        "/sys",
        "/sys/fs/cgroup",
    ] {
        assert!(dests.contains(&PathBuf::from(d)), "{d}");
    }
    assert!(!dests.contains(&PathBuf::from("/run")));
    assert!(options(&spec, "/sys").contains(&"ro".to_string()));
    assert!(options(&spec, "/sys/fs/cgroup").contains(&"ro".to_string()));
    // Shallow mounts come before deeper ones.
    let pos = |d: &str| dests.iter().position(|x| x == Path::new(d)).unwrap();
    assert!(pos("/dev") < pos("/dev/pts"));
    assert!(pos("/sys") < pos("/sys/fs/cgroup"));
}

#[test]
fn host_dev_mount_replaces_dev_defaults_and_adds_console_for_tty() {
    let f = Fixture::new();
    let mut c = config();
    c.tty = true;
    c.mounts = vec![v1::Mount {
        container_path: "/dev".into(),
        host_path: "/dev".into(),
        ..Default::default()
    }];
    let spec = f.spec(&c).unwrap();
    let under_dev: Vec<_> = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .filter(|m| m.destination().starts_with("/dev"))
        .map(|m| (m.destination().clone(), m.typ().clone()))
        .collect();
    // The host /dev bind and the pod's shm, no tmpfs, devpts or mqueue.
    assert!(
        under_dev.iter().all(|(_, t)| t.as_deref() == Some("bind")),
        "{under_dev:?}"
    );
    let devices = linux(&spec).devices().clone().unwrap();
    assert!(devices
        .iter()
        .any(|d| d.path() == Path::new("/dev/console")));
}

#[test]
fn cri_mounts_sorted_and_checked() {
    let f = Fixture::new();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir(data.path().join("sub")).unwrap();
    let link = tempfile::tempdir().unwrap();
    let link_path = link.path().join("link");
    std::os::unix::fs::symlink(data.path(), &link_path).unwrap();
    let mut c = config();
    c.mounts = vec![
        v1::Mount {
            container_path: "/data/sub".into(),
            host_path: data.path().join("sub").to_str().unwrap().into(),
            readonly: true,
            selinux_relabel: true,
            ..Default::default()
        },
        v1::Mount {
            container_path: "/data".into(),
            host_path: link_path.to_str().unwrap().into(),
            ..Default::default()
        },
    ];
    let spec = f.spec(&c).unwrap();
    let dests: Vec<_> = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.destination().clone())
        .collect();
    let pos = |d: &str| dests.iter().position(|x| x == Path::new(d)).unwrap();
    assert!(pos("/data") < pos("/data/sub"));
    // The symlink is resolved to its target.
    let real = std::fs::canonicalize(data.path()).unwrap();
    assert_eq!(
        mount_at(&spec, "/data").unwrap().source().as_deref(),
        Some(real.as_path())
    );
    assert_eq!(options(&spec, "/data/sub"), vec!["rbind", "rprivate", "ro"]);

    // A missing host path is the caller's error, naming the path.
    let mut c = config();
    c.mounts = vec![v1::Mount {
        container_path: "/x".into(),
        host_path: "/nonexistent/berth-spec-test".into(),
        ..Default::default()
    }];
    let e = invalid_argument(&f, &c);
    assert!(
        e.contains("/nonexistent/berth-spec-test") && e.contains("mounts[0]"),
        "{e}"
    );

    let mut c = config();
    c.mounts = vec![v1::Mount {
        container_path: "rel".into(),
        host_path: "/tmp".into(),
        ..Default::default()
    }];
    invalid_argument(&f, &c);
}

#[test]
fn readonly_rootfs_makes_pod_files_read_only() {
    let f = Fixture::new();
    let spec = f.spec(&with_sc(|sc| sc.readonly_rootfs = true)).unwrap();
    assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));
    assert_eq!(
        options(&spec, "/etc/hosts"),
        vec!["rbind", "rprivate", "ro"]
    );
    assert_eq!(options(&spec, "/dev/shm"), vec!["rbind", "rprivate", "rw"]);
}

#[test]
fn anonymous_volumes_are_mounted() {
    let mut f = Fixture::new();
    f.image.volumes = vec!["/var/lib/data".into()];
    let dir = tempfile::tempdir().unwrap();
    let vols = anonymous_volumes(&config(), &f.image, dir.path());
    assert_eq!(vols.len(), 1);
    let spec = f
        .spec_with(&config(), &opts(), |r| r.volumes = vols.clone())
        .unwrap();
    let m = mount_at(&spec, "/var/lib/data").unwrap();
    assert_eq!(m.source().as_deref(), Some(vols[0].host_path.as_path()));
    assert_eq!(
        options(&spec, "/var/lib/data"),
        vec!["rbind", "rprivate", "rw"]
    );
}

#[test]
fn devices_are_made_and_allowed() {
    let f = Fixture::new();
    let mut c = config();
    c.devices = vec![v1::Device {
        container_path: "/dev/xnull".into(),
        host_path: "/dev/null".into(),
        permissions: "rwm".into(),
    }];
    let spec = f.spec(&c).unwrap();
    let l = linux(&spec);
    let d = &l.devices().as_ref().unwrap()[0];
    assert_eq!(d.path(), Path::new("/dev/xnull"));
    let rules = l.resources().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(rules.len(), 2);
    assert!(rules[1].allow());
    assert_eq!((rules[1].major(), rules[1].minor()), (Some(1), Some(3)));
}

#[test]
fn pod_namespaces_and_hostname() {
    let f = Fixture::new();
    let spec = f.spec(&config()).unwrap();
    let nss = linux(&spec).namespaces().clone().unwrap();
    let path = |t| {
        nss.iter()
            .find(|n| n.typ() == t)
            .and_then(|n| n.path().clone())
    };
    assert_eq!(
        path(LinuxNamespaceType::Network),
        Some(PathBuf::from("/run/berth/netns/pod1"))
    );
    assert_eq!(
        path(LinuxNamespaceType::Ipc),
        Some(PathBuf::from("/proc/4242/ns/ipc"))
    );
    assert_eq!(
        path(LinuxNamespaceType::Uts),
        Some(PathBuf::from("/proc/4242/ns/uts"))
    );
    assert_eq!(
        path(LinuxNamespaceType::Pid),
        Some(PathBuf::from("/proc/4242/ns/pid"))
    );
    assert!(nss
        .iter()
        .any(|n| n.typ() == LinuxNamespaceType::Mount && n.path().is_none()));
    assert!(!nss.iter().any(|n| n.typ() == LinuxNamespaceType::Cgroup));

    // Host network: no network or UTS namespace, no hostname.
    let mut f = Fixture::new();
    f.sandbox.netns = None;
    let spec = f.spec(&config()).unwrap();
    assert!(spec.hostname().is_none());
    let nss = linux(&spec).namespaces().clone().unwrap();
    assert!(!nss.iter().any(|n| matches!(
        n.typ(),
        LinuxNamespaceType::Network | LinuxNamespaceType::Uts
    )));

    // No hostname configured: none in the spec, the host's in HOSTNAME.
    let mut f = Fixture::new();
    f.sandbox.hostname.clear();
    f.sandbox_config.hostname.clear();
    let spec = f.spec(&config()).unwrap();
    assert!(spec.hostname().is_none());
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert!(process(&spec)
        .env()
        .as_ref()
        .unwrap()
        .contains(&format!("HOSTNAME={host}")));

    // Cgroup v2: a cgroup namespace.
    let f = Fixture::new();
    let o = SpecOptions {
        cgroup_v2: true,
        ..opts()
    };
    let spec = f.spec_with(&config(), &o, |_| {}).unwrap();
    assert!(linux(&spec)
        .namespaces()
        .as_ref()
        .unwrap()
        .iter()
        .any(|n| n.typ() == LinuxNamespaceType::Cgroup));
}

#[test]
fn pid_namespace_target() {
    let f = Fixture::new();
    let c = with_sc(|sc| {
        sc.namespace_options = Some(v1::NamespaceOption {
            pid: v1::NamespaceMode::Target as i32,
            target_id: "other".into(),
            ..Default::default()
        })
    });
    let spec = f
        .spec_with(&c, &opts(), |r| r.target_pid = Some(999))
        .unwrap();
    let nss = linux(&spec).namespaces().clone().unwrap();
    let pid = nss
        .iter()
        .find(|n| n.typ() == LinuxNamespaceType::Pid)
        .unwrap();
    assert_eq!(pid.path().as_deref(), Some(Path::new("/proc/999/ns/pid")));
    invalid_argument(&f, &c);
}

#[test]
fn privileged_container() {
    let mut f = Fixture::new();
    let c = with_sc(|sc| {
        sc.privileged = true;
        sc.masked_paths = vec!["/proc/kcore".into()];
        sc.seccomp = Some(v1::SecurityProfile {
            profile_type: 0,
            localhost_ref: String::new(),
        });
    });
    // Not in an unprivileged pod.
    assert!(invalid_argument(&f, &c).contains("privileged"));

    f.privileged_pod();
    let spec = f.spec(&c).unwrap();
    assert_eq!(bounding(&spec).len(), 40);
    let l = linux(&spec);
    assert!(l.masked_paths().as_ref().unwrap().is_empty());
    assert!(l.readonly_paths().as_ref().unwrap().is_empty());
    assert!(l.seccomp().is_none());
    assert!(options(&spec, "/sys").contains(&"rw".to_string()));
    assert!(options(&spec, "/sys/fs/cgroup").contains(&"rw".to_string()));
    let rules = l.resources().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert!(rules[0].allow());
    assert!(l
        .devices()
        .as_ref()
        .unwrap()
        .iter()
        .any(|d| d.path() == Path::new("/dev/null")));
}

#[test]
fn masked_and_readonly_paths() {
    let f = Fixture::new();
    // A security context with empty lists: before, no masking at all. Now
    // the defaults (see masked_and_readonly: Unmasked needs a user
    // namespace, which berth does not run).
    let spec = f.spec(&with_sc(|_| {})).unwrap();
    let l = linux(&spec);
    let masked = l.masked_paths().as_ref().unwrap();
    for p in [
        "/proc/kcore",
        "/proc/keys",
        "/sys/firmware",
        "/sys/devices/virtual/powercap",
    ] {
        assert!(
            masked.contains(&p.to_string()),
            "{p} not masked: {masked:?}"
        );
    }
    let ro = l.readonly_paths().as_ref().unwrap();
    for p in ["/proc/sys", "/proc/sysrq-trigger", "/proc/bus"] {
        assert!(ro.contains(&p.to_string()), "{p} not read-only: {ro:?}");
    }
    // One list given, the other empty: the given one as is, the default other.
    let spec = f
        .spec(&with_sc(|sc| sc.masked_paths = vec!["/proc/a".into()]))
        .unwrap();
    assert_eq!(
        linux(&spec).masked_paths().as_ref().unwrap(),
        &vec!["/proc/a".to_string()]
    );
    assert!(linux(&spec)
        .readonly_paths()
        .as_ref()
        .unwrap()
        .contains(&"/proc/sys".to_string()));
    // Privileged: none.
    let mut pf = Fixture::new();
    pf.privileged_pod();
    let spec = pf.spec(&with_sc(|sc| sc.privileged = true)).unwrap();
    assert!(linux(&spec).masked_paths().as_ref().unwrap().is_empty());
    assert!(linux(&spec).readonly_paths().as_ref().unwrap().is_empty());
    let spec = f
        .spec(&with_sc(|sc| {
            sc.masked_paths = vec!["/proc/a".into()];
            sc.readonly_paths = vec!["/proc/b".into()];
        }))
        .unwrap();
    assert_eq!(
        linux(&spec).masked_paths().as_ref().unwrap(),
        &vec!["/proc/a".to_string()]
    );
    assert_eq!(
        linux(&spec).readonly_paths().as_ref().unwrap(),
        &vec!["/proc/b".to_string()]
    );
    // No security context: the defaults.
    let spec = f.spec(&config()).unwrap();
    assert!(linux(&spec)
        .masked_paths()
        .as_ref()
        .unwrap()
        .contains(&"/sys/firmware".to_string()));
}

#[test]
fn capabilities_through_the_spec() {
    let f = Fixture::new();
    let c = with_sc(|sc| {
        sc.capabilities = Some(v1::Capability {
            add_capabilities: vec!["SYS_ADMIN".into()],
            drop_capabilities: vec!["CAP_NET_RAW".into()],
            add_ambient_capabilities: vec![],
        });
        sc.seccomp = Some(v1::SecurityProfile {
            profile_type: 0,
            localhost_ref: String::new(),
        });
    });
    let spec = f.spec(&c).unwrap();
    let b = bounding(&spec);
    assert!(b.contains(&Capability::SysAdmin) && !b.contains(&Capability::NetRaw));
    // The seccomp profile follows the capabilities: SYS_ADMIN allows mount.
    let seccomp = linux(&spec).seccomp().clone().unwrap();
    assert!(seccomp
        .syscalls()
        .as_ref()
        .unwrap()
        .iter()
        .any(|s| s.names().contains(&"mount".to_string())));

    let bad = with_sc(|sc| {
        sc.capabilities = Some(v1::Capability {
            add_capabilities: vec!["FLY".into()],
            ..Default::default()
        })
    });
    invalid_argument(&f, &bad);
}

#[test]
fn no_new_privs_and_default_seccomp() {
    let f = Fixture::new();
    let spec = f.spec(&with_sc(|sc| sc.no_new_privs = true)).unwrap();
    assert_eq!(process(&spec).no_new_privileges(), Some(true));
    let o = SpecOptions {
        default_seccomp: true,
        ..opts()
    };
    let spec = f.spec_with(&config(), &o, |_| {}).unwrap();
    assert!(linux(&spec).seccomp().is_some());
}

#[test]
fn oom_score_adj_through_the_spec() {
    let f = Fixture::new();
    let mut c = config();
    c.linux = Some(v1::LinuxContainerConfig {
        resources: Some(v1::LinuxContainerResources {
            oom_score_adj: -997,
            ..Default::default()
        }),
        security_context: None,
    });
    let spec = f.spec(&c).unwrap();
    assert_eq!(process(&spec).oom_score_adj(), Some(0));
    let o = SpecOptions {
        oom_score_adj_floor: Some(-999),
        ..opts()
    };
    let spec = f.spec_with(&c, &o, |_| {}).unwrap();
    assert_eq!(process(&spec).oom_score_adj(), Some(-997));
}

#[test]
fn resources_sysctls_and_cgroup_paths() {
    let mut f = Fixture::new();
    f.sandbox_config.linux = Some(v1::LinuxPodSandboxConfig {
        sysctls: [(
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "0".to_string(),
        )]
        .into(),
        ..Default::default()
    });
    let mut c = config();
    c.linux = Some(v1::LinuxContainerConfig {
        resources: Some(v1::LinuxContainerResources {
            cpu_shares: 256,
            memory_limit_in_bytes: 32 << 20,
            ..Default::default()
        }),
        security_context: None,
    });
    let o = SpecOptions {
        pids_limit: Some(100),
        cgroup_driver_systemd: true,
        ..opts()
    };
    // A cgroupfs parent with the systemd driver: refused (before, the path
    // became "podabc:berth:ctr1", no slice at all).
    let e = f.spec_with(&c, &o, |_| {}).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("cgroup_parent"), "{e}");
    f.sandbox.cgroup_parent = "kubepods-besteffort-podabc.slice".into();
    let spec = f.spec_with(&c, &o, |_| {}).unwrap();
    let l = linux(&spec);
    let r = l.resources().as_ref().unwrap();
    assert_eq!(r.cpu().as_ref().unwrap().shares(), Some(256));
    assert_eq!(r.memory().unwrap().limit(), Some(32 << 20));
    assert_eq!(r.pids().unwrap().limit(), 100);
    assert_eq!(
        l.sysctl().as_ref().unwrap()["net.ipv4.ip_unprivileged_port_start"],
        "0"
    );
    assert_eq!(
        l.cgroups_path().as_deref(),
        Some(Path::new("kubepods-besteffort-podabc.slice:berth:ctr1"))
    );
}

#[test]
fn detect_reads_this_host() {
    let o = SpecOptions::detect();
    // This host may be v1 or v2; the answer must agree with the filesystem.
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    assert_eq!(o.cgroup_v2, v2);
    assert!(o
        .all_capabilities
        .is_some_and(|c| c.contains(&Capability::Chown)));
    assert!(!o.cgroup_driver_systemd && o.pids_limit.is_none() && !o.default_seccomp);
}

#[test]
fn pause_and_containers_are_siblings_under_the_pods_parent() {
    for (systemd, kubelet_parent, pause_path, ctr_path) in [
        (
            true,
            "kubepods-besteffort-podabc.slice",
            "kubepods-besteffort-podabc.slice:berth:pod1",
            "kubepods-besteffort-podabc.slice:berth:ctr1",
        ),
        (
            true,
            "",
            "system.slice:berth:pod1",
            "system.slice:berth:ctr1",
        ),
        (
            false,
            "/kubepods/besteffort/podabc",
            "/kubepods/besteffort/podabc/pod1",
            "/kubepods/besteffort/podabc/ctr1",
        ),
        (false, "", "/berth/pod1", "/berth/ctr1"),
    ] {
        let mut f = Fixture::new();
        f.sandbox_config.linux = Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: kubelet_parent.into(),
            ..Default::default()
        });
        let o = SpecOptions {
            cgroup_driver_systemd: systemd,
            ..opts()
        };
        // Resolved once at RunPodSandbox, kept for the pod's containers.
        let parent = pod_cgroup_parent("pod1", &f.sandbox_config, &o).unwrap();
        let req = PauseRequest::new(
            "pod1",
            &f.sandbox_config,
            f.sandbox.netns.as_deref(),
            &f.sandbox.shm,
            &parent,
        );
        let pause = pause_spec(&req, &o).unwrap();
        f.sandbox.cgroup_parent = parent;
        let ctr = f.spec_with(&config(), &o, |_| {}).unwrap();
        assert_eq!(
            linux(&pause).cgroups_path().as_deref(),
            Some(Path::new(pause_path))
        );
        assert_eq!(
            linux(&ctr).cgroups_path().as_deref(),
            Some(Path::new(ctr_path))
        );
    }
}

#[test]
fn container_sysctls_are_checked_against_the_pods_namespaces() {
    let mut f = Fixture::new();
    f.sandbox_config.linux = Some(v1::LinuxPodSandboxConfig {
        sysctls: [("net.ipv4.ip_forward".to_string(), "1".to_string())].into(),
        ..Default::default()
    });
    assert!(f.spec(&config()).is_ok());
    // Host network: a net.* sysctl would change the host's.
    f.sandbox.netns = None;
    let e = invalid_argument(&f, &config());
    assert!(e.contains("linux.sysctls"), "{e}");
    f.sandbox_config.linux.as_mut().unwrap().sysctls =
        [("vm.swappiness".to_string(), "1".to_string())].into();
    f.sandbox.netns = Some("/run/berth/netns/pod1".into());
    let e = invalid_argument(&f, &config());
    assert!(e.contains("not namespaced"), "{e}");
}
