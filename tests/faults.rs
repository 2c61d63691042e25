//! Faults through the real daemon, with real runc and CNI plugins: the retry
//! contract of RunPodSandbox and CreateContainer under short client
//! deadlines, CNI plugins that fail or hang, an OCI runtime that is missing
//! or fails, a full disk, and a registry that dies mid-layer. Each fault
//! ends in a clear gRPC code and leaves nothing half-made or leaked. Root
//! only.

use crate::common;
use crate::common::faults;

use std::time::{Duration, Instant};

use common::cri::{container, container_status, exec, pull, run_container, ContainerPaths};
use common::pods::{pod_config, pod_config_with_pause};
use common::registry;
use cri_api::v1;
use faults::{assert_clean, code_of, entries, Rig};
use tonic::Code;

fn gave_up(r: &Result<String, tonic::Status>) -> bool {
    matches!(r, Err(s) if matches!(s.code(), Code::DeadlineExceeded | Code::Cancelled))
}

/// kubelet's "name is reserved" loop, through the daemon: a CNI ADD that
/// takes 4 s, a client that gives up after 1.5 s. The retry with the same
/// config waits for the abandoned call and gets its pod, once; a different
/// config for the name gets AlreadyExists; nothing is made twice.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn run_pod_sandbox_retry_gets_the_abandoned_pod() {
    require_root!();
    let rig = Rig::new();
    rig.arm("sleep-ADD", "4");
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let config = pod_config("slowpod");
    let started = Instant::now();
    let first = cri
        .with_deadline(Duration::from_millis(1500))
        .run_pod(&config)
        .await;
    assert!(gave_up(&first), "{first:?}");
    // While it is still being made: a different config is refused.
    let mut other = config.clone();
    other.labels.insert("other".into(), "yes".into());
    let refused = cri
        .with_deadline(Duration::from_secs(20))
        .run_pod(&other)
        .await;
    assert_eq!(code_of(&refused), Code::AlreadyExists, "{refused:?}");
    assert!(
        refused.unwrap_err().message().contains("already in use by"),
        "names the holder"
    );
    // The retry of the same request waits and gets the pod.
    let id = cri
        .with_deadline(Duration::from_secs(20))
        .run_pod(&config)
        .await
        .expect("the retry gets the pod the abandoned call made");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the retry answered before the slow ADD ended"
    );
    let pods = cri.list_pods(None).await.unwrap();
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0].id, id);
    assert_eq!(pods[0].state, v1::PodSandboxState::SandboxReady as i32);
    assert_eq!(rig.leases().len(), 1, "one IP: {:?}", rig.leases());
    // Handed out once: a later retry is a new call for a taken name.
    let again = cri
        .with_deadline(Duration::from_secs(20))
        .run_pod(&config)
        .await;
    assert_eq!(code_of(&again), Code::AlreadyExists, "{again:?}");
    // A different config after it finished: refused too.
    let refused = cri
        .with_deadline(Duration::from_secs(20))
        .run_pod(&other)
        .await;
    assert_eq!(code_of(&refused), Code::AlreadyExists, "{refused:?}");
    rig.heal("sleep-ADD");
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// The same for CreateContainer: its hostPath dir is made on a frozen file
/// system (mkdir blocks until it is thawed, 4 s later).
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn create_container_retry_gets_the_abandoned_container() {
    require_root!();
    let rig = Rig::new();
    let frozen = faults::FreezableFs::new();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let pod_cfg = pod_config("slowctr");
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_cfg)
        .await
        .unwrap();
    let host_dir = frozen.mount.join("made-at-create");
    let mut config = container("c", &["sleep", "1000"]);
    config.mounts.push(v1::Mount {
        container_path: "/data".into(),
        host_path: host_dir.display().to_string(),
        ..Default::default()
    });
    frozen.freeze();
    let thaw = {
        let mount = frozen.mount.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(4));
            let _ = std::process::Command::new("fsfreeze")
                .arg("--unfreeze")
                .arg(&mount)
                .status();
        })
    };
    let started = Instant::now();
    let first = cri
        .with_deadline(Duration::from_millis(1500))
        .create_container(&pod, &pod_cfg, config.clone())
        .await;
    assert!(gave_up(&first), "{first:?}");
    let mut other = config.clone();
    other.labels.insert("other".into(), "yes".into());
    let refused = cri
        .with_deadline(Duration::from_secs(20))
        .create_container(&pod, &pod_cfg, other.clone())
        .await;
    assert_eq!(code_of(&refused), Code::AlreadyExists, "{refused:?}");
    let id = cri
        .with_deadline(Duration::from_secs(20))
        .create_container(&pod, &pod_cfg, config.clone())
        .await
        .expect("the retry gets the container the abandoned call made");
    assert!(started.elapsed() >= Duration::from_secs(4));
    thaw.join().unwrap();
    frozen.thaw();
    let listed = cri.list_containers(None).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);
    let again = cri
        .with_deadline(Duration::from_secs(20))
        .create_container(&pod, &pod_cfg, config.clone())
        .await;
    assert_eq!(code_of(&again), Code::AlreadyExists, "{again:?}");
    // It is whole: it starts, with its hostPath.
    cri.start_container(&id).await.unwrap();
    assert!(host_dir.is_dir());
    exec(&daemon, &id, &["test", "-d", "/data"]).await;
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// A CNI plugin that fails at ADD: a clear error, nothing of the pod left
/// (netns, lease, dirs, record, pause); once it heals, the same name works.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn cni_add_failure_leaves_nothing() {
    require_root!();
    let rig = Rig::new();
    rig.arm("fail-ADD", "");
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let config = pod_config("addfail");
    let r = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&config)
        .await;
    assert_eq!(code_of(&r), Code::Internal, "{r:?}");
    assert!(
        r.as_ref()
            .unwrap_err()
            .message()
            .contains("injected CNI failure"),
        "the plugin's message is passed on: {r:?}"
    );
    assert_clean(&daemon, &rig.net).await;
    rig.heal("fail-ADD");
    let id = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&config)
        .await
        .expect("the name is free again");
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// A CNI plugin that fails at DEL: StopPodSandbox reports it, the pod stays
/// (NotReady) with its lease, RemovePodSandbox fails while the plugin does
/// and succeeds once it heals, and nothing is left. The pod never wedges.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn cni_del_failure_is_reported_and_retried() {
    require_root!();
    let rig = Rig::new();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let config = pod_config("delfail");
    let id = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&config)
        .await
        .unwrap();
    let c = run_container(&daemon, &id, &config, container("c", &["sleep", "1000"])).await;
    rig.arm("fail-DEL", "");
    let r = cri.stop_pod(&id).await;
    assert_eq!(code_of(&r), Code::Internal, "{r:?}");
    assert!(
        r.as_ref()
            .unwrap_err()
            .message()
            .contains("injected CNI failure"),
        "{r:?}"
    );
    let pods = cri.list_pods(None).await.unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].state, v1::PodSandboxState::SandboxNotready as i32);
    assert_eq!(rig.leases().len(), 1, "the lease is kept for the retry");
    let st = container_status(&daemon, &c).await;
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    // Still failing: Remove reports it and keeps the pod.
    let r = cri.remove_pod(&id).await;
    assert_eq!(code_of(&r), Code::Internal, "{r:?}");
    assert_eq!(cri.list_pods(None).await.unwrap().len(), 1);
    // A daemon restart in between keeps it too (recovery does not drop it).
    let mut daemon = daemon;
    daemon.restart().await;
    let cri = daemon.cri().await;
    assert_eq!(cri.list_pods(None).await.unwrap().len(), 1);
    rig.heal("fail-DEL");
    cri.remove_pod(&id).await.expect("the retried DEL works");
    assert_clean(&daemon, &rig.net).await;
}

