//! NRI in the daemon, against runc and the real `berth-nri-test-plugin`
//! speaking NRI v0.12's protocol: events in order with their metadata,
//! each adjustment kind seen inside the container, merge and conflict, a
//! hanging and a crashing plugin, a failing hook, a late plugin
//! synchronized, a pre-installed plugin relaunched after a restart. Root only.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cri::{exec, pull, run_container};
use common::pods::{net_config, pod_config, TestNet};
use common::{registry, Daemon, Sandbox};
use serde_json::Value;

fn plugin_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_berth")).with_file_name("berth-nri-test-plugin");
    assert!(
        bin.exists(),
        "{} is missing: build it: cargo build --workspace --bins",
        bin.display()
    );
    bin
}

/// A daemon with NRI on its sandbox's socket (`nri` more `[nri]` keys),
/// plugins it launched, and their event logs.
struct Rig {
    daemon: Daemon,
    plugins: Vec<std::process::Child>,
    net: TestNet,
}

impl Rig {
    async fn new(nri: &str) -> Rig {
        Rig::with_sandbox(Sandbox::new(), nri).await
    }

    async fn with_sandbox(sandbox: Sandbox, nri: &str) -> Rig {
        let net = TestNet::new();
        let config = net_config(&sandbox, &net, &sandbox.nri_section(nri));
        let daemon = Daemon::start_in(sandbox, &config).await;
        pull(&daemon, &registry().busybox()).await;
        Rig {
            daemon,
            plugins: Vec::new(),
            net,
        }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.daemon.sandbox.path(&format!("{name}.events"))
    }

