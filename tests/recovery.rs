//! Crash safety: berth killed at each step of the life-cycle RPCs comes
//! back consistent, with running containers still running and nothing
//! leaked. Root only.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::cri::remove_pod;
use common::pods::{pod_config, TestNet};
use common::{registry, Daemon, Sandbox};
use cri_api::v1;

async fn pods(daemon: &Daemon) -> Vec<v1::PodSandbox> {
    daemon.cri().await.list_pods(None).await.unwrap()
}

/// A pod named `pod_name` running one busybox container: their ids.
async fn pod_with_container(
    daemon: &Daemon,
    pod_name: &str,
    name: &str,
    command: &[&str],
) -> (String, String) {
    let cri = daemon.cri().await;
    let pod_cfg = pod_config(pod_name);
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    common::cri::pull(daemon, &registry().busybox()).await;
    let config = common::cri::container(name, command);
    let id = common::cri::run_container(daemon, &pod, &pod_cfg, config).await;
    (pod, id)
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn run_pod_sandbox_killed_at_each_step_is_rolled_back() {
    require_root!();
    for step in ["after_record", "after_netns", "after_cni", "after_pause"] {
        let net = TestNet::new();
        let sandbox = Sandbox::new();
        let config = common::pods::net_config(&sandbox, &net, "");
        let mut daemon =
            Daemon::start_with_failpoints(sandbox, &config, &format!("run_pod_sandbox:{step}"))
                .await;
        let cri = daemon.cri().await;
        assert!(cri.run_pod(&pod_config("crashy")).await.is_err(), "{step}");
        daemon.wait_crashed().await;
        daemon.restart().await;
        let cri = daemon.cri().await;
        assert!(
            pods(&daemon).await.is_empty(),
            "{step}: a half-made pod is listed"
        );
        daemon.assert_no_leftovers();
        assert!(
            net.leases().is_empty(),
            "{step}: IPAM lease left: {:?}",
            net.leases()
        );
        // The name is free again.
        let id = cri.run_pod(&pod_config("crashy")).await.unwrap();
        remove_pod(&daemon, &id).await;
        daemon.assert_no_leftovers();
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn stop_pod_sandbox_killed_midway_can_be_stopped_again() {
    require_root!();
    for step in ["after_containers", "after_pause", "after_cni"] {
        let net = TestNet::new();
        let sandbox = Sandbox::new();
        let config = common::pods::net_config(&sandbox, &net, "");
        let mut daemon =
            Daemon::start_with_failpoints(sandbox, &config, &format!("stop_pod_sandbox:{step}"))
                .await;
        let cri = daemon.cri().await;
        let id = cri.run_pod(&pod_config("stopper")).await.unwrap();
        let stopped = cri.stop_pod(&id).await;
        assert!(stopped.is_err(), "{step}");
        daemon.wait_crashed().await;
        daemon.restart().await;
        let listed = pods(&daemon).await;
        assert_eq!(listed.len(), 1, "{step}");
        remove_pod(&daemon, &id).await;
        assert!(pods(&daemon).await.is_empty());
        daemon.assert_no_leftovers();
        assert!(net.leases().is_empty(), "{step}: IPAM lease left");
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn containers_outlive_a_killed_daemon() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon = Daemon::start_in(sandbox, &config).await;
    let cri = daemon.cri().await;
    let pod_cfg = pod_config("survivor");
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    cri.pull(&registry().busybox()).await.unwrap();
    let mut ids = Vec::new();
    for (name, cmd) in [("long", "sleep 1000"), ("short", "sleep 3; exit 7")] {
        let config = common::cri::container(name, &["sh", "-c", cmd]);
        let id = cri.create_container(&pod, &pod_cfg, config).await.unwrap();
        cri.start_container(&id).await.unwrap();
        ids.push(id);
    }
    // The daemon keeps a standby shim ready for its next container; it
    // ends with the daemon (its stdin closes), the containers' shims do not.
    let dir = daemon.sandbox.dir.path().to_path_buf();
    // (One: its first process, which forks it, is gone within an instant.)
    let ready = std::time::Instant::now() + Duration::from_secs(10);
    while common::standby_shims(&dir).len() != 1 {
        assert!(
            std::time::Instant::now() < ready,
            "not one standby shim: {:?}",
            common::standby_shims(&dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill(&mut daemon).await;
    let gone = std::time::Instant::now() + Duration::from_secs(5);
    while !common::standby_shims(&dir).is_empty() {
        assert!(
            std::time::Instant::now() < gone,
            "a standby shim outlived the daemon by 5 s: {:?}",
            common::standby_shims(&dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The short one exits while berth is down.
    tokio::time::sleep(Duration::from_secs(5)).await;
    daemon.restart().await;
    let cri = daemon.cri().await;
    let long = cri
        .container_status(&ids[0], false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(long.state, v1::ContainerState::ContainerRunning as i32);
    let short = cri
        .container_status(&ids[1], false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(short.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!(short.exit_code, 7);
    let out = cri
        .exec_sync(&ids[0], &["echo", "alive"], 10)
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
    assert_eq!(
        pods(&daemon).await[0].state,
        v1::PodSandboxState::SandboxReady as i32
    );
    cri.stop_container(&ids[0], 1).await.unwrap();
    remove_pod(&daemon, &pod).await;
    daemon.assert_no_leftovers();
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn create_container_killed_midway_is_rolled_back() {
    require_root!();
    for step in ["after_record", "after_rootfs"] {
        let net = TestNet::new();
        let sandbox = Sandbox::new();
        let config = common::pods::net_config(&sandbox, &net, "");
        let mut daemon =
            Daemon::start_with_failpoints(sandbox, &config, &format!("create_container:{step}"))
                .await;
        let cri = daemon.cri().await;
        let pod_cfg = pod_config("creator");
        let pod = cri.run_pod(&pod_cfg).await.unwrap();
        common::cri::pull(&daemon, &registry().busybox()).await;
        let config = common::cri::container("c", &["sleep", "100"]);
        assert!(cri
            .create_container(&pod, &pod_cfg, config.clone())
            .await
            .is_err());
        daemon.wait_crashed().await;
        daemon.restart().await;
        let cri = daemon.cri().await;
        let listed = cri.list_containers(None).await.unwrap();
        assert!(listed.is_empty(), "{step}: a half-made container is listed");
        // The name is free again.
        cri.create_container(&pod, &pod_cfg, config).await.unwrap();
        remove_pod(&daemon, &pod).await;
        daemon.assert_no_leftovers();
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn start_container_and_remove_pod_killed_midway() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon = Daemon::start_with_failpoints(
        sandbox,
        &config,
        "start_container:after_start,remove_pod_sandbox:before_delete",
    )
    .await;
    let cri = daemon.cri().await;
    let pod_cfg = pod_config("starter");
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    common::cri::pull(&daemon, &registry().busybox()).await;
    let id = cri
        .create_container(
            &pod,
            &pod_cfg,
            common::cri::container("c", &["sleep", "1000"]),
        )
        .await
        .unwrap();
    assert!(cri.start_container(&id).await.is_err());
    daemon.wait_crashed().await;
    // Restart with the remove failpoint still armed.
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(daemon.sandbox.log_file())
        .unwrap();
    daemon.child = daemon
        .sandbox
        .command(&config)
        .env("BERTH_FAILPOINTS", "remove_pod_sandbox:before_delete")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    daemon.wait_ready().await;
    let cri = daemon.cri().await;
    let st = cri
        .container_status(&id, false)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        st.state,
        v1::ContainerState::ContainerRunning as i32,
        "the started container is adopted"
    );
    let out = cri.exec_sync(&id, &["true"], 10).await.unwrap();
    assert_eq!(out.exit_code, 0);
    assert!(cri.remove_pod(&pod).await.is_err());
    daemon.wait_crashed().await;
    daemon.restart().await;
    remove_pod(&daemon, &pod).await;
    assert!(pods(&daemon).await.is_empty());
    daemon.assert_no_leftovers();
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn recover_dry_run_lists_orphans_and_changes_nothing() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let orphan = sandbox.path("state/containers/0123456789abcdef");
    std::fs::create_dir_all(&orphan).unwrap();
    let out = sandbox
        .command(&config)
        .args(["recover", "--dry-run"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("remove orphan") && text.contains("0123456789abcdef"),
        "{text}"
    );
    assert!(orphan.exists(), "dry run removed something");
    // A real start removes it.
    let daemon = Daemon::start_in(sandbox, &config).await;
    assert!(!orphan.exists());
    daemon.assert_no_leftovers();
}

/// RemoveContainer moves a container's trees aside (`.removing-*`) and
/// empties them after it answers: trees a crash left there, one with a
/// mount still below it, are swept at the next start, the mount undone
/// first (never removed through).
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn trees_left_aside_by_a_crash_mid_removal_are_swept_at_start() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let layer = sandbox.path("root/containers/.removing-0123456789abcdef-7");
    let bundle = sandbox.path("state/containers/.removing-0123456789abcdef-8");
    let shim = sandbox.path("state/s/.removing-0123456789ab-9");
    for dir in [&layer, &bundle, &shim] {
        std::fs::create_dir_all(dir.join("upper/etc")).unwrap();
        std::fs::write(dir.join("upper/etc/file"), b"x").unwrap();
    }
    // A mount left below the bundle, with a file of its own: swept by
    // unmounting, so the file (on the tmpfs) is never reached.
    let mounted = bundle.join("rootfs");
    std::fs::create_dir_all(&mounted).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&mounted)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(mounted.join("on-the-mount"), b"y").unwrap();
    let daemon = Daemon::start_in(sandbox, &config).await;
    for dir in [&layer, &bundle, &shim] {
        assert!(!dir.exists(), "{} was not swept", dir.display());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&mounted.display().to_string()),
        "the mount below the tree is left"
    );
    daemon.assert_no_leftovers();
}

/// SIGKILLs the daemon and starts it again.
async fn kill_and_restart(daemon: &mut Daemon) {
    kill(daemon).await;
    daemon.restart().await;
}

/// SIGKILLs the daemon and waits for it to be gone.
async fn kill(daemon: &mut Daemon) {
    daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(10))
        .await;
}

/// A small deterministic random source (no extra crate needed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn soak_with_random_kills_ends_without_leaks() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon = Daemon::start_in(sandbox, &config).await;
    common::cri::pull(&daemon, &registry().busybox()).await;
    let mut rng = Lcg(u64::from(std::process::id()));
    let deadline = std::time::Instant::now() + Duration::from_secs(150);
    let (mut cycles, mut kills) = (0, 0);
    while cycles < 200 && std::time::Instant::now() < deadline {
        cycles += 1;
        let name = format!("soak{cycles}");
        let pod_cfg = pod_config(&name);
        // Each step may be followed by a SIGKILL of the daemon (1 in 8).
        let mut maybe_kill = || rng.next() % 8 == 0;
        // A client of its own after each step (the daemon may have restarted).
        let Ok(pod) = daemon.cri().await.run_pod(&pod_cfg).await else {
            continue;
        };
        if maybe_kill() {
            kills += 1;
            kill_and_restart(&mut daemon).await;
        }
        let cri = daemon.cri().await;
        let config = common::cri::container("c", &["sleep", "1000"]);
        if let Ok(c) = cri.create_container(&pod, &pod_cfg, config).await {
            let _ = cri.start_container(&c).await;
        }
        if maybe_kill() {
            kills += 1;
            kill_and_restart(&mut daemon).await;
        }
        daemon.cri().await.stop_pod(&pod).await.unwrap();
        if maybe_kill() {
            kills += 1;
            kill_and_restart(&mut daemon).await;
        }
        daemon.cri().await.remove_pod(&pod).await.unwrap();
    }
    eprintln!("soak: {cycles} cycles, {kills} kills");
    assert!(pods(&daemon).await.is_empty());
    daemon.assert_no_leftovers();
    assert!(
        net.leases().is_empty(),
        "IPAM leases left: {:?}",
        net.leases()
    );
    let shims = std::process::Command::new("pgrep")
        .args(["-f", &daemon.sandbox.dir.path().display().to_string()])
        .output()
        .unwrap();
    let pids = String::from_utf8_lossy(&shims.stdout).trim().to_string();
    let own = daemon.child.id().to_string();
    // The running daemon's standby shim (not yet taken) is its own.
    let spares: Vec<String> = common::standby_shims(daemon.sandbox.dir.path())
        .iter()
        .map(u32::to_string)
        .collect();
    let others: Vec<&str> = pids
        .lines()
        .filter(|p| *p != own && !spares.iter().any(|s| s == p))
        .collect();
    assert!(others.is_empty(), "processes left: {others:?}");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn orphans_of_a_lost_record_are_cleaned_up() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon = Daemon::start_in(sandbox, &config).await;
    let cri = daemon.cri().await;
    let id = cri.run_pod(&pod_config("orphan")).await.unwrap();
    assert_eq!(net.leases().len(), 1);
    kill(&mut daemon).await;
    // The record is lost: netns, dirs, the pause's shim and the CNI lease are orphans.
    std::fs::remove_file(
        daemon
            .sandbox
            .path(&format!("root/records/sandboxes/{id}.json")),
    )
    .unwrap();
    daemon.restart().await;
    assert!(pods(&daemon).await.is_empty());
    daemon.assert_no_leftovers();
    assert!(
        net.leases().is_empty(),
        "IPAM lease left: {:?}",
        net.leases()
    );
    let left = std::fs::read_dir(daemon.sandbox.path("root/cni"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "CNI cache entries left");
}

/// The cgroup directory (pids controller) of process `pid`, v1 or v2.
fn pids_cgroup(pid: u32) -> std::path::PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        if controllers.split(',').any(|c| c == "pids") {
            return std::path::Path::new("/sys/fs/cgroup/pids").join(path.trim_start_matches('/'));
        }
        if controllers.is_empty() {
            v2 = Some(std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')));
        }
    }
    v2.expect("a pids cgroup")
}

/// A container whose record is lost while its shim died too: runc still
/// holds it. Recovery deletes it from runc, which kills its process and
/// removes its cgroup.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn orphan_container_of_a_lost_record_is_killed_with_its_cgroup() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon = Daemon::start_in(sandbox, &config).await;
    let (pod, id) = pod_with_container(&daemon, "lostctr", "lost", &["sleep", "4243"]).await;
    let pid = common::cri::container_status(&daemon, &id).await;
    assert_eq!(pid.state, v1::ContainerState::ContainerRunning as i32);
    let sleep_pid: u32 = String::from_utf8(
        std::process::Command::new("pgrep")
            .args(["-f", "sleep 4243"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    // The shim (a subreaper) is the container init's parent.
    let shim_pid: i32 = std::fs::read_to_string(format!("/proc/{sleep_pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let shim_comm = std::fs::read_to_string(format!("/proc/{shim_pid}/comm")).unwrap();
    assert_eq!(shim_comm.trim(), "berth-shim");
    let cgroup = pids_cgroup(sleep_pid);
    assert!(cgroup.is_dir(), "{}", cgroup.display());
    kill(&mut daemon).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    std::fs::remove_file(
        daemon
            .sandbox
            .path(&format!("root/records/containers/{id}.json")),
    )
    .unwrap();
    daemon.restart().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Gone, or a zombie its new parent has not reaped yet.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{sleep_pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the orphan container's process still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!cgroup.exists(), "cgroup {} left", cgroup.display());
    assert!(!daemon.sandbox.path("state/runtime").join(&id).exists());
    remove_pod(&daemon, &pod).await;
    daemon.assert_no_leftovers();
}

/// berth killed after StopContainer recorded the exit but before it
/// deleted the container from runc: recovery finishes the job.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn stop_container_killed_before_release_is_released_at_restart() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon =
        Daemon::start_with_failpoints(sandbox, &config, "stop_container:before_release").await;
    let (pod, id) = pod_with_container(&daemon, "releaser", "c", &["sleep", "1000"]).await;
    let stopped = daemon.cri().await.stop_container(&id, 0).await;
    assert!(stopped.is_err());
    daemon.wait_crashed().await;
    let paths = common::cri::ContainerPaths::new(&daemon, &id);
    assert!(paths.runtime_state.exists() && paths.shim_socket.exists());
    daemon.restart().await;
    let st = common::cri::container_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 137);
    assert!(
        paths.released(),
        "runc, the shim or the rootfs mount still hold {id}"
    );
    remove_pod(&daemon, &pod).await;
    daemon.assert_no_leftovers();
}

/// ContainerStatus of `id`, with the pid its verbose `info` gives.
async fn verbose_status(daemon: &Daemon, id: &str) -> (v1::ContainerStatus, Option<u64>) {
    let resp = daemon.cri().await.container_status(id, true).await.unwrap();
    let pid = resp
        .info
        .get("info")
        .and_then(|info| serde_json::from_str::<serde_json::Value>(info).ok())
        .and_then(|info| info["pid"].as_u64());
    (resp.status.unwrap(), pid)
}

/// Nanoseconds since the Unix epoch, as CRI times are.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A container's Running and Exited writes are not fsynced (docs/architecture.md,
/// *Which writes are synced*). berth SIGKILLed right after StartContainer, or right
/// after it saw the container exit, answers the same after its restart;
/// and where a power cut took such a write back before it reached the disk
/// (the test puts the record back as it was before the write), recovery
/// derives it again from the shim: the same pid, the shim's start time
/// (within the StartContainer call), the same exit code and time.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn unsynced_start_and_exit_are_derived_again_after_a_kill() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = common::pods::net_config(&sandbox, &net, "");
    let mut daemon = Daemon::start_in(sandbox, &config).await;
    let cri = daemon.cri().await;
    let pod_cfg = pod_config("unsynced");
    let pod = cri.run_pod(&pod_cfg).await.unwrap();
    common::cri::pull(&daemon, &registry().busybox()).await;
    // Runs until /go exists, then exits 3.
    let script = "until [ -e /go ]; do sleep 0.1; done; exit 3";
    let config_c = common::cri::container("c", &["sh", "-c", script]);
    let id = cri
        .create_container(&pod, &pod_cfg, config_c)
        .await
        .unwrap();
    let record = daemon
        .sandbox
        .path(&format!("root/records/containers/{id}.json"));
    let created = std::fs::read(&record).unwrap();

    // Killed right after StartContainer answered.
    let before = now_ns();
    cri.start_container(&id).await.unwrap();
    let after = now_ns();
    kill(&mut daemon).await;
    daemon.restart().await;
    let (st, pid) = verbose_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerRunning as i32);
    let pid = pid.expect("a running container's pid");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("until"),
        "pid {pid} is not the container's"
    );
    assert!(
        (before..=after).contains(&st.started_at),
        "started_at {} not within StartContainer ({before}..={after})",
        st.started_at
    );

    // The Running write lost: recovery finds the start again in the shim.
    kill(&mut daemon).await;
    std::fs::write(&record, &created).unwrap();
    daemon.restart().await;
    let (st, again) = verbose_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerRunning as i32);
    assert_eq!(again, Some(pid));
    assert!(
        (before..=after).contains(&st.started_at),
        "derived started_at {} not within StartContainer ({before}..={after})",
        st.started_at
    );
    let running = std::fs::read(&record).unwrap();

    // Killed right after berth saw the exit.
    let paths = common::cri::ContainerPaths::new(&daemon, &id);
    std::fs::write(paths.rootfs.join("go"), b"").unwrap();
    let exited = common::cri::wait_exited(&daemon, &id, Duration::from_secs(20)).await;
    kill(&mut daemon).await;
    assert_eq!((exited.exit_code, exited.reason.as_str()), (3, "Error"));
    assert!(exited.finished_at > after && exited.finished_at <= now_ns());
    daemon.restart().await;
    let (st, _) = verbose_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!(
        (st.exit_code, st.finished_at, st.reason.as_str()),
        (3, exited.finished_at, "Error")
    );

    // The Exited write lost: the shim's exit file has it.
    kill(&mut daemon).await;
    std::fs::write(&record, &running).unwrap();
    daemon.restart().await;
    let (st, _) = verbose_status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!(
        (st.exit_code, st.finished_at, st.reason.as_str()),
        (3, exited.finished_at, "Error")
    );
    assert!(
        paths.released(),
        "runc, the shim or the rootfs mount still hold {id}"
    );
    remove_pod(&daemon, &pod).await;
    daemon.assert_no_leftovers();
}
