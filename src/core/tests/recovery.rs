//! Recovery's decisions from the records and what runs.

use super::*;

/// What a crash leaves beside live pod `ready` with its container
/// `running`: a pod whose RunPodSandbox was cut short, a record that cannot
/// be read, dirs nothing owns, pod `dead` with its shim gone and container
/// `lost` whose shim was killed.
fn leave_what_a_crash_leaves(core: &Core, fake: &Fake, [ready, dead, running, lost]: [&String; 4]) {
    // A pod whose RunPodSandbox was cut short, a record that cannot be read,
    // and dirs nothing owns.
    let cut = core.sandboxes.create(
        crate::sandbox::SandboxMeta {
            id: "cut".into(),
            name: "cut_default_u_0".into(),
            config: Vec::new(),
            runtime_handler: "runc".into(),
            requested_handler: None,
            netns: Some(core.layout.netns("cut")),
            created_at: 0,
            facts: None,
            decoded: Default::default(),
            derived: Default::default(),
        },
        Default::default(),
    );
    cut.unwrap();
    std::fs::write(
        core.layout.sandbox_records().join("damaged.json"),
        b"{not json",
    )
    .unwrap();
    {
        let mut w = fake.world.lock().unwrap();
        w.entries.insert(
            core.layout.netns_dir(),
            vec![ready.to_string(), "damaged".into(), "orphan".into()],
        );
        w.entries
            .insert(core.layout.containers_root(), vec!["gone".into()]);
        // Userns trees of a live pod and container, and of gone ones.
        w.entries.insert(
            core.layout.userns_dir().join("p"),
            vec![ready.to_string(), "gone-pod".into()],
        );
        w.entries.insert(
            core.layout.userns_dir().join("c"),
            vec![running.to_string(), "gone-container".into()],
        );
        w.attached.insert("damaged".into());
        w.attached.insert("orphan".into());
    }
    fake.world
        .lock()
        .unwrap()
        .runtime
        .get_mut(dead)
        .unwrap()
        .shim_alive = false;
    fake.kill_shim(lost);
}

#[tokio::test]
async fn recovery_decides_from_records_and_what_runs() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let core = open(&dir, &fake);
    let ready = core.run_pod_sandbox(pod("ready")).await.unwrap();
    let dead = core.run_pod_sandbox(pod("dead")).await.unwrap();
    let running = core
        .create_container(container(&ready, "running"))
        .await
        .unwrap();
    core.start_container(&running).await.unwrap();
    let lost = core
        .create_container(container(&ready, "lost"))
        .await
        .unwrap();
    core.start_container(&lost).await.unwrap();
    leave_what_a_crash_leaves(&core, &fake, [&ready, &dead, &running, &lost]);
    // Let the watcher of `lost` see its shim go... then "restart": a new core
    // on the same dirs (the old one's watchers are ignored from here on).
    let core = open(&dir, &fake);
    let plan = core.plan().await;
    let has = |a: Action| assert!(plan.contains(&a), "{a:?} not in {plan:#?}");
    assert!(
        matches!(&plan[0], Action::Quarantine { id, .. } if id == "damaged"),
        "{plan:#?}"
    );
    has(Action::RollBackSandbox("cut".into()));
    has(Action::SandboxNotReady(dead.clone()));
    has(Action::WatchContainer(running.clone()));
    has(Action::RemoveOrphan(core.layout.netns("orphan")));
    has(Action::RemoveOrphan(
        core.layout.containers_root().join("gone"),
    ));
    has(Action::RemoveOrphan(
        core.layout.pod_userns("gone-pod").root,
    ));
    has(Action::RemoveOrphan(
        core.layout.userns_container("gone-container"),
    ));
    assert!(!plan.contains(&Action::RemoveOrphan(core.layout.pod_userns(&ready).root)));
    assert!(!plan.contains(&Action::RemoveOrphan(
        core.layout.userns_container(&running)
    )));
    has(Action::ReleaseOrphanNetwork {
        container_id: "orphan".into(),
        ifname: "eth0".into(),
    });
    // What the damaged record owns is left alone.
    for a in &plan {
        assert!(
            !a.to_string().contains("damaged") || matches!(a, Action::Quarantine { .. }),
            "{a}"
        );
    }
    core.recover().await;
    assert!(core.layout.quarantine().join("damaged.json").exists());
    assert!(core.sandboxes.get("cut").is_err());
    assert_eq!(
        core.sandboxes.get(&dead).unwrap().status().state,
        SandboxState::NotReady
    );
    assert!(fake.world.lock().unwrap().attached.contains("damaged"));
    assert!(!fake.world.lock().unwrap().attached.contains("orphan"));
    // The next start still leaves the quarantined record's objects alone.
    let core = open(&dir, &fake);
    let plan = core.plan().await;
    assert!(
        !plan.iter().any(|a| a.to_string().contains("damaged")),
        "{plan:#?}"
    );
}

