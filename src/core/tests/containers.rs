//! CreateContainer, StartContainer, Stop and Remove of containers and
//! pods, and concurrent calls on one pod.

use super::*;

const CREATE_STEPS: [&str; 4] = [
    "files.mount_rootfs",
    "files.create_dirs",
    "files.make_volumes",
    "files.write_spec",
];

/// Nothing of the container is left: record, rootfs mount, its files, its
/// spec, the anonymous volume made for the image's VOLUME; the retry that
/// succeeds has each of them (so the checks look where things are made).
#[tokio::test]
async fn each_failing_step_of_create_container_leaves_nothing_of_the_container() {
    for step in CREATE_STEPS {
        let r = rig();
        for image in r.fake.images.lock().unwrap().values_mut() {
            image.config.volumes = vec!["/data".into()];
        }
        let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
        r.fake.fail(step);
        let e = r
            .core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        assert!(r.core.containers.list().is_empty(), "{step}: record left");
        {
            let world = r.fake.world.lock().unwrap();
            assert!(world.rootfs_mounted.is_empty(), "{step}: rootfs left");
            assert!(world.container_files.is_empty(), "{step}: files left");
            assert!(world.specs.is_empty(), "{step}: spec left");
            assert!(
                world.dirs.is_empty(),
                "{step}: volume left: {:?}",
                world.dirs
            );
        }
        r.fake.heal(step);
        let id = r
            .core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_or_else(|e| panic!("{step}: retry: {e}"));
        let dirs = r.core.layout.container_dirs(&id);
        let world = r.fake.world.lock().unwrap();
        assert!(world.container_files.contains(&id), "{step}");
        assert!(world.specs.contains_key(&dirs.spec()), "{step}");
        assert!(
            world.dirs.iter().any(|d| d.starts_with(dirs.volumes())),
            "{step}: {:?}",
            world.dirs
        );
    }
}