/// A CNI plugin that hangs at ADD past `cni.timeout_secs`: DeadlineExceeded
/// in about that time, the plugin killed, nothing left.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn cni_add_hanging_past_its_timeout_is_killed() {
    require_root!();
    let mut rig = Rig::new();
    rig.arm("sleep-ADD", "31.7");
    rig.cni_extra = "timeout_secs = 2".into();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let started = Instant::now();
    let r = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_config("hang"))
        .await;
    assert_eq!(code_of(&r), Code::DeadlineExceeded, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_no_hung_plugin();
    assert_clean(&daemon, &rig.net).await;

    // Hanging at DEL: StopPodSandbox is DeadlineExceeded, the pod is kept
    // (NotReady, with its lease) and removed once the plugin answers again.
    rig.heal("sleep-ADD");
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_config("hang"))
        .await
        .unwrap();
    rig.arm("sleep-DEL", "31.7");
    let started = Instant::now();
    let r = cri.stop_pod(&pod).await;
    assert_eq!(code_of(&r), Code::DeadlineExceeded, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_no_hung_plugin();
    let pods = cri.list_pods(None).await.unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].state, v1::PodSandboxState::SandboxNotready as i32);
    assert_eq!(rig.leases().len(), 1);
    rig.heal("sleep-DEL");
    cri.remove_pod(&pod).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// No `sleep 31.7` of a hung plugin wrapper is left (it was killed).
