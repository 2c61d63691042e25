//! The NRI hooks, with the fake plugins: their order per RPC, what a
//! failing hook leaves (nothing), the adjustment applied to the spec, and
//! that nothing is listed while its hook runs.

use super::*;

#[tokio::test]
async fn hooks_run_in_order_through_a_pods_life() {
    let (r, pod_id, id) = running().await;
    let update = v1::LinuxContainerResources {
        cpu_shares: 512,
        ..Default::default()
    };
    r.core
        .update_container_resources(&id, Some(update.clone()))
        .await
        .unwrap();
    r.core
        .update_pod_resources(&pod_id, None, Some(update))
        .await
        .unwrap();
    r.core
        .stop_container(&id, Duration::from_secs(1))
        .await
        .unwrap();
    // Stopped twice, told once.
    r.core
        .stop_container(&id, Duration::from_secs(1))
        .await
        .unwrap();
    r.core.remove_container(&id).await.unwrap();
    r.core.stop_pod_sandbox(&pod_id).await.unwrap();
    r.core.stop_pod_sandbox(&pod_id).await.unwrap();
    r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    assert_eq!(
        r.fake.hooks(),
        [
            "RunPodSandbox",
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "UpdatePodSandbox",
            "PostUpdatePodSandbox",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
        ]
    );
    // Pods and containers are made with plugin synchronization blocked.
    assert_eq!(r.fake.count("nri.block_sync"), 2);
    r.assert_empty();
}

#[tokio::test]
async fn nothing_is_listed_while_its_hook_runs() {
    let (r, _, _) = running().await;
    let states = r.fake.hook_states.lock().unwrap().clone();
    // Unknown is what ListPodSandbox and ListContainers leave out.
    assert_eq!(states[0], ("nri.RunPodSandbox".into(), "Unknown".into()));
    assert_eq!(states[1], ("nri.CreateContainer".into(), "Unknown".into()));
    assert_eq!(
        states[2],
        ("nri.PostCreateContainer".into(), "Created".into())
    );
    assert_eq!(states[3], ("nri.StartContainer".into(), "Created".into()));
    assert_eq!(
        states[4],
        ("nri.PostStartContainer".into(), "Running".into())
    );
}

#[tokio::test]
async fn a_failing_run_pod_sandbox_hook_leaves_nothing_and_a_retry_works() {
    for request in [pod("web"), kubelet_pod("web")] {
        let r = rig();
        r.fake.fail("nri.RunPodSandbox");
        let e = r.core.run_pod_sandbox(request.clone()).await.unwrap_err();
        assert!(e.to_string().contains("nri.RunPodSandbox"), "{e}");
        r.assert_empty();
        // The plugins that heard of it hear it is gone.
        assert_eq!(r.fake.hooks(), ["RunPodSandbox", "RemovePodSandbox"]);
        r.fake.heal("nri.RunPodSandbox");
        let id = r.core.run_pod_sandbox(request).await.unwrap();
        assert_eq!(
            r.core.sandboxes.get(&id).unwrap().status().state,
            SandboxState::Ready
        );
    }
}

#[tokio::test]
async fn a_failing_create_container_hook_leaves_nothing_and_a_retry_works() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    r.fake.fail("nri.CreateContainer");
    let e = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("nri.CreateContainer"), "{e}");
    assert!(r.core.containers.list().is_empty(), "record left");
    {
        let w = r.fake.world.lock().unwrap();
        assert!(w.rootfs_mounted.is_empty() && w.container_files.is_empty());
        assert!(w.specs.is_empty(), "a bundle spec was written");
    }
    assert_eq!(
        r.fake.hooks(),
        [
            "RunPodSandbox",
            "CreateContainer",
            "StopContainer",
            "RemoveContainer"
        ]
    );
    r.fake.heal("nri.CreateContainer");
    r.core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_create_adjustment_is_in_the_bundles_spec() {
    let r = rig();
    r.fake.nri_env.lock().unwrap().push("FROM_NRI=yes".into());
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    let env = spec_of(&r, &id).process().clone().unwrap().env().clone();
    assert!(env.unwrap().contains(&"FROM_NRI=yes".to_string()));
}

#[tokio::test]
async fn a_failing_start_hook_fails_the_start_and_runs_nothing() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    r.fake.fail("nri.StartContainer");
    let e = r.core.start_container(&id).await.unwrap_err();
    assert!(e.to_string().contains("nri.StartContainer"), "{e}");
    assert_eq!(r.fake.count("runtime.create"), 1, "only the pause ran");
    let s = r.core.containers.get(&id).unwrap().status();
    assert_eq!(
        (s.state, s.reason.as_str()),
        (ContainerState::Exited, "StartError")
    );
}

#[tokio::test]
async fn plugins_may_change_an_update_and_a_failing_update_hook_changes_nothing() {
    let (r, _, id) = running().await;
    *r.fake.nri_cpu_shares.lock().unwrap() = Some(256);
    let update = v1::LinuxContainerResources {
        cpu_shares: 512,
        ..Default::default()
    };
    r.core
        .update_container_resources(&id, Some(update.clone()))
        .await
        .unwrap();
    let applied = r.fake.world.lock().unwrap().updates.clone();
    let shares = applied[0].1.cpu().as_ref().unwrap().shares();
    assert_eq!(shares, Some(256));
    r.fake.fail("nri.UpdateContainer");
    assert!(r
        .core
        .update_container_resources(&id, Some(update))
        .await
        .is_err());
    assert_eq!(r.fake.world.lock().unwrap().updates.len(), 1);
    // A plugin's own update takes the same path, without the hooks.
    let hooks = r.fake.hooks().len();
    r.core
        .update_container_for_plugin(&id, v1::LinuxContainerResources::default())
        .await
        .unwrap();
    assert_eq!(r.fake.world.lock().unwrap().updates.len(), 2);
    assert_eq!(r.fake.hooks().len(), hooks);
}

#[tokio::test]
async fn an_exit_by_itself_is_told_once_as_stop_container() {
    let (r, pod_id, id) = running().await;
    r.fake.exit(&id, 0);
    for _ in 0..200 {
        if r.fake.hooks().contains(&"StopContainer".to_string()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    r.core.stop_container(&id, Duration::ZERO).await.unwrap();
    r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    let hooks = r.fake.hooks();
    let stops = hooks.iter().filter(|h| *h == "StopContainer").count();
    assert_eq!(stops, 1, "{hooks:?}");
    // Notifications that fail are logged, and teardown goes on.
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    r.fake.fail("nri.StopPodSandbox");
    r.fake.fail("nri.RemovePodSandbox");
    r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    r.assert_empty();
}
