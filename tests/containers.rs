//! Containers against the real daemon, runc, CNI and a local registry:
//! output and exit codes, logs, ExecSync, stop with grace and SIGKILL,
//! user/env/workdir, listing, removal and bad requests. Root only.

use crate::common;

use std::time::{Duration, Instant};

use common::cri::{
    as_kubelet_sends, container_status, pull, remove_pod, run_container, start, PodCgroup,
};
use common::faults::entries;
use common::pods::{daemon, pod_config, pod_config_with_pause, TestNet};
use common::{registry, Daemon};
use cri_api::v1;
use tonic::Code;

/// A pod with a log directory, and the busybox image pulled.
async fn pod(daemon: &Daemon, name: &str) -> (String, v1::PodSandboxConfig, std::path::PathBuf) {
    let cri = daemon.cri().await;
    let mut config = pod_config(name);
    let logs = daemon.sandbox.path(&format!("logs/{name}"));
    config.log_directory = logs.display().to_string();
    let id = cri.run_pod(&config).await.unwrap();
    pull(daemon, &registry().busybox()).await;
    (id, config, logs)
}

/// common's busybox container, logging to `<name>.log` in the pod's log directory.
fn container(name: &str, command: &[&str]) -> v1::ContainerConfig {
    v1::ContainerConfig {
        log_path: format!("{name}.log"),
        ..common::cri::container(name, command)
    }
}

async fn wait_exited(daemon: &Daemon, id: &str) -> v1::ContainerStatus {
    common::cri::wait_exited(daemon, id, Duration::from_secs(20)).await
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn container_output_exit_code_and_log() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, logs) = pod(&daemon, "out").await;
    let id = cri
        .create_container(
            &pod,
            &pod_config,
            container(
                "printer",
                &["sh", "-c", "echo hello; echo oops >&2; exit 3"],
            ),
        )
        .await
        .unwrap();
    let st = container_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerCreated as i32);
    start(&daemon, &id).await;
    let st = wait_exited(&daemon, &id).await;
    assert_eq!(st.exit_code, 3);
    assert_eq!(st.reason, "Error");
    assert!(st.started_at > 0 && st.finished_at >= st.started_at);
    let log = std::fs::read_to_string(logs.join("printer.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    for (line, stream, text) in [
        (
            lines.iter().find(|l| l.contains(" stdout ")).unwrap(),
            "stdout",
            "hello",
        ),
        (
            lines.iter().find(|l| l.contains(" stderr ")).unwrap(),
            "stderr",
            "oops",
        ),
    ] {
        let parts: Vec<&str> = line.splitn(4, ' ').collect();
        assert!(parts[0].ends_with('Z') && parts[0].contains('T'), "{line}");
        assert_eq!(parts[1], stream);
        assert_eq!(parts[2], "F");
        assert_eq!(parts[3], text);
    }
    remove_pod(&daemon, &pod).await;
    assert_eq!(
        cri.container_status(&id, false).await.unwrap_err().code(),
        Code::NotFound
    );
}

