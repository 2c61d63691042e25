//! As root: a spec from `container_spec` on a busybox rootfs runs under real
//! runc — user and groups, ambient capabilities, the RuntimeDefault seccomp
//! profile, masked paths, a read-only bind mount, the pod's files, a device.
//! Ignored by a plain `cargo test`; fails, saying why, when included
//! (`--include-ignored`) but not run as root or without runc.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_spec::{container_spec, pause_spec, PauseRequest, SandboxInfo, SpecOptions, SpecRequest};
use cri_api::v1;
use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

const CGROUP_PARENT: &str = "berth-spec-test";
const APPLETS: &[&str] = &[
    "sh", "id", "cat", "grep", "hostname", "test", "touch", "echo", "ip", "ping", "sleep",
];

/// Fails the test unless it runs as root with runc installed. Every test
/// that calls it is also `#[ignore = "needs root and runc..."]`: left out
/// (and said to be) by a plain `cargo test`, and failing, never passing,
/// when included where it cannot run.
fn require_root_and_runc() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
    );
    assert!(
        Command::new("runc").arg("--version").output().is_ok(),
        "needs runc (hack/install-deps.sh)"
    );
}

/// Deletes the container and its cgroups however the test ends.
struct Cleanup {
    root: PathBuf,
    id: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&self.root)
            .args(["delete", "--force", &self.id])
            .stderr(Stdio::null())
            .status();
        let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            roots.extend(entries.flatten().map(|e| e.path()));
        }
        for root in roots {
            let parent = root.join(CGROUP_PARENT);
            // The shared parent stays (a concurrent test may be creating
            // under it); hack/test.sh removes it when all tests are done.
            let _ = std::fs::remove_dir(parent.join(&self.id));
        }
    }
}

