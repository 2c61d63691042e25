//! berth-nri against the test plugin over real unix sockets.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_nri::{api, Config, Host, Nri};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_berth-nri-test-plugin");

#[derive(Default)]
struct FakeHost {
    pods: Vec<api::PodSandbox>,
    ctrs: Vec<api::Container>,
    updates: Mutex<Vec<(String, Vec<api::ContainerUpdate>)>>,
}

#[async_trait::async_trait]
impl Host for FakeHost {
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        (self.pods.clone(), self.ctrs.clone())
    }
    async fn update_containers(
        &self,
        plugin: &str,
        updates: Vec<api::ContainerUpdate>,
        _evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate> {
        self.updates.lock().unwrap().push((plugin.into(), updates));
        Vec::new()
    }
}

struct Env {
    dir: tempfile::TempDir,
    nri: Nri,
    host: Arc<FakeHost>,
    children: Vec<tokio::process::Child>,
}

fn pod() -> api::PodSandbox {
    let mut p = api::PodSandbox::new();
    p.id = "pod1".into();
    p.name = "web".into();
    p.namespace = "default".into();
    p.labels.insert("app".into(), "web".into());
    p.annotations.insert("a".into(), "b".into());
    p
}

fn ctr() -> api::Container {
    let mut c = api::Container::new();
    c.id = "ctr1".into();
    c.pod_sandbox_id = "pod1".into();
    c.name = "nginx".into();
    c.env = vec!["PATH=/bin".into()];
    c
}

async fn start(host: FakeHost, plugin_dir: Option<PathBuf>) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host);
    let cfg = Config {
        socket_path: dir.path().join("nri/nri.sock"),
        plugin_path: plugin_dir.unwrap_or_else(|| dir.path().join("none")),
        plugin_config_path: dir.path().join("conf"),
        registration_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_millis(700),
        ..Config::default()
    };
    let nri = Nri::start(cfg, host.clone()).await.unwrap();
    Env {
        dir,
        nri,
        host,
        children: Vec::new(),
    }
}

impl Env {
    fn socket(&self) -> PathBuf {
        self.dir.path().join("nri/nri.sock")
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.events"))
    }

    /// Starts an external test plugin and waits until it is active.
    async fn plugin(&mut self, idx: &str, name: &str, script: &str) {
        let before = self.nri.plugins().len();
        self.spawn(idx, name, script);
        wait_for(|| self.nri.plugins().len() > before).await;
    }

    /// Starts a test plugin that logs nothing (as the bench's no-op plugin,
    /// which berth launches without `--events`): for the cost measurements,
    /// which would otherwise time the plugin's own log writes.
    async fn silent_plugin(&mut self, idx: &str, name: &str) {
        let before = self.nri.plugins().len();
        let child = self.command(idx, name, "{}").spawn().unwrap();
        self.children.push(child);
        wait_for(|| self.nri.plugins().len() > before).await;
    }

    fn spawn(&mut self, idx: &str, name: &str, script: &str) {
        let mut command = self.command(idx, name, script);
        let child = command.arg("--events").arg(self.log(name)).spawn().unwrap();
        self.children.push(child);
    }

