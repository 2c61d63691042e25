//! UpdateContainerResources and UpdatePodSandboxResources in the core, and
//! the calls that go through a running container's shim (ExecSync,
//! ReopenContainerLog): what a failure leaves, and the lock they share with
//! Stop.

use super::*;

fn resources(shares: i64, memory: i64) -> v1::LinuxContainerResources {
    v1::LinuxContainerResources {
        cpu_shares: shares,
        memory_limit_in_bytes: memory,
        ..Default::default()
    }
}

fn memory_limit(spec: &oci_spec::runtime::Spec) -> Option<i64> {
    spec.linux()
        .as_ref()?
        .resources()
        .as_ref()?
        .memory()
        .as_ref()?
        .limit()
}

#[tokio::test]
async fn an_update_reaches_the_shim_the_spec_and_the_record() {
    let (r, _, id) = running().await;
    let new = resources(512, 64 << 20);
    r.core
        .update_container_resources(&id, Some(new.clone()))
        .await
        .unwrap();
    let updates = r.fake.world.lock().unwrap().updates.clone();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].0, id);
    assert_eq!(
        updates[0].1.memory().as_ref().and_then(|m| m.limit()),
        Some(64 << 20)
    );
    assert_eq!(memory_limit(&spec_of(&r, &id)), Some(64 << 20));
    let recorded = r.core.containers.get(&id).unwrap().status().resources;
    assert_eq!(recorded, prost::Message::encode_to_vec(&new));
    // No resources: nothing changes, nothing is called.
    r.core.update_container_resources(&id, None).await.unwrap();
    assert_eq!(r.fake.count("task.update"), 1);
}

/// kubelet's in-place resize of a Burstable pod moves its OOM score: a
/// changed `oom_score_adj` is set on the running container's processes and
/// kept in the spec; the same one again calls nothing; a failure to set it
/// changes nothing.
#[tokio::test]
async fn a_changed_oom_score_adj_reaches_the_processes_and_the_spec() {
    let (r, _, id) = running().await;
    let with_oom = |oom: i64| v1::LinuxContainerResources {
        oom_score_adj: oom,
        ..resources(512, 64 << 20)
    };
    r.core
        .update_container_resources(&id, Some(with_oom(800)))
        .await
        .unwrap();
    assert_eq!(r.fake.world.lock().unwrap().oom_score_adj[&id], 800);
    let oom_of = |r: &Rig| {
        spec_of(r, &id)
            .process()
            .as_ref()
            .and_then(|p| p.oom_score_adj())
    };
    assert_eq!(oom_of(&r), Some(800));
    r.core
        .update_container_resources(&id, Some(with_oom(800)))
        .await
        .unwrap();
    assert_eq!(r.fake.count("task.oom_score_adj"), 1);
    r.fake.fail("task.oom_score_adj");
    let e = r
        .core
        .update_container_resources(&id, Some(with_oom(600)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("task.oom_score_adj"), "{e}");
    assert_eq!(oom_of(&r), Some(800));
    assert_eq!(r.fake.count("task.update"), 2);
    let bad = r
        .core
        .update_container_resources(&id, Some(with_oom(1001)))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad}");
}