    /// Starts an external plugin with `script` and waits until it is synchronized.
    async fn plugin(&mut self, idx: &str, name: &str, script: &str) {
        let sp = self.daemon.sandbox.path(&format!("{name}.json"));
        std::fs::write(&sp, script).unwrap();
        let child = std::process::Command::new(plugin_bin())
            .arg("--socket")
            .arg(self.daemon.sandbox.nri_socket())
            .args(["--idx", idx, "--name", name, "--script"])
            .arg(&sp)
            .arg("--events")
            .arg(self.log(name))
            .spawn()
            .unwrap();
        self.plugins.push(child);
        wait_for_event(&self.log(name), "Synchronize").await;
        // It joins the set right after its Synchronize reply.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for p in &mut self.plugins {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn names(path: &Path) -> Vec<String> {
    events(path)
        .iter()
        .filter_map(|e| e["event"].as_str().map(String::from))
        .filter(|n| !matches!(n.as_str(), "Registered" | "Configure" | "Synchronize"))
        .collect()
}

async fn wait_for_event(log: &Path, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(e) = events(log).into_iter().find(|e| e["event"] == name) {
            return e;
        }
        assert!(Instant::now() < deadline, "no {name} in {}", log.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A pod and a long-running busybox container in it: (pod, container).
async fn pod_with_container(rig: &Rig, name: &str) -> (String, String) {
    let cri = rig.daemon.cri().await;
    let config = pod_config(name);
    let pod = cri.run_pod(&config).await.unwrap();
    let c = common::cri::container("app", &["sleep", "3600"]);
    let id = run_container(&rig.daemon, &pod, &config, c).await;
    (pod, id)
}

const ALL: &str = r#"["RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer",
    "PostCreateContainer", "StartContainer", "PostStartContainer", "UpdateContainer",
    "PostUpdateContainer", "StopContainer", "RemoveContainer"]"#;

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn events_arrive_in_order_with_their_metadata() {
    require_root!();
    let mut rig = Rig::new("").await;
    rig.plugin("10", "watch", &format!(r#"{{"subscribe": {ALL}}}"#))
        .await;
    let cri = rig.daemon.cri().await;
    let (pod, id) = pod_with_container(&rig, "events").await;
    cri.update_container_resources(
        &id,
        cri_api::v1::LinuxContainerResources {
            cpu_shares: 512,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod).await.unwrap();
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    let log = rig.log("watch");
    assert_eq!(
        names(&log),
        [
            "RunPodSandbox",
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
        ]
    );
    let ev = events(&log);
    let create = ev.iter().find(|e| e["event"] == "CreateContainer").unwrap();
    assert_eq!(create["pod"]["id"], pod.as_str());
    assert_eq!(create["pod"]["name"], "events");
    assert_eq!(create["pod"]["namespace"], "default");
    assert_eq!(create["pod"]["uid"], "uid-events");
    assert_eq!(create["pod"]["labels"]["app"], "events");
    assert_eq!(create["container"]["id"], id.as_str());
    assert_eq!(create["container"]["name"], "app");
    assert_eq!(create["container"]["pod_sandbox_id"], pod.as_str());
    assert_eq!(create["container"]["labels"]["name"], "app");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn each_adjustment_is_seen_inside_the_container() {
    require_root!();
    let mut rig = Rig::new("").await;
    let data = rig.daemon.sandbox.path("nri-data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("hello"), "from the host\n").unwrap();
    let hook_ran = rig.daemon.sandbox.path("hook-ran");
    let script = serde_json::json!({
        "subscribe": ["CreateContainer"],
        "adjust": {
            "env": {"NRI_ENV": "adjusted"},
            "annotations": {"nri.test/annotation": "yes"},
            "mounts": [{"destination": "/nri-data", "source": data, "type": "bind", "options": ["rbind", "ro"]}],
            "hooks": {"prestart": [{"path": "/bin/sh", "args": ["sh", "-c", format!("echo ran > {}", hook_ran.display())]}]},
            "devices": [{"path": "/dev/nri-null", "type": "c", "major": 1, "minor": 3, "file_mode": 438}],
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 512}],
            "resources": {"memory_limit": 67108864}
        }
    });
    rig.plugin("10", "adjust", &script.to_string()).await;
    let (_, id) = pod_with_container(&rig, "adjusted").await;
    let d = &rig.daemon;
    let out =
        |r: cri_api::v1::ExecSyncResponse| String::from_utf8_lossy(&r.stdout).trim().to_string();
    assert_eq!(
        out(exec(d, &id, &["sh", "-c", "echo $NRI_ENV"]).await),
        "adjusted"
    );
    assert_eq!(
        out(exec(d, &id, &["cat", "/nri-data/hello"]).await),
        "from the host"
    );
    // The container's own process (pid 1): runc 1.1's exec sets an exec's
    // rlimits racing the Go runtime of its init, which raises the soft
    // NOFILE limit to the hard one (seen: 1024 under load).
    let limits = out(exec(d, &id, &["grep", "Max open files", "/proc/1/limits"]).await);
    let fields: Vec<&str> = limits.split_whitespace().collect();
    assert_eq!(fields.get(3..5), Some(&["512", "1024"][..]), "{limits}");
    exec(
        d,
        &id,
        &[
            "sh",
            "-c",
            "test -c /dev/nri-null && echo x > /dev/nri-null",
        ],
    )
    .await;
    let memory = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max";
    assert_eq!(out(exec(d, &id, &["sh", "-c", memory]).await), "67108864");
    assert_eq!(std::fs::read_to_string(&hook_ran).unwrap().trim(), "ran");
    let bundle = d
        .sandbox
        .path("state")
        .join("containers")
        .join(&id)
        .join("config.json");
    let spec: Value = serde_json::from_slice(&std::fs::read(bundle).unwrap()).unwrap();
    assert_eq!(spec["annotations"]["nri.test/annotation"], "yes");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn two_plugins_merge_and_a_conflict_fails_create_naming_both() {
    require_root!();
    let mut rig = Rig::new("").await;
    rig.plugin(
        "10",
        "first",
        r#"{"subscribe": ["CreateContainer"], "adjust": {"env": {"A": "1"}}}"#,
    )
    .await;
    rig.plugin(
        "20",
        "second",
        r#"{"subscribe": ["CreateContainer"], "adjust": {"env": {"B": "2"}}}"#,
    )
    .await;
    let (pod, id) = pod_with_container(&rig, "merged").await;
    let got = exec(&rig.daemon, &id, &["sh", "-c", "echo $A$B"]).await;
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "12");
    rig.plugin(
        "30",
        "third",
        r#"{"subscribe": ["CreateContainer"], "adjust": {"env": {"A": "3"}}}"#,
    )
    .await;
    let cri = rig.daemon.cri().await;
    let config = pod_config("merged");
    let e = cri
        .create_container(
            &pod,
            &config,
            common::cri::container("clash", &["sleep", "60"]),
        )
        .await
        .unwrap_err();
    let msg = e.message();
    assert!(
        msg.contains("10-first") && msg.contains("30-third"),
        "{msg}"
    );
    let listed = cri.list_containers(None).await.unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the refused container is not left: {listed:?}"
    );
}

/// PostCreateContainer and PostStartContainer do not hold the call's
/// answer (containerd's do), yet reach the plugin before its next event.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn post_events_do_not_hold_the_answer_and_come_before_the_next_event() {
    require_root!();
    let mut rig = Rig::new("").await;
    rig.plugin(
        "10",
        "slow",
        r#"{"subscribe": ["PostCreateContainer", "PostStartContainer", "StopContainer"],
            "misbehave": {"PostStartContainer": {"delay": 1500}}}"#,
    )
    .await;
    let cri = rig.daemon.cri().await;
    let (pod, id) = pod_with_container(&rig, "post").await;
    let log = rig.log("slow");
    // The plugin logs "Delayed" just before its reply to PostStart: none
    // yet, so StartContainer answered without waiting for the reply.
    assert!(
        !names(&log).contains(&"Delayed".to_string()),
        "{:?}",
        names(&log)
    );
    cri.stop_container(&id, 0).await.unwrap();
    wait_for_event(&log, "StopContainer").await;
    assert_eq!(
        names(&log),
        [
            "PostCreateContainer",
            "PostStartContainer",
            "Delayed",
            "StopContainer"
        ]
    );
    let ev = events(&log);
    let started = ev
        .iter()
        .find(|e| e["event"] == "PostStartContainer")
        .unwrap();
    assert_eq!(started["container"]["id"], id.as_str());
    assert_eq!(started["container"]["state"], "CONTAINER_RUNNING");
    cri.remove_pod(&pod).await.unwrap();
}

/// A plugin that hangs is cut off by the request timeout and one that
/// crashes is dropped: the pod and its container are made all the same.
/// Both are gone: the daemon closed the hanging one's connection (it says
/// so, and exits), the next pod goes through without them, and once the
/// pods are removed nothing is left, no plugin process either.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_hanging_plugin_is_cut_off_and_a_crashing_one_dropped() {
    require_root!();
    let mut rig = Rig::new("plugin_request_timeout = \"1s\"").await;
    rig.plugin(
        "10",
        "hang",
        r#"{"subscribe": ["CreateContainer"], "misbehave": {"CreateContainer": "hang"}}"#,
    )
    .await;
    rig.plugin(
        "20",
        "crash",
        r#"{"subscribe": ["RunPodSandbox"], "misbehave": {"RunPodSandbox": "crash"}}"#,
    )
    .await;
    let (pod, _) = pod_with_container(&rig, "bounded").await;
    let cri = rig.daemon.cri().await;
    assert_eq!(cri.list_containers(None).await.unwrap().len(), 1);
    let hang = rig.log("hang");
    wait_for_event(&hang, "Hang").await;
    wait_for_event(&hang, "Closed").await;
    let again = cri.run_pod(&pod_config("again")).await.unwrap();
    cri.remove_pod(&again).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    // The plugins name the sandbox on their command lines: a live one
    // would be a stray process here.
    common::faults::assert_clean(&rig.daemon, &rig.net).await;
}

/// A plugin that refuses RunPodSandbox fails it, and the pod leaves
/// nothing behind (no record, dir, mount, netns, lease or process); the
/// retry, without the plugin, works.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_failing_run_pod_sandbox_hook_leaves_nothing_and_a_retry_works() {
    require_root!();
    let mut rig = Rig::new("").await;
    rig.plugin("10", "refuse", r#"{"subscribe": ["RunPodSandbox"], "misbehave": {"RunPodSandbox": {"error": "no pods today"}}}"#)
        .await;
    let cri = rig.daemon.cri().await;
    let e = cri.run_pod(&pod_config("refused")).await.unwrap_err();
    assert!(e.message().contains("no pods today"), "{}", e.message());
    // The plugin goes first: its command line names the sandbox.
    for p in &mut rig.plugins {
        let _ = p.kill();
        let _ = p.wait();
    }
    common::faults::assert_clean(&rig.daemon, &rig.net).await;
    let id = cri.run_pod(&pod_config("refused")).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    common::faults::assert_clean(&rig.daemon, &rig.net).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_late_plugin_is_synchronized_with_what_runs() {
    require_root!();
    let mut rig = Rig::new("").await;
    let (pod, id) = pod_with_container(&rig, "early").await;
    rig.plugin("10", "late", r#"{"subscribe": ["StopContainer"]}"#)
        .await;
    let sync = wait_for_event(&rig.log("late"), "Synchronize").await;
    let text = sync.to_string();
    assert!(text.contains(&pod) && text.contains(&id), "{text}");
    // And it hears of what happens from then on.
    rig.daemon.cri().await.stop_container(&id, 0).await.unwrap();
    wait_for_event(&rig.log("late"), "StopContainer").await;
}

/// Installs the test plugin as pre-installed plugin `idx_name`, subscribed
/// to every event; its event log.
fn pre_installed(sandbox: &Sandbox, idx_name: &str) -> PathBuf {
    let dir = sandbox.path("nri/plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let log = sandbox.path(&format!("{idx_name}.events"));
    let script = sandbox.path(&format!("{idx_name}.json"));
    std::fs::write(&script, format!(r#"{{"subscribe": {ALL}}}"#)).unwrap();
    let wrapper = dir.join(idx_name);
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} --script {} --events {}\n",
            plugin_bin().display(),
            script.display(),
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    log
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_pre_installed_plugin_is_launched_and_relaunched_after_a_restart() {
    require_root!();
    let sandbox = Sandbox::new();
    let log = pre_installed(&sandbox, "05-pre");
    let mut rig = Rig::with_sandbox(sandbox, "").await;
    wait_for_event(&log, "Synchronize").await;
    let (pod, id) = pod_with_container(&rig, "pre").await;
    wait_for_event(&log, "PostStartContainer").await;
    std::fs::remove_file(&log).unwrap();
    rig.daemon.restart().await;
    // Relaunched, and synchronized with the pod and container that lived on.
    let sync = wait_for_event(&log, "Synchronize").await.to_string();
    assert!(sync.contains(&pod) && sync.contains(&id), "{sync}");
    exec(&rig.daemon, &id, &["true"]).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_plugins_unsolicited_update_goes_through_the_update_path() {
    require_root!();
    let mut rig = Rig::new("").await;
    let (_, id) = pod_with_container(&rig, "updated").await;
    let script = serde_json::json!({
        "subscribe": ["StopContainer"],
        "update_after_sync": [{"container_id": id, "resources": {"memory_limit": 33554432}}]
    });
    rig.plugin("10", "updater", &script.to_string()).await;
    let result = wait_for_event(&rig.log("updater"), "UpdateContainersResult").await;
    assert!(
        !result.to_string().contains(&id),
        "the update failed: {result}"
    );
    let memory = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max";
    let out = exec(&rig.daemon, &id, &["sh", "-c", memory]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "33554432");
    // Recorded as UpdateContainerResources records it.
    let st = common::cri::container_status(&rig.daemon, &id).await;
    let limit = st
        .resources
        .and_then(|r| r.linux)
        .map(|l| l.memory_limit_in_bytes);
    assert_eq!(limit, Some(33554432));
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn the_default_validator_refuses_an_oci_hook_when_configured() {
    require_root!();
    let mut rig =
        Rig::new("default_validator = { enable = true, reject_oci_hook_adjustment = true }").await;
    let script = serde_json::json!({
        "subscribe": ["CreateContainer"],
        "adjust": {"hooks": {"prestart": [{"path": "/bin/true"}]}}
    });
    rig.plugin("10", "hooker", &script.to_string()).await;
    let cri = rig.daemon.cri().await;
    let config = pod_config("validated");
    let pod = cri.run_pod(&config).await.unwrap();
    let e = cri
        .create_container(
            &pod,
            &config,
            common::cri::container("hooked", &["sleep", "60"]),
        )
        .await
        .unwrap_err();
    let msg = e.message();
    assert!(
        msg.contains("default-validator") && msg.contains("10-hooker") && msg.contains("OCI hook"),
        "{msg}"
    );
    assert!(
        cri.list_containers(None).await.unwrap().is_empty(),
        "the refused container is not left"
    );
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_required_plugin_is_checked_with_no_plugin_connected() {
    require_root!();
    // No plugin at all: a CreateContainer has no event to send, but the
    // default validator still refuses it for the plugin it requires.
    let rig =
        Rig::new(r#"default_validator = { enable = true, required_plugins = ["absent"] }"#).await;
    let cri = rig.daemon.cri().await;
    let config = pod_config("required");
    let pod = cri.run_pod(&config).await.unwrap();
    let e = cri
        .create_container(
            &pod,
            &config,
            common::cri::container("lonely", &["sleep", "60"]),
        )
        .await
        .unwrap_err();
    let msg = e.message();
    assert!(
        msg.contains("default-validator") && msg.contains("absent"),
        "{msg}"
    );
    assert!(cri.list_containers(None).await.unwrap().is_empty());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_container_that_exited_while_berth_was_down_gets_its_stop_event_after_the_restart() {
    require_root!();
    let sandbox = Sandbox::new();
    let log = pre_installed(&sandbox, "05-pre");
    let mut rig = Rig::with_sandbox(sandbox, "").await;
    wait_for_event(&log, "Synchronize").await;
    let (_, id) = pod_with_container(&rig, "down").await;
    let started = wait_for_event(&log, "PostStartContainer").await;
    let pid = started["container"]["pid"].as_i64().expect("a pid") as i32;
    assert!(pid > 1, "{started}");
    // berth dies, then the container's process, while berth is down.
    rig.daemon.child.kill().unwrap();
    rig.daemon.child.wait().unwrap();
    std::fs::remove_file(&log).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    rig.daemon.restart().await;
    let stop = wait_for_event(&log, "StopContainer").await;
    assert_eq!(stop["container"]["id"], id.as_str(), "{stop}");
    // After the plugin's Synchronize, and once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let all: Vec<String> = events(&log)
        .iter()
        .filter_map(|e| e["event"].as_str().map(String::from))
        .collect();
    let sync = all
        .iter()
        .position(|e| e == "Synchronize")
        .expect("synchronized");
    let stops: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, e)| *e == "StopContainer")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(stops.len(), 1, "{all:?}");
    assert!(stops[0] > sync, "{all:?}");
    // A StopContainer call now says nothing more to the plugin.
    rig.daemon.cri().await.stop_container(&id, 0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = events(&log)
        .iter()
        .filter(|e| e["event"] == "StopContainer")
        .count();
    assert_eq!(again, 1);
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn updates_in_a_create_reply_are_applied_before_it_answers() {
    require_root!();
    let mut rig = Rig::new("").await;
    let (pod, first) = pod_with_container(&rig, "replied").await;
    let script = serde_json::json!({
        "subscribe": ["CreateContainer"],
        "updates": [{"container_id": first, "resources": {"memory_limit": 41943040}}]
    });
    rig.plugin("10", "updater", &script.to_string()).await;
    let cri = rig.daemon.cri().await;
    cri.create_container(
        &pod,
        &pod_config("replied"),
        common::cri::container("second", &["sleep", "60"]),
    )
    .await
    .unwrap();
    // No waiting: the other container has it as the call returns.
    let st = common::cri::container_status(&rig.daemon, &first).await;
    let limit = st
        .resources
        .and_then(|r| r.linux)
        .map(|l| l.memory_limit_in_bytes);
    assert_eq!(limit, Some(41943040));
    let memory = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max";
    let out = exec(&rig.daemon, &first, &["sh", "-c", memory]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "41943040");
}
