//! Pods without a pause: their namespaces pinned on files.

use super::*;

const PINNED_RUN_STEPS: [&str; 4] = ["netns.create", "cni.add", "files.pod", "ns.pin"];

#[tokio::test]
async fn a_pod_that_needs_no_pause_gets_its_namespaces_pinned() {
    let r = rig();
    let id = r.core.run_pod_sandbox(kubelet_pod("web")).await.unwrap();
    let sandbox = r.core.sandboxes.get(&id).unwrap();
    assert!(sandbox.meta.facts().pinned);
    assert_eq!(sandbox.status().state, SandboxState::Ready);
    assert!(sandbox.status().pid.is_none());
    assert_eq!(r.fake.steps(), PINNED_RUN_STEPS);
    assert!(r
        .fake
        .world
        .lock()
        .unwrap()
        .pins
        .contains(&r.core.layout.pod_ns(&id)));
    // Its containers run; Stop unpins after they are down; Remove leaves
    // nothing.
    let mut req = container(&id, "c");
    req.config.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Container as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let c = r.core.create_container(req).await.unwrap();
    r.core.start_container(&c).await.unwrap();
    // A container asking to share a PID namespace the pod does not have:
    // refused, not given one of its own in silence.
    let e = r
        .core
        .create_container(container(&id, "shares-pid"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("pid"), "{e}");
    r.core.stop_pod_sandbox(&id).await.unwrap();
    let steps = r.fake.steps();
    let kill = steps.iter().position(|s| s == "task.kill").unwrap();
    let unpin = steps.iter().position(|s| s == "ns.unpin").unwrap();
    assert!(kill < unpin, "{steps:?}");
    assert!(r.fake.world.lock().unwrap().pins.is_empty());
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn each_failing_step_of_a_pod_without_a_pause_leaves_nothing() {
    each_failing_step_leaves_nothing(&PINNED_RUN_STEPS, || kubelet_pod("web")).await;
}

#[tokio::test]
async fn a_shared_pid_namespace_or_the_switch_keeps_the_pause() {
    // pid POD: the pod's containers share one PID namespace, which a
    // process must hold.
    let r = rig();
    let id = r.core.run_pod_sandbox(pod("shared")).await.unwrap();
    assert!(!r.core.sandboxes.get(&id).unwrap().meta.facts().pinned);
    assert_eq!(r.fake.steps()[..RUN_STEPS.len()], RUN_STEPS);
    // drop_infra_ctr = false: a pause in every pod.
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let core = open_with(&dir, &fake, |c| c.runtime.drop_infra_ctr = false);
    let id = core.run_pod_sandbox(kubelet_pod("web")).await.unwrap();
    assert!(!core.sandboxes.get(&id).unwrap().meta.facts().pinned);
    assert!(fake.steps().contains(&"runtime.create".to_string()));
    assert!(fake.world.lock().unwrap().pins.is_empty());
}

#[tokio::test]
async fn a_pinned_pods_files_and_pins_are_made_while_cni_add_runs() {
    made_while_cni_add_runs(kubelet_pod("web"), &["files.pod", "ns.pin"]).await;
}
