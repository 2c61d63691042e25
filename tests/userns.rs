//! Pods in their own user namespace (`hostUsers: false`, issue #19) against
//! the real daemon, runc, CNI and the local registry: the mapping inside,
//! root inside and an unprivileged uid outside, file ownership through the
//! idmapped layers and pod files, isolation between two ranges, kubelet's
//! contract for bad requests (InvalidArgument, nothing left behind), NODE
//! mode, Status, and exec/stats/restart/removal of such pods. Root only.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cri::{exec, pull, remove_pod, start};
use common::faults::entries;
use common::pods::{pod_config, TestNet};
use common::{registry, Daemon, Sandbox};
use cri_api::v1;
use tonic::Code;

/// A daemon on `net` whose temp dir its pods' root can pass (the harness
/// makes it 0700; a real root and state are 0711, set by the daemon).
async fn daemon(net: &TestNet) -> Daemon {
    let sandbox = Sandbox::new();
    std::fs::set_permissions(sandbox.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let config = common::pods::net_config(&sandbox, net, "");
    Daemon::start_in(sandbox, &config).await
}

fn map(container_id: u32, host_id: u32, length: u32) -> v1::IdMapping {
    v1::IdMapping {
        container_id,
        host_id,
        length,
    }
}

/// Namespace options as kubelet sends them for `hostUsers: false` (pid
/// CONTAINER: no shared process namespace), with `userns`.
fn ns_options(userns: v1::UserNamespace) -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: v1::NamespaceMode::Pod as i32,
        pid: v1::NamespaceMode::Container as i32,
        ipc: v1::NamespaceMode::Pod as i32,
        target_id: String::new(),
        userns_options: Some(userns),
    }
}

fn pod_userns(host: u32) -> v1::UserNamespace {
    v1::UserNamespace {
        mode: v1::NamespaceMode::Pod as i32,
        uids: vec![map(0, host, 65536)],
        gids: vec![map(0, host, 65536)],
    }
}

fn userns_pod(name: &str, userns: v1::UserNamespace) -> v1::PodSandboxConfig {
    let mut config = pod_config(name);
    config.linux.as_mut().unwrap().security_context = Some(v1::LinuxSandboxSecurityContext {
        namespace_options: Some(ns_options(userns)),
        ..Default::default()
    });
    config
}