/// Runs `cmd`, killing it after `timeout`; returns (status, stdout, stderr).
fn run_bounded(mut cmd: Command, timeout: Duration) -> (Option<i32>, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning runc");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, out_t.join().unwrap(), err_t.join().unwrap())
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A busybox rootfs, the pod's files and a host dir, in one temp dir.
struct Setup {
    dir: tempfile::TempDir,
    id: String,
    sandbox: SandboxInfo,
    image: berth_spec::ImageInfo,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let dir = tempfile::Builder::new()
            .prefix("berth-spec-")
            .tempdir()
            .unwrap();
        let rootfs = dir.path().join("bundle/rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).expect("copying /bin/busybox");
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
        write(
            &rootfs.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\n",
        );
        write(
            &rootfs.join("etc/group"),
            "root:x:0:\napp:x:1000:\nstaff:x:50:app\n",
        );

        let pod = dir.path().join("pod");
        write(&pod.join("hostname"), "spec-test\n");
        write(&pod.join("hosts"), "127.0.0.1 localhost spec-test\n");
        write(&pod.join("resolv.conf"), "nameserver 127.0.0.53\n");
        std::fs::create_dir_all(pod.join("shm")).unwrap();
        write(&dir.path().join("data/hello"), "hello from the host\n");

        let sandbox = SandboxInfo {
            id: "spec-test-pod".into(),
            // This test process stands in for the pause: its IPC namespace is joined.
            pid: std::process::id(),
            netns: None,
            host_ipc: false,
            host_pid: false,
            hostname: "spec-test".into(),
            hostname_file: pod.join("hostname"),
            hosts_file: pod.join("hosts"),
            resolv_conf: pod.join("resolv.conf"),
            shm: pod.join("shm"),
            cgroup_parent: CGROUP_PARENT.into(),
            ..Default::default()
        };
        let image = berth_spec::ImageInfo {
            name: "busybox".into(),
            env: vec!["PATH=/bin".into()],
            cmd: vec!["sh".into()],
            ..Default::default()
        };
        Setup {
            id: format!("spectest-{name}-{}", std::process::id()),
            dir,
            sandbox,
            image,
        }
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.path().join("bundle/rootfs")
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Builds the spec, gives it a new network and UTS namespace (this test
    /// has no pod to join), runs it with `runc run` and returns its stdout.
    fn run(
        &self,
        config: &v1::ContainerConfig,
        sandbox_config: &v1::PodSandboxConfig,
        opts: &SpecOptions,
    ) -> String {
        let rootfs = self.rootfs();
        let req = SpecRequest::new(
            &self.id,
            config,
            sandbox_config,
            &self.sandbox,
            &self.image,
            &rootfs,
        );
        let mut spec = container_spec(&req, opts).expect("building the spec");
        let mut linux = spec.linux().clone().unwrap();
        let mut nss = linux.namespaces().clone().unwrap();
        for typ in [LinuxNamespaceType::Network, LinuxNamespaceType::Uts] {
            let mut ns = LinuxNamespace::default();
            ns.set_typ(typ);
            nss.push(ns);
        }
        linux.set_namespaces(Some(nss));
        spec.set_linux(Some(linux));
        spec.set_hostname(Some("spec-test".into()));
        self.run_spec(&spec)
    }

    /// Writes `spec` into the bundle, runs it with `runc run` and returns its
    /// stdout.
    fn run_spec(&self, spec: &oci_spec::runtime::Spec) -> String {
        let bundle = self.dir.path().join("bundle");
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(spec).unwrap(),
        )
        .unwrap();
        let runtime_root = self.dir.path().join("runc-root");
        let _cleanup = Cleanup {
            root: runtime_root.clone(),
            id: self.id.clone(),
        };
        let mut cmd = Command::new("runc");
        cmd.arg("--root")
            .arg(&runtime_root)
            .arg("run")
            .arg("--bundle")
            .arg(&bundle)
            .arg(&self.id);
        cmd.stdin(Stdio::null());
        let (status, out, err) = run_bounded(cmd, Duration::from_secs(60));
        eprintln!("container output:\n{out}");
        assert_eq!(
            status,
            Some(0),
            "runc run failed\nstdout:\n{out}\nstderr:\n{err}"
        );
        out
    }
}

fn line(out: &str, prefix: &str) -> String {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} line in:\n{out}"))
        .to_string()
}

#[test]
#[ignore = "needs root and runc: hack/test.sh runs it (--include-ignored)"]
fn runc_runs_the_generated_spec() {
    require_root_and_runc();
    let s = Setup::new("plain");
    let opts = SpecOptions {
        pids_limit: Some(64),
        ..SpecOptions::detect()
    };
    let script = "id; grep -E '^(Cap|Seccomp:|NoNewPrivs)' /proc/self/status; cat /data/hello; \
        test -c /dev/xnull && echo device-ok; touch /data/x 2>/dev/null || echo data-ro; \
        test -s /proc/kcore || echo kcore-masked; cat /etc/hosts; \
        cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; \
        cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; echo done";
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        command: vec!["sh".into(), "-c".into(), script.into()],
        mounts: vec![v1::Mount {
            container_path: "/data".into(),
            host_path: s.data().to_str().unwrap().into(),
            readonly: true,
            // Where the kernel can, read-only all the way down.
            recursive_read_only: opts.rro_supported,
            ..Default::default()
        }],
        devices: vec![v1::Device {
            container_path: "/dev/xnull".into(),
            host_path: "/dev/null".into(),
            permissions: "rwm".into(),
        }],
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(v1::LinuxContainerResources {
                memory_limit_in_bytes: 64 << 20,
                cpu_shares: 512,
                ..Default::default()
            }),
            security_context: Some(v1::LinuxContainerSecurityContext {
                run_as_username: "app".into(),
                supplemental_groups: vec![2000],
                capabilities: Some(v1::Capability {
                    add_ambient_capabilities: vec!["NET_BIND_SERVICE".into()],
                    ..Default::default()
                }),
                namespace_options: Some(v1::NamespaceOption {
                    pid: v1::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                seccomp: Some(v1::SecurityProfile {
                    profile_type: 0,
                    localhost_ref: String::new(),
                }),
                no_new_privs: true,
                masked_paths: vec!["/proc/kcore".into(), "/sys/firmware".into()],
                readonly_paths: vec!["/proc/sys".into()],
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    let out = s.run(&config, &v1::PodSandboxConfig::default(), &opts);

    let id_line = line(&out, "uid=");
    assert!(
        id_line.starts_with("uid=1000(app) gid=1000(app)"),
        "{id_line}"
    );
    assert!(
        id_line.contains("50(staff)") && id_line.contains("2000"),
        "{id_line}"
    );
    // Docker's default set as the bounding set; NET_BIND_SERVICE ambient,
    // hence permitted and effective for the non-root user.
    assert_eq!(line(&out, "CapBnd:"), "CapBnd:\t00000000a80425fb");
    assert_eq!(line(&out, "CapAmb:"), "CapAmb:\t0000000000000400");
    assert_eq!(line(&out, "CapEff:"), "CapEff:\t0000000000000400");
    assert_eq!(line(&out, "Seccomp:"), "Seccomp:\t2");
    assert_eq!(line(&out, "NoNewPrivs:"), "NoNewPrivs:\t1");
    for want in [
        "hello from the host",
        "device-ok",
        "data-ro",
        "kcore-masked",
        "127.0.0.1 localhost spec-test",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    assert!(
        out.lines().any(|l| l == "67108864"),
        "memory limit not applied:\n{out}"
    );
    assert!(
        out.lines().any(|l| l == "64"),
        "pids limit not applied:\n{out}"
    );
    assert!(out.trim_end().ends_with("done"), "{out}");
}

#[test]
#[ignore = "needs root and runc: hack/test.sh runs it (--include-ignored)"]
fn runc_runs_a_privileged_spec() {
    require_root_and_runc();
    let s = Setup::new("priv");
    let script = "grep -E '^(CapBnd|Seccomp:)' /proc/self/status; \
        grep -q ' /sys sysfs rw' /proc/mounts && echo sysfs-rw; \
        test -c /dev/null && echo has-null; touch /rootfs-write 2>/dev/null || echo rootfs-ro; echo done";
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: "priv".into(),
            attempt: 0,
        }),
        command: vec!["sh".into(), "-c".into(), script.into()],
        linux: Some(v1::LinuxContainerConfig {
            resources: None,
            security_context: Some(v1::LinuxContainerSecurityContext {
                privileged: true,
                readonly_rootfs: true,
                seccomp: Some(v1::SecurityProfile {
                    profile_type: 0,
                    localhost_ref: String::new(),
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    let sandbox_config = v1::PodSandboxConfig {
        linux: Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                privileged: true,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts = SpecOptions::detect();
    let out = s.run(&config, &sandbox_config, &opts);
    // Every capability this process holds, and no seccomp filter.
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_eq!(line(&out, "CapBnd:"), line(&own, "CapBnd:"));
    assert_eq!(line(&out, "Seccomp:"), "Seccomp:\t0");
    for want in ["sysfs-rw", "has-null", "rootfs-ro"] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    assert!(out.trim_end().ends_with("done"), "{out}");
}

#[test]
#[ignore = "needs root and runc: hack/test.sh runs it (--include-ignored)"]
fn runtime_default_seccomp_lets_shells_sleep_and_ping_work() {
    require_root_and_runc();
    let s = Setup::new("ping");
    // NET_ADMIN only to bring up lo in the container's own network namespace:
    // ping goes to 127.0.0.1 there and nowhere else.
    let script = "grep Seccomp: /proc/self/status; ip link set lo up; \
        ping -c 1 -W 2 127.0.0.1 >/dev/null && echo ping-ok; sleep 0.1 && echo sleep-ok; echo done";
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: "ping".into(),
            attempt: 0,
        }),
        command: vec!["sh".into(), "-c".into(), script.into()],
        linux: Some(v1::LinuxContainerConfig {
            resources: None,
            security_context: Some(v1::LinuxContainerSecurityContext {
                capabilities: Some(v1::Capability {
                    add_capabilities: vec!["NET_ADMIN".into()],
                    ..Default::default()
                }),
                seccomp: Some(v1::SecurityProfile {
                    profile_type: 0,
                    localhost_ref: String::new(),
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    let out = s.run(
        &config,
        &v1::PodSandboxConfig::default(),
        &SpecOptions::detect(),
    );
    assert_eq!(line(&out, "Seccomp:"), "Seccomp:\t2");
    for want in ["ping-ok", "sleep-ok"] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    assert!(out.trim_end().ends_with("done"), "{out}");
}

#[test]
#[ignore = "needs root and runc: hack/test.sh runs it (--include-ignored)"]
fn runc_runs_the_pause_spec() {
    require_root_and_runc();
    let s = Setup::new("pause");
    // A host-network pod (this test makes no netns) with its own IPC and PID
    // namespaces, RuntimeDefault seccomp and a user from the pod.
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "p".into(),
            uid: "u".into(),
            namespace: "n".into(),
            attempt: 0,
        }),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: CGROUP_PARENT.into(),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                run_as_user: Some(v1::Int64Value { value: 1000 }),
                run_as_group: Some(v1::Int64Value { value: 1000 }),
                supplemental_groups: vec![3000],
                seccomp: Some(v1::SecurityProfile {
                    profile_type: v1::security_profile::ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new(),
                }),
                ..Default::default()
            }),
            sysctls: [("kernel.shm_rmid_forced".to_string(), "1".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts = SpecOptions::detect();
    let parent = berth_spec::pod_cgroup_parent(&s.id, &config, &opts).unwrap();
    let shm = s.dir.path().join("pod/shm");
    let rootfs = s.rootfs();
    let mut req = PauseRequest::new(&s.id, &config, None, &shm, &parent);
    req.rootfs = &rootfs;
    // The pause binary is the shim's; a shell stands in to look around.
    req.args = vec![
        "sh".into(),
        "-c".into(),
        "id; grep -E '^(Cap|Seccomp:|NoNewPrivs)' /proc/self/status; echo pid=$$; \
         echo shm=$(cat /proc/sys/kernel/shm_rmid_forced); echo oom=$(cat /proc/self/oom_score_adj); \
         echo shares=$(cat /sys/fs/cgroup/cpu/cpu.shares 2>/dev/null || cat /sys/fs/cgroup/cpu.weight); touch /x 2>/dev/null || echo rootfs-ro; \
         test -s /proc/kcore || echo kcore-masked; grep -c . /proc/self/cgroup >/dev/null; \
         cat /proc/self/cgroup; echo done"
            .into(),
    ];
    let spec = pause_spec(&req, &opts).expect("building the pause spec");
    let out = s.run_spec(&spec);
    let id_line = line(&out, "uid=");
    assert!(
        id_line.starts_with("uid=1000(app) gid=1000(app)"),
        "{id_line}"
    );
    assert!(id_line.contains("3000"), "{id_line}");
    assert_eq!(line(&out, "CapBnd:"), "CapBnd:\t0000000000000000");
    assert_eq!(line(&out, "CapEff:"), "CapEff:\t0000000000000000");
    assert_eq!(line(&out, "Seccomp:"), "Seccomp:\t2");
    assert_eq!(line(&out, "NoNewPrivs:"), "NoNewPrivs:\t1");
    // Its own PID namespace: the shell is pid 1.
    assert!(out.lines().any(|l| l == "pid=1"), "{out}");
    for want in ["rootfs-ro", "kcore-masked"] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    assert_eq!(line(&out, "shm="), "shm=1", "the pod's sysctl");
    let own = berth_spec::current_oom_score_adj().unwrap();
    assert_eq!(line(&out, "oom="), format!("oom={}", own.max(-998)));
    // cpu shares 2, or its cgroup v2 weight 1.
    let shares = line(&out, "shares=");
    assert!(shares == "shares=2" || shares == "shares=1", "{shares}");
    // Under the pod's parent, named by its id.
    let cg = format!("/{CGROUP_PARENT}/{}", s.id);
    assert!(out.lines().any(|l| l.ends_with(&cg)), "not in {cg}:\n{out}");
    assert!(out.trim_end().ends_with("done"), "{out}");
}

#[test]
#[ignore = "needs root and runc: hack/test.sh runs it (--include-ignored)"]
fn runc_runs_a_container_with_a_cdi_device() {
    require_root_and_runc();
    let s = Setup::new("cdi");
    let cdi_dir = s.dir.path().join("cdi");
    let data = s.data();
    write(
        &cdi_dir.join("example.yaml"),
        &format!(
            "cdiVersion: \"0.6.0\"\n\
             kind: example.com/test\n\
             devices:\n\
             \x20 - name: nul\n\
             \x20   containerEdits:\n\
             \x20     env: [CDI_OK=yes]\n\
             \x20     deviceNodes:\n\
             \x20       - path: /dev/xcdi\n\
             \x20         hostPath: /dev/null\n\
             \x20     mounts:\n\
             \x20       - hostPath: {}\n\
             \x20         containerPath: /cdi-data\n\
             \x20         options: [ro, rbind]\n",
            data.display()
        ),
    );
    let script = "test -c /dev/xcdi && echo cdi-node; echo x > /dev/xcdi && echo cdi-write; \
        echo env=$CDI_OK; cat /cdi-data/hello; touch /cdi-data/x 2>/dev/null || echo cdi-ro; echo done";
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: "cdi".into(),
            attempt: 0,
        }),
        command: vec!["sh".into(), "-c".into(), script.into()],
        cdi_devices: vec![v1::CdiDevice {
            name: "example.com/test=nul".into(),
        }],
        ..Default::default()
    };
    let opts = SpecOptions {
        cdi_spec_dirs: vec![cdi_dir],
        ..SpecOptions::detect()
    };
    let out = s.run(&config, &v1::PodSandboxConfig::default(), &opts);
    for want in [
        "cdi-node",
        "cdi-write",
        "env=yes",
        "hello from the host",
        "cdi-ro",
    ] {
        assert!(out.lines().any(|l| l == want), "no {want:?} in:\n{out}");
    }
    assert!(out.trim_end().ends_with("done"), "{out}");
}
