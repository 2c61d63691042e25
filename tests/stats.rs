//! Stats, events, OOM and metrics against the real daemon, runc, CNI and a
//! local registry: CPU and memory of busy containers, writable layers, list
//! filters, pod stats with network counters, the event stream of a pod's
//! life, a stalled event subscriber, an OOM kill, the Prometheus endpoint and
//! the runtime handlers in Status. Pod tests need root.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::cri::{
    container, exec, pod_status, pull, remove_pod, run_container, start, wait_exited, PodCgroup,
};
use common::pods::{daemon, TestNet};
use common::{prom, registry, Daemon};
use cri_api::v1;
use cri_api::v1::ContainerEventType as Ev;

fn val(v: Option<v1::UInt64Value>) -> u64 {
    v.map(|v| v.value).unwrap_or(0)
}

async fn container_stats(daemon: &Daemon, id: &str) -> v1::ContainerStats {
    daemon
        .cri()
        .await
        .container_stats(id)
        .await
        .expect("ContainerStats")
        .stats
        .expect("stats")
}

/// Waits up to 30 s for a container's CPU rate to be known and pass `check`.
async fn wait_nano_cores(daemon: &Daemon, id: &str, check: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cpu = container_stats(daemon, id).await.cpu.expect("cpu stats");
        if let Some(rate) = cpu.usage_nano_cores.map(|v| v.value) {
            if check(rate) {
                return rate;
            }
        }
        assert!(
            Instant::now() < deadline,
            "container {id}: CPU rate never as expected: {cpu:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn ids(stats: &[v1::ContainerStats]) -> BTreeSet<String> {
    stats
        .iter()
        .map(|s| s.attributes.as_ref().expect("attributes").id.clone())
        .collect()
}

async fn list_container_stats(
    daemon: &Daemon,
    filter: v1::ContainerStatsFilter,
) -> BTreeSet<String> {
    let stats = daemon
        .cri()
        .await
        .list_container_stats(Some(filter))
        .await
        .expect("ListContainerStats");
    ids(&stats)
}

async fn pod_stats(daemon: &Daemon, pod: &str) -> v1::LinuxPodSandboxStats {
    let stats = daemon
        .cri()
        .await
        .pod_stats(pod)
        .await
        .expect("PodSandboxStats")
        .stats
        .expect("stats");
    assert_eq!(stats.attributes.expect("attributes").id, pod);
    stats.linux.expect("linux stats")
}

fn eth0(stats: &v1::LinuxPodSandboxStats) -> v1::NetworkInterfaceUsage {
    let network = stats.network.clone().expect("network stats");
    let default = network.default_interface.expect("a default interface");
    assert_eq!(default.name, "eth0");
    default
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn container_and_pod_stats() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let cgroup = PodCgroup::new("stats");
    let config = cgroup.pod_config("stats");
    let pod = cri.run_pod(&config).await.unwrap();
    pull(&daemon, &registry().busybox()).await;
    let burner = run_container(
        &daemon,
        &pod,
        &config,
        container("burner", &["sh", "-c", "while :; do :; done"]),
    )
    .await;
    let sleeper = run_container(
        &daemon,
        &pod,
        &config,
        container("sleeper", &["sleep", "1000"]),
    )
    .await;

    // CPU: the burner's cumulative time rises and its rate is a good part of a core.
    let rate = wait_nano_cores(&daemon, &burner, |r| r > 200_000_000).await;
    let first = val(container_stats(&daemon, &burner)
        .await
        .cpu
        .unwrap()
        .usage_core_nano_seconds);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = val(container_stats(&daemon, &burner)
        .await
        .cpu
        .unwrap()
        .usage_core_nano_seconds);
    assert!(second > first + 100_000_000, "{first} → {second}");
    let idle = wait_nano_cores(&daemon, &sleeper, |_| true).await;
    assert!(
        idle < 100_000_000 && idle < rate,
        "sleeper {idle}, burner {rate}"
    );

    // Memory: 32 MiB written to the pod's /dev/shm (tmpfs) from inside the
    // sleeper are charged to it and are working set (not inactive file cache).
    let before = container_stats(&daemon, &sleeper)
        .await
        .memory
        .expect("memory");
    exec(
        &daemon,
        &sleeper,
        &[
            "dd",
            "if=/dev/zero",
            "of=/dev/shm/fill",
            "bs=1M",
            "count=32",
        ],
    )
    .await;
    let after = container_stats(&daemon, &sleeper)
        .await
        .memory
        .expect("memory");
    let (ws0, ws1) = (val(before.working_set_bytes), val(after.working_set_bytes));
    assert!(ws1 >= ws0 + (24 << 20), "working set {ws0} → {ws1}");
    assert!(val(after.usage_bytes) >= ws1);
    assert!(after.timestamp > 0 && after.page_faults.is_some());

    // Writable layer: a file written into the rootfs adds bytes and an inode.
    let layer0 = container_stats(&daemon, &sleeper)
        .await
        .writable_layer
        .expect("layer");
    exec(
        &daemon,
        &sleeper,
        &["dd", "if=/dev/zero", "of=/big", "bs=1M", "count=8"],
    )
    .await;
    let layer1 = container_stats(&daemon, &sleeper)
        .await
        .writable_layer
        .expect("layer");
    assert!(
        val(layer1.used_bytes) >= val(layer0.used_bytes) + (8 << 20),
        "{layer0:?} → {layer1:?}"
    );
    assert!(val(layer1.inodes_used) > val(layer0.inodes_used));
    let layer_fs = layer1.fs_id.expect("fs id").mountpoint;
    assert!(!layer_fs.is_empty());

    // ImageFsInfo: the writable layers' filesystem (kubelet's containerfs)
    // beside the image store's, holding at least the 8 MiB just written.
    let fs = cri.image_fs_info().await.unwrap();
    assert_eq!(fs.image_filesystems.len(), 1, "{fs:?}");
    let [containers] = fs.container_filesystems.as_slice() else {
        panic!("one container filesystem: {fs:?}");
    };
    assert_eq!(
        containers.fs_id.as_ref().unwrap().mountpoint,
        layer_fs,
        "{fs:?}"
    );
    assert!(
        val(containers.used_bytes) >= val(layer1.used_bytes),
        "{fs:?}"
    );
    assert!(val(containers.inodes_used) >= val(layer1.inodes_used));

    // List filters: id prefix, pod, labels; unknown pod or label: nothing.
    let both: BTreeSet<String> = [burner.clone(), sleeper.clone()].into();
    let filter = |id: &str, pod: &str, label: Option<&str>| v1::ContainerStatsFilter {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        label_selector: label
            .map(|l| [("name".to_string(), l.to_string())].into())
            .unwrap_or_default(),
    };
    assert_eq!(
        list_container_stats(&daemon, filter("", "", None)).await,
        both
    );
    assert_eq!(
        list_container_stats(&daemon, filter(&burner[..12], "", None)).await,
        [burner.clone()].into()
    );
    assert_eq!(
        list_container_stats(&daemon, filter("", &pod, None)).await,
        both
    );
    assert_eq!(
        list_container_stats(&daemon, filter("", &pod[..10], Some("sleeper"))).await,
        [sleeper.clone()].into()
    );
    assert!(
        list_container_stats(&daemon, filter("", "", Some("nobody")))
            .await
            .is_empty()
    );
    assert!(
        list_container_stats(&daemon, filter("", "ffffffffff", None))
            .await
            .is_empty()
    );

    // Pod stats: its cgroup holds both containers' usage; its containers are listed.
    let stats = pod_stats(&daemon, &pod).await;
    assert_eq!(ids(&stats.containers), both);
    let pod_cpu = val(stats.cpu.as_ref().expect("pod cpu").usage_core_nano_seconds);
    assert!(pod_cpu >= second, "pod {pod_cpu} < burner {second}");
    // The sleeper's 32 MiB in /dev/shm stay charged to the pod; the rest of
    // its working set (the exec's dd, page tables) comes and goes, so the
    // pod's read later need not reach the sleeper's earlier read.
    let pod_ws = val(stats.memory.as_ref().expect("pod memory").working_set_bytes);
    assert!(
        pod_ws >= 32 << 20,
        "pod working set {pod_ws} < the sleeper's 32 MiB fill (sleeper's was {ws1})"
    );
    // The two containers (the pod has no pause: nothing needs one).
    assert!(val(stats.process.as_ref().expect("processes").process_count) >= 2);

    // Network: pinging the pod's IP from the host shows on its eth0.
    let ip = pod_status(&daemon, &pod)
        .await
        .network
        .expect("pod network")
        .ip;
    let rx0 = val(eth0(&stats).rx_bytes);
    let ping = std::process::Command::new("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", &ip])
        .output()
        .expect("ping");
    assert!(
        ping.status.success(),
        "ping {ip}: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let stats = pod_stats(&daemon, &pod).await;
    let rx1 = val(eth0(&stats).rx_bytes);
    assert!(rx1 >= rx0 + 3 * 84, "eth0 rx {rx0} → {rx1}");
    assert!(val(eth0(&stats).tx_bytes) >= 3 * 84);

    // ListPodSandboxStats filters.
    let list = |id: &str, app: &str| {
        cri.list_pod_stats(Some(v1::PodSandboxStatsFilter {
            id: id.into(),
            label_selector: [("app".to_string(), app.to_string())].into(),
        }))
    };
    let found = list(&pod[..12], "stats").await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].linux.as_ref().unwrap().containers.len(), 2);
    let none = list("", "nobody").await.unwrap();
    assert!(none.is_empty());

    // cAdvisor-style metrics kubelet can read.
    let descriptors = cri.list_metric_descriptors().await.unwrap();
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
    ] {
        let d = descriptors.iter().find(|d| d.name == name).expect(name);
        assert_eq!(d.label_keys[..3], ["id", "name", "image"]);
    }
    let metrics = cri.list_pod_metrics().await.unwrap();
    let ours = metrics
        .iter()
        .find(|m| m.pod_sandbox_id == pod)
        .expect("our pod");
    let rx = ours
        .metrics
        .iter()
        .find(|m| m.name == "container_network_receive_bytes_total" && m.label_values[3] == "eth0")
        .expect("pod network metric");
    assert!(val(rx.value) >= rx1);
    let burner_metrics = ours
        .container_metrics
        .iter()
        .find(|c| c.container_id == burner)
        .expect("burner metrics");
    let cpu = burner_metrics
        .metrics
        .iter()
        .find(|m| m.name == "container_cpu_usage_seconds_total")
        .expect("cpu metric");
    assert_eq!(cpu.label_values[0], burner);
    assert_eq!(cpu.label_values[1], "burner");
    assert!(val(cpu.value) >= 1, "{cpu:?}");
    for m in metrics.iter().flat_map(|p| {
        p.metrics
            .iter()
            .chain(p.container_metrics.iter().flat_map(|c| c.metrics.iter()))
    }) {
        let d = descriptors
            .iter()
            .find(|d| d.name == m.name)
            .expect("described");
        assert_eq!(d.label_keys.len(), m.label_values.len(), "{}", m.name);
    }

    remove_pod(&daemon, &pod).await;
}