/// A busybox container that sleeps, with the pod's namespace options (as
/// kubelet repeats them) and `mounts`.
fn sleeper(name: &str, pod: &v1::PodSandboxConfig, mounts: Vec<v1::Mount>) -> v1::ContainerConfig {
    let ns = pod
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone());
    v1::ContainerConfig {
        mounts,
        linux: Some(v1::LinuxContainerConfig {
            security_context: Some(v1::LinuxContainerSecurityContext {
                namespace_options: ns,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..common::cri::container(name, &["sleep", "600"])
    }
}

fn host_dir_mount(host: &Path) -> v1::Mount {
    v1::Mount {
        container_path: "/data".into(),
        host_path: host.display().to_string(),
        ..Default::default()
    }
}

async fn out(daemon: &Daemon, id: &str, cmd: &[&str]) -> String {
    String::from_utf8_lossy(&exec(daemon, id, cmd).await.stdout).into_owned()
}

/// The container's pid on the host, from verbose ContainerStatus.
async fn host_pid(daemon: &Daemon, id: &str) -> u32 {
    let resp = daemon.cri().await.container_status(id, true).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    info["pid"].as_u64().expect("a pid") as u32
}

/// The real, effective, saved and fs uids of a host process.
fn host_uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect()
}

/// Mount points under `dir`, from this process's mountinfo.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&dir))
        .collect()
}

/// What of pods is left in a daemon's state: mounts (but the shared netns
/// dir itself), netns files, userns trees, sandbox and container dirs.
fn leftovers(daemon: &Daemon) -> Vec<String> {
    let state = daemon.sandbox.path("state");
    let shared = daemon.sandbox.shared_mount_points();
    let mut left: Vec<String> = mounts_under(daemon.sandbox.dir.path())
        .into_iter()
        .filter(|p| !shared.contains(p))
        .map(|p| format!("mount {p}"))
        .collect();
    for dir in [
        state.join("netns"),
        state.join("podns"),
        state.join("userns/p"),
        state.join("userns/c"),
        state.join("sandboxes"),
        state.join("containers"),
        daemon.sandbox.path("root/sandboxes"),
        daemon.sandbox.path("root/containers"),
    ] {
        for name in entries(&dir) {
            left.push(dir.join(name).display().to_string());
        }
    }
    left
}

/// A host dir owned by the namespace's root, as an emptyDir the pod owns.
fn owned_dir(daemon: &Daemon, name: &str, uid: u32) -> PathBuf {
    let dir = daemon.sandbox.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
    dir
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_userns_pod_runs_as_root_inside_and_an_unprivileged_range_outside() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;

    let pod_a = userns_pod("userns-a", pod_userns(100000));
    let a = cri.run_pod(&pod_a.clone()).await.expect("RunPodSandbox");
    let shared = owned_dir(&daemon, "empty-dir", 100000);
    // A root-owned host dir asked for idmapped (uidMappings: the pod's).
    let idmapped = owned_dir(&daemon, "idmapped", 0);
    std::fs::write(idmapped.join("from-host"), b"h").unwrap();
    let idmapped_mount = v1::Mount {
        container_path: "/idm".into(),
        host_path: idmapped.display().to_string(),
        uid_mappings: vec![map(0, 100000, 65536)],
        gid_mappings: vec![map(0, 100000, 65536)],
        ..Default::default()
    };
    let c = cri
        .create_container(
            &a,
            &pod_a,
            sleeper("c", &pod_a, vec![host_dir_mount(&shared), idmapped_mount]),
        )
        .await
        .expect("CreateContainer");
    start(&daemon, &c).await;

    // The mapping, root inside.
    let uid_map = out(&daemon, &c, &["cat", "/proc/self/uid_map"]).await;
    assert_eq!(
        uid_map.split_whitespace().collect::<Vec<_>>(),
        ["0", "100000", "65536"],
        "{uid_map}"
    );
    let gid_map = out(&daemon, &c, &["cat", "/proc/self/gid_map"]).await;
    assert_eq!(
        gid_map.split_whitespace().collect::<Vec<_>>(),
        ["0", "100000", "65536"]
    );
    let id = out(&daemon, &c, &["id"]).await;
    assert!(id.starts_with("uid=0(root) gid=0(root)"), "{id}");
    // ... and 100000 on the host, for the container and for its pause.
    let pid = host_pid(&daemon, &c).await;
    assert_eq!(host_uids(pid), [100000; 4]);

    // Image files owned by root show owned by root; so do the pod's files.
    for path in [
        "/bin/busybox",
        "/etc/passwd",
        "/",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/etc/hostname",
    ] {
        let owner = out(&daemon, &c, &["stat", "-c", "%u:%g", path]).await;
        assert_eq!(owner.trim(), "0:0", "{path}");
    }
    // Nothing of the image was chowned on the host.
    let snapshots = daemon.sandbox.path("root/images");
    let busybox_on_host = find_file(&snapshots, "busybox").expect("the busybox layer file");
    assert_eq!(std::fs::metadata(&busybox_on_host).unwrap().uid(), 0);

    // It writes its rootfs and the host dir; the host sees its range.
    exec(&daemon, &c, &["sh", "-c", "echo rootfs > /written"]).await;
    let upper = daemon
        .sandbox
        .path(&format!("root/containers/{c}/upper/written"));
    let m = std::fs::metadata(&upper).unwrap();
    assert_eq!((m.uid(), m.gid()), (100000, 100000));
    exec(
        &daemon,
        &c,
        &["sh", "-c", "umask 077; echo secret > /data/secret"],
    )
    .await;
    let m = std::fs::metadata(shared.join("secret")).unwrap();
    assert_eq!((m.uid(), m.gid()), (100000, 100000));
    assert_eq!(
        out(&daemon, &c, &["stat", "-c", "%u", "/data/secret"])
            .await
            .trim(),
        "0"
    );
    // The idmapped host dir: root's files are root's inside, and what root
    // inside writes is root's on disk.
    assert_eq!(
        out(
            &daemon,
            &c,
            &["stat", "-c", "%u:%g", "/idm", "/idm/from-host"]
        )
        .await,
        "0:0\n0:0\n"
    );
    exec(&daemon, &c, &["sh", "-c", "echo in > /idm/from-pod"]).await;
    let m = std::fs::metadata(idmapped.join("from-pod")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    // Root inside is not root outside: a root-owned host file it cannot write.
    let root_file = daemon.sandbox.path("empty-dir/root-only");
    std::fs::write(&root_file, b"host\n").unwrap();
    std::fs::set_permissions(&root_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let denied = cri
        .exec_sync(&c, &["sh", "-c", "echo x >> /data/root-only"], 30)
        .await
        .unwrap();
    assert_ne!(denied.exit_code, 0, "root inside wrote a host root file");
    assert_eq!(std::fs::read(&root_file).unwrap(), b"host\n");

    // A second pod with another range cannot read the first's files.
    let pod_b = userns_pod("userns-b", pod_userns(200000));
    let b = cri.run_pod(&pod_b.clone()).await.expect("RunPodSandbox b");
    let cb = cri
        .create_container(
            &b,
            &pod_b,
            sleeper("cb", &pod_b, vec![host_dir_mount(&shared)]),
        )
        .await
        .unwrap();
    start(&daemon, &cb).await;
    assert_eq!(host_uids(host_pid(&daemon, &cb).await), [200000; 4]);
    let read = cri
        .exec_sync(&cb, &["cat", "/data/secret"], 30)
        .await
        .unwrap();
    assert_ne!(read.exit_code, 0, "pod b read pod a's file");
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "{read:?}"
    );
    // It sees it owned by nobody (not mapped in its namespace).
    assert_eq!(
        out(&daemon, &cb, &["stat", "-c", "%u", "/data/secret"])
            .await
            .trim(),
        "65534"
    );

    // Only the pod's root passes its userns trees: no other local user
    // reaches its /dev/shm, files or rootfs.
    for tree in [
        daemon.sandbox.path(&format!("state/userns/p/{a}")),
        daemon.sandbox.path(&format!("state/userns/c/{c}")),
    ] {
        let m = std::fs::metadata(&tree).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (100000, 100000, 0o700),
            "{tree:?}"
        );
    }

    // Stats work for such a container.
    let stats = cri.container_stats(&c).await.expect("ContainerStats");
    assert!(stats.stats.unwrap().cpu.is_some());
    // Pod stats read the network of its netns (owned by its user namespace).
    let pod_stats = cri
        .pod_stats(&a)
        .await
        .expect("PodSandboxStats")
        .stats
        .unwrap()
        .linux
        .unwrap();
    let eth0 = pod_stats
        .network
        .expect("network stats")
        .default_interface
        .expect("a default interface");
    assert_eq!(eth0.name, "eth0");
    assert!(eth0.rx_bytes.is_some(), "{eth0:?}");

    // Removal leaves no mount, netns, userns tree or dir.
    remove_pod(&daemon, &a).await;
    remove_pod(&daemon, &b).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

/// The first file named `name` below `dir`.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let t = e.file_type().ok()?;
        if t.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        } else if t.is_file() && p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn bad_userns_requests_are_invalid_and_leave_nothing() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let with = |f: fn(&mut v1::UserNamespace)| {
        let mut u = pod_userns(100000);
        f(&mut u);
        u
    };
    let bad: Vec<(&str, v1::PodSandboxConfig)> = vec![
        (
            "container mode",
            userns_pod(
                "bad",
                with(|u| u.mode = v1::NamespaceMode::Container as i32),
            ),
        ),
        (
            "target mode",
            userns_pod("bad", with(|u| u.mode = v1::NamespaceMode::Target as i32)),
        ),
        (
            "no uid mapping",
            userns_pod("bad", with(|u| u.uids.clear())),
        ),
        (
            "two gid mappings",
            userns_pod("bad", with(|u| u.gids.push(map(65536, 300000, 10)))),
        ),
        (
            "container 0 not mapped",
            userns_pod("bad", with(|u| u.uids = vec![map(1, 100000, 65536)])),
        ),
        (
            "length 0",
            userns_pod("bad", with(|u| u.gids = vec![map(0, 100000, 0)])),
        ),
        (
            "overflow",
            userns_pod(
                "bad",
                with(|u| u.uids = vec![map(0, u32::MAX - 100, 65536)]),
            ),
        ),
        (
            "host root",
            userns_pod("bad", with(|u| u.uids = vec![map(0, 0, 65536)])),
        ),
        ("host IPC", {
            let mut c = userns_pod("bad", pod_userns(100000));
            let sc = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
            sc.namespace_options.as_mut().unwrap().ipc = v1::NamespaceMode::Node as i32;
            c
        }),
    ];
    for (what, config) in bad {
        let e = cri.run_pod(&config).await.expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
        assert!(e.message().contains("namespace_options"), "{what}: {e:?}");
    }
    let pods = cri.list_pods(None).await.unwrap();
    assert!(pods.is_empty(), "{pods:?}");
    assert_eq!(leftovers(&daemon), Vec::<String>::new());

    // A container that asks for another mapping, or the host's, than its pod.
    let pod = userns_pod("good", pod_userns(100000));
    let p = cri.run_pod(&pod).await.unwrap();
    for (what, ns) in [
        ("another range", ns_options(pod_userns(300000))),
        (
            "NODE",
            ns_options(v1::UserNamespace {
                mode: v1::NamespaceMode::Node as i32,
                ..Default::default()
            }),
        ),
    ] {
        let mut config = sleeper("c", &pod, Vec::new());
        config
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .namespace_options = Some(ns);
        let e = cri
            .create_container(&p, &pod, config)
            .await
            .expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
    }
    let containers = entries(&daemon.sandbox.path("state/containers")).len();
    assert_eq!(containers, 0, "a refused container left its bundle");
    assert!(mounts_under(&daemon.sandbox.path("state/userns/c")).is_empty());
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn node_mode_is_the_hosts_user_namespace() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let pod = userns_pod(
        "node",
        v1::UserNamespace {
            mode: v1::NamespaceMode::Node as i32,
            ..Default::default()
        },
    );
    let p = cri.run_pod(&pod).await.expect("RunPodSandbox");
    let c = cri
        .create_container(&p, &pod, sleeper("c", &pod, Vec::new()))
        .await
        .unwrap();
    start(&daemon, &c).await;
    let uid_map = out(&daemon, &c, &["cat", "/proc/self/uid_map"]).await;
    assert_eq!(
        uid_map.split_whitespace().collect::<Vec<_>>(),
        ["0", "0", "4294967295"]
    );
    assert_eq!(host_uids(host_pid(&daemon, &c).await), [0; 4]);
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn status_reports_user_namespaces_and_a_restart_keeps_the_pod() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let status = cri.status(false).await.unwrap();
    // Probed here: this host makes user namespaces and idmapped mounts,
    // and runc and crun are installed (crun claims them only where it runs
    // containers at all).
    let crun_runs = common::crun_runs_here();
    for h in &status.runtime_handlers {
        let runs = h.name != "crun" || crun_runs;
        assert_eq!(h.features.unwrap().user_namespaces, runs, "{h:?}");
    }
    assert!(!status.runtime_handlers.is_empty());
    // Host-network userns pods (KEP-5607) where the default handler runs
    // userns pods: runc, here (a_userns_pod_on_the_host_network runs one).
    let default = status.runtime_handlers[0].features.unwrap();
    assert!(default.user_namespaces);
    assert!(status.features.unwrap().user_namespaces_host_network);

    pull(&daemon, &registry().busybox()).await;
    let pod = userns_pod("restart", pod_userns(100000));
    let p = cri.run_pod(&pod).await.unwrap();
    let c = cri
        .create_container(&p, &pod, sleeper("c", &pod, Vec::new()))
        .await
        .unwrap();
    start(&daemon, &c).await;
    daemon.restart().await;
    let cri = daemon.cri().await;
    // Exec and a new container in the same pod still work after a restart.
    let id = out(&daemon, &c, &["id", "-u"]).await;
    assert_eq!(id.trim(), "0");
    let c2 = cri
        .create_container(&p, &pod, sleeper("c2", &pod, Vec::new()))
        .await
        .unwrap();
    start(&daemon, &c2).await;
    assert_eq!(host_uids(host_pid(&daemon, &c2).await), [100000; 4]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn image_volumes_of_a_userns_pod_are_reachable_and_root_owned() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let layered = format!("{}/berth-test/layers:latest", registry().addr);
    pull(&daemon, &layered).await;
    let pod = userns_pod("imgvol", pod_userns(100000));
    let p = cri.run_pod(&pod).await.unwrap();
    // Three layers (a read-only overlay), and one (a read-only bind).
    let image_mount = |path: &str, image: &str| v1::Mount {
        container_path: path.into(),
        image: Some(v1::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        readonly: true,
        ..Default::default()
    };
    let mounts = vec![
        image_mount("/imgvol", &layered),
        image_mount("/bb", &registry().busybox()),
    ];
    let c = cri
        .create_container(&p, &pod, sleeper("c", &pod, mounts))
        .await
        .expect("CreateContainer with an image volume");
    start(&daemon, &c).await;
    assert_eq!(
        out(&daemon, &c, &["stat", "-c", "%u:%g", "/imgvol/bin/busybox"]).await,
        "0:0\n"
    );
    let w = cri
        .exec_sync(&c, &["touch", "/imgvol/x"], 10)
        .await
        .unwrap();
    assert_ne!(w.exit_code, 0, "the image volume is writable");
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

/// An OCI artifact's files in a userns pod: idmapped, so root's files are
/// root's inside (not `nobody`'s), read byte for byte, not writable.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_artifact_volume_of_a_userns_pod_is_idmapped() {
    use common::artifacts::{artifact_mount, model, VOCAB};
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let (model, _) = model();
    pull(&daemon, &model).await;
    let pod = userns_pod("artifact", pod_userns(100000));
    let p = cri.run_pod(&pod).await.unwrap();
    let mounts = vec![
        artifact_mount("/models", &model, ""),
        artifact_mount("/tok", &model, "tok"),
    ];
    let c = cri
        .create_container(&p, &pod, sleeper("c", &pod, mounts))
        .await
        .expect("CreateContainer with an artifact volume");
    start(&daemon, &c).await;
    assert_eq!(
        out(
            &daemon,
            &c,
            &["stat", "-c", "%u:%g %a", "/models/model.bin"]
        )
        .await,
        "0:0 444\n"
    );
    let weights = common::artifacts::digest(&common::artifacts::weights(256 << 10));
    let sum = out(&daemon, &c, &["sha256sum", "/models/model.bin"]).await;
    assert_eq!(&sum[..64], &weights["sha256:".len()..]);
    for file in ["/models/tok/vocab.txt", "/tok/vocab.txt"] {
        assert_eq!(out(&daemon, &c, &["cat", file]).await.as_bytes(), VOCAB);
    }
    assert_eq!(
        out(&daemon, &c, &["cat", "/models/data/a.txt"]).await,
        "from a tar\n"
    );
    let w = cri
        .exec_sync(&c, &["touch", "/models/x"], 10)
        .await
        .unwrap();
    assert_ne!(w.exit_code, 0, "the artifact volume is writable");
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("Read-only file system"),
        "{w:?}"
    );
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn attach_and_port_forward_reach_a_userns_pod() {
    use berth_streaming::client::{CommandOptions, RemoteCommand, SpdyPortForward, Transport};
    use common::cri::Streams;
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let pod = userns_pod("streams", pod_userns(100000));
    let p = cri.run_pod(&pod).await.unwrap();
    // Root inside may bind a low port: it owns the pod's network namespace.
    let mut server = sleeper("server", &pod, Vec::new());
    server.command = ["nc", "-ll", "-p", "80", "-e", "echo", "hi from userns"]
        .map(String::from)
        .to_vec();
    let s = cri.create_container(&p, &pod, server).await.unwrap();
    start(&daemon, &s).await;
    let wait = Duration::from_secs(30);
    let deadline = std::time::Instant::now() + wait;
    loop {
        let url = cri.port_forward(&p, &[]).await.expect("PortForward");
        let mut pf = SpdyPortForward::connect(&url).await.unwrap();
        let got = pf.open(80).await.unwrap().finish(wait).await.unwrap();
        if got.error.is_empty() {
            assert_eq!(String::from_utf8_lossy(&got.data), "hi from userns\n");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nc did not come up: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut echo = sleeper("echo", &pod, Vec::new());
    echo.command = vec!["cat".into()];
    echo.stdin = true;
    let e = cri.create_container(&p, &pod, echo).await.unwrap();
    start(&daemon, &e).await;
    let all = Streams {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let url = cri.attach(&e, all).await.expect("Attach");
    let options = CommandOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut rc = RemoteCommand::connect(&url, Transport::Spdy, options, &["v4.channel.k8s.io"])
        .await
        .unwrap();
    rc.send_stdin(b"hello userns\n").await.unwrap();
    rc.read_stdout_until("hello userns\n", wait).await.unwrap();
    rc.close_stdin().await.unwrap();
    rc.finish(wait).await.unwrap();
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

/// KEP-5607 (`user_namespaces_host_network`): a pod in its own user
/// namespace on the host's network runs: root inside and an unprivileged
/// range outside, the host's network namespace (the same interfaces, the
/// same inode), its `/sys` the host's bound read-only, exec works, and
/// nothing is left after removal (the old code refused it).
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_userns_pod_on_the_host_network() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let pod = common::pods::on_host_network(userns_pod("hostnet", pod_userns(100000)));
    let p = cri.run_pod(&pod).await.expect("RunPodSandbox");
    let st = cri.pod_status(&p, false).await.unwrap().status.unwrap();
    assert_eq!(st.state, v1::PodSandboxState::SandboxReady as i32);
    let c = cri
        .create_container(&p, &pod, sleeper("c", &pod, Vec::new()))
        .await
        .expect("CreateContainer");
    start(&daemon, &c).await;

    let uid_map = out(&daemon, &c, &["cat", "/proc/self/uid_map"]).await;
    assert_eq!(
        uid_map.split_whitespace().collect::<Vec<_>>(),
        ["0", "100000", "65536"]
    );
    assert_eq!(out(&daemon, &c, &["id", "-u"]).await.trim(), "0");
    let pid = host_pid(&daemon, &c).await;
    assert_eq!(host_uids(pid), [100000; 4]);
    let ino = |p: String| std::fs::metadata(p).unwrap().ino();
    assert_eq!(
        ino(format!("/proc/{pid}/ns/net")),
        ino("/proc/self/ns/net".into()),
        "not the host's network namespace"
    );
    assert_ne!(
        ino(format!("/proc/{pid}/ns/user")),
        ino("/proc/self/ns/user".into())
    );
    // The host's interfaces, through /sys too (those there before and
    // after: other tests make and remove theirs meanwhile); and /sys is
    // read-only.
    let host_links = || -> Vec<String> {
        std::fs::read_dir("/sys/class/net")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let before = host_links();
    let links = out(&daemon, &c, &["ls", "/sys/class/net"]).await;
    let after = host_links();
    let stable: Vec<&String> = before.iter().filter(|l| after.contains(l)).collect();
    assert!(stable.iter().any(|l| l.as_str() == "lo"), "{stable:?}");
    for l in stable {
        assert!(
            links.split_whitespace().any(|x| x == l),
            "{l} not in {links}"
        );
    }
    let mountinfo = out(&daemon, &c, &["cat", "/proc/self/mountinfo"]).await;
    let sys = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/sys"))
        .expect("/sys mounted");
    assert!(
        sys.split(' ').nth(5).unwrap().split(',').any(|o| o == "ro"),
        "{sys}"
    );
    let touch = cri
        .exec_sync(&c, &["sh", "-c", "echo 1 > /sys/kernel/uevent_helper"], 10)
        .await
        .unwrap();
    assert_ne!(touch.exit_code, 0, "/sys was writable");
    assert!(String::from_utf8_lossy(&touch.stderr).contains("Read-only"));

    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}

/// An image's VOLUME in a userns pod: its content copied with the image's
/// owners (on disk as in the image, seen through the idmapped view inside),
/// writable by the non-root user that owns it.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_images_volume_of_a_userns_pod_keeps_the_images_owners() {
    require_root!();
    let image = crate::volumes::content_image();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &image).await;
    let pod = userns_pod("volumes", pod_userns(100000));
    let p = cri.run_pod(&pod).await.unwrap();
    let mut config = sleeper("nobody", &pod, vec![]);
    config.image.as_mut().unwrap().image = image.clone();
    let sc = config
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.run_as_user = Some(v1::Int64Value { value: 65534 });
    let c = cri.create_container(&p, &pod, config).await.unwrap();
    let dir = crate::volumes::volume_dir(&daemon, &c, "/test_dir");
    let on_disk = std::fs::metadata(dir.join("nested/deep.conf")).unwrap();
    assert_eq!((on_disk.uid(), on_disk.gid()), (1000, 1000));
    start(&daemon, &c).await;
    assert_eq!(
        out(
            &daemon,
            &c,
            &["stat", "-c", "%u:%g %a", "/test_dir", "/test_dir/test_file"]
        )
        .await,
        "65534:65534 755\n65534:65534 644\n"
    );
    assert_eq!(
        out(
            &daemon,
            &c,
            &[
                "sh",
                "-c",
                "echo mine > /test_dir/new && cat /test_dir/test_file"
            ]
        )
        .await,
        "from the image\n"
    );
    // Written through the idmapped view: on disk as inside.
    assert_eq!(std::fs::metadata(dir.join("new")).unwrap().uid(), 65534);
    remove_pod(&daemon, &p).await;
    assert_eq!(leftovers(&daemon), Vec::<String>::new());
}