    /// The test plugin's command line, without `--events`.
    fn command(&self, idx: &str, name: &str, script: &str) -> tokio::process::Command {
        let sp = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&sp, script).unwrap();
        let mut command = tokio::process::Command::new(BIN);
        command
            .args([
                "--socket",
                self.socket().to_str().unwrap(),
                "--idx",
                idx,
                "--name",
                name,
            ])
            .arg("--script")
            .arg(&sp)
            .kill_on_drop(true);
        command
    }
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "condition not met in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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
        .map(|e| e["event"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn events_arrive_in_order_and_adjustment_merges() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin("10", "a", r#"{"subscribe": ["RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer", "RemovePodSandbox"],
        "adjust": {"env": {"FOO": "bar"}, "annotations": {"x": "y"}, "mounts": [{"destination": "/data", "source": "/src", "type": "bind", "options": ["rbind"]}],
        "hooks": {"prestart": [{"path": "/bin/true"}]}, "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 512}], "oom_score_adj": -100,
        "resources": {"cpu_shares": 512, "memory_limit": 1048576, "unified": {"memory.high": "1M"}}}}"#).await;
    let info = env.nri.plugins();
    assert_eq!((info[0].index.as_str(), info[0].name.as_str()), ("10", "a"));
    env.nri.run_pod_sandbox(&pod()).await.unwrap();
    let res = env.nri.create_container(&pod(), &ctr()).await.unwrap();
    env.nri.start_container(&pod(), &ctr()).await.unwrap();
    env.nri.post_start_container(&pod(), &ctr()).await.unwrap(); // not subscribed
    env.nri.stop_container(&pod(), &ctr()).await.unwrap();
    env.nri.remove_container(&pod(), &ctr()).await.unwrap();
    env.nri.remove_pod_sandbox(&pod()).await.unwrap();
    let a = &res.adjust;
    assert_eq!(a.env[0].key, "FOO");
    assert_eq!(a.annotations["x"], "y");
    assert_eq!(a.mounts[0].destination, "/data");
    assert_eq!(a.hooks.prestart[0].path, "/bin/true");
    assert_eq!(a.linux.devices[0].path, "/dev/fuse");
    assert_eq!(a.rlimits[0].hard, 1024);
    assert_eq!(a.linux.oom_score_adj.value, -100);
    assert_eq!(a.linux.resources.cpu.shares.value, 512);
    assert_eq!(a.linux.resources.memory.limit.value, 1048576);
    assert_eq!(a.linux.resources.unified["memory.high"], "1M");
    let log = env.log("a");
    let got: Vec<String> = names(&log)
        .into_iter()
        .filter(|n| n != "Registered")
        .collect();
    let want = [
        "Configure",
        "Synchronize",
        "RunPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "RemovePodSandbox",
    ];
    assert_eq!(got, want);
    let ev = events(&log);
    let create = ev.iter().find(|e| e["event"] == "CreateContainer").unwrap();
    assert_eq!(create["pod"]["namespace"], "default");
    assert_eq!(create["pod"]["labels"]["app"], "web");
    assert_eq!(create["container"]["name"], "nginx");
    let cfg = ev.iter().find(|e| e["event"] == "Configure").unwrap();
    assert_eq!(cfg["runtime_name"], "berth");
    assert_eq!(cfg["request_timeout"], 700);
    let stats = env.nri.stats();
    assert!(
        stats[0].requests >= 8 && stats[0].failures == 0,
        "{stats:?}"
    );
}

/// Post-events answer at once (the caller does not wait for the plugin's
/// reply) and are still delivered, in order, before the next event.
#[tokio::test]
async fn post_events_do_not_wait_for_the_reply_and_come_before_the_next_event() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin(
        "10",
        "slow",
        r#"{"subscribe": ["PostCreateContainer", "PostStartContainer", "StopContainer"],
            "misbehave": {"PostStartContainer": {"delay": 400}}}"#,
    )
    .await;
    // Configure and Synchronize count too.
    let base = env.nri.stats()[0].requests;
    env.nri.post_create_container(&pod(), &ctr()).await.unwrap();
    env.nri.post_start_container(&pod(), &ctr()).await.unwrap();
    let log = env.log("slow");
    // The plugin logs "Delayed" just before it replies to PostStart.
    assert!(
        !names(&log).contains(&"Delayed".to_string()),
        "post_start_container waited for the reply: {:?}",
        names(&log)
    );
    // StopContainer goes out only once both post-events are answered.
    env.nri.stop_container(&pod(), &ctr()).await.unwrap();
    let got: Vec<String> = names(&log)
        .into_iter()
        .filter(|n| !matches!(n.as_str(), "Registered" | "Configure" | "Synchronize"))
        .collect();
    assert_eq!(
        got,
        [
            "PostCreateContainer",
            "PostStartContainer",
            "Delayed",
            "StopContainer"
        ]
    );
    let s = &env.nri.stats()[0];
    assert_eq!((s.requests - base, s.failures), (3, 0), "{s:?}");
    // A post-event with nothing after it is delivered all the same.
    env.nri.post_create_container(&pod(), &ctr()).await.unwrap();
    wait_for(|| env.nri.stats()[0].requests == base + 4).await;
    assert_eq!(names(&log).last().unwrap(), "PostCreateContainer");
}

/// The queue of post-events is bounded: past it, a post delivers the queue
/// and itself before it answers.
#[tokio::test]
async fn the_post_event_queue_is_bounded() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin("10", "p", r#"{"subscribe": ["PostStartContainer"]}"#)
        .await;
    let base = env.nri.stats()[0].requests;
    // On this (current-thread) runtime the delivering task cannot run
    // while the loop does not yield: the queue fills up.
    for _ in 0..=berth_nri::MAX_POSTED {
        env.nri.post_start_container(&pod(), &ctr()).await.unwrap();
    }
    assert_eq!(
        env.nri.stats()[0].requests - base,
        berth_nri::MAX_POSTED as u64 + 1
    );
}

