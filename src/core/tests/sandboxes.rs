//! RunPodSandbox and StopPodSandbox: every failing step undone, host
//! network, bad requests.

use super::*;

#[tokio::test]
async fn run_pod_sandbox_makes_a_ready_pod() {
    let r = rig();
    let id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let sandbox = r.core.sandboxes.get(&id).unwrap();
    let status = sandbox.status();
    assert_eq!(status.state, SandboxState::Ready);
    assert_eq!(status.ips, vec!["10.88.0.2"]);
    assert!(status.network_attached && status.shm_mounted);
    assert_eq!(sandbox.meta.facts().hostname, "web");
    assert_eq!(r.fake.steps()[..RUN_STEPS.len()], RUN_STEPS);
    let w = r.fake.world.lock().unwrap();
    assert!(w.netns.contains(&r.core.layout.netns(&id)));
    assert!(w.runtime[&id].started);
    assert_eq!(
        w.events,
        vec![
            (EventKind::Created, id.clone()),
            (EventKind::Started, id.clone())
        ]
    );
}

#[tokio::test]
async fn each_failing_step_of_run_pod_sandbox_leaves_nothing() {
    each_failing_step_leaves_nothing(&RUN_STEPS, || pod("web")).await;
}

#[tokio::test]
async fn a_failed_cni_del_during_rollback_keeps_the_pod_for_a_retry() {
    let r = rig();
    r.fake.fail("task.start");
    r.fake.fail("cni.del");
    let e = r.core.run_pod_sandbox(pod("web")).await.unwrap_err();
    assert!(matches!(e, Error::Cleanup { .. }), "{e}");
    // Kept: not ready, still attached, the name still taken.
    let sandboxes = r.core.sandboxes.list();
    assert_eq!(sandboxes.len(), 1);
    let s = sandboxes[0].status();
    assert_eq!(s.state, SandboxState::NotReady);
    assert!(s.network_attached);
    assert_eq!(
        r.core.run_pod_sandbox(pod("web")).await.unwrap_err().code(),
        tonic::Code::AlreadyExists
    );
    // Remove retries the DEL.
    let id = sandboxes[0].meta.id.clone();
    assert!(r.core.remove_pod_sandbox(&id).await.is_err());
    r.fake.heal("cni.del");
    r.fake.heal("task.start");
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
    r.core.run_pod_sandbox(pod("web")).await.unwrap();
}

#[tokio::test]
async fn stop_pod_sandbox_with_a_failing_cni_del_is_retried_and_never_wedges() {
    let r = rig();
    let id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    r.fake.fail("cni.del");
    let e = r.core.stop_pod_sandbox(&id).await.unwrap_err();
    assert!(e.to_string().contains("cni.del"), "{e}");
    let s = r.core.sandboxes.get(&id).unwrap().status();
    assert_eq!(
        s.state,
        SandboxState::NotReady,
        "a pod whose teardown began is not ready"
    );
    assert!(s.network_attached);
    r.fake.heal("cni.del");
    r.core.stop_pod_sandbox(&id).await.unwrap();
    r.core.stop_pod_sandbox(&id).await.unwrap();
    assert_eq!(
        r.fake.count("cni.del"),
        2,
        "one failed DEL, one that worked, none after"
    );
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn host_network_pods_get_no_netns_and_no_cni() {
    let r = rig();
    let mut req = pod("host");
    req.config.hostname.clear();
    req.config.linux = Some(v1::LinuxPodSandboxConfig {
        security_context: Some(v1::LinuxSandboxSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                network: v1::NamespaceMode::Node as i32,
                ipc: v1::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = r.core.run_pod_sandbox(req).await.unwrap();
    assert_eq!(r.fake.count("netns.create") + r.fake.count("cni.add"), 0);
    let s = r.core.sandboxes.get(&id).unwrap();
    assert!(s.meta.netns.is_none() && !s.status().shm_mounted);
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn bad_requests_leave_nothing() {
    let r = rig();
    let mut req = pod("web");
    req.config.port_mappings.push(v1::PortMapping {
        host_port: 70000,
        container_port: 80,
        ..Default::default()
    });
    assert_eq!(
        r.core.run_pod_sandbox(req).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let mut req = pod("web");
    req.config.linux = Some(v1::LinuxPodSandboxConfig {
        security_context: Some(v1::LinuxSandboxSecurityContext {
            run_as_user: Some(v1::Int64Value { value: 4294967296 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = r.core.run_pod_sandbox(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("run_as_user"), "{e}");
    let mut req = pod("web");
    req.runtime_handler = "nope".into();
    assert_eq!(
        r.core.run_pod_sandbox(req).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    r.assert_empty();
    assert!(
        r.fake.steps().iter().all(|s| s.starts_with("netns.")
            || s.starts_with("files.")
            || s.starts_with("runtime.delete")),
        "{:?}",
        r.fake.steps()
    );
}

#[tokio::test]
async fn the_pods_files_and_pause_are_made_while_cni_add_runs() {
    let steps = [
        "files.pod",
        "files.pause_bundle",
        "runtime.create",
        "task.start",
    ];
    made_while_cni_add_runs(pod("web"), &steps).await;
}

#[tokio::test]
async fn cni_add_and_the_pods_set_up_failing_together_leave_nothing() {
    let r = rig();
    r.fake.fail("cni.add");
    r.fake.fail("files.pod");
    let e = r.core.run_pod_sandbox(pod("web")).await.unwrap_err();
    assert!(e.to_string().contains("cni.add"), "{e}");
    r.assert_empty();
    r.fake.heal("cni.add");
    r.fake.heal("files.pod");
    r.core.run_pod_sandbox(pod("web")).await.unwrap();
}