///
/// The kill is a SIGKILL to the plugin's process group: berth reaps the
/// group's leader before it answers, but the leader's `sleep` child dies
/// when the kernel next schedules it, which on a loaded machine can come
/// a moment after the answer. A killed process is gone within a second;
/// one that was never killed sleeps for 31.7 s.
fn assert_no_hung_plugin() {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let sleeping = std::process::Command::new("pgrep")
            .args(["-f", "sleep 31.7"])
            .output()
            .unwrap();
        if sleeping.stdout.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the hung plugin still runs 3 s after its call timed out: {}",
            String::from_utf8_lossy(&sleeping.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a container left in the runtime's and the shim's state dirs.
fn runtime_leftovers(daemon: &common::Daemon, id: &str) -> Vec<String> {
    let paths = ContainerPaths::new(daemon, id);
    let mut left = Vec::new();
    if paths.runtime_state.exists() {
        left.push(format!("runc state {}", paths.runtime_state.display()));
    }
    if paths.shim_socket.exists() {
        left.push(format!("shim socket {}", paths.shim_socket.display()));
    }
    left
}

/// Starts a container with a runtime fault armed: the start fails with
/// `code`, the container is reported exited (StartError), runc and its shim
/// hold nothing of it, and it can be removed.
async fn start_fails_cleanly(
    daemon: &common::Daemon,
    pod: &str,
    pod_cfg: &v1::PodSandboxConfig,
    name: &str,
    (code, says): (Code, &str),
    arm: impl FnOnce(),
    heal: impl FnOnce(),
) {
    let cri = daemon.cri().await;
    let id = cri
        .create_container(pod, pod_cfg, container(name, &["sleep", "1000"]))
        .await
        .unwrap();
    arm();
    let r = cri.start_container(&id).await;
    heal();
    assert_eq!(code_of(&r), code, "{name}: {r:?}");
    assert!(
        r.as_ref().unwrap_err().message().contains(says),
        "{name}: says why: {r:?}"
    );
    let st = container_status(daemon, &id).await;
    assert_eq!(
        st.state,
        v1::ContainerState::ContainerExited as i32,
        "{name}: {st:?}"
    );
    assert_eq!(st.reason, "StartError", "{name}");
    assert!(!st.message.is_empty(), "{name}: says why");
    assert!(
        runtime_leftovers(daemon, &id).is_empty(),
        "{name}: {:?}",
        runtime_leftovers(daemon, &id)
    );
    cri.remove_container(&id).await.unwrap();
    assert!(!daemon.sandbox.path("state/containers").join(&id).exists());
}

/// The OCI runtime missing, or failing (exit 1) at create, start and
/// delete: clear codes, nothing half-made, everything removable.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn runtime_missing_or_failing() {
    require_root!();
    let rig = Rig::new();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;

    // A handler whose binary does not exist: RunPodSandbox fails, leaving nothing.
    let r = cri.run_pod_on(&pod_config("nort"), "missing").await;
    // Internal, as containerd's Unknown, with the cause spelled out.
    assert_eq!(code_of(&r), Code::Internal, "{r:?}");
    assert!(
        r.as_ref().unwrap_err().message().contains("cannot run"),
        "{r:?}"
    );
    assert_clean(&daemon, &rig.net).await;

    let pod_cfg = pod_config("rtfaults");
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_cfg)
        .await
        .unwrap();
    start_fails_cleanly(
        &daemon,
        &pod,
        &pod_cfg,
        "missing",
        (Code::Internal, "cannot run"),
        || rig.remove_runtime(),
        || rig.restore_runtime(),
    )
    .await;
    // StartContainer is one `runc run --detach` (create and start in one
    // exec): the runtime failing there.
    start_fails_cleanly(
        &daemon,
        &pod,
        &pod_cfg,
        "run",
        (Code::Internal, "injected runtime failure at run"),
        || rig.arm("fail-run", ""),
        || rig.heal("fail-run"),
    )
    .await;

    // Failing at delete: RemoveContainer reports it and keeps the container;
    // once the runtime heals, the remove goes through.
    let id = run_container(
        &daemon,
        &pod,
        &pod_cfg,
        container("del", &["sleep", "1000"]),
    )
    .await;
    rig.arm("fail-delete", "");
    let r = cri.remove_container(&id).await;
    assert_eq!(code_of(&r), Code::Internal, "{r:?}");
    assert!(
        r.unwrap_err()
            .message()
            .contains("injected runtime failure at delete"),
        "says why"
    );
    let listed = cri.list_containers(None).await.unwrap();
    assert_eq!(listed.len(), 1, "kept for the retry: {listed:?}");
    rig.heal("fail-delete");
    cri.remove_container(&id)
        .await
        .expect("the retried delete works");
    assert!(runtime_leftovers(&daemon, &id).is_empty());

    // Missing at delete: the same.
    let id = run_container(
        &daemon,
        &pod,
        &pod_cfg,
        container("gone", &["sleep", "1000"]),
    )
    .await;
    rig.remove_runtime();
    let asked = Instant::now();
    let r = cri.remove_container(&id).await;
    rig.restore_runtime();
    // The kill could not even be sent: said at once, not after the 30 s
    // wait for a SIGKILLed container (DeadlineExceeded, misleading).
    assert!(asked.elapsed() < Duration::from_secs(10), "{r:?}");
    assert_eq!(code_of(&r), Code::Internal, "{r:?}");
    assert!(
        r.as_ref().unwrap_err().message().contains("cannot run"),
        "says why: {r:?}"
    );
    assert_eq!(
        cri.list_containers(None).await.unwrap().len(),
        1,
        "kept for the retry"
    );
    cri.remove_container(&id)
        .await
        .expect("the retried delete works");
    assert!(runtime_leftovers(&daemon, &id).is_empty());

    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// What a pull left in the content store besides whole blobs: ingest temp
/// files and snapshots being unpacked.
fn partial_image_content(daemon: &common::Daemon) -> Vec<String> {
    let images = daemon.sandbox.path("root/images");
    let mut left: Vec<String> = entries(&images.join("ingest"))
        .into_iter()
        .map(|e| format!("ingest/{e}"))
        .collect();
    left.extend(
        entries(&images.join("snapshots"))
            .into_iter()
            .filter(|e| e.starts_with('.'))
            .map(|e| format!("snapshots/{e}")),
    );
    left
}

/// The daemon's root on a small tmpfs that the test fills: a pull, a
/// RunPodSandbox, a CreateContainer and a StopPodSandbox each fail with
/// ResourceExhausted and leave nothing half-made; once space is freed
/// the same calls succeed.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn disk_full_is_resource_exhausted_and_leaves_nothing() {
    require_root!();
    let rig = Rig::new();
    let root = rig.sandbox.path("root");
    let disk = faults::SmallTmpfs::mount(&root, 48 << 20);
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let own = [root.as_path()];

    // Pull.
    disk.fill();
    let r = cri.pull(&registry().busybox()).await;
    assert_eq!(code_of(&r), Code::ResourceExhausted, "pull: {r:?}");
    assert_eq!(cri.list_images(None).await.unwrap().len(), 0);
    assert!(
        partial_image_content(&daemon).is_empty(),
        "{:?}",
        partial_image_content(&daemon)
    );
    faults::assert_blobs_whole(&daemon);
    // Some room, but less than the store's own reserve (5% of the file
    // system): refused by the store's check, ResourceExhausted too.
    disk.drain();
    disk.fill_leaving(1536 << 10);
    let r = cri.pull(&registry().busybox()).await;
    eprintln!("pull with 1.5 MiB free: {r:?}");
    assert_eq!(
        code_of(&r),
        Code::ResourceExhausted,
        "pull, unpacking: {r:?}"
    );
    assert_eq!(cri.list_images(None).await.unwrap().len(), 0);
    assert!(
        partial_image_content(&daemon).is_empty(),
        "{:?}",
        partial_image_content(&daemon)
    );
    faults::assert_blobs_whole(&daemon);
    disk.drain();
    cri.pull(&registry().busybox()).await.unwrap();

    // RunPodSandbox: its record is written first.
    let pod_cfg = pod_config("full");
    disk.fill();
    let r = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_cfg)
        .await;
    assert_eq!(code_of(&r), Code::ResourceExhausted, "run: {r:?}");
    faults::assert_clean_but(&daemon, &rig.net, &own).await;
    disk.drain();
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_cfg)
        .await
        .expect("the name is free again");

    // CreateContainer.
    let config = container("c", &["sleep", "1000"]);
    disk.fill();
    let r = cri
        .with_deadline(Duration::from_secs(30))
        .create_container(&pod, &pod_cfg, config.clone())
        .await;
    assert_eq!(code_of(&r), Code::ResourceExhausted, "create: {r:?}");
    assert!(cri.list_containers(None).await.unwrap().is_empty());
    for dir in [
        "root/containers",
        "state/containers",
        "root/records/containers",
    ] {
        let left = entries(&daemon.sandbox.path(dir));
        assert!(left.is_empty(), "{dir}: {left:?}");
    }
    disk.drain();
    let id = cri
        .with_deadline(Duration::from_secs(30))
        .create_container(&pod, &pod_cfg, config.clone())
        .await
        .expect("the name is free again");
    cri.start_container(&id).await.unwrap();

    // A teardown whose record writes fail: reported, and done on retry.
    disk.fill();
    let r = cri.stop_pod(&pod).await;
    assert_eq!(code_of(&r), Code::ResourceExhausted, "stop: {r:?}");
    disk.drain();
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    faults::assert_clean_but(&daemon, &rig.net, &own).await;
    // The sandbox's temp dir can go only once the tmpfs in it is unmounted.
    let dir = daemon.sandbox.dir.path().to_path_buf();
    drop(daemon);
    drop(disk);
    let _ = std::fs::remove_dir_all(dir);
}

