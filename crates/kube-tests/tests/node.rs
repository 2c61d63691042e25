//! What kubelet does to manage the node through berth: in-place resize,
//! container log rotation, image and container garbage collection, the
//! stats of the summary API and of /metrics/resource (from kubelet's own
//! cAdvisor path and from CRI). Needs the node of `hack/kube.sh up`
//! (hack/test.sh runs these).

use std::path::PathBuf;

use berth_kube_tests::images::{AGNHOST, BUSYBOX};
use berth_kube_tests::{
    cgroup_dir, container, container_id, crictl, disrupt, host_pid, kubelet_get, node, restarts,
    share, summary, wait_until, KubeletWith, Namespace,
};
use serde_json::Value;

fn read_trim(p: PathBuf) -> String {
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn in_place_resize_changes_the_cgroup_without_a_restart() {
    let _g = share();
    let ns = Namespace::new("resize");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {AGNHOST}
    args: ["pause"]
    resources:
      requests: {{cpu: 100m, memory: 64Mi}}
      limits: {{cpu: 100m, memory: 64Mi}}
    resizePolicy:
    - {{resourceName: cpu, restartPolicy: NotRequired}}
    - {{resourceName: memory, restartPolicy: NotRequired}}
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    let pid = host_pid(&container_id(&pod, "c").unwrap()).unwrap();
    let cpu = cgroup_dir(pid, "cpu").unwrap();
    let mem = cgroup_dir(pid, "memory").unwrap();
    let quota = |d: &PathBuf| read_trim(d.join("cpu.cfs_quota_us"));
    let limit = |d: &PathBuf| read_trim(d.join("memory.limit_in_bytes"));
    assert_eq!(quota(&cpu), "10000");
    assert_eq!(limit(&mem), (64u64 << 20).to_string());

    ns.kubectl(&[
        "patch",
        "pod",
        "p",
        "--subresource",
        "resize",
        "--patch",
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"250m","memory":"128Mi"},"limits":{"cpu":"250m","memory":"128Mi"}}}]}}"#,
    ])
    .unwrap();
    // kubelet applies it through UpdateContainerResources and reports the
    // resources the container now has.
    let pod = ns
        .wait_pod("p", 60, "resized", |p| {
            let r = &container(p, "c")
                .map(|c| c["resources"].clone())
                .unwrap_or_default();
            r["limits"]["cpu"] == "250m" && r["limits"]["memory"] == "128Mi"
        })
        .unwrap();
    wait_until(30, "the cgroup's new limits", |seen| {
        *seen = format!("quota {} limit {}", quota(&cpu), limit(&mem));
        (quota(&cpu) == "25000" && limit(&mem) == (128u64 << 20).to_string()).then_some(())
    })
    .unwrap();
    assert_eq!(restarts(&pod, "c"), 0, "{}", summary(&pod));
    assert_eq!(host_pid(&container_id(&pod, "c").unwrap()).unwrap(), pid);
    // berth's own view of the container agrees.
    let inspect: Value = serde_json::from_str(
        &crictl(&["inspect", "-o", "json", &container_id(&pod, "c").unwrap()]).unwrap(),
    )
    .unwrap();
    let linux = &inspect["status"]["resources"]["linux"];
    assert_eq!(linux["cpuQuota"], "25000", "{linux}");
    assert_eq!(
        linux["memoryLimitInBytes"],
        (128u64 << 20).to_string(),
        "{linux}"
    );
}

/// The pod's entry of kubelet's summary API.
fn summary_of(ns: &Namespace, pod: &str) -> Option<Value> {
    let text = kubelet_get("/stats/summary").ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["namespace"] == ns.name.as_str() && p["podRef"]["name"] == pod)
        .cloned()
}