/// Events nobody subscribed to are not sent, and cost no request.
#[tokio::test]
async fn unsubscribed_events_are_not_sent() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin("10", "p", r#"{"subscribe": ["StopContainer"]}"#)
        .await;
    let base = env.nri.stats()[0].requests;
    assert!(env.nri.wants(api::Event::STOP_CONTAINER));
    assert!(!env.nri.wants(api::Event::POST_START_CONTAINER));
    env.nri.post_start_container(&pod(), &ctr()).await.unwrap();
    env.nri.start_container(&pod(), &ctr()).await.unwrap();
    env.nri.stop_container(&pod(), &ctr()).await.unwrap();
    assert_eq!(env.nri.stats()[0].requests - base, 1);
}

#[tokio::test]
async fn a_create_is_wanted_by_its_subscribers_validators_or_the_default_validator() {
    let mut env = start(FakeHost::default(), None).await;
    assert!(!env.nri.wants_create(), "no plugin, no validator");
    env.plugin("10", "s", r#"{"subscribe": ["StopContainer"]}"#)
        .await;
    assert!(!env.nri.wants_create(), "a plugin of other events");
    env.plugin(
        "20",
        "v",
        r#"{"subscribe": ["ValidateContainerAdjustment"]}"#,
    )
    .await;
    assert!(env.nri.wants_create(), "a validating plugin");

    // The default validator checks required plugins with none connected.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config {
        socket_path: dir.path().join("nri.sock"),
        plugin_path: dir.path().join("none"),
        plugin_config_path: dir.path().join("conf"),
        ..Config::default()
    };
    cfg.validator.enable = true;
    let nri = Nri::start(cfg, Arc::new(FakeHost::default()))
        .await
        .unwrap();
    assert!(nri.wants_create());
}

#[tokio::test]
async fn two_plugins_merge_and_conflict_names_both() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin("20", "b", r#"{"subscribe": ["CreateContainer"], "adjust": {"env": {"B": "2"}, "resources": {"cpu_shares": 2}}}"#).await;
    env.plugin(
        "10",
        "a",
        r#"{"subscribe": ["CreateContainer"], "adjust": {"env": {"A": "1"}}}"#,
    )
    .await;
    let res = env.nri.create_container(&pod(), &ctr()).await.unwrap();
    let keys: Vec<&str> = res.adjust.env.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["A", "B"], "plugins run in index order");
    // B saw A's adjustment.
    let b = events(&env.log("b"));
    let c = b.iter().find(|e| e["event"] == "CreateContainer").unwrap();
    assert!(c["container"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e == "A=1"));
    env.plugin(
        "30",
        "c",
        r#"{"subscribe": ["CreateContainer"], "adjust": {"resources": {"cpu_shares": 3}}}"#,
    )
    .await;
    let err = env
        .nri
        .create_container(&pod(), &ctr())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("30-c") && err.contains("20-b") && err.contains("CPUShares"),
        "{err}"
    );
}

#[tokio::test]
async fn plugin_error_fails_the_event_with_its_name() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin("10", "bad", r#"{"subscribe": ["CreateContainer"], "misbehave": {"CreateContainer": {"error": "no way"}}}"#).await;
    let err = env
        .nri
        .create_container(&pod(), &ctr())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("10-bad") && err.contains("CreateContainer") && err.contains("no way"),
        "{err}"
    );
}

/// The stats of the plugin `IDX-NAME`, connected or dropped.
fn stats_of(nri: &Nri, plugin: &str) -> berth_nri::PluginStats {
    let all = nri.stats();
    all.iter()
        .find(|s| s.plugin == plugin)
        .unwrap_or_else(|| panic!("no stats for {plugin}: {all:?}"))
        .clone()
}

