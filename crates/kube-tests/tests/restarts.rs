//! The node's parts restarted under running pods: berth killed with SIGKILL
//! and started again, kubelet restarted. Neither may cost a container a
//! restart. Needs the node of `hack/kube.sh up` (hack/test.sh runs these).

use berth_kube_tests::images::AGNHOST;
use berth_kube_tests::{
    container_id, crictl, disrupt, host_pid, kube_sh, kubectl_json, restarts, wait_until,
    Namespace, NODE,
};

/// A deployment of `n` agnhost pods (netexec: exec and logs have something
/// to show) in `ns`, all Ready; the pods' JSON.
fn running_pods(ns: &Namespace, n: usize) -> Vec<serde_json::Value> {
    ns.apply(&format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: {n}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: {AGNHOST}
        args: ["netexec", "--http-port=8080"]
        readinessProbe: {{httpGet: {{port: 8080, path: /healthz}}, periodSeconds: 1}}
        livenessProbe: {{exec: {{command: ["true"]}}, periodSeconds: 1}}
"#
    ))
    .unwrap();
    wait_until(180, "all ready", |seen| {
        let d = ns.json(&["get", "deployment", "web"]).ok()?;
        *seen = d["status"].to_string();
        (d["status"]["readyReplicas"].as_u64() == Some(n as u64)).then_some(())
    })
    .unwrap();
    ns.json(&["get", "pods", "-l", "app=web"]).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// Each pod's name, container id, host pid and restart count.
fn identity(pods: &[serde_json::Value]) -> Vec<(String, String, u32, i64)> {
    let mut v: Vec<_> = pods
        .iter()
        .map(|p| {
            let id = container_id(p, "c").unwrap();
            let pid = host_pid(&id).unwrap();
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                id,
                pid,
                restarts(p, "c"),
            )
        })
        .collect();
    v.sort();
    v
}

/// After a restart: the same pods, containers and processes, no restart,
/// all Ready, and exec and logs work.
fn unchanged(ns: &Namespace, before: &[(String, String, u32, i64)]) {
    // Long enough for kubelet to have relisted and probed many times; the
    // pods must stay as they were throughout, so the check is repeated.
    let checks = std::time::Instant::now();
    while checks.elapsed() < std::time::Duration::from_secs(15) {
        let pods = ns.json(&["get", "pods", "-l", "app=web"]).unwrap()["items"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(identity(&pods), before, "pods changed");
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    wait_until(60, "all ready again", |_| {
        let d = ns.json(&["get", "deployment", "web"]).ok()?;
        (d["status"]["readyReplicas"].as_u64() == Some(before.len() as u64)).then_some(())
    })
    .unwrap();
    let name = &before[0].0;
    assert_eq!(ns.exec(name, "c", &["echo", "alive"]).unwrap(), "alive\n");
    ns.kubectl(&["logs", name, "--tail=1"]).unwrap();
    let node = kubectl_json(&["get", "node", NODE]).unwrap();
    assert!(
        berth_kube_tests::condition(&node, "Ready"),
        "node not Ready: {}",
        node["status"]["conditions"]
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn berth_killed_and_restarted_restarts_no_container() {
    let _g = disrupt();
    let ns = Namespace::new("berth-sigkill");
    let pods = running_pods(&ns, 5);
    let before = identity(&pods);
    kube_sh(&["restart", "berth", "--kill"]).unwrap();
    // berth answers again, and knows every container as running.
    for (_, id, _, _) in &before {
        let state = crictl(&[
            "inspect",
            "-o",
            "go-template",
            "--template",
            "{{.status.state}}",
            id,
        ])
        .unwrap();
        assert_eq!(state.trim(), "CONTAINER_RUNNING", "{id}");
    }
    unchanged(&ns, &before);
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn kubelet_restarted_adopts_its_pods() {
    let _g = disrupt();
    let ns = Namespace::new("kubelet-restart");
    let pods = running_pods(&ns, 5);
    let before = identity(&pods);
    let sandboxes = crictl(&["pods", "--namespace", &ns.name, "-q"]).unwrap();
    kube_sh(&["restart", "kubelet"]).unwrap();
    unchanged(&ns, &before);
    // The same sandboxes: none made again.
    assert_eq!(
        crictl(&["pods", "--namespace", &ns.name, "-q"]).unwrap(),
        sandboxes
    );
}
