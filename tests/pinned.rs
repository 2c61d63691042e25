//! Pods without a pause process, against the real daemon, runc and CNI
//! plugins. kubelet's namespaces for a pod that does not share its process
//! namespace (network and IPC of the pod, a PID namespace per container)
//! need no process: berth pins the pod's UTS and IPC namespaces on files, as
//! CRI-O does with `drop_infra_ctr`, and its containers join them and the
//! network namespace by path. A pod that shares one PID namespace, or a
//! daemon with `drop_infra_ctr = false`, keeps a pause. Root only.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::cri::{container, exec, pull, remove_pod, run_container};
use common::faults::entries;
use common::pods::{daemon, pod_config, pod_config_with_pause, TestNet};
use common::{registry, Daemon};
use cri_api::v1;

async fn verbose(daemon: &Daemon, id: &str) -> (v1::PodSandboxStatus, serde_json::Value) {
    let cri = daemon.cri().await;
    let resp = cri.pod_status(id, true).await.expect("PodSandboxStatus");
    let info = serde_json::from_str(&resp.info["info"]).unwrap();
    (resp.status.unwrap(), info)
}

/// `readlink /proc/self/ns/<kind>` inside a container.
async fn ns_of(daemon: &Daemon, id: &str, kind: &str) -> String {
    let path = format!("/proc/self/ns/{kind}");
    let out = exec(daemon, id, &["readlink", &path]).await;
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The `kind:[inode]` name of the namespace pinned at `path`.
fn pinned_name(kind: &str, path: &Path) -> String {
    format!("{kind}:[{}]", std::fs::metadata(path).unwrap().ino())
}

/// Processes whose command line mentions `id` (a pause's shim would).
fn processes_naming(id: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(id))
                .unwrap_or(false)
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_pod_without_a_pause_shares_its_namespaces_and_leaves_nothing() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let config = pod_config("pinned");
    let pod = cri.run_pod(&config).await.unwrap();
    let (status, info) = verbose(&daemon, &pod).await;
    assert_eq!(status.state, v1::PodSandboxState::SandboxReady as i32);
    assert!(info["pid"].is_null(), "a pause runs: {info}");
    assert!(
        processes_naming(&pod).is_empty(),
        "a process of the pod runs"
    );
    let uts = PathBuf::from(info["pinnedNamespaces"]["uts"].as_str().unwrap());
    let ipc = PathBuf::from(info["pinnedNamespaces"]["ipc"].as_str().unwrap());
    let netns = PathBuf::from(info["netns"].as_str().unwrap());

    let a = run_container(&daemon, &pod, &config, container("a", &["sleep", "1000"])).await;
    let b = run_container(&daemon, &pod, &config, container("b", &["sleep", "1000"])).await;
    // The pod's hostname, in the pinned UTS namespace both containers are in.
    let out = exec(&daemon, &a, &["hostname"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pinned");
    for (kind, pin) in [("uts", &uts), ("ipc", &ipc), ("net", &netns)] {
        let (in_a, in_b) = (
            ns_of(&daemon, &a, kind).await,
            ns_of(&daemon, &b, kind).await,
        );
        assert_eq!(in_a, in_b, "{kind}");
        assert_eq!(in_a, pinned_name(kind, pin), "{kind}");
        let host = std::fs::read_link(format!("/proc/self/ns/{kind}")).unwrap();
        assert_ne!(in_a, host.display().to_string(), "{kind} is the host's");
    }
    // A PID namespace each: each container's command is its PID 1.
    assert_ne!(
        ns_of(&daemon, &a, "pid").await,
        ns_of(&daemon, &b, "pid").await
    );
    let out = exec(&daemon, &a, &["cat", "/proc/1/comm"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sleep");
    // The host's name is untouched.
    let host = nix::unistd::gethostname().unwrap();
    assert_ne!(host.to_string_lossy(), "pinned");

    // A container asking to share a PID namespace the pod does not have is
    // refused with the reason.
    let mut shared = container("shared", &["sleep", "1000"]);
    shared.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Pod as i32,
                ..common::pods::kubelet_namespaces()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = cri
        .create_container(&pod, &config, shared)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("pid"), "{e:?}");

    // A restart keeps the pod ready; a container made after it joins the
    // same pinned namespaces.
    daemon.restart().await;
    let (status, _) = verbose(&daemon, &pod).await;
    assert_eq!(status.state, v1::PodSandboxState::SandboxReady as i32);
    let c = run_container(&daemon, &pod, &config, container("c", &["sleep", "1000"])).await;
    assert_eq!(ns_of(&daemon, &c, "uts").await, pinned_name("uts", &uts));

    // Pod stats read the network counters from the namespace itself when no
    // container runs in it.
    let cri = daemon.cri().await;
    for id in [&a, &b, &c] {
        cri.stop_container(id, 0).await.unwrap();
    }
    let ip = status.network.unwrap().ip;
    let ping = Command::new("ping")
        .args(["-c", "2", "-i", "0.2", "-W", "2", &ip])
        .status()
        .unwrap();
    assert!(ping.success(), "the pod's IP {ip} does not answer");
    let stats = cri
        .pod_stats(&pod)
        .await
        .unwrap()
        .stats
        .unwrap()
        .linux
        .unwrap();
    let eth0 = stats
        .network
        .expect("pod network")
        .interfaces
        .into_iter()
        .find(|i| i.name == "eth0")
        .expect("eth0");
    assert!(eth0.rx_bytes.unwrap().value > 0, "{eth0:?}");
    drop(cri);

    // Stop unpins; nothing is left.
    remove_pod(&daemon, &pod).await;
    assert!(!uts.exists() && !ipc.exists(), "pins left");
    let dir = daemon.sandbox.path("state/podns");
    assert_eq!(entries(&dir), Vec::<String>::new());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(&pod), "a mount of the pod is left");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_shared_pid_namespace_or_the_switch_keeps_a_pause() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let config = pod_config_with_pause("shared");
    let pod = cri.run_pod(&config).await.unwrap();
    let (_, info) = verbose(&daemon, &pod).await;
    assert!(info["pid"].as_u64().is_some(), "no pause: {info}");
    assert!(info["pinnedNamespaces"].is_null(), "{info}");
    // Its containers share the pause's PID namespace: the pause is PID 1.
    let a = run_container(&daemon, &pod, &config, container("a", &["sleep", "1000"])).await;
    let out = exec(&daemon, &a, &["cat", "/proc/1/cmdline"]).await;
    assert!(
        !String::from_utf8_lossy(&out.stdout).starts_with("sleep"),
        "PID 1 is the container's own command"
    );
    remove_pod(&daemon, &pod).await;
    drop(daemon);

    // drop_infra_ctr = false: a pause even where nothing needs one.
    let daemon = common::pods::daemon_with(&net, "[runtime]\ndrop_infra_ctr = false\n").await;
    let cri = daemon.cri().await;
    let pod = cri.run_pod(&pod_config("always")).await.unwrap();
    let (_, info) = verbose(&daemon, &pod).await;
    assert!(info["pid"].as_u64().is_some(), "no pause: {info}");
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn pins_lost_while_berth_was_down_make_the_pod_not_ready() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let pod = cri.run_pod(&pod_config("lost")).await.unwrap();
    let kept = cri.run_pod(&pod_config("kept")).await.unwrap();
    let (_, info) = verbose(&daemon, &pod).await;
    let uts = PathBuf::from(info["pinnedNamespaces"]["uts"].as_str().unwrap());
    // As a reboot would (for one pod): the pins go while berth is down.
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
    nix::mount::umount2(&uts, nix::mount::MntFlags::MNT_DETACH).unwrap();
    daemon.restart().await;
    let (status, _) = verbose(&daemon, &pod).await;
    assert_eq!(status.state, v1::PodSandboxState::SandboxNotready as i32);
    let (status, _) = verbose(&daemon, &kept).await;
    assert_eq!(status.state, v1::PodSandboxState::SandboxReady as i32);
    // Stop and Remove finish it; nothing is left.
    remove_pod(&daemon, &pod).await;
    remove_pod(&daemon, &kept).await;
    let dir = daemon.sandbox.path("state/podns");
    assert_eq!(entries(&dir), Vec::<String>::new());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_daemon_dropped_by_a_failed_test_takes_its_containers_with_it() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let config = pod_config("dropped");
    let pod = cri.run_pod(&config).await.unwrap();
    let c = run_container(&daemon, &pod, &config, container("c", &["sleep", "1000"])).await;
    let info = cri.container_status(&c, true).await.unwrap().info;
    let info: serde_json::Value = serde_json::from_str(&info["info"]).unwrap();
    let pid = info["pid"].as_u64().expect("a pid");
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    // As a test that panics before its clean-up drops it.
    drop(daemon);
    let gone = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    assert!(gone, "container process {pid} outlived its test");
    assert!(
        processes_naming(&c).is_empty(),
        "its shim outlived its test"
    );
}