/// A plugin that hangs is cut off by the request timeout, whichever end
/// sees it first (our timer, the ttrpc client's, or the plugin's ttrpc
/// server answering DEADLINE_EXCEEDED), and the event goes on with the
/// others; a crashing one is dropped. No elapsed time is asserted: the
/// plugin says when it starts to hang, and the counters say what ended it.
#[tokio::test]
async fn hanging_plugin_is_cut_off_and_crashing_one_dropped() {
    let mut env = start(FakeHost::default(), None).await;
    env.plugin(
        "10",
        "hang",
        r#"{"subscribe": ["CreateContainer"], "misbehave": {"CreateContainer": "hang"}}"#,
    )
    .await;
    env.plugin(
        "20",
        "crash",
        r#"{"subscribe": ["RunPodSandbox"], "misbehave": {"RunPodSandbox": "crash"}}"#,
    )
    .await;
    env.plugin(
        "30",
        "good",
        r#"{"subscribe": ["CreateContainer", "RunPodSandbox"], "adjust": {"env": {"G": "1"}}}"#,
    )
    .await;
    // The plugin hangs for an hour: the guard only keeps a broken cut-off
    // from holding the suite that long.
    let (pod, ctr) = (pod(), ctr());
    let create = env.nri.create_container(&pod, &ctr);
    let res = tokio::time::timeout(Duration::from_secs(60), create)
        .await
        .expect("the hanging plugin was not cut off")
        .unwrap();
    assert_eq!(res.adjust.env[0].key, "G");
    wait_for(|| names(&env.log("hang")).contains(&"Hang".to_string())).await;
    let hang = stats_of(&env.nri, "10-hang");
    assert_eq!(
        (hang.connected, hang.timeouts, hang.failures),
        (false, 1, 1),
        "{hang:?}"
    );
    // Its connection is closed: the plugin sees it.
    wait_for(|| names(&env.log("hang")).contains(&"Closed".to_string())).await;
    env.nri.run_pod_sandbox(&pod).await.unwrap();
    wait_for(|| env.nri.plugins().len() == 1).await;
    assert_eq!(env.nri.plugins()[0].name, "good");
    assert!(names(&env.log("good")).contains(&"RunPodSandbox".to_string()));
    let crash = stats_of(&env.nri, "20-crash");
    assert_eq!((crash.connected, crash.timeouts), (false, 0), "{crash:?}");
}

#[tokio::test]
async fn late_plugin_is_synchronized_and_unsolicited_update_reaches_host() {
    let host = FakeHost {
        pods: vec![pod()],
        ctrs: vec![ctr()],
        ..Default::default()
    };
    let mut env = start(host, None).await;
    env.plugin("10", "late", r#"{"subscribe": ["CreateContainer"], "update_after_sync": [{"container_id": "ctr1", "resources": {"cpu_shares": 99}}]}"#).await;
    let ev = events(&env.log("late"));
    let sync = ev.iter().find(|e| e["event"] == "Synchronize").unwrap();
    assert_eq!(sync["pods"][0]["id"], "pod1");
    assert_eq!(sync["containers"][0]["id"], "ctr1");
    wait_for(|| !env.host.updates.lock().unwrap().is_empty()).await;
    let (who, ups) = env.host.updates.lock().unwrap()[0].clone();
    assert_eq!(who, "10-late");
    assert_eq!(ups[0].linux.resources.cpu.shares.value, 99);
    wait_for(|| names(&env.log("late")).contains(&"UpdateContainersResult".to_string())).await;
}

/// Synchronize is bounded by the registration timeout (2 s here), not the
/// request timeout (700 ms): a plugin that takes 1.2 s to synchronize (as
/// cri-tools' Synchronize specs hold it for 2 s against NRI's default 2 s)
/// stays and hears of what comes next; one slower than that is dropped.
#[tokio::test]
async fn synchronize_is_bounded_by_the_registration_timeout() {
    let host = FakeHost {
        pods: vec![pod()],
        ctrs: vec![ctr()],
        ..Default::default()
    };
    let mut env = start(host, None).await;
    env.plugin(
        "10",
        "slow",
        r#"{"subscribe": ["RunPodSandbox"], "misbehave": {"Synchronize": {"delay": 1200}}}"#,
    )
    .await;
    assert_eq!(env.nri.plugins().len(), 1);
    env.nri.run_pod_sandbox(&pod()).await.unwrap();
    wait_for(|| names(&env.log("slow")).contains(&"RunPodSandbox".to_string())).await;
    env.spawn(
        "20",
        "slower",
        r#"{"misbehave": {"Synchronize": {"delay": 2600}}}"#,
    );
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let names: Vec<String> = env.nri.plugins().iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, ["slow"]);
}