#[tokio::test]
async fn recovery_marks_a_pod_whose_pins_are_gone_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let core = open(&dir, &fake);
    let kept = core.run_pod_sandbox(kubelet_pod("kept")).await.unwrap();
    let lost = core.run_pod_sandbox(kubelet_pod("lost")).await.unwrap();
    // As after a reboot, for one pod: its pins are gone.
    fake.world
        .lock()
        .unwrap()
        .pins
        .remove(&core.layout.pod_ns(&lost));
    {
        let mut w = fake.world.lock().unwrap();
        w.entries.insert(
            core.layout.pod_ns_dir(),
            vec![kept.clone(), lost.clone(), "orphan".into()],
        );
    }
    let core = open(&dir, &fake);
    let plan = core.plan().await;
    assert!(
        plan.contains(&Action::SandboxNotReady(lost.clone())),
        "{plan:#?}"
    );
    assert!(
        !plan.contains(&Action::SandboxNotReady(kept.clone())),
        "{plan:#?}"
    );
    assert!(plan.contains(&Action::RemoveOrphan(core.layout.pod_ns("orphan"))));
    assert!(!plan.contains(&Action::RemoveOrphan(core.layout.pod_ns(&kept))));
    core.recover().await;
    assert_eq!(
        core.sandboxes.get(&lost).unwrap().status().state,
        SandboxState::NotReady
    );
    assert_eq!(
        core.sandboxes.get(&kept).unwrap().status().state,
        SandboxState::Ready
    );
}

/// A start's Running write is not synced: a power cut may take the record
/// back to Created while (the cut being only of the record) the shim runs.
/// Recovery adopts the container with the pid and the start time its shim
/// reports, not a time of its own.
#[tokio::test]
async fn a_lost_running_write_is_derived_again_from_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let core = open(&dir, &fake);
    let pod = core.run_pod_sandbox(pod("p")).await.unwrap();
    let id = core.create_container(container(&pod, "c")).await.unwrap();
    let record = core.layout.container_records().join(format!("{id}.json"));
    let created = std::fs::read(&record).unwrap();
    core.start_container(&id).await.unwrap();
    // The write that was lost.
    std::fs::write(&record, &created).unwrap();
    let core = open(&dir, &fake);
    let c = core.containers.get(&id).unwrap();
    assert_eq!(c.status().state, ContainerState::Created);
    let plan = core.plan().await;
    assert!(
        plan.contains(&Action::AdoptStarted(id.clone())),
        "{plan:#?}"
    );
    core.recover().await;
    let s = c.status();
    assert_eq!(
        (s.state, s.pid, s.started_at),
        (
            ContainerState::Running,
            Some(42),
            super::fake::FAKE_STARTED_AT
        )
    );
    // And on disk, for the start after this one.
    let core = open(&dir, &fake);
    let s = core.containers.get(&id).unwrap().status();
    assert_eq!(s.started_at, super::fake::FAKE_STARTED_AT);
}