#[tokio::test]
async fn a_failing_shim_update_leaves_the_record_and_the_spec_as_they_were() {
    let (r, _, id) = running().await;
    let spec_before = spec_of(&r, &id);
    let record_before = r.core.containers.get(&id).unwrap().status().resources;
    r.fake.fail("task.update");
    let e = r
        .core
        .update_container_resources(&id, Some(resources(512, 64 << 20)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("task.update"), "{e}");
    assert_eq!(
        serde_json::to_value(spec_of(&r, &id)).unwrap(),
        serde_json::to_value(spec_before).unwrap()
    );
    assert_eq!(
        r.core.containers.get(&id).unwrap().status().resources,
        record_before
    );
    assert_eq!(
        r.fake.count("files.write_spec"),
        1,
        "only CreateContainer's"
    );
}

#[tokio::test]
async fn bad_values_and_exited_containers_are_refused_before_anything_changes() {
    let (r, _, id) = running().await;
    let e = r
        .core
        .update_container_resources(&id, Some(resources(-5, 0)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    r.core
        .stop_container(&id, Duration::from_secs(1))
        .await
        .unwrap();
    let e = r
        .core
        .update_container_resources(&id, Some(resources(512, 0)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    assert_eq!(r.fake.count("task.update"), 0);
    let e = r
        .core
        .update_container_resources("nope", Some(resources(512, 0)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
}

/// No fixed sleep: on this current-thread runtime the update is polled
/// into the shim, then the stop up to the lock, before the update (woken
/// by its delay's timer, behind the stop in the queue) can release it.
#[tokio::test]
async fn a_concurrent_stop_waits_for_the_update() {
    let (r, _, id) = running().await;
    r.fake.delay("task.update", Duration::from_millis(300));
    let update = {
        let (core, id) = (r.core.clone(), id.clone());
        tokio::spawn(async move {
            core.update_container_resources(&id, Some(resources(512, 64 << 20)))
                .await
        })
    };
    // The update holds the lifecycle lock while the shim applies it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while r.fake.count("task.update") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no update reached the shim"
        );
        tokio::task::yield_now().await;
    }
    let stop = {
        let (core, id) = (r.core.clone(), id.clone());
        tokio::spawn(async move { core.stop_container(&id, Duration::from_secs(1)).await })
    };
    // The stop runs up to the lock (nothing before it awaits).
    tokio::task::yield_now().await;
    update.await.unwrap().unwrap();
    stop.await.unwrap().unwrap();
    let steps = r.fake.steps();
    let last_write = steps.iter().rposition(|s| s == "files.write_spec").unwrap();
    let kill = steps.iter().position(|s| s == "task.kill").unwrap();
    assert!(last_write < kill, "stop ran inside the update: {steps:?}");
    assert_eq!(memory_limit(&spec_of(&r, &id)), Some(64 << 20));
}

#[tokio::test]
async fn pod_resources_are_checked_then_recorded() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let e = r
        .core
        .update_pod_resources(&pod_id, Some(resources(-1, 0)), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    assert!(r
        .core
        .sandboxes
        .get(&pod_id)
        .unwrap()
        .status()
        .resources
        .is_none());
    let total = resources(1024, 128 << 20);
    r.core
        .update_pod_resources(&pod_id, None, Some(total.clone()))
        .await
        .unwrap();
    let recorded = r.core.sandboxes.get(&pod_id).unwrap().status().resources;
    let recorded = recorded.expect("recorded");
    assert_eq!(recorded.resources, prost::Message::encode_to_vec(&total));
    assert!(recorded.overhead.is_empty());
}

#[tokio::test]
async fn exec_sync_keeps_the_kind_of_what_went_wrong() {
    let (r, _, id) = running().await;
    r.fake.world.lock().unwrap().exec_output = berth_shim::ExecOutput {
        exit_code: 3,
        stdout: b"out".to_vec(),
        stderr: b"err".to_vec(),
        ..Default::default()
    };
    let out = r.core.exec_sync(&id, vec!["true".into()], 5).await.unwrap();
    assert_eq!((out.exit_code, &out.stdout[..]), (3, &b"out"[..]));
    let code = |out: berth_shim::ExecOutput| {
        let (r, id) = (&r, id.clone());
        async move {
            r.fake.world.lock().unwrap().exec_output = out;
            r.core
                .exec_sync(&id, vec!["x".into()], 1)
                .await
                .unwrap_err()
                .code()
        }
    };
    let timed_out = berth_shim::ExecOutput {
        timed_out: true,
        ..Default::default()
    };
    assert_eq!(code(timed_out).await, tonic::Code::DeadlineExceeded);
    let truncated = berth_shim::ExecOutput {
        truncated: true,
        ..Default::default()
    };
    assert_eq!(code(truncated).await, tonic::Code::ResourceExhausted);
    let e = r.core.exec_sync(&id, Vec::new(), 1).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // A shim that is gone: FailedPrecondition, for ExecSync and the log.
    r.fake
        .world
        .lock()
        .unwrap()
        .runtime
        .get_mut(&id)
        .unwrap()
        .shim_alive = false;
    let e = r
        .core
        .exec_sync(&id, vec!["x".into()], 1)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    let e = r.core.reopen_log(&id).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
}

#[tokio::test]
async fn calls_through_the_shim_need_a_running_container() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    for e in [
        r.core
            .exec_sync(&id, vec!["x".into()], 1)
            .await
            .unwrap_err(),
        r.core.reopen_log(&id).await.unwrap_err(),
    ] {
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    }
    r.core.start_container(&id).await.unwrap();
    r.core.reopen_log(&id).await.unwrap();
    assert_eq!(r.fake.count("task.reopen_log"), 1);
}