/// cri-api v0.36.2 made `KeyValue.value` bytes: a binary Secret's value
/// reaches the process with each byte that is not UTF-8 as U+FFFD (what
/// containerd gives it), and a NUL is refused naming the variable.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn binary_env_values_reach_the_process_and_nul_is_refused() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let (pod, pod_config, _) = pod(&daemon, "binenv").await;
    let mut config = container("bin", &["sleep", "1000"]);
    config.envs = vec![
        v1::KeyValue {
            key: "SECRET".into(),
            value: vec![b'k', 0xff, 0xfe, b'=', 0xc3, 0xa9, 0xf0, 0x9f],
        },
        v1::KeyValue {
            key: "PLAIN".into(),
            value: "ok".into(),
        },
    ];
    let id = daemon
        .cri()
        .await
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap();
    start(&daemon, &id).await;
    let out = daemon
        .cri()
        .await
        .exec_sync(&id, &["sh", "-c", "printf %s \"$SECRET|$PLAIN\""], 10)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "k\u{fffd}\u{fffd}=é\u{fffd}\u{fffd}|ok"
    );

    let mut config = container("nul", &["true"]);
    config.envs = vec![v1::KeyValue {
        key: "TOKEN".into(),
        value: b"a\0b".to_vec(),
    }];
    let err = daemon
        .cri()
        .await
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("\"TOKEN\""), "{err:?}");
    // Nothing half-made: only the first container is listed.
    let listed = daemon
        .cri()
        .await
        .runtime()
        .list_containers(v1::ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(listed.len(), 1, "{listed:?}");
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn exec_sync_env_user_workdir_and_stop() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "exec").await;
    let mut config = container("sleeper", &["sh", "-c", "trap '' TERM; sleep 1000"]);
    config.envs = vec![v1::KeyValue {
        key: "FOO".into(),
        value: "bar".into(),
    }];
    config.working_dir = "/tmp".into();
    config.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            run_as_user: Some(v1::Int64Value { value: 1000 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = cri
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap();
    start(&daemon, &id).await;
    assert_eq!(
        container_status(&daemon, &id).await.state,
        v1::ContainerState::ContainerRunning as i32
    );

    let out = cri
        .exec_sync(&id, &["sh", "-c", "echo $FOO; pwd; id -u; hostname"], 10)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "bar\n/tmp\n1000\nexec\n"
    );
    assert_eq!(out.exit_code, 0);
    let out = cri
        .exec_sync(&id, &["sh", "-c", "echo bad >&2; exit 5"], 10)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 5);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "bad\n");
    let err = cri
        .exec_sync(&id, &["sh", "-c", "head -c 20000000 /dev/zero"], 30)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("16 MiB"));
    let started = Instant::now();
    let err = cri.exec_sync(&id, &["sleep", "30"], 1).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Listing.
    let listed = cri
        .list_containers(Some(v1::ContainerFilter {
            pod_sandbox_id: pod[..10].to_string(),
            state: Some(v1::ContainerStateValue {
                state: v1::ContainerState::ContainerRunning as i32,
            }),
            label_selector: [("name".to_string(), "sleeper".to_string())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);

    // TERM is ignored: the grace period runs out and SIGKILL ends it.
    let started = Instant::now();
    cri.stop_container(&id, 1).await.unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(15),
        "{elapsed:?}"
    );
    let st = container_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 137);
    // Stop again, remove twice: all fine.
    cri.stop_container(&id, 1).await.unwrap();
    for _ in 0..2 {
        cri.remove_container(&id).await.unwrap();
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(&id), "rootfs still mounted");
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn bad_container_requests() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "bad").await;
    let mut missing_image = container("c", &["true"]);
    missing_image.image = Some(v1::ImageSpec {
        image: format!("{}/berth-test/none:latest", registry().addr),
        ..Default::default()
    });
    assert_eq!(
        cri.create_container(&pod, &pod_config, missing_image)
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        cri.create_container("no-such-pod", &pod_config, container("c", &["true"]))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    let mut no_meta = container("c", &["true"]);
    no_meta.metadata = None;
    assert_eq!(
        cri.create_container(&pod, &pod_config, no_meta)
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    // A create that fails late (a relative host path, refused by the spec
    // generator after the rootfs is mounted) leaves nothing.
    let mut bad_mount = container("c", &["true"]);
    bad_mount.mounts = vec![v1::Mount {
        container_path: "/data".into(),
        host_path: "relative/berth-test".into(),
        ..Default::default()
    }];
    let err = cri
        .create_container(&pod, &pod_config, bad_mount)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    for dir in [
        "state/containers",
        "root/containers",
        "root/records/containers",
    ] {
        let n = entries(&daemon.sandbox.path(dir)).len();
        assert_eq!(n, 0, "{dir} not empty after a failed create");
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(
        &daemon
            .sandbox
            .path("state/containers")
            .display()
            .to_string()
    ));
    // A host path that does not exist is made as a directory, as
    // containerd and CRI-O do for hostPath type "".
    let missing = daemon.sandbox.path("hostpath-that-did-not-exist/data");
    let mut new_dir = container("d", &["true"]);
    new_dir.mounts = vec![v1::Mount {
        container_path: "/data".into(),
        host_path: missing.display().to_string(),
        ..Default::default()
    }];
    cri.create_container(&pod, &pod_config, new_dir)
        .await
        .unwrap();
    assert!(missing.is_dir(), "{} was not created", missing.display());
    let id = cri
        .create_container(&pod, &pod_config, container("c", &["true"]))
        .await
        .unwrap();
    assert_eq!(
        cri.create_container(&pod, &pod_config, container("c", &["true"]))
            .await
            .unwrap_err()
            .code(),
        Code::AlreadyExists
    );
    assert_eq!(
        cri.exec_sync(&id, &["true"], 5).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    // A stopped pod takes no new containers; removing it removes its containers.
    cri.stop_pod(&pod).await.unwrap();
    assert_eq!(
        cri.create_container(&pod, &pod_config, container("d", &["true"]))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    remove_pod(&daemon, &pod).await;
    let left = cri.list_containers(None).await.unwrap();
    assert!(left.is_empty());
    let n = entries(&daemon.sandbox.path("state/containers")).len();
    assert_eq!(n, 0, "container bundles left");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn reopen_log_and_update_resources() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, logs) = pod(&daemon, "upd").await;
    let id = cri
        .create_container(
            &pod,
            &pod_config,
            container(
                "ticker",
                &[
                    "sh",
                    "-c",
                    "i=0; while true; do echo tick$i; i=$((i+1)); sleep 0.1; done",
                ],
            ),
        )
        .await
        .unwrap();
    start(&daemon, &id).await;
    let log = logs.join("ticker.log");
    // Rotated as kubelet does once ticks are logged: the reopened file
    // (at the old name) gets the next ones.
    common::wait_for_text(&log, " stdout F tick").await;
    std::fs::rename(&log, logs.join("ticker.log.1")).unwrap();
    cri.reopen_container_log(&id).await.unwrap();
    common::wait_for_text(&log, " stdout F tick").await;

    cri.update_container_resources(
        &id,
        v1::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let out = cri.exec_sync(&id,
        &["sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"],
        10,
    )
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (64u64 << 20).to_string()
    );
    // ContainerStatus shows the resources last applied.
    let resources = container_status(&daemon, &id)
        .await
        .resources
        .and_then(|r| r.linux)
        .expect("resources in the status");
    assert_eq!(resources.memory_limit_in_bytes, 64 << 20);
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn image_volume_is_mounted_read_only() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "imgvol").await;
    let layered = format!("{}/berth-test/layers:latest", registry().addr);
    let volume_id = pull(&daemon, &layered).await;
    let mut config = container("reader", &["sleep", "1000"]);
    config.mounts = vec![v1::Mount {
        container_path: "/imgvol".into(),
        image: Some(v1::ImageSpec {
            image: layered.clone(),
            ..Default::default()
        }),
        readonly: true,
        ..Default::default()
    }];
    // Asked for read-write: refused (image volumes are read-only).
    let mut rw = config.clone();
    rw.metadata.as_mut().unwrap().name = "writer".into();
    rw.mounts[0].readonly = false;
    let err = cri
        .create_container(&pod, &pod_config, rw)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let id = cri
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap();
    // The status names the exact image mounted (KEP-5365), as PullImage did.
    let st = container_status(&daemon, &id).await;
    let mount = st.mounts.iter().find(|m| m.container_path == "/imgvol");
    let image_ref = mount.and_then(|m| m.image.as_ref()).map(|i| &i.image_ref);
    assert_eq!(image_ref, Some(&volume_id), "{:?}", st.mounts);
    start(&daemon, &id).await;
    let out = cri.exec_sync(&id, &["sh", "-c", "test -x /imgvol/bin/busybox && echo present; touch /imgvol/x 2>/dev/null && echo writable || echo read-only"], 10)
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "present\nread-only\n");
    remove_pod(&daemon, &pod).await;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(&id), "image volume still mounted");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn security_context_mounts_limits_and_shared_namespaces_take_effect() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let mut pod_cfg = pod_config("fields");
    pod_cfg.log_directory = daemon.sandbox.path("logs/fields").display().to_string();
    pod_cfg.linux.as_mut().unwrap().security_context = Some(v1::LinuxSandboxSecurityContext {
        namespace_options: Some(v1::NamespaceOption {
            pid: v1::NamespaceMode::Pod as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    pull(&daemon, &registry().busybox()).await;
    let host_dir = daemon.sandbox.path("hostdata");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("hello"), "from-host\n").unwrap();

    let mut a = container("a", &["sleep", "1000"]);
    a.mounts = vec![v1::Mount {
        container_path: "/data".into(),
        host_path: host_dir.display().to_string(),
        readonly: true,
        ..Default::default()
    }];
    a.linux = Some(v1::LinuxContainerConfig {
        resources: Some(v1::LinuxContainerResources {
            memory_limit_in_bytes: 32 << 20,
            ..Default::default()
        }),
        security_context: Some(v1::LinuxContainerSecurityContext {
            run_as_user: Some(v1::Int64Value { value: 1000 }),
            run_as_group: Some(v1::Int64Value { value: 1000 }),
            supplemental_groups: vec![2000],
            readonly_rootfs: true,
            capabilities: Some(v1::Capability {
                drop_capabilities: vec!["ALL".into()],
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                ..Default::default()
            }),
            masked_paths: vec!["/proc/kcore".into(), "/proc/uptime".into()],
            readonly_paths: vec!["/proc/sys".into()],
            seccomp: Some(v1::SecurityProfile {
                profile_type: v1::security_profile::ProfileType::RuntimeDefault as i32,
                ..Default::default()
            }),
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
    });
    let a = cri.create_container(&pod, &pod_cfg, a).await.unwrap();
    start(&daemon, &a).await;
    let mut b = container("b", &["sleep", "999"]);
    b.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let b = cri.create_container(&pod, &pod_cfg, b).await.unwrap();
    start(&daemon, &b).await;

    let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    let run_in = |id: String, script: String| {
        let cri = &cri;
        async move {
            let cmd = sh(&script);
            let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let out = cri.exec_sync(&id, &refs, 10).await.unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
    };
    assert_eq!(run_in(a.clone(), "id -u; id -g".into()).await, "1000\n1000");
    assert!(run_in(a.clone(), "id -G".into())
        .await
        .split(' ')
        .any(|g| g == "2000"));
    // Only NET_BIND_SERVICE (bit 10) is left in the bounding set.
    assert_eq!(
        run_in(a.clone(), "grep CapBnd /proc/self/status".into()).await,
        "CapBnd:\t0000000000000400"
    );
    assert_eq!(
        run_in(
            a.clone(),
            "touch /newfile 2>/dev/null && echo rw || echo ro".into()
        )
        .await,
        "ro"
    );
    assert_eq!(
        run_in(
            a.clone(),
            "cat /data/hello; touch /data/x 2>/dev/null || echo ro".into()
        )
        .await,
        "from-host\nro"
    );
    // Masked: /dev/null (char 1:3) is bound over it.
    assert_eq!(
        run_in(
            a.clone(),
            "stat -c %t:%T /proc/uptime; wc -c < /proc/uptime".into()
        )
        .await,
        "1:3\n0"
    );
    assert_eq!(
        run_in(a.clone(), "grep Seccomp: /proc/self/status".into()).await,
        "Seccomp:\t2"
    );
    assert_eq!(
        run_in(a.clone(), "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max".into()).await,
        (32u64 << 20).to_string()
    );
    // Both containers share the pod's hostname, IP and PID namespace.
    let ip = |id: String| run_in(id, "ip -4 -o addr show eth0 | awk '{print $4}'".into());
    let ip_a = ip(a.clone()).await;
    assert!(ip_a.starts_with(&net.subnet_prefix), "{ip_a}");
    assert_eq!(ip(b.clone()).await, ip_a);
    assert_eq!(run_in(b.clone(), "hostname".into()).await, "fields");
    assert_eq!(run_in(a.clone(), "hostname".into()).await, "fields");
    // No containers and no timestamp in the pod's status (as containerd
    // 2.4): kubelet 1.37 with EventedPLEG would take them as the pod's
    // whole state (and made init containers again); it lists them itself.
    let pod_status = daemon.cri().await.pod_status(&pod, false).await.unwrap();
    assert!(pod_status.containers_statuses.is_empty());
    assert_eq!(pod_status.timestamp, 0);
    assert!(pod_status.info.is_empty());
    // Verbose: the same status with the info.
    let verbose = daemon.cri().await.pod_status(&pod, true).await.unwrap();
    assert!(verbose.info["info"].contains(&pod), "{:?}", verbose.info);
    assert_eq!(verbose.status.as_ref().unwrap().id, pod);
    assert_eq!(verbose.status, pod_status.status);
    assert!(verbose.containers_statuses.is_empty());
    let ps = run_in(b.clone(), "ps -o args".into()).await;
    assert!(
        ps.contains("sleep 1000") && ps.contains("sleep 999"),
        "{ps}"
    );
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn shared_pid_namespace_container_leaves_no_processes() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    // The pod's PID namespace (with a pause as its init): the container
    // joins it (the client sends the pod's namespace options, as kubelet).
    let pod_config = pod_config_with_pause("orphans");
    let pod = cri.run_pod(&pod_config).await.unwrap();
    pull(&daemon, &registry().busybox()).await;
    let id = cri
        .create_container(
            &pod,
            &pod_config,
            container("forker", &["sh", "-c", "sleep 3331 & exit 0"]),
        )
        .await
        .unwrap();
    let started = Instant::now();
    start(&daemon, &id).await;
    let st = wait_exited(&daemon, &id).await;
    assert_eq!(st.exit_code, 0);
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    // The shim kills what the container left in the pod's PID namespace
    // (`kill --all`) before it records the exit; dying takes a moment.
    let left = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "sleep 3331"])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    if tokio::time::timeout(Duration::from_secs(10), async {
        while left() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_err()
    {
        let logs: Vec<String> = std::fs::read_dir(daemon.sandbox.path("state/s"))
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("shim.log")).ok())
            .collect();
        panic!("background process left running: {logs:?}");
    }
    remove_pod(&daemon, &pod).await;
}

/// A container that exits is deleted from the runtime then (its shim exits
/// too), so RemoveContainer only has its files and record left to remove.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn exited_container_leaves_the_runtime_at_exit() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "gone").await;
    let id = cri
        .create_container(
            &pod,
            &pod_config,
            container("brief", &["sh", "-c", "exit 0"]),
        )
        .await
        .unwrap();
    start(&daemon, &id).await;
    let paths = common::cri::ContainerPaths::new(&daemon, &id);
    assert!(paths.shim_socket.parent().unwrap().is_dir());
    let st = wait_exited(&daemon, &id).await;
    assert_eq!(st.reason, "Completed");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !paths.released() {
        assert!(
            Instant::now() < deadline,
            "runtime state {}, shim socket {} or rootfs mount still there",
            paths.runtime_state.display(),
            paths.shim_socket.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The record stays until RemoveContainer, which stays idempotent.
    assert_eq!(container_status(&daemon, &id).await.exit_code, 0);
    for _ in 0..2 {
        daemon.cri().await.remove_container(&id).await.unwrap();
    }
    assert!(!paths.shim_socket.parent().unwrap().exists());
    remove_pod(&daemon, &pod).await;
}

/// A tmpfs made a shared mount, for the propagation tests; unmounted (with
/// whatever propagated into it) on drop.
struct SharedMount(std::path::PathBuf);

impl SharedMount {
    fn new(path: std::path::PathBuf) -> SharedMount {
        std::fs::create_dir_all(&path).unwrap();
        let sh = |args: &[&str]| {
            let st = std::process::Command::new("mount")
                .args(args)
                .status()
                .unwrap();
            assert!(st.success(), "mount {args:?}");
        };
        let p = path.to_str().unwrap();
        sh(&["-t", "tmpfs", "tmpfs", p]);
        sh(&["--make-shared", p]);
        SharedMount(path)
    }
}

impl Drop for SharedMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-R", "-l"])
            .arg(&self.0)
            .status();
    }
}

fn mount_at(host: &std::path::Path, propagation: v1::MountPropagation) -> v1::Mount {
    v1::Mount {
        container_path: "/data".into(),
        host_path: host.display().to_string(),
        propagation: propagation as i32,
        ..Default::default()
    }
}

/// HostToContainer (rslave): a mount made on the host after the start shows
/// in the container. Bidirectional (rshared, privileged): a mount the
/// container makes shows on the host. Private: neither.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn mount_propagation_takes_effect() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let mut pod_cfg = pod_config("prop");
    pod_cfg.linux.as_mut().unwrap().security_context = Some(v1::LinuxSandboxSecurityContext {
        privileged: true,
        ..Default::default()
    });
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    pull(&daemon, &registry().busybox()).await;
    let shared = SharedMount::new(daemon.sandbox.path("propagated"));
    let host = shared.0.clone();

    let mut slave = container("slave", &["sleep", "1000"]);
    slave.mounts = vec![mount_at(
        &host,
        v1::MountPropagation::PropagationHostToContainer,
    )];
    let slave = cri.create_container(&pod, &pod_cfg, slave).await.unwrap();
    start(&daemon, &slave).await;
    let mut private = container("private", &["sleep", "1000"]);
    private.mounts = vec![mount_at(&host, v1::MountPropagation::PropagationPrivate)];
    let private = cri.create_container(&pod, &pod_cfg, private).await.unwrap();
    start(&daemon, &private).await;
    let mut bidi = container("bidi", &["sleep", "1000"]);
    bidi.mounts = vec![mount_at(
        &host,
        v1::MountPropagation::PropagationBidirectional,
    )];
    bidi.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let bidi = cri.create_container(&pod, &pod_cfg, bidi).await.unwrap();
    start(&daemon, &bidi).await;

    // Host → containers.
    std::fs::create_dir(host.join("fromhost")).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(host.join("fromhost"))
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(host.join("fromhost/marker"), "late\n").unwrap();
    let read = |id: String, path: &'static str| {
        let cri = &cri;
        async move {
            let cmd = format!("cat {path} 2>/dev/null || echo absent");
            let out = cri.exec_sync(&id, &["sh", "-c", &cmd], 10).await.unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
    };
    assert_eq!(read(slave.clone(), "/data/fromhost/marker").await, "late");
    assert_eq!(read(bidi.clone(), "/data/fromhost/marker").await, "late");
    assert_eq!(
        read(private.clone(), "/data/fromhost/marker").await,
        "absent"
    );

    // Container → host (and the slave sees it too, through the host).
    let out = cri.exec_sync(&bidi,
        &[
            "sh",
            "-c",
            "mkdir /data/fromctr && mount -t tmpfs tmpfs /data/fromctr && echo hi > /data/fromctr/f",
        ],
        10,
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(host.join("fromctr/f")).unwrap(),
        "hi\n"
    );
    assert_eq!(read(slave.clone(), "/data/fromctr/f").await, "hi");
    assert_eq!(read(private.clone(), "/data/fromctr/f").await, "absent");
    remove_pod(&daemon, &pod).await;
    drop(shared);
}

/// The RuntimeDefault profile denies what Unconfined allows: creating a user
/// namespace (`unshare` without CAP_SYS_ADMIN).
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn runtime_default_seccomp_denies_a_syscall_unconfined_allows() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "seccomp").await;
    let mut outcomes = Vec::new();
    for (name, profile) in [
        (
            "confined",
            v1::security_profile::ProfileType::RuntimeDefault,
        ),
        ("unconfined", v1::security_profile::ProfileType::Unconfined),
    ] {
        let mut c = container(name, &["sleep", "1000"]);
        c.linux = Some(v1::LinuxContainerConfig {
            security_context: Some(v1::LinuxContainerSecurityContext {
                seccomp: Some(v1::SecurityProfile {
                    profile_type: profile as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let id = cri.create_container(&pod, &pod_config, c).await.unwrap();
        start(&daemon, &id).await;
        let out = cri
            .exec_sync(&id, &["unshare", "-U", "true"], 10)
            .await
            .unwrap();
        outcomes.push((
            name,
            out.exit_code,
            String::from_utf8_lossy(&out.stderr).to_string(),
        ));
    }
    assert_ne!(outcomes[0].1, 0, "{outcomes:?}");
    assert!(outcomes[0].2.contains("not permitted"), "{outcomes:?}");
    assert_eq!(outcomes[1].1, 0, "{outcomes:?}");
    remove_pod(&daemon, &pod).await;
}

/// The image fields as containerd fills them (internal/cri/server/
/// container_list.go, container_status.go): a listed container carries the
/// image id in `image_ref` and `image_id` (kubelet's image GC and `crictl
/// ps` read them); a container's status carries the image's repo digest in
/// `image_ref` and the image id in `image_id`.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn image_ref_and_image_id_as_containerd_fills_them() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "imageref").await;
    let image_id = pull(&daemon, &registry().busybox()).await;
    let image = cri
        .image_status(&registry().busybox())
        .await
        .unwrap()
        .unwrap();
    let digest = image.repo_digests.first().expect("a repo digest").clone();
    assert_ne!(digest, image_id);
    let id = cri
        .create_container(&pod, &pod_config, container("ref", &["true"]))
        .await
        .unwrap();

    let listed = cri
        .list_containers(Some(v1::ContainerFilter {
            id: id.clone(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].image_ref, image_id, "ListContainers image_ref");
    assert_eq!(listed[0].image_id, image_id, "ListContainers image_id");

    let st = container_status(&daemon, &id).await;
    assert_eq!(st.image_ref, digest, "ContainerStatus image_ref");
    assert_eq!(st.image_id, image_id, "ContainerStatus image_id");
    remove_pod(&daemon, &pod).await;
}

/// cri-api v0.37's `Mount.mount_options` (KEP-5855): `noexec`, `nosuid` and
/// `nodev` land on the bind mount inside the container (a program on it
/// cannot run, the flags show in its mountinfo), the same mount without
/// them runs it, and an option berth does not apply is refused naming it,
/// leaving no container.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn mount_options_are_applied_to_bind_mounts_or_refused() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "mntopts").await;
    let host = daemon.sandbox.path("mntopts-data");
    std::fs::create_dir_all(&host).unwrap();
    let script = host.join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    let with = |name: &str, opts: &[&str]| {
        let mut c = container(name, &["sleep", "1000"]);
        let mut m = mount_at(&host, v1::MountPropagation::PropagationPrivate);
        m.mount_options = opts.iter().map(|o| o.to_string()).collect();
        c.mounts = vec![m];
        c
    };
    let tight = cri
        .create_container(
            &pod,
            &pod_config,
            with("tight", &["noexec", "nosuid", "nodev"]),
        )
        .await
        .unwrap();
    start(&daemon, &tight).await;
    let plain = cri
        .create_container(&pod, &pod_config, with("plain", &[]))
        .await
        .unwrap();
    start(&daemon, &plain).await;

    // runc's own exec of it fails (EACCES); a shell says 126.
    let e = cri
        .exec_sync(&tight, &["/data/run.sh"], 10)
        .await
        .unwrap_err();
    assert!(e.message().contains("permission denied"), "{e:?}");
    let out = cri
        .exec_sync(&tight, &["sh", "-c", "/data/run.sh"], 10)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 126, "a program on a noexec mount ran");
    let out = cri.exec_sync(&plain, &["/data/run.sh"], 10).await.unwrap();
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    let flags = |id: String| {
        let cri = &cri;
        async move {
            let cmd = "awk '$5 == \"/data\" { print $6 }' /proc/self/mountinfo";
            let out = cri.exec_sync(&id, &["sh", "-c", cmd], 10).await.unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
    };
    let tight_flags = flags(tight.clone()).await;
    for f in ["noexec", "nosuid", "nodev"] {
        assert!(tight_flags.split(',').any(|x| x == f), "{tight_flags}");
    }
    assert!(!flags(plain.clone()).await.contains("noexec"));

    let err = cri
        .create_container(&pod, &pod_config, with("loose", &["nodev", "exec"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message().contains("mounts[0].mount_options[1]"),
        "{}",
        err.message()
    );
    let names: Vec<String> = cri
        .list_containers(None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.metadata.map(|m| m.name))
        .collect();
    assert!(!names.contains(&"loose".to_string()), "{names:?}");
    remove_pod(&daemon, &pod).await;
}

/// Whether this process has CAP_SYS_RESOURCE (lowering an OOM score
/// below what a process started with needs it).
fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    // CAP_SYS_RESOURCE is capability 24.
    eff & (1 << 24) != 0
}

/// UpdateContainerResources' `oom_score_adj` (kubelet's in-place resize
/// moves a Burstable pod's score with its memory request) reaches the
/// running container's processes, and one berth cannot set (lowering it
/// without CAP_SYS_RESOURCE) is refused, not reported as applied. The old
/// code recorded it and changed nothing.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn oom_score_adj_updates_reach_the_processes() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let (pod, pod_config, _) = pod(&daemon, "oom").await;
    let mut config = container("scored", &["sh", "-c", "sleep 1000 & exec sleep 1000"]);
    config.linux = Some(v1::LinuxContainerConfig {
        resources: Some(v1::LinuxContainerResources {
            oom_score_adj: 500,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = cri
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap();
    start(&daemon, &id).await;
    let resp = cri.container_status(&id, true).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    let pid = info["pid"].as_u64().unwrap();
    // The init and its child, seen from the host.
    let scores = || {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        std::iter::once(pid.to_string())
            .chain(children.split_whitespace().map(str::to_string))
            .map(|p| {
                std::fs::read_to_string(format!("/proc/{p}/oom_score_adj"))
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while scores().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(scores(), ["500", "500"]);
    let update = |oom: i64| v1::LinuxContainerResources {
        oom_score_adj: oom,
        ..Default::default()
    };
    cri.update_container_resources(&id, update(800))
        .await
        .unwrap();
    assert_eq!(scores(), ["800", "800"]);
    cri.update_container_resources(&id, update(600))
        .await
        .unwrap();
    assert_eq!(scores(), ["600", "600"]);
    // Below berth's own score: raised to it, as at CreateContainer (berth
    // gives no container a lower score than its own, as containerd's
    // restrict_oom_score_adj). Below what the processes may go to,
    // the kernel refuses without CAP_SYS_RESOURCE, and so does berth:
    // nothing is reported as applied.
    let own: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let expected = (-500).max(own).to_string();
    let recorded = || async {
        container_status(&daemon, &id)
            .await
            .resources
            .and_then(|r| r.linux)
            .unwrap()
            .oom_score_adj
    };
    match cri.update_container_resources(&id, update(-500)).await {
        Ok(()) => {
            assert_eq!(scores(), [expected.clone(), expected]);
            assert_eq!(recorded().await, -500);
        }
        Err(e) => {
            assert!(!has_cap_sys_resource(), "{e:?}");
            assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
            assert!(e.message().contains("CAP_SYS_RESOURCE"), "{}", e.message());
            assert_eq!(scores(), ["600", "600"]);
            assert_eq!(recorded().await, 600);
        }
    }
    remove_pod(&daemon, &pod).await;
}

/// The cgroup of `pid` in the memory hierarchy (v1), else the unified one.
fn cgroup_of(pid: u64) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let line = |prefix: &str| {
        text.lines()
            .find_map(|l| l.split_once(prefix).map(|(_, path)| path.to_string()))
    };
    line(":memory:")
        .or_else(|| line("0::"))
        .unwrap_or_else(|| panic!("no cgroup in {text}"))
}

/// `crictl inspect`'s (or `inspectp`'s) go-template answer for `id`.
fn crictl_template(daemon: &Daemon, verb: &str, id: &str, template: &str) -> String {
    let endpoint = format!("unix://{}", daemon.sandbox.socket().display());
    let out = std::process::Command::new("crictl")
        .args(["--runtime-endpoint", &endpoint, verb, "-o", "go-template"])
        .args(["--template", template, id])
        .output()
        .expect("crictl on PATH (hack/test.sh puts target/gotools-path first)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The verbose info has containerd's keys whose meaning carries over, as
/// tools read them: `runtimeSpec` (the spec as run: its cgroupsPath is the
/// process's cgroup), `config` (the CRI config, Go's JSON names),
/// `privileged`, `runtimeOptions`, `snapshotter`; the pod's `config`,
/// `netNamespaceClosed`, and the pause's `runtimeSpec` where it has one.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn verbose_info_has_containerds_keys_as_crictl_reads_them() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let mut pod_cfg = pod_config_with_pause("inspect");
    let sc = pod_cfg
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.privileged = true;
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    let mut privileged = container("priv", &["sleep", "3600"]);
    privileged.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let privileged = common::cri::run_container(&daemon, &pod, &pod_cfg, privileged).await;
    let plain = container("plain", &["sleep", "3600"]);
    let plain = common::cri::run_container(&daemon, &pod, &pod_cfg, plain).await;

    let info = |id: String| {
        let cri = &cri;
        async move {
            let resp = cri.container_status(&id, true).await.unwrap();
            serde_json::from_str::<serde_json::Value>(&resp.info["info"]).unwrap()
        }
    };
    for (id, name, is_privileged) in [(&privileged, "priv", true), (&plain, "plain", false)] {
        let info = info(id.clone()).await;
        let cgroup = cgroup_of(info["pid"].as_u64().unwrap());
        assert_eq!(info["runtimeSpec"]["linux"]["cgroupsPath"], cgroup.as_str());
        assert_eq!(
            info["runtimeSpec"]["process"]["args"],
            serde_json::json!(["sleep", "3600"])
        );
        assert_eq!(info["config"]["metadata"]["name"], name);
        assert_eq!(
            info["config"]["image"]["image"],
            registry().busybox().as_str()
        );
        assert_eq!(info["config"]["labels"]["name"], name);
        assert_eq!(info["config"]["log_path"], format!("{name}.log").as_str());
        assert_eq!(info["privileged"], is_privileged);
        let sc = &info["config"]["linux"]["security_context"];
        assert_eq!(sc["privileged"].as_bool().unwrap_or(false), is_privileged);
        assert_eq!(info["snapshotter"], "overlayfs");
        assert_eq!(info["runtimeOptions"]["binary_name"], info["runtime"]);
        assert_eq!(info["sandboxID"], pod.as_str());
        // What scripts run.
        let template = "{{.info.runtimeSpec.linux.cgroupsPath}}";
        assert_eq!(crictl_template(&daemon, "inspect", id, template), cgroup);
        let template = "{{.info.config.metadata.name}} {{.info.privileged}}";
        assert_eq!(
            crictl_template(&daemon, "inspect", id, template),
            format!("{name} {is_privileged}")
        );
    }

    // The pod: its config, its netns open, the pause's spec as run.
    let resp = cri.pod_status(&pod, true).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    assert_eq!(info["config"]["metadata"]["name"], "inspect");
    assert_eq!(
        info["config"]["linux"]["security_context"]["privileged"],
        true
    );
    assert_eq!(info["netNamespaceClosed"], false);
    let pause_cgroup = cgroup_of(info["pid"].as_u64().unwrap());
    assert_eq!(
        info["runtimeSpec"]["linux"]["cgroupsPath"],
        pause_cgroup.as_str()
    );
    let annotations = &info["runtimeSpec"]["annotations"];
    assert_eq!(annotations["io.kubernetes.cri.container-type"], "sandbox");
    let template = "{{.info.config.metadata.name}} {{.info.runtimeSpec.linux.cgroupsPath}}";
    assert_eq!(
        crictl_template(&daemon, "inspectp", &pod, template),
        format!("inspect {pause_cgroup}")
    );
    // Stopped: the netns is gone.
    cri.stop_pod(&pod).await.unwrap();
    let resp = cri.pod_status(&pod, true).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    assert_eq!(info["netNamespaceClosed"], true);
    remove_pod(&daemon, &pod).await;

    // A pod without a pause has no spec of its own; its config is there.
    let pod_cfg = pod_config("inspect-pinned");
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    let resp = cri.pod_status(&pod, true).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    assert_eq!(info["config"]["metadata"]["name"], "inspect-pinned");
    assert!(info["runtimeSpec"].is_null(), "{info}");
    assert_eq!(info["netNamespaceClosed"], false);
    remove_pod(&daemon, &pod).await;
}

/// What the node e2e suite's isolated-PID-namespace pod met: containers
/// that outlive SIGTERM were in kubelet's graceful StopContainer when
/// StopPodSandbox came with a 2 s deadline. The pod's stop queued behind
/// their grace past the deadline, and the node's take-down then stopped
/// berth mid-stop, leaving the shims and their cgroups. The pod's stop
/// kills at once: the graceful stops end with it, and the client's retry
/// and the removal leave no shim, container cgroup (nor process), mount,
/// netns or record. A pod without a pause, then one with.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_pod_stop_does_not_wait_out_its_containers_grace() {
    require_root!();
    for with_pause in [false, true] {
        pod_stop_during_grace(with_pause).await;
    }
}

async fn pod_stop_during_grace(with_pause: bool) {
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let name = if with_pause { "grace-pause" } else { "grace" };
    let cgroup = PodCgroup::new(name);
    let mut config = cgroup.pod_config(name);
    if with_pause {
        let linux = config.linux.as_mut().unwrap();
        let sc = linux.security_context.as_mut().unwrap();
        sc.namespace_options.as_mut().unwrap().pid = v1::NamespaceMode::Pod as i32;
    }
    let logs = daemon.sandbox.path(&format!("logs/{name}"));
    config.log_directory = logs.display().to_string();
    let pod = cri.run_pod(&config).await.unwrap();
    pull(&daemon, &registry().busybox()).await;
    // Outlives SIGTERM (as the e2e's `sleep`, PID 1 of its own namespace),
    // and says when it got one.
    // It says when its trap is set: a SIGTERM before that would kill it (or,
    // as PID 1 of its own namespace, be dropped and never be told).
    let script = "trap 'echo TERM ignored' TERM; echo trap set; while :; do sleep 1; done";
    let names = ["one", "two"];
    let mut ids = Vec::new();
    for c in names {
        let cfg = as_kubelet_sends(&config, container(c, &["sh", "-c", script]));
        ids.push(run_container(&daemon, &pod, &config, cfg).await);
    }
    for c in names {
        let log = logs.join(format!("{c}.log"));
        let set = || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("trap set"));
        common::wait_until("the trap set", Duration::from_secs(60), set).await;
    }
    // kubelet's graceful stops, with a grace no test waits out.
    let graceful: Vec<_> = ids
        .iter()
        .map(|id| {
            let (cri, id) = (cri.clone(), id.clone());
            tokio::spawn(async move { cri.stop_container(&id, 3600).await })
        })
        .collect();
    for c in names {
        let log = logs.join(format!("{c}.log"));
        let told = || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("TERM ignored"));
        common::wait_until("the stop signal", Duration::from_secs(60), told).await;
    }
    // The pod's stop with kubelet's 2 s deadline: whether or not it ends in
    // time, its client gives up then, and calls again.
    let _ = cri
        .with_deadline(Duration::from_secs(2))
        .stop_pod(&pod)
        .await;
    let bound = Duration::from_secs(60);
    let retried = cri.with_deadline(bound).stop_pod(&pod).await;
    retried.expect("the retried StopPodSandbox waited out its containers' grace");
    for call in graceful {
        let ended = tokio::time::timeout(bound, call).await;
        let stopped = ended.expect("a graceful StopContainer outlived its pod's stop");
        stopped.unwrap().expect("StopContainer");
    }
    for id in &ids {
        let status = container_status(&daemon, id).await;
        assert_eq!(status.state, v1::ContainerState::ContainerExited as i32);
        assert_eq!(status.exit_code, 137, "{status:?}");
    }
    cri.remove_pod(&pod).await.expect("RemovePodSandbox");
    common::faults::assert_clean(&daemon, &net).await;
    let left = cgroup.children();
    assert!(left.is_empty(), "cgroups left: {left:?}");
}