#[tokio::test]
async fn create_container_checks_its_pod_and_image() {
    let r = rig();
    assert_eq!(
        r.core
            .create_container(container("nope", "app"))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let mut req = container(&pod_id, "app");
    req.config.image.as_mut().unwrap().image = "missing".into();
    assert_eq!(
        r.core.create_container(req).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let mut req = container(&pod_id, "app");
    req.config.log_path = "../../../tmp/x.log".into();
    let mut with_logs = pod("logs");
    with_logs.config.log_directory = "/var/log/pods/x".into();
    let logs_pod = r.core.run_pod_sandbox(with_logs).await.unwrap();
    req.sandbox_id = logs_pod;
    assert_eq!(
        r.core.create_container(req).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    r.core.stop_pod_sandbox(&pod_id).await.unwrap();
    assert_eq!(
        r.core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::FailedPrecondition
    );
    assert!(r.core.containers.list().is_empty());
}

/// RemoveContainer removes the container's dirs and its shim's side by
/// side: either failing keeps the record (the other tree may be gone), and
/// the retry finishes the job.
#[tokio::test]
async fn a_failed_removal_of_either_tree_keeps_the_record_for_a_retry() {
    for step in ["files.remove_container", "files.remove_dir"] {
        let (r, pod_id, id) = running().await;
        r.core
            .stop_container(&id, Duration::from_secs(1))
            .await
            .unwrap();
        r.fake.fail(step);
        let e = r.core.remove_container(&id).await.unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        assert!(r.core.containers.get(&id).is_ok(), "{step}: record gone");
        r.fake.heal(step);
        r.core
            .remove_container(&id)
            .await
            .unwrap_or_else(|e| panic!("{step}: retry: {e}"));
        assert!(r.core.containers.get(&id).is_err(), "{step}: record left");
        assert!(
            !r.fake.world.lock().unwrap().container_files.contains(&id),
            "{step}: files left"
        );
        r.core.remove_pod_sandbox(&pod_id).await.unwrap();
        r.assert_empty();
    }
}

#[tokio::test]
async fn container_life_cycle() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    let c = r.core.containers.get(&id).unwrap();
    assert_eq!(c.status().state, ContainerState::Created);
    assert_eq!(c.meta.image_id, "sha256:1111");
    r.core.start_container(&id).await.unwrap();
    assert_eq!(c.status().state, ContainerState::Running);
    assert_eq!(
        r.core.start_container(&id).await.unwrap_err().code(),
        tonic::Code::FailedPrecondition
    );
    // A natural exit is recorded, and the container leaves the runtime.
    r.fake.exit(&id, 3);
    for _ in 0..200 {
        if !r.fake.world.lock().unwrap().runtime.contains_key(&id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let s = c.status();
    assert_eq!(
        (s.state, s.exit_code, s.reason.as_str()),
        (ContainerState::Exited, 3, "Error")
    );
    assert!(!r.fake.world.lock().unwrap().rootfs_mounted.contains(&id));
    r.core.remove_container(&id).await.unwrap();
    r.core.remove_container(&id).await.unwrap();
    r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    r.assert_empty();
    let events: Vec<EventKind> = r
        .fake
        .world
        .lock()
        .unwrap()
        .events
        .iter()
        .filter(|(_, i)| *i == id)
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(
        events[..3],
        [EventKind::Created, EventKind::Started, EventKind::Stopped]
    );
    assert_eq!(events.last(), Some(&EventKind::Deleted));
}

#[tokio::test]
async fn a_failed_start_is_reported_as_exited_and_leaves_no_runtime_container() {
    for step in ["runtime.create", "task.start"] {
        let r = rig();
        let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
        let id = r
            .core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap();
        r.fake.fail(step);
        r.core.start_container(&id).await.unwrap_err();
        let s = r.core.containers.get(&id).unwrap().status();
        assert_eq!(
            (s.state, s.reason.as_str()),
            (ContainerState::Exited, "StartError"),
            "{step}"
        );
        assert!(
            !r.fake.world.lock().unwrap().runtime.contains_key(&id),
            "{step}"
        );
        r.fake.heal(step);
        r.core.remove_pod_sandbox(&pod_id).await.unwrap();
        r.assert_empty();
    }
}

#[tokio::test]
async fn a_killed_shim_is_reported_exited_not_running() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    r.core.start_container(&id).await.unwrap();
    r.fake.kill_shim(&id);
    let c = r.core.containers.get(&id).unwrap();
    for _ in 0..200 {
        if c.status().state == ContainerState::Exited {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let s = c.status();
    assert_eq!(
        (s.state, s.reason.as_str()),
        (ContainerState::Exited, "Unknown")
    );
    // Releasing it deleted what was left in the runtime.
    for _ in 0..200 {
        if !r.fake.world.lock().unwrap().runtime.contains_key(&id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!r.fake.world.lock().unwrap().runtime.contains_key(&id));
}

#[tokio::test]
async fn stop_and_remove_pod_take_their_containers_down() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let a = r
        .core
        .create_container(container(&pod_id, "a"))
        .await
        .unwrap();
    let b = r
        .core
        .create_container(container(&pod_id, "b"))
        .await
        .unwrap();
    r.core.start_container(&a).await.unwrap();
    r.core.stop_pod_sandbox(&pod_id).await.unwrap();
    assert_eq!(
        r.core.containers.get(&a).unwrap().status().state,
        ContainerState::Exited
    );
    assert_eq!(
        r.core.containers.get(&b).unwrap().status().state,
        ContainerState::Created
    );
    r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    r.assert_empty();
}

/// A graceful StopContainer waiting out a long grace (the fake ignores
/// every signal but SIGKILL, as a PID 1 without handlers does) holds up
/// neither a shorter StopContainer nor StopPodSandbox: each kills at once,
/// and the graceful calls end with them.
#[tokio::test]
async fn a_graceful_stop_holds_up_no_forced_stop() {
    let (r, pod_id, a) = running().await;
    let b = r
        .core
        .create_container(container(&pod_id, "b"))
        .await
        .unwrap();
    r.core.start_container(&b).await.unwrap();
    let graceful = |id: &String| {
        let (core, id) = (r.core.clone(), id.clone());
        tokio::spawn(async move { core.stop_container(&id, Duration::from_secs(3600)).await })
    };
    let (graceful_a, graceful_b) = (graceful(&a), graceful(&b));
    // Both stop signals sent: both calls are in their grace now.
    let signalled = tokio::time::timeout(Duration::from_secs(30), async {
        while r.fake.count("task.kill") < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    signalled.await.expect("the stop signals were never sent");
    let bound = Duration::from_secs(60);
    let forced = tokio::time::timeout(bound, r.core.stop_container(&a, Duration::ZERO)).await;
    forced
        .expect("StopContainer waited out the other's grace")
        .unwrap();
    let pod_stop = tokio::time::timeout(bound, r.core.stop_pod_sandbox(&pod_id)).await;
    pod_stop
        .expect("StopPodSandbox waited out a container's grace")
        .unwrap();
    for call in [graceful_a, graceful_b] {
        let ended = tokio::time::timeout(bound, call).await;
        ended
            .expect("the graceful stop outlived the kill")
            .unwrap()
            .unwrap();
    }
    for id in [&a, &b] {
        let status = r.core.containers.get(id).unwrap().status();
        assert_eq!(status.state, ContainerState::Exited);
        assert_eq!(status.exit_code, 137);
        assert!(!r.fake.world.lock().unwrap().runtime.contains_key(id));
    }
    r.core.remove_pod_sandbox(&pod_id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn concurrent_calls_on_one_pod() {
    let r = rig();
    // Two runs of one name: one wins, the other is told who holds it.
    let (x, y) = tokio::join!(
        r.core.run_pod_sandbox(pod("web")),
        r.core.run_pod_sandbox(pod("web"))
    );
    let (ok, err) = match (x, y) {
        (Ok(id), Err(e)) | (Err(e), Ok(id)) => (id, e),
        other => panic!("{other:?}"),
    };
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    assert!(err.to_string().contains(&ok));
    // Two stops and two removes at once: each step once, both succeed.
    let (a, b) = tokio::join!(r.core.stop_pod_sandbox(&ok), r.core.stop_pod_sandbox(&ok));
    a.unwrap();
    b.unwrap();
    assert_eq!(r.fake.count("cni.del"), 1);
    let (a, b) = tokio::join!(
        r.core.remove_pod_sandbox(&ok),
        r.core.remove_pod_sandbox(&ok)
    );
    a.unwrap();
    b.unwrap();
    r.assert_empty();
}

/// The calls logged for `id`, of these steps, in order (`step`, no id).
fn calls_of(r: &Rig, id: &str, steps: &[&str]) -> Vec<String> {
    r.fake
        .calls()
        .into_iter()
        .filter_map(|c| {
            let (step, of) = c.split_once(' ')?;
            (of == id && steps.contains(&step)).then(|| step.to_string())
        })
        .collect()
}

#[tokio::test]
async fn the_runtimes_cgroup_move_is_warmed_up_by_each_call_that_will_run_it() {
    let r = rig();
    let steps = ["runtime.warm_up", "runtime.create", "task.exec_sync"];
    // A pod with a pause: before its runtime runs.
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    assert_eq!(
        calls_of(&r, &pod_id, &steps),
        ["runtime.warm_up", "runtime.create"]
    );
    // CreateContainer (kubelet starts it next), StartContainer before the
    // shim, ExecSync before the exec.
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    assert_eq!(calls_of(&r, &id, &steps), ["runtime.warm_up"]);
    r.core.start_container(&id).await.unwrap();
    r.core.exec_sync(&id, vec!["true".into()], 5).await.unwrap();
    assert_eq!(
        calls_of(&r, &id, &steps),
        [
            "runtime.warm_up",
            "runtime.warm_up",
            "runtime.create",
            "runtime.warm_up",
            "task.exec_sync"
        ]
    );
    // Calls refused before anything is done warm nothing up.
    let before = r.fake.count("runtime.warm_up");
    assert!(r.core.start_container("nope").await.is_err());
    assert!(r.core.exec_sync("nope", vec!["x".into()], 1).await.is_err());
    assert!(r
        .core
        .create_container(container("nope", "app"))
        .await
        .is_err());
    assert_eq!(r.fake.count("runtime.warm_up"), before);
}

#[tokio::test]
async fn a_pod_without_a_pause_warms_nothing_up_until_its_first_container() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(kubelet_pod("web")).await.unwrap();
    assert!(r.core.sandboxes.get(&pod_id).unwrap().meta.facts().pinned);
    assert_eq!(r.fake.count("runtime.warm_up"), 0);
}