/// A plugin that never registers is cut off at the registration timeout
/// (2 s here): its connection is closed, which it sees while it still
/// hangs before registering, and it never joins. One that sends a frame
/// larger than the mux allows is dropped for it, not by a timeout.
#[tokio::test]
async fn registration_timeout_and_oversize_frame_drop_the_plugin() {
    let mut env = start(FakeHost::default(), None).await;
    env.spawn("10", "mute", r#"{"misbehave": {"Register": "hang"}}"#);
    env.plugin(
        "20",
        "big",
        r#"{"subscribe": ["RunPodSandbox"], "misbehave": {"RunPodSandbox": "oversize"}}"#,
    )
    .await;
    env.nri.run_pod_sandbox(&pod()).await.unwrap();
    wait_for(|| env.nri.plugins().is_empty()).await;
    let big = stats_of(&env.nri, "20-big");
    assert_eq!(
        (big.connected, big.failures, big.timeouts),
        (false, 1, 0),
        "{big:?}"
    );
    let mute = env.log("mute");
    wait_for(|| names(&mute).contains(&"Closed".to_string())).await;
    let closed = events(&mute)
        .into_iter()
        .find(|e| e["event"] == "Closed")
        .unwrap();
    assert_eq!(closed["registered"], false, "{closed}");
    assert!(env.nri.plugins().is_empty());
    assert!(
        env.nri.stats().iter().all(|s| s.plugin != "10-mute"),
        "{:?}",
        env.nri.stats()
    );
}

#[tokio::test]
async fn preinstalled_plugin_registers_over_fd3() {
    let plugins = tempfile::tempdir().unwrap();
    let log = plugins.path().join("events");
    let wrapper = plugins.path().join("05-pre");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {BIN} --events {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let env = start(FakeHost::default(), Some(plugins.path().into())).await;
    let info = env.nri.plugins();
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(
        (info[0].index.as_str(), info[0].name.as_str()),
        ("05", "pre")
    );
    assert_eq!(info[0].kind, berth_nri::PluginKind::Launched);
    env.nri.run_pod_sandbox(&pod()).await.unwrap(); // subscribed to all
    wait_for(|| names(&log).contains(&"RunPodSandbox".to_string())).await;
    env.nri.shutdown().await;
    assert!(env.nri.plugins().is_empty());
}

/// What one event costs with one no-op plugin subscribed to all (the
/// round trip over NRI's mux and ttrpc, both ends real): printed, not
/// asserted (`cargo test -p berth-nri-test-plugin --release -- --ignored
/// --nocapture event_round_trip_cost`).
#[tokio::test]
#[ignore = "a measurement: run it by hand"]
async fn event_round_trip_cost() {
    let mut env = start(FakeHost::default(), None).await;
    env.silent_plugin("10", "noop").await;
    let pod = pod();
    for _ in 0..50 {
        env.nri.run_pod_sandbox(&pod).await.unwrap();
    }
    let n = 500;
    let t = Instant::now();
    for _ in 0..n {
        env.nri.run_pod_sandbox(&pod).await.unwrap();
    }
    println!(
        "RunPodSandbox with one no-op plugin: {:.1} µs per event",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}

/// What one no-op plugin adds to a pod + container start, as the caller
/// waits for it: RunPodSandbox, CreateContainer (and
/// ValidateContainerAdjustment), then PostCreateContainer,
/// StartContainer and PostStartContainer as the daemon sends them, with
/// 5 ms of other work (untimed) between the calls, as in a daemon
/// (`cargo test -p berth-nri-test-plugin --release -- --ignored
/// --nocapture start_path_cost`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by hand"]
async fn start_path_cost() {
    let mut env = start(FakeHost::default(), None).await;
    env.silent_plugin("10", "noop").await;
    let (pod, ctr) = (pod(), ctr());
    let (nri, pod, ctr) = (&env.nri, &pod, &ctr);
    let gap = || tokio::time::sleep(Duration::from_millis(5));
    let once = move || async move {
        let t = Instant::now();
        nri.run_pod_sandbox(pod).await.unwrap();
        let mut waited = t.elapsed();
        gap().await;
        let t = Instant::now();
        nri.create_container(pod, ctr).await.unwrap();
        nri.post_create_container(pod, ctr).await.unwrap();
        waited += t.elapsed();
        gap().await;
        let t = Instant::now();
        nri.start_container(pod, ctr).await.unwrap();
        nri.post_start_container(pod, ctr).await.unwrap();
        waited += t.elapsed();
        gap().await;
        waited
    };
    for _ in 0..20 {
        once().await;
    }
    let n = 200;
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        took.push(once().await);
    }
    took.sort();
    println!(
        "pod + container start events with one no-op plugin, waited for: median {:.1} µs",
        took[n / 2].as_secs_f64() * 1e6
    );
}