/// The registry dies mid-layer (a proxy cuts every answer after 400 KiB,
/// the layer is ~1 MiB): the pull fails with a clear code and leaves no
/// partial blob, snapshot or image; once the registry is back, the same
/// pull succeeds and its image runs.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn registry_dying_mid_layer_leaves_no_partial_content() {
    require_root!();
    let upstream = registry().addr.clone();
    let proxy = faults::CutProxy::start(&upstream, 400 << 10).await;
    let rig = Rig::new();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let image = format!("{}/berth-test/busybox:latest", proxy.addr);
    let r = cri.pull(&image).await;
    assert!(
        proxy.cuts.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the proxy never cut: {r:?}"
    );
    assert!(
        matches!(code_of(&r), Code::Unavailable | Code::DataLoss),
        "{r:?}"
    );
    assert_eq!(cri.list_images(None).await.unwrap().len(), 0);
    assert!(
        partial_image_content(&daemon).is_empty(),
        "{:?}",
        partial_image_content(&daemon)
    );
    let snapshots = entries(&daemon.sandbox.path("root/images/snapshots"));
    assert!(snapshots.is_empty(), "{snapshots:?}");
    faults::assert_blobs_whole(&daemon);

    proxy.heal();
    cri.pull(&image).await.expect("the retried pull");
    assert_eq!(cri.list_images(None).await.unwrap().len(), 1);
    faults::assert_blobs_whole(&daemon);
    assert!(partial_image_content(&daemon).is_empty());
    let pod_cfg = pod_config("pulled");
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_cfg)
        .await
        .unwrap();
    let mut config = container("c", &["sleep", "1000"]);
    config.image = Some(v1::ImageSpec {
        image: image.clone(),
        ..Default::default()
    });
    let id = run_container(&daemon, &pod, &pod_cfg, config).await;
    let out = exec(&daemon, &id, &["sh", "-c", "busybox | head -1"]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("BusyBox"),
        "{out:?}"
    );
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// A daemon SIGKILLed in the middle of an atomic write leaves its temp file
/// (`.NAME.tmp-PID-N`) in the records or the CNI cache dir; found by the
/// soak. The next start sweeps them, and only them.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn temp_files_of_a_killed_daemon_are_swept_at_start() {
    require_root!();
    let rig = Rig::new();
    let (mut daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_config("temps"))
        .await
        .unwrap();
    daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(10))
        .await;
    let planted = [
        format!("root/cni/.{}+{pod}+eth0.json.tmp-99999-0", rig.net.name),
        format!("root/records/sandboxes/.{pod}.json.tmp-99999-1"),
        "root/records/containers/.0123abcd.json.tmp-99999-2".to_string(),
    ];
    for p in &planted {
        let path = daemon.sandbox.path(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{\"torn").unwrap();
    }
    daemon.restart().await;
    let cri = daemon.cri().await;
    for p in &planted {
        assert!(!daemon.sandbox.path(p).exists(), "{p} left");
    }
    let pods = cri.list_pods(None).await.unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].state, v1::PodSandboxState::SandboxReady as i32);
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// StartContainer racing StopPodSandbox (found by the soak): the stop has
/// stopped the pod's containers and killed the pause, and is still
/// deleting it (a slow `runc delete`). A start then must wait for the
/// stop and refuse (FailedPrecondition: the pod is not ready), not run
/// runc against a dead pause's namespaces (Internal, "lstat
/// /proc/PID/ns/ipc: no such file").
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn start_container_racing_stop_pod_sandbox_is_refused_cleanly() {
    require_root!();
    let rig = Rig::new();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    // A pod with a pause: the stop kills it and deletes it slowly.
    let pod_cfg = pod_config_with_pause("startstop");
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_cfg)
        .await
        .unwrap();
    let id = cri
        .create_container(&pod, &pod_cfg, container("c", &["sleep", "1000"]))
        .await
        .unwrap();
    rig.arm("sleep-delete", "3");
    let stop = {
        let (cri, pod) = (cri.clone(), pod.clone());
        tokio::spawn(async move { cri.stop_pod(&pod).await })
    };
    // The start comes while the stop is in its slow delete.
    rig.wait_for_sleep("delete").await;
    assert!(!stop.is_finished());
    let r = cri.start_container(&id).await;
    assert_eq!(code_of(&r), Code::FailedPrecondition, "{r:?}");
    stop.await.unwrap().expect("StopPodSandbox");
    rig.heal("sleep-delete");
    assert!(runtime_leftovers(&daemon, &id).is_empty());
    cri.remove_pod(&pod).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// The disk fills while RunPodSandbox is half-way (during a slow CNI ADD):