/// A pod that burns some CPU and holds some memory, and its stats in the
/// summary API and /metrics/resource are non-zero; its network's too when
/// `network` (kubelet's cAdvisor path finds a pod's network through its
/// pause process, which berth's pods do without, as CRI-O's: there the
/// summary has none).
fn stats_are_reported(test: &str, network: bool) {
    let ns = Namespace::new(test);
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "head -c 20m /dev/zero > /dev/shm/hold; while true; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.5; done"]
"#
    ))
    .unwrap();
    ns.wait_ready("p", 120).unwrap();
    let entry = wait_until(120, "cpu and memory in the summary API", |seen| {
        let p = summary_of(&ns, "p")?;
        let c = p["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "c")?
            .clone();
        *seen = c.to_string();
        let ok = c["cpu"]["usageNanoCores"].as_u64()? > 0
            && c["cpu"]["usageCoreNanoSeconds"].as_u64()? > 0
            && c["memory"]["workingSetBytes"].as_u64()? > 0
            && p["cpu"]["usageCoreNanoSeconds"].as_u64()? > 0
            && p["memory"]["workingSetBytes"].as_u64()? > 0;
        ok.then_some(p)
    })
    .unwrap();
    if network {
        assert!(
            entry["network"]["interfaces"]
                .as_array()
                .is_some_and(|i| i.iter().any(|i| i["name"] == "eth0")),
            "no network stats of eth0: {entry}"
        );
    }
    let metrics = wait_until(60, "the pod in /metrics/resource", |seen| {
        let text = kubelet_get("/metrics/resource").ok()?;
        let mine: Vec<String> = text
            .lines()
            .filter(|l| l.contains(&format!("namespace=\"{}\"", ns.name)))
            .map(str::to_string)
            .collect();
        *seen = mine.join("\n");
        let positive = |name: &str| {
            mine.iter().any(|l| {
                l.starts_with(name)
                    && l.contains("container=\"c\"")
                    && l.split(' ')
                        .nth(1)
                        .and_then(|v| v.parse::<f64>().ok())
                        .is_some_and(|v| v > 0.0)
            })
        };
        (positive("container_cpu_usage_seconds_total")
            && positive("container_memory_working_set_bytes"))
        .then_some(mine)
    })
    .unwrap();
    assert!(!metrics.is_empty());
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn summary_api_and_resource_metrics_report_berths_pods() {
    let _g = share();
    stats_are_reported("stats-cadvisor", false);
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn summary_api_and_resource_metrics_from_cri_stats() {
    let _g = disrupt();
    let _k = KubeletWith::restart("PodAndContainerStatsFromCRI=true", "").unwrap();
    stats_are_reported("stats-cri", true);
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn container_gc_keeps_one_dead_container_per_container() {
    let _g = share();
    let ns = Namespace::new("container-gc");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "exit 1"]
"#
    ))
    .unwrap();
    ns.wait_pod("p", 180, "restarted 3 times", |p| restarts(p, "c") >= 3)
        .unwrap();
    // kubelet's container GC (every minute, at most one dead container per
    // container by default) removes the others from berth.
    let label = format!("io.kubernetes.pod.namespace={}", ns.name);
    wait_until(150, "at most one exited container left", |seen| {
        let ids = crictl(&["ps", "-a", "--label", &label, "--state", "exited", "-q"]).ok()?;
        let n = ids.lines().filter(|l| !l.trim().is_empty()).count();
        *seen = format!("{n} exited");
        (n <= 1).then_some(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn container_logs_rotate_through_reopen_container_log() {
    let _g = disrupt();
    let _k = KubeletWith::restart(
        "",
        "containerLogMaxSize: 64Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s",
    )
    .unwrap();
    let ns = Namespace::new("log-rotation");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; sleep 0.002; done"]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let dir = node()
        .unwrap()
        .join("pod-logs")
        .join(format!("{}_p_{uid}", ns.name))
        .join("c");
    // Rotated files appear (0.log.<time>, older ones compressed), at most
    // containerLogMaxFiles in all, and the live file keeps growing after a
    // rotation: berth reopened it.
    let files = wait_until(90, "two rotations", |seen| {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        *seen = names.join(" ");
        (names.iter().filter(|n| n.starts_with("0.log.")).count() >= 2).then_some(names)
    })
    .unwrap();
    assert!(
        files.len() <= 3 + 1,
        "more than containerLogMaxFiles: {files:?}"
    );
    let live = dir.join("0.log");
    let size = |p: &PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let first = size(&live);
    wait_until(20, "the live log growing after the rotation", |_| {
        (size(&live) > first).then_some(())
    })
    .unwrap();
    // kubectl logs reads the live file: the newest lines.
    let tail = ns.kubectl(&["logs", "p", "--tail=1"]).unwrap();
    assert!(tail.starts_with("line-"), "{tail}");
    assert_eq!(restarts(&ns.pod("p").unwrap(), "c"), 0);
}
