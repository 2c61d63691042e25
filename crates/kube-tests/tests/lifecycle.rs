//! A pod's life under a real kubelet on berth, as kubectl shows it: the
//! node, workloads, init containers, static pods, graceful termination,
//! restarts and probes. Needs the node of `hack/kube.sh up` (hack/test.sh
//! stands it up and runs these).

use std::time::{Duration, Instant};

use berth_kube_tests::images::{AGNHOST, BUSYBOX};
use berth_kube_tests::{
    container, container_id, host_pid, kubectl, kubectl_json, node, part_log, restarts, rfc3339,
    share, summary, wait_until, Namespace, NODE,
};

/// A pod of one busybox container running `script` under `sh -c`, with
/// `extra` YAML appended to the container (indented six spaces) and
/// `pod_extra` to the pod's spec (indented two).
fn busybox_pod(name: &str, script: &str, extra: &str, pod_extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
{pod_extra}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {script:?}]
{extra}
"#
    )
}

/// Whether the process `pid` is gone from the host.
fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn node_is_ready_on_berth() {
    let _g = share();
    let n = kubectl_json(&["get", "node", NODE]).unwrap();
    let info = &n["status"]["nodeInfo"];
    let runtime = info["containerRuntimeVersion"].as_str().unwrap();
    assert!(runtime.starts_with("berth://"), "{runtime}");
    assert_eq!(info["kubeletVersion"], "v1.37.2");
    let ready = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True", "{ready}");
    // What `kubectl get node -o wide` shows a user.
    let wide = kubectl(&["get", "node", NODE, "-o", "wide"]).unwrap();
    assert!(wide.contains("berth://"), "{wide}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn kubelet_takes_its_cgroup_driver_from_berth() {
    let _g = share();
    let log = part_log("kubelet").unwrap();
    assert!(
        log.contains("Using cgroup driver setting received from the CRI runtime")
            && log.contains("cgroupDriver=\"cgroupfs\""),
        "kubelet's log does not say it took its cgroup driver from the runtime"
    );
    assert!(
        !log.contains("Falling back to using cgroupDriver from kubelet config"),
        "kubelet fell back to its own cgroup driver"
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn deployment_of_30_scales_to_zero_and_back() {
    let _g = share();
    let ns = Namespace::new("deployment");
    ns.apply(&format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 30
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: {AGNHOST}
        args: ["pause"]
        resources: {{requests: {{cpu: 1m, memory: 8Mi}}}}
"#
    ))
    .unwrap();
    let ready = |want: i64| {
        wait_until(300, &format!("{want} replicas ready"), |seen| {
            let d = ns.json(&["get", "deployment", "web"]).ok()?;
            let got = d["status"]["readyReplicas"].as_i64().unwrap_or(0);
            *seen = format!("{got} ready");
            (got == want).then_some(())
        })
    };
    ready(30).unwrap();
    let pods = ns.json(&["get", "pods", "-l", "app=web"]).unwrap();
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 30);
    let ips: std::collections::BTreeSet<_> = items
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ips.len(), 30, "each pod has an IP of its own: {ips:?}");
    for p in items {
        assert_eq!(p["spec"]["nodeName"], NODE);
        assert_eq!(restarts(p, "c"), 0, "{}", summary(p));
    }

    ns.kubectl(&["scale", "deployment", "web", "--replicas", "0"])
        .unwrap();
    wait_until(180, "all pods gone", |seen| {
        let pods = ns.json(&["get", "pods", "-l", "app=web"]).ok()?;
        let left = pods["items"].as_array()?.len();
        *seen = format!("{left} pods left");
        (left == 0).then_some(())
    })
    .unwrap();
    // berth runs nothing of the namespace any more (kubelet removes the
    // stopped sandboxes later, in its garbage collection).
    let still =
        berth_kube_tests::crictl(&["pods", "--namespace", &ns.name, "--state", "ready", "-q"])
            .unwrap();
    assert_eq!(still.trim(), "", "sandboxes still ready: {still}");
    let running = berth_kube_tests::crictl(&[
        "ps",
        "--label",
        &format!("io.kubernetes.pod.namespace={}", ns.name),
        "--state",
        "running",
        "-q",
    ])
    .unwrap();
    assert_eq!(running.trim(), "", "containers still running: {running}");

    ns.kubectl(&["scale", "deployment", "web", "--replicas", "30"])
        .unwrap();
    ready(30).unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn job_runs_to_completion() {
    let _g = share();
    let ns = Namespace::new("job");
    ns.apply(&format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: once}}
spec:
  completions: 2
  parallelism: 2
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: {BUSYBOX}
        command: ["sh", "-c", "echo job-done; exit 0"]
"#
    ))
    .unwrap();
    wait_until(180, "job complete", |seen| {
        let j = ns.json(&["get", "job", "once"]).ok()?;
        *seen = j["status"].to_string();
        (j["status"]["succeeded"] == 2).then_some(())
    })
    .unwrap();
    let pods = ns.json(&["get", "pods", "-l", "job-name=once"]).unwrap();
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for p in items {
        assert_eq!(p["status"]["phase"], "Succeeded", "{}", summary(p));
        let t = &container(p, "c").unwrap()["state"]["terminated"];
        assert_eq!(t["exitCode"], 0);
        assert_eq!(t["reason"], "Completed");
        let name = p["metadata"]["name"].as_str().unwrap();
        assert_eq!(ns.kubectl(&["logs", name]).unwrap(), "job-done\n");
    }
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn init_containers_run_in_order_before_the_app() {
    let _g = share();
    let ns = Namespace::new("init");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  volumes: [{{name: work, emptyDir: {{}}}}]
  initContainers:
  - name: first
    image: {BUSYBOX}
    command: ["sh", "-c", "echo first >> /work/order; sleep 1"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  - name: second
    image: {BUSYBOX}
    command: ["sh", "-c", "test -f /work/order && echo second >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  containers:
  - name: app
    image: {BUSYBOX}
    command: ["sh", "-c", "echo app >> /work/order; cat /work/order; sleep 3600"]
    volumeMounts: [{{name: work, mountPath: /work}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    for name in ["first", "second"] {
        let t = &container(&pod, name).unwrap()["state"]["terminated"];
        assert_eq!(t["exitCode"], 0, "{name}: {t}");
        assert_eq!(t["reason"], "Completed");
    }
    let first = container(&pod, "first").unwrap()["state"]["terminated"]["finishedAt"].clone();
    let second = container(&pod, "second").unwrap()["state"]["terminated"]["startedAt"].clone();
    assert!(first.as_str() <= second.as_str(), "{first} {second}");
    let out = wait_until(30, "app's output", |_| {
        let l = ns.kubectl(&["logs", "p", "-c", "app"]).ok()?;
        l.contains("app").then_some(l)
    })
    .unwrap();
    assert_eq!(out, "first\nsecond\napp\n");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn static_pod_runs_and_shows_as_a_mirror_pod() {
    let _g = share();
    let manifests = node().unwrap().join("manifests");
    let file = manifests.join("static-web.yaml");
    std::fs::write(
        &file,
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: static-web, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {AGNHOST}
    args: ["pause"]
"#
        ),
    )
    .unwrap();
    let mirror = format!("static-web-{NODE}");
    let pod = wait_until(120, "mirror pod Ready", |seen| {
        let p = kubectl_json(&["-n", "default", "get", "pod", &mirror]).ok()?;
        *seen = summary(&p);
        berth_kube_tests::condition(&p, "Ready").then_some(p)
    });
    // Its container's pid is read while the manifest is still there: once
    // it is removed, kubelet stops the container at once.
    let pid = pod
        .as_ref()
        .ok()
        .map(|pod| host_pid(&container_id(pod, "c").unwrap()));
    std::fs::remove_file(&file).unwrap();
    let pod = pod.unwrap();
    assert!(pid.unwrap().unwrap() > 1);
    assert!(
        pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string(),
        "{}",
        pod["metadata"]
    );
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    // The manifest removed, kubelet stops it and the mirror goes.
    wait_until(120, "mirror pod gone", |_| {
        kubectl_json(&["-n", "default", "get", "pod", &mirror])
            .is_err()
            .then_some(())
    })
    .unwrap();
    // kubelet's garbage collection (every minute) removes the stopped
    // sandbox of a pod that is gone.
    wait_until(150, "static pod's sandbox gone", |_| {
        let left = berth_kube_tests::crictl(&["pods", "--name", "static-web", "-q"]).ok()?;
        left.trim().is_empty().then_some(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn prestop_hook_runs_before_the_container_is_stopped() {
    let _g = share();
    let ns = Namespace::new("prestop");
    let out = node().unwrap().join("tmp").join(&ns.name);
    std::fs::create_dir_all(&out).unwrap();
    let _ = std::fs::remove_file(out.join("log"));
    let extra = r#"    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "echo prestop-ran >> /out/log; sleep 1"]
    volumeMounts: [{name: out, mountPath: /out}]"#;
    let pod_extra = format!(
        "  terminationGracePeriodSeconds: 20\n  volumes: [{{name: out, hostPath: {{path: {}}}}}]",
        out.display()
    );
    ns.apply(&busybox_pod(
        "p",
        "trap 'echo term-received >> /out/log; exit 0' TERM; while true; do sleep 0.1; done",
        extra,
        &pod_extra,
    ))
    .unwrap();
    ns.wait_ready("p", 120).unwrap();
    ns.kubectl(&["delete", "pod", "p", "--wait=true", "--timeout=60s"])
        .unwrap();
    let log = std::fs::read_to_string(out.join("log")).unwrap();
    // The hook first, then the stop signal.
    assert_eq!(log, "prestop-ran\nterm-received\n");
    std::fs::remove_dir_all(&out).unwrap();
}

/// Pod `p` whose container records the SIGTERM it gets (the file `term`
/// in a host directory) and then runs `trap`; its grace period is `grace`.
struct TrapPod {
    pid: u32,
    dir: std::path::PathBuf,
}

impl TrapPod {
    fn start(ns: &Namespace, trap: &str, grace: u32) -> TrapPod {
        let dir = node().unwrap().join("tmp").join(&ns.name);
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join("term"));
        let _ = std::fs::remove_file(dir.join("trap-set"));
        // `trap-set` says the trap is in place: a SIGTERM before it would be
        // dropped (the shell is PID 1 of its namespace) and never recorded.
        ns.apply(&busybox_pod(
            "p",
            &format!(
                "trap 'touch /out/term; {trap}' TERM; touch /out/trap-set; while true; do sleep 0.1; done"
            ),
            "    volumeMounts: [{name: out, mountPath: /out}]",
            &format!(
                "  terminationGracePeriodSeconds: {grace}\n  volumes: [{{name: out, hostPath: {{path: {}}}}}]",
                dir.display()
            ),
        ))
        .unwrap();
        let pod = ns.wait_ready("p", 120).unwrap();
        let pid = host_pid(&container_id(&pod, "c").unwrap()).unwrap();
        let set = Instant::now();
        while !dir.join("trap-set").exists() {
            assert!(
                set.elapsed() < Duration::from_secs(60),
                "no trap set in 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        TrapPod { pid, dir }
    }

    /// Deletes the pod with `args`; the time from the delete to the
    /// process gone, and from its SIGTERM to the process gone (the grace
    /// the runtime gave it; kubectl's and kubelet's delays are not in it).
    fn delete(&self, ns: &Namespace, args: &[&str]) -> (Duration, Duration) {
        let t = Instant::now();
        let mut all = vec!["delete", "pod", "p", "--wait=false"];
        all.extend_from_slice(args);
        ns.kubectl(&all).unwrap();
        wait_until(120, "the container's process gone", |_| {
            gone(self.pid).then_some(())
        })
        .unwrap();
        let (took, now) = (t.elapsed(), std::time::SystemTime::now());
        let term = std::fs::metadata(self.dir.join("term"))
            .and_then(|m| m.modified())
            .expect("the container got no SIGTERM");
        (took, now.duration_since(term).unwrap_or_default())
    }
}

impl Drop for TrapPod {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// The bounds below tell the grace period asked for from the one a defect
// would give (the pod's 60 s, or a kill at once); the wide upper sides
// leave room for a loaded machine.

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn container_that_traps_sigterm_exits_at_once() {
    let _g = share();
    let ns = Namespace::new("sigterm-trap");
    let p = TrapPod::start(&ns, "exit 0", 60);
    let (took, _) = p.delete(&ns, &[]);
    assert!(
        took < Duration::from_secs(30),
        "took {took:?} of a 60 s grace period"
    );
    ns.wait_gone("p", 60).unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn container_that_ignores_sigterm_is_killed_at_the_end_of_its_grace_period() {
    let _g = share();
    let ns = Namespace::new("sigterm-ignored");
    let p = TrapPod::start(&ns, "", 5);
    let (took, grace) = p.delete(&ns, &[]);
    assert!(
        grace >= Duration::from_millis(4500) && took < Duration::from_secs(30),
        "killed {grace:?} after its SIGTERM, {took:?} after the delete; grace period 5 s"
    );
    ns.wait_gone("p", 60).unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn delete_grace_period_takes_precedence_over_the_pods() {
    let _g = share();
    let ns = Namespace::new("grace-override");
    let p = TrapPod::start(&ns, "", 60);
    let (took, grace) = p.delete(&ns, &["--grace-period=3"]);
    assert!(
        grace >= Duration::from_millis(2500) && took < Duration::from_secs(30),
        "killed {grace:?} after its SIGTERM, {took:?} after the delete; --grace-period=3, the pod's 60"
    );
    ns.wait_gone("p", 60).unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn liveness_kill_uses_the_probes_grace_period() {
    let _g = share();
    let ns = Namespace::new("probe-grace");
    // The pod's grace period is 60 s, the probe's 2 s: a liveness kill that
    // used the pod's would take a minute.
    let extra = r#"    livenessProbe:
      exec: {command: ["sh", "-c", "test ! -f /tmp/sick"]}
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 2"#;
    ns.apply(&busybox_pod(
        "p",
        "trap '' TERM; while true; do sleep 0.1; done",
        extra,
        "  terminationGracePeriodSeconds: 60",
    ))
    .unwrap();
    ns.wait_ready("p", 120).unwrap();
    let t = Instant::now();
    ns.exec("p", "c", &["touch", "/tmp/sick"]).unwrap();
    let pod = ns
        .wait_pod("p", 55, "restarted once", |p| restarts(p, "c") >= 1)
        .unwrap();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(30), "restarted after {took:?}");
    let last = &container(&pod, "c").unwrap()["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{last}");
}

/// When the container's latest run started (seconds since the epoch), from
/// its status: the running or terminated state, or, while it waits, the
/// last terminated one.
fn latest_start(c: &serde_json::Value) -> f64 {
    let started = ["running", "terminated"]
        .iter()
        .map(|s| &c["state"][s]["startedAt"])
        .chain([&c["lastState"]["terminated"]["startedAt"]])
        .find_map(|v| v.as_str())
        .unwrap_or_else(|| panic!("no start time in {c}"));
    rfc3339(started).unwrap_or_else(|| panic!("not RFC 3339: {started:?}"))
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn crashing_container_backs_off_and_keeps_its_last_state() {
    let _g = share();
    let ns = Namespace::new("crashloop");
    ns.apply(&busybox_pod("p", "echo crashing; exit 3", "", ""))
        .unwrap();
    let once = ns
        .wait_pod("p", 60, "restarted once", |p| restarts(p, "c") >= 1)
        .unwrap();
    assert_eq!(restarts(&once, "c"), 1, "{}", summary(&once));
    let second_run = latest_start(container(&once, "c").unwrap());
    let pod = ns
        .wait_pod("p", 120, "restarted twice, in back-off", |p| {
            restarts(p, "c") >= 2
                && container(p, "c")
                    .is_some_and(|c| c["state"]["waiting"]["reason"] == "CrashLoopBackOff")
        })
        .unwrap();
    // kubelet restarts a first exit at once, then backs off from 10 s,
    // doubling: the third run starts 10 s after the second ended. Told by
    // kubelet's own start times (whole seconds), not by when this test saw
    // them.
    let third_run = latest_start(container(&pod, "c").unwrap());
    assert!(
        third_run - second_run >= 8.0,
        "the third run started {:.0} s after the second",
        third_run - second_run
    );
    let c = container(&pod, "c").unwrap();
    // The image as the pod named it, not the id kubelet created it from.
    assert_eq!(c["image"], BUSYBOX, "{c}");
    let last = &c["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["reason"], "Error", "{last}");
    assert_eq!(
        ns.kubectl(&["logs", "p", "--previous"]).unwrap(),
        "crashing\n"
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn liveness_probes_of_each_kind_restart_a_failing_container_only() {
    let _g = share();
    let ns = Namespace::new("liveness");
    let probe = |kind: &str| {
        format!("    livenessProbe: {{{kind}, periodSeconds: 1, failureThreshold: 2, timeoutSeconds: 2}}")
    };
    // Each kind twice: one probe that passes (the container must not
    // restart) and one that fails (it must).
    let c = |name: &str, args: &str, probe: String| {
        format!("  - name: {name}\n    image: {AGNHOST}\n    args: {args}\n{probe}\n")
    };
    let mut containers = String::new();
    containers += &c(
        "exec-ok",
        r#"["pause"]"#,
        probe(r#"exec: {command: ["true"]}"#),
    );
    containers += &c(
        "exec-bad",
        r#"["pause"]"#,
        probe(r#"exec: {command: ["false"]}"#),
    );
    containers += &c(
        "http",
        r#"["netexec", "--http-port=8080"]"#,
        probe("httpGet: {port: 8080, path: /healthz}"),
    );
    containers += &c(
        "http-bad",
        r#"["pause"]"#,
        probe("httpGet: {port: 8083, path: /}"),
    );
    containers += &c("tcp-bad", r#"["pause"]"#, probe("tcpSocket: {port: 8082}"));
    containers += &c(
        "grpc",
        r#"["grpc-health-checking", "--port=5000", "--http-port=5001"]"#,
        probe("grpc: {port: 5000}"),
    );
    containers += &c("grpc-bad", r#"["pause"]"#, probe("grpc: {port: 5002}"));
    containers += &c("tcp", r#"["pause"]"#, probe("tcpSocket: {port: 8080}"));
    ns.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n{containers}"
    ))
    .unwrap();
    let bad = ["exec-bad", "http-bad", "tcp-bad", "grpc-bad"];
    let pod = ns
        .wait_pod("p", 120, "each failing container restarted", |p| {
            bad.iter().all(|c| restarts(p, c) >= 1)
        })
        .unwrap();
    for good in ["exec-ok", "http", "grpc", "tcp"] {
        assert_eq!(restarts(&pod, good), 0, "{good}: {}", summary(&pod));
    }
    for b in bad {
        let last = &container(&pod, b).unwrap()["lastState"]["terminated"];
        assert!(last.is_object(), "{b}: {}", summary(&pod));
    }
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn readiness_probe_gates_the_pods_ready_condition() {
    let _g = share();
    let ns = Namespace::new("readiness");
    let extra = r#"    readinessProbe:
      exec: {command: ["cat", "/tmp/ready"]}
      periodSeconds: 1
      failureThreshold: 1"#;
    ns.apply(&busybox_pod("p", "sleep 3600", extra, ""))
        .unwrap();
    let not_ready = |p: &serde_json::Value| {
        p["status"]["phase"] == "Running"
            && container(p, "c").is_some_and(|c| c["ready"] == false && c["started"] == true)
    };
    ns.wait_pod("p", 120, "running, not ready", not_ready)
        .unwrap();
    ns.exec("p", "c", &["touch", "/tmp/ready"]).unwrap();
    ns.wait_ready("p", 30).unwrap();
    ns.exec("p", "c", &["rm", "/tmp/ready"]).unwrap();
    ns.wait_pod("p", 30, "not ready again", |p| {
        !berth_kube_tests::condition(p, "Ready")
    })
    .unwrap();
    assert_eq!(restarts(&ns.pod("p").unwrap(), "c"), 0);
}

/// The events of the namespace about object `name` with reason `reason`,
/// summed over their counts.
fn event_count(ns: &Namespace, name: &str, reason: &str) -> i64 {
    let ev = ns
        .json(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name},reason={reason}"),
        ])
        .unwrap();
    ev["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["count"]
                .as_i64()
                .or_else(|| e["series"]["count"].as_i64())
                .unwrap_or(1)
        })
        .sum()
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn startup_probe_holds_liveness_off_until_it_passes() {
    let _g = share();
    let ns = Namespace::new("startup");
    let extra = r#"    startupProbe:
      exec: {command: ["cat", "/tmp/started"]}
      periodSeconds: 1
      failureThreshold: 600
    livenessProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
      failureThreshold: 1"#;
    ns.apply(&busybox_pod(
        "p",
        "sleep 3600",
        extra,
        "  terminationGracePeriodSeconds: 1",
    ))
    .unwrap();
    // The startup probe has failed several times (events, not a sleep),
    // and the liveness probe, which always fails, has not restarted it.
    wait_until(120, "startup probe failed 4 times", |seen| {
        let n = event_count(&ns, "p", "Unhealthy");
        *seen = format!("{n} Unhealthy events");
        (n >= 4).then_some(())
    })
    .unwrap();
    let pod = ns.pod("p").unwrap();
    assert_eq!(restarts(&pod, "c"), 0, "{}", summary(&pod));
    assert_eq!(container(&pod, "c").unwrap()["started"], false);
    ns.exec("p", "c", &["touch", "/tmp/started"]).unwrap();
    // Started, the liveness probe runs and restarts it.
    ns.wait_pod("p", 60, "restarted by liveness", |p| restarts(p, "c") >= 1)
        .unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn container_over_its_memory_limit_is_oomkilled() {
    let _g = share();
    let ns = Namespace::new("oom");
    // sort keeps its one line (no newline in /dev/zero) in memory.
    let extra = "    resources: {limits: {memory: 32Mi}}";
    ns.apply(&busybox_pod(
        "p",
        "head -c 200m /dev/zero | sort > /dev/null",
        extra,
        "  restartPolicy: Never",
    ))
    .unwrap();
    let pod = ns
        .wait_pod("p", 120, "terminated", |p| {
            container(p, "c").is_some_and(|c| c["state"]["terminated"].is_object())
        })
        .unwrap();
    let t = &container(&pod, "c").unwrap()["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled", "{t}");
    assert_eq!(t["exitCode"], 137, "{t}");
    ns.wait_pod("p", 60, "phase Failed", |p| {
        p["status"]["phase"] == "Failed"
    })
    .unwrap();
}