/// the record and CNI cache writes after the ADD fail, the whole pod is
/// rolled back (DEL frees the IP, netns and files go), the call says
/// ResourceExhausted, and the name is free again once there is space.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn disk_filling_during_run_pod_sandbox_rolls_it_back() {
    require_root!();
    let rig = Rig::new();
    let root = rig.sandbox.path("root");
    let disk = std::sync::Arc::new(faults::SmallTmpfs::mount(&root, 32 << 20));
    rig.arm("sleep-ADD", "3");
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let filler = {
        let disk = disk.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            disk.fill();
        })
    };
    let config = pod_config("fillmid");
    let r = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&config)
        .await;
    filler.join().unwrap();
    assert_eq!(code_of(&r), Code::ResourceExhausted, "{r:?}");
    faults::assert_clean_but(&daemon, &rig.net, &[root.as_path()]).await;
    disk.drain();
    rig.heal("sleep-ADD");
    let id = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&config)
        .await
        .expect("the name is free again");
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    faults::assert_clean_but(&daemon, &rig.net, &[root.as_path()]).await;
    let dir = daemon.sandbox.dir.path().to_path_buf();
    drop(daemon);
    drop(disk);
    let _ = std::fs::remove_dir_all(dir);
}

/// The abandoned creation fails (a slow CNI ADD that then fails): the
/// retry waiting for it is not handed the failure, nor AlreadyExists — the
/// name was released, so it makes the pod anew (and gets it).
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn run_pod_sandbox_retry_after_a_failed_abandoned_call_makes_it_anew() {
    require_root!();
    let rig = Rig::new();
    rig.arm("sleep-ADD", "4");
    rig.arm("fail-ADD", "");
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let config = pod_config("failedfirst");
    let first = cri
        .with_deadline(Duration::from_millis(1500))
        .run_pod(&config)
        .await;
    assert!(gave_up(&first), "{first:?}");
    // Heals after the first ADD failed (t = 4 s), before the retry's own
    // ADD (started then, sleeping 4 s) looks.
    let healer = {
        let fail = rig.bin.join("fail-ADD");
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            std::fs::remove_file(fail).unwrap();
        })
    };
    let id = cri
        .with_deadline(Duration::from_secs(25))
        .run_pod(&config)
        .await
        .expect("the retry makes the pod anew");
    healer.join().unwrap();
    let pods = cri.list_pods(None).await.unwrap();
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0].id, id);
    assert_eq!(rig.leases().len(), 1, "{:?}", rig.leases());
    rig.heal("sleep-ADD");
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    assert_clean(&daemon, &rig.net).await;
}