/// Reads the next event, failing after 20 s.
async fn next_event(
    stream: &mut tonic::Streaming<v1::ContainerEventResponse>,
) -> v1::ContainerEventResponse {
    tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("an event in time")
        .expect("the stream is healthy")
        .expect("the stream goes on")
}

fn state_of(event: &v1::ContainerEventResponse, id: &str) -> Option<i32> {
    event
        .containers_statuses
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.state)
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn events_follow_a_pod_and_two_containers_in_order() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    // A stream: the raw client.
    let mut events = cri
        .runtime()
        .get_container_events(v1::GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();

    let cgroup = PodCgroup::new("events");
    let config = cgroup.pod_config("events");
    let pod = cri.run_pod(&config).await.unwrap();
    let c1 = cri
        .create_container(&pod, &config, container("one", &["sleep", "1000"]))
        .await
        .unwrap();
    let c2 = cri
        .create_container(&pod, &config, container("two", &["sleep", "1000"]))
        .await
        .unwrap();
    start(&daemon, &c1).await;
    start(&daemon, &c2).await;
    remove_pod(&daemon, &pod).await;

    let mut got = Vec::new();
    for _ in 0..12 {
        got.push(next_event(&mut events).await);
    }
    // Nothing more: each change is reported once.
    let extra = tokio::time::timeout(Duration::from_millis(700), events.message()).await;
    assert!(extra.is_err(), "unexpected event: {extra:?}");

    let seen: Vec<(String, i32)> = got
        .iter()
        .map(|e| (e.container_id.clone(), e.container_event_type))
        .collect();
    let e = |id: &str, kind: Ev| (id.to_string(), kind as i32);
    assert_eq!(
        seen[..6],
        [
            e(&pod, Ev::ContainerCreatedEvent),
            e(&pod, Ev::ContainerStartedEvent),
            e(&c1, Ev::ContainerCreatedEvent),
            e(&c2, Ev::ContainerCreatedEvent),
            e(&c1, Ev::ContainerStartedEvent),
            e(&c2, Ev::ContainerStartedEvent),
        ],
        "{seen:?}"
    );
    // Stopping the pod stops its containers (in any order) and then itself;
    // removing it removes them, and then itself.
    let group =
        |range: std::ops::Range<usize>| seen[range].iter().cloned().collect::<BTreeSet<_>>();
    assert_eq!(
        group(6..8),
        [
            e(&c1, Ev::ContainerStoppedEvent),
            e(&c2, Ev::ContainerStoppedEvent)
        ]
        .into(),
        "{seen:?}"
    );
    assert_eq!(seen[8], e(&pod, Ev::ContainerStoppedEvent), "{seen:?}");
    assert_eq!(
        group(9..11),
        [
            e(&c1, Ev::ContainerDeletedEvent),
            e(&c2, Ev::ContainerDeletedEvent)
        ]
        .into(),
        "{seen:?}"
    );
    assert_eq!(seen[11], e(&pod, Ev::ContainerDeletedEvent), "{seen:?}");

    // Every event but the last carries the pod's status; times never go back.
    for event in &got[..11] {
        let status = event.pod_sandbox_status.as_ref().expect("pod status");
        assert_eq!(status.id, pod);
    }
    assert!(got[11].pod_sandbox_status.is_none());
    assert!(got.windows(2).all(|w| w[0].created_at <= w[1].created_at));
    // The container statuses are as of the event.
    let running = v1::ContainerState::ContainerRunning as i32;
    let exited = v1::ContainerState::ContainerExited as i32;
    assert_eq!(
        state_of(&got[2], &c1),
        Some(v1::ContainerState::ContainerCreated as i32)
    );
    assert_eq!(state_of(&got[2], &c2), None);
    assert_eq!(state_of(&got[5], &c1), Some(running));
    assert_eq!(state_of(&got[5], &c2), Some(running));
    for event in &got[6..8] {
        assert_eq!(state_of(event, &event.container_id), Some(exited));
    }
    assert_eq!(
        got[8].pod_sandbox_status.as_ref().unwrap().state,
        v1::PodSandboxState::SandboxNotready as i32
    );
    assert!(got[11].containers_statuses.is_empty());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_stalled_event_subscriber_does_not_slow_the_runtime() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let cgroup = PodCgroup::new("stalled");

    let started = Instant::now();
    let base = cri.run_pod(&cgroup.pod_config("base")).await.unwrap();
    let baseline = started.elapsed();

    // One subscriber never reads (on its own connection); another reads all.
    let mut stalled_client = daemon.cri().await.runtime();
    let _stalled = stalled_client
        .get_container_events(v1::GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut live = daemon
        .cri()
        .await
        .runtime()
        .get_container_events(v1::GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    const CONTAINERS: usize = 30;
    let expected = 2 + CONTAINERS + 2;
    let reader = tokio::spawn(async move {
        let mut n = 0;
        while n < expected {
            match live.message().await {
                Ok(Some(_)) => n += 1,
                _ => break,
            }
        }
        n
    });

    // Events that grow to megabytes: each carries every container's status,
    // each status a 16 KiB annotation. Far more than HTTP/2 windows hold.
    let config = cgroup.pod_config("flood");
    let flood = cri.run_pod(&config).await.unwrap();
    for i in 0..CONTAINERS {
        let mut c = container(&format!("c{i}"), &["sleep", "1000"]);
        c.annotations.insert("big".into(), "x".repeat(16 << 10));
        cri.create_container(&flood, &config, c).await.unwrap();
    }

    let started = Instant::now();
    let after = cri.run_pod(&cgroup.pod_config("after")).await.unwrap();
    let took = started.elapsed();
    assert!(
        took < baseline * 4 + Duration::from_secs(5),
        "RunPodSandbox took {took:?} with a stalled subscriber, {baseline:?} without"
    );
    let n = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the live subscriber keeps up")
        .unwrap();
    assert_eq!(n, expected);

    for pod in [base, flood, after] {
        remove_pod(&daemon, &pod).await;
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn oom_killed_container_reports_oomkilled() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let cgroup = PodCgroup::new("oom");
    let config = cgroup.pod_config("oom");
    let pod = cri.run_pod(&config).await.unwrap();
    // tail keeps the newline-free "line" of /dev/zero in memory until killed.
    let mut hog = container("hog", &["sh", "-c", "tail /dev/zero"]);
    hog.linux = Some(v1::LinuxContainerConfig {
        resources: Some(v1::LinuxContainerResources {
            memory_limit_in_bytes: 16 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = run_container(&daemon, &pod, &config, hog).await;
    let st = wait_exited(&daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(st.reason, "OOMKilled", "{st:?}");
    assert_eq!(st.exit_code, 137, "{st:?}");

    // A container that exits on its own with 137 is not OOM killed.
    // (`kill -9 $$` would not do: sh is PID 1 of its own PID namespace.)
    let killer = container("self-kill", &["sh", "-c", "exit 137"]);
    let id = run_container(&daemon, &pod, &config, killer).await;
    let st = wait_exited(&daemon, &id, Duration::from_secs(30)).await;
    assert_eq!(st.exit_code, 137, "{st:?}");
    assert_eq!(st.reason, "Error", "{st:?}");
    remove_pod(&daemon, &pod).await;
}

/// `text` without terminal colour codes (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The metrics endpoint's address, from the daemon's log.
async fn metrics_address(daemon: &Daemon) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = strip_ansi(&daemon.stderr());
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("serving Prometheus metrics"))
        {
            let addr = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
                .expect("address field");
            return addr.trim_matches('"').to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no metrics endpoint in the log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn metrics_endpoint_serves_prometheus_text_and_counts_calls() {
    let daemon = Daemon::start("[metrics]\naddress = \"127.0.0.1:0\"\n").await;
    let addr = metrics_address(&daemon).await;

    let scrape = || async {
        let (status, content_type, body) = prom::http_get(&addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        prom::parse(&body).unwrap_or_else(|e| panic!("not Prometheus text: {e}\n{body}"))
    };
    let version_calls = |exp: &prom::Exposition| {
        exp.value(
            "berth_grpc_requests_total",
            &[("method", "Version"), ("code", "OK")],
        )
        .unwrap_or(0.0)
    };
    let before = scrape().await;
    daemon.version().await;
    daemon.version().await;
    let after = scrape().await;
    assert!(
        version_calls(&after) >= version_calls(&before) + 2.0,
        "{} → {}",
        version_calls(&before),
        version_calls(&after)
    );
    assert_eq!(
        after.types["berth_grpc_request_duration_seconds"],
        "histogram"
    );
    let observed = after
        .value(
            "berth_grpc_request_duration_seconds_count",
            &[("method", "Version"), ("code", "OK")],
        )
        .unwrap();
    assert!(observed >= version_calls(&after));
    for state in ["created", "running", "exited", "unknown"] {
        assert_eq!(
            after.value("berth_containers", &[("state", state)]),
            Some(0.0)
        );
    }
    assert_eq!(
        after.value("berth_pod_sandboxes", &[("state", "ready")]),
        Some(0.0)
    );
    assert_eq!(after.value("berth_shims", &[]), Some(0.0));

    // A failed call is counted with its code.
    let err = daemon
        .cri()
        .await
        .container_stats("nope")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let last = scrape().await;
    assert_eq!(
        last.value(
            "berth_grpc_requests_total",
            &[("method", "ContainerStats"), ("code", "NotFound")]
        ),
        Some(1.0)
    );
    let (status, _, _) = prom::http_get(&addr, "/other").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn metrics_endpoint_is_off_by_default() {
    let daemon = Daemon::start("").await;
    daemon.version().await;
    assert!(!daemon.stderr().contains("serving Prometheus metrics"));
}

/// As root: user namespaces are probed with an idmapped mount.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn status_lists_runtime_handlers_and_features() {
    require_root!();
    let daemon = Daemon::start("").await;
    let resp = daemon.cri().await.status(false).await.unwrap();
    let names: Vec<&str> = resp
        .runtime_handlers
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["", "crun", "runc"]);
    let features = |name: &str| {
        resp.runtime_handlers
            .iter()
            .find(|h| h.name == name)
            .and_then(|h| h.features)
            .expect("features")
    };
    // The default handler is runc.
    assert_eq!(features(""), features("runc"));
    // runc says itself whether it knows `rro`; the kernel needs 5.12.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let kernel: (u32, u32) = (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    let runc_rro = std::process::Command::new("runc")
        .arg("features")
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"rro\"")
        });
    assert_eq!(
        features("runc").recursive_read_only_mounts,
        kernel >= (5, 12) && runc_rro
    );
    // User namespaces: probed on this host (a userns and an idmapped mount
    // under root and state); the kernel here has them.
    let kernel_idmap = kernel >= (5, 19);
    for handler in &resp.runtime_handlers {
        if handler.name != "crun" {
            assert_eq!(
                handler.features.unwrap().user_namespaces,
                kernel_idmap,
                "{}",
                handler.name
            );
        }
    }
    // A handler that cannot run containers here claims nothing (crun on
    // a cgroup v1 hybrid host with cgroup2 controllers).
    if !common::crun_runs_here() {
        assert_eq!(
            features("crun"),
            v1::RuntimeHandlerFeatures {
                recursive_read_only_mounts: false,
                user_namespaces: false
            }
        );
    }
    let runtime_features = resp.features.expect("runtime features");
    assert!(runtime_features.supplemental_groups_policy);

    // Verbose: what the host's security modules give containers.
    let verbose = daemon.cri().await.status(true).await.unwrap();
    let lsm: serde_json::Value = serde_json::from_str(&verbose.info["lsm"]).unwrap();
    let apparmor = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y");
    assert_eq!(lsm["apparmor"]["enabled"], apparmor, "{lsm}");
    assert_eq!(
        lsm["selinux"]["enabled"],
        std::path::Path::new("/sys/fs/selinux/enforce").exists(),
        "{lsm}"
    );
    if !apparmor {
        assert!(lsm["apparmor"]["defaultProfile"].is_null(), "{lsm}");
        assert!(lsm["apparmor"]["problem"].is_null(), "{lsm}");
    }
}

#[test]
fn prometheus_reader_accepts_good_and_refuses_bad_text() {
    let good =
        "# HELP x_total A counter.\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"\"} 3\n\
# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.3\nh_count 2\n";
    let exp = prom::parse(good).unwrap();
    assert_eq!(exp.value("x_total", &[("b", "q\"")]), Some(3.0));
    assert!(prom::parse("x 1\n").is_err(), "no TYPE");
    assert!(
        prom::parse("# TYPE x gauge\nx{a=1} 1\n").is_err(),
        "unquoted"
    );
    assert!(prom::parse("# TYPE x gauge\nx one\n").is_err(), "bad value");
    let not_cumulative =
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n";
    assert!(prom::parse(not_cumulative).is_err());
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn step_timings_show_where_a_pod_start_goes() {
    require_root!();
    let net = TestNet::new();
    let daemon = common::pods::daemon_with(&net, "[metrics]\naddress = \"127.0.0.1:0\"\n").await;
    let cri = daemon.cri().await;
    let addr = metrics_address(&daemon).await;
    pull(&daemon, &registry().busybox()).await;
    let config = common::pods::pod_config("steps");
    let pod = cri.run_pod(&config).await.unwrap();
    run_container(&daemon, &pod, &config, container("c", &["sleep", "1000"])).await;
    let (_, _, body) = prom::http_get(&addr, "/metrics").await;
    let exp = prom::parse(&body).unwrap();
    assert_eq!(exp.types["berth_step_duration_seconds"], "histogram");
    let count = |step: &str| {
        exp.value("berth_step_duration_seconds_count", &[("step", step)])
            .unwrap_or(0.0)
    };
    for step in [
        "record.create",
        "record.save",
        "netns.create",
        "cni.add",
        "pod.files",
        "ns.pin",
        "container.rootfs",
        "container.spec",
        "container.shim",
        "container.start",
    ] {
        assert!(count(step) >= 1.0, "{step} not timed:\n{body}");
    }
    // The pod runs no pause (kubelet's namespaces need none).
    assert_eq!(count("pause.shim"), 0.0);
    // Each synced record write is two fsyncs: a pod and a container are
    // made with one each, and change state three times in all (pod ready,
    // container created: synced; container running: not synced, its shim
    // says it again after a power cut): no write of the pod's IPs or of its
    // network attachment of its own.
    assert_eq!(count("record.create"), 2.0);
    assert_eq!(count("record.save"), 2.0);
    assert_eq!(count("record.save_volatile"), 1.0);
    remove_pod(&daemon, &pod).await;
}