/// The registry hangs mid-layer (the connection stays open, no more bytes
/// come): the pull fails after `registry.progress_timeout` with
/// DeadlineExceeded, never hangs; a daemon SIGKILLed during such a pull
/// leaves no partial content after its restart; a later pull succeeds.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn registry_hanging_mid_layer_times_out_and_a_killed_pull_leaves_nothing() {
    require_root!();
    let upstream = registry().addr.clone();
    let proxy = faults::CutProxy::start(&upstream, 400 << 10).await;
    proxy.stall.store(true, std::sync::atomic::Ordering::SeqCst);
    let rig = Rig::new();
    let (mut daemon, rig) = rig.start("[registry]\nprogress_timeout = \"3s\"\n").await;
    let cri = daemon.cri().await;
    let image = format!("{}/berth-test/busybox:latest", proxy.addr);
    let started = Instant::now();
    let r = cri.pull(&image).await;
    assert_eq!(code_of(&r), Code::DeadlineExceeded, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(cri.list_images(None).await.unwrap().len(), 0);
    assert!(
        partial_image_content(&daemon).is_empty(),
        "{:?}",
        partial_image_content(&daemon)
    );
    faults::assert_blobs_whole(&daemon);

    // Killed while a pull hangs mid-layer: the proxy has stalled it, and
    // part of the layer is on disk.
    let cuts = proxy.cuts.load(std::sync::atomic::Ordering::SeqCst);
    let pulling = {
        let (cri, image) = (cri.clone(), image.clone());
        tokio::spawn(async move { cri.pull(&image).await })
    };
    common::wait_until("the pull hangs mid-layer", Duration::from_secs(20), || {
        proxy.cuts.load(std::sync::atomic::Ordering::SeqCst) > cuts
            && !partial_image_content(&daemon).is_empty()
    })
    .await;
    daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(10))
        .await;
    assert!(pulling.await.unwrap().is_err());
    daemon.restart().await;
    let cri = daemon.cri().await;
    assert_eq!(cri.list_images(None).await.unwrap().len(), 0);
    let snapshots = entries(&daemon.sandbox.path("root/images/snapshots"));
    assert!(snapshots.is_empty(), "{snapshots:?}");
    assert!(
        partial_image_content(&daemon).is_empty(),
        "a killed pull left {:?}",
        partial_image_content(&daemon)
    );
    faults::assert_blobs_whole(&daemon);
    proxy.heal();
    cri.pull(&image).await.expect("the pull after it");
    faults::assert_blobs_whole(&daemon);
    assert_clean(&daemon, &rig.net).await;
}

/// A shim whose own `runtime delete` fails while the daemon's direct one
/// (its fallback) works: the container is gone, and the shim must go too.
/// The pause's shim is deleted once per StopPodSandbox: with one failed
/// delete it kept serving, with its dir (and socket) removed, for as long
/// as the node ran.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_shim_whose_delete_failed_once_is_not_left_behind() {
    require_root!();
    let rig = Rig::new();
    let (daemon, rig) = rig.start("").await;
    let cri = daemon.cri().await;
    let pod = cri
        .with_deadline(Duration::from_secs(30))
        .run_pod(&pod_config_with_pause("shimleft"))
        .await
        .unwrap();
    rig.arm("once-fail-delete", "");
    cri.stop_pod(&pod).await.unwrap();
    assert!(!rig.armed("once-fail-delete"), "the shim's delete failed");
    cri.remove_pod(&pod).await.unwrap();
    // The shim exits a moment after it answers its delete.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = faults::stray_processes(&daemon);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left 10 s after: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_clean(&daemon, &rig.net).await;
}
