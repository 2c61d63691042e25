//! Unit tests of the lifecycle rules, with the recording fakes: no root, no
//! runc, no CNI. Each step of RunPodSandbox, CreateContainer and
//! StartContainer fails in turn, and each test asserts what was undone and
//! what was kept; teardown with failing steps, concurrency on one id, and
//! recovery's decisions.

use std::sync::Arc;
use std::time::Duration;

use cri_api::v1;

use super::fake::Fake;
use super::recovery::Action;
use super::*;
use crate::container::ContainerState;
use crate::sandbox::SandboxState;

struct Rig {
    core: Arc<Core>,
    fake: Arc<Fake>,
    _dir: tempfile::TempDir,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let core = open(&dir, &fake);
    Rig {
        core,
        fake,
        _dir: dir,
    }
}

fn open(dir: &tempfile::TempDir, fake: &Arc<Fake>) -> Arc<Core> {
    open_with(dir, fake, |_| {})
}

/// [`open`] with `change` made to the config first.
fn open_with(
    dir: &tempfile::TempDir,
    fake: &Arc<Fake>,
    change: impl FnOnce(&mut Config),
) -> Arc<Core> {
    let mut config = Config {
        root: dir.path().join("root"),
        state: dir.path().join("state"),
        ..Config::default()
    };
    change(&mut config);
    let options = berth_spec::SpecOptions {
        oom_score_adj_floor: Some(-1000),
        all_capabilities: Some(Vec::new()),
        ..Default::default()
    };
    Core::open(config, Fake::mechanisms(fake), options).unwrap()
}

fn pod(name: &str) -> SandboxRequest {
    SandboxRequest {
        config: v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.into(),
                namespace: "default".into(),
                uid: format!("uid-{name}"),
                attempt: 0,
            }),
            hostname: name.into(),
            ..Default::default()
        },
        runtime_handler: String::new(),
    }
}

fn container(sandbox_id: &str, name: &str) -> ContainerRequest {
    ContainerRequest {
        sandbox_id: sandbox_id.into(),
        config: v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(v1::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

impl Rig {
    /// Nothing of any pod or container exists any more.
    fn assert_empty(&self) {
        let w = self.fake.world.lock().unwrap();
        assert!(w.netns.is_empty(), "netns left: {:?}", w.netns);
        assert!(w.attached.is_empty(), "attachments left: {:?}", w.attached);
        assert!(w.pod_files.is_empty(), "pod files left: {:?}", w.pod_files);
        assert!(w.shm_mounted.is_empty(), "shm left: {:?}", w.shm_mounted);
        assert!(w.bundles.is_empty(), "bundles left: {:?}", w.bundles);
        assert!(
            w.rootfs_mounted.is_empty(),
            "rootfs left: {:?}",
            w.rootfs_mounted
        );
        assert!(
            w.container_files.is_empty(),
            "container files left: {:?}",
            w.container_files
        );
        assert!(
            w.runtime.is_empty(),
            "runtime containers left: {:?}",
            w.runtime.keys()
        );
        assert!(w.userns.is_empty(), "user namespaces left: {:?}", w.userns);
        assert!(w.binds.is_empty(), "bind mounts left: {:?}", w.binds);
        assert!(w.pins.is_empty(), "pinned namespaces left: {:?}", w.pins);
        drop(w);
        assert!(
            self.core.sandboxes.list().is_empty(),
            "sandbox records left"
        );
        assert!(
            self.core.containers.list().is_empty(),
            "container records left"
        );
    }
}

const RUN_STEPS: [&str; 6] = [
    "netns.create",
    "cni.add",
    "files.pod",
    "files.pause_bundle",
    "runtime.create",
    "task.start",
];

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

/// Each of `steps` failing in turn makes RunPodSandbox of `request` fail
/// naming it, leave nothing, and free the name for a retry.
async fn each_failing_step_leaves_nothing(steps: &[&str], request: impl Fn() -> SandboxRequest) {
    for &step in steps {
        let r = rig();
        r.fake.fail(step);
        let e = r.core.run_pod_sandbox(request()).await.unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        r.assert_empty();
        // The name is free again.
        r.fake.heal(step);
        r.core
            .run_pod_sandbox(request())
            .await
            .unwrap_or_else(|e| panic!("{step}: retry: {e}"));
    }
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

const CREATE_STEPS: [&str; 3] = [
    "files.mount_rootfs",
    "files.create_dirs",
    "files.write_spec",
];

#[tokio::test]
async fn each_failing_step_of_create_container_leaves_nothing_of_the_container() {
    for step in CREATE_STEPS {
        let r = rig();
        let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
        r.fake.fail(step);
        let e = r
            .core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        assert!(r.core.containers.list().is_empty(), "{step}: record left");
        assert!(
            r.fake.world.lock().unwrap().rootfs_mounted.is_empty(),
            "{step}: rootfs left"
        );
        r.fake.heal(step);
        r.core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_or_else(|e| panic!("{step}: retry: {e}"));
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
    // A pod whose RunPodSandbox was cut short, a record that cannot be read,
    // and dirs nothing owns.
    let cut = core.sandboxes.create(
        crate::sandbox::SandboxMeta {
            id: "cut".into(),
            name: "cut_default_u_0".into(),
            config: Vec::new(),
            runtime_handler: "runc".into(),
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
            vec![ready.clone(), "damaged".into(), "orphan".into()],
        );
        w.entries
            .insert(core.layout.containers_root(), vec!["gone".into()]);
        // Userns trees of a live pod and container, and of gone ones.
        w.entries.insert(
            core.layout.userns_dir().join("p"),
            vec![ready.clone(), "gone-pod".into()],
        );
        w.entries.insert(
            core.layout.userns_dir().join("c"),
            vec![running.clone(), "gone-container".into()],
        );
        w.attached.insert("damaged".into());
        w.attached.insert("orphan".into());
    }
    fake.world
        .lock()
        .unwrap()
        .runtime
        .get_mut(&dead)
        .unwrap()
        .shim_alive = false;
    fake.kill_shim(&lost);
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

/// Runs `call` as the RPC layer does: on its own task, tracked so that it
/// sees its client go when the returned guard is dropped.
fn as_rpc<T: Send + 'static>(
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> (super::caller::CallerGuard, tokio::task::JoinHandle<T>) {
    let (guard, body) = super::caller::track(call);
    (guard, tokio::spawn(body))
}

#[tokio::test]
async fn a_retry_of_an_abandoned_run_pod_sandbox_gets_its_id_once() {
    let r = rig();
    r.fake.delay("cni.add", Duration::from_millis(300));
    let core = r.core.clone();
    let (client, first) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The client times out; its call goes on.
    drop(client);
    // A different config for the same name is refused at once.
    let mut other = pod("web");
    other.config.hostname = "other".into();
    let e = r.core.run_pod_sandbox(other).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    // The same request waits for the first and gets its id.
    let core = r.core.clone();
    let (retry_client, retry) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    let id = retry.await.unwrap().unwrap();
    retry_client.answered();
    assert_eq!(first.await.unwrap().unwrap(), id);
    assert_eq!(r.core.sandboxes.list().len(), 1);
    assert_eq!(r.fake.count("cni.add"), 1);
    // Once: a further identical request is told who holds the name.
    let e = r.core.run_pod_sandbox(pod("web")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    assert!(e.to_string().contains(&id));
}

#[tokio::test]
async fn a_pod_whose_client_got_its_id_is_not_handed_out_again() {
    let r = rig();
    let core = r.core.clone();
    let (client, call) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    call.await.unwrap().unwrap();
    client.answered();
    let e = r.core.run_pod_sandbox(pod("web")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
}

#[tokio::test]
async fn a_retry_of_a_failed_abandoned_call_makes_the_pod_anew() {
    let r = rig();
    r.fake.delay("cni.add", Duration::from_millis(200));
    r.fake.fail("cni.add");
    let core = r.core.clone();
    let (client, first) = as_rpc(async move { core.run_pod_sandbox(pod("web")).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(client);
    let core = r.core.clone();
    let fake = r.fake.clone();
    let (_retry_client, retry) = as_rpc(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Heals before the first fails: the retry's own attempt works.
        fake.heal("cni.add");
        core.run_pod_sandbox(pod("web")).await
    });
    first.await.unwrap().unwrap_err();
    let id = retry.await.unwrap().unwrap();
    assert_eq!(
        r.core.sandboxes.get(&id).unwrap().status().state,
        SandboxState::Ready
    );
}

#[tokio::test]
async fn a_retry_of_an_abandoned_create_container_gets_its_id_once() {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    r.fake
        .delay("files.mount_rootfs", Duration::from_millis(300));
    let core = r.core.clone();
    let req = container(&pod_id, "app");
    let (client, first) = as_rpc(async move { core.create_container(req).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(client);
    let mut other = container(&pod_id, "app");
    other.config.command = vec!["true".into()];
    assert_eq!(
        r.core.create_container(other).await.unwrap_err().code(),
        tonic::Code::AlreadyExists
    );
    let core = r.core.clone();
    let req = container(&pod_id, "app");
    let (_c, retry) = as_rpc(async move { core.create_container(req).await });
    let id = retry.await.unwrap().unwrap();
    assert_eq!(first.await.unwrap().unwrap(), id);
    assert_eq!(r.core.containers.list().len(), 1);
    assert_eq!(
        r.core
            .create_container(container(&pod_id, "app"))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::AlreadyExists
    );
}

#[tokio::test]
async fn remove_pod_sandbox_waits_for_a_run_in_progress() {
    let r = rig();
    r.fake.delay("cni.add", Duration::from_millis(200));
    let core = r.core.clone();
    let run = tokio::spawn(async move { core.run_pod_sandbox(pod("web")).await });
    // The half-made sandbox is visible but locked.
    let id = loop {
        if let Some(s) = r.core.sandboxes.list().first() {
            break s.meta.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    r.core.remove_pod_sandbox(&id).await.unwrap();
    run.await.unwrap().unwrap();
    // The remove came after the run: nothing is left, nothing raced.
    r.assert_empty();
    let steps = r.fake.steps();
    let add = steps.iter().position(|s| s == "cni.add").unwrap();
    let del = steps.iter().position(|s| s == "cni.del").unwrap();
    assert!(add < del, "{steps:?}");
}

#[tokio::test]
async fn bandwidth_annotations_become_the_cni_capability() {
    let r = rig();
    let mut req = pod("shaped");
    req.config.annotations = [
        (
            "kubernetes.io/ingress-bandwidth".to_string(),
            "10M".to_string(),
        ),
        (
            "kubernetes.io/egress-bandwidth".to_string(),
            "1M".to_string(),
        ),
    ]
    .into();
    r.core.run_pod_sandbox(req).await.unwrap();
    let added = r.fake.added.lock().unwrap().clone();
    let b = added[0]
        .capabilities
        .bandwidth
        .clone()
        .expect("bandwidth capability");
    assert_eq!((b.ingress_rate, b.egress_rate), (10_000_000, 1_000_000));
    // A value kubelet would never send is refused, not dropped.
    let mut req = pod("bad");
    req.config.annotations = [(
        "kubernetes.io/ingress-bandwidth".to_string(),
        "fast".to_string(),
    )]
    .into();
    let e = r.core.run_pod_sandbox(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

fn userns_map(host: u32) -> v1::IdMapping {
    v1::IdMapping {
        container_id: 0,
        host_id: host,
        length: 65536,
    }
}

/// A pod as kubelet asks for one with `hostUsers: false`.
fn userns_pod(name: &str, host: u32) -> SandboxRequest {
    let mut req = pod(name);
    req.config.linux = Some(v1::LinuxPodSandboxConfig {
        security_context: Some(v1::LinuxSandboxSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Container as i32,
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Pod as i32,
                    uids: vec![userns_map(host)],
                    gids: vec![userns_map(host)],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    req
}

/// A container with an idmapped host path (the pod's mappings).
fn idmapped_container(pod_id: &str, name: &str, host: &std::path::Path) -> ContainerRequest {
    std::fs::create_dir_all(host).unwrap();
    let mut req = container(pod_id, name);
    req.config.mounts = vec![v1::Mount {
        container_path: "/data".into(),
        host_path: host.display().to_string(),
        uid_mappings: vec![userns_map(100000)],
        gid_mappings: vec![userns_map(100000)],
        ..Default::default()
    }];
    req
}

const USERNS_RUN_STEPS: [&str; 9] = [
    "netns.create",
    "cni.add",
    "files.pod",
    "files.idmapped_bind",
    "files.idmapped_bind",
    "files.pause_bundle",
    "files.bind",
    "runtime.create",
    "task.start",
];

#[tokio::test]
async fn a_userns_pod_pins_its_namespace_and_maps_its_files_and_rootfs() {
    let r = rig();
    let id = r
        .core
        .run_pod_sandbox(userns_pod("web", 100000))
        .await
        .unwrap();
    assert_eq!(r.fake.steps()[..USERNS_RUN_STEPS.len()], USERNS_RUN_STEPS);
    let tree = r.core.layout.pod_userns(&id);
    {
        let w = r.fake.world.lock().unwrap();
        let mapping = w.userns[&tree.ns()];
        assert_eq!(
            (mapping.host_root_uid(), mapping.host_root_gid()),
            (100000, 100000)
        );
        assert_eq!(w.binds[&tree.files()], Some(tree.ns()));
        assert_eq!(w.binds[&tree.shm()], Some(tree.ns()));
        assert_eq!(w.binds[&tree.pause_rootfs()], None);
    }
    let host = r._dir.path().join("data");
    let c = r
        .core
        .create_container(idmapped_container(&id, "app", &host))
        .await
        .unwrap();
    {
        let w = r.fake.world.lock().unwrap();
        let idmap = &w.rootfs_idmaps[&c];
        assert_eq!(
            (idmap.userns.clone(), idmap.uid, idmap.gid),
            (tree.ns(), 100000, 100000)
        );
        assert_eq!(w.binds[&r.core.layout.userns_rootfs(&c)], None);
        assert_eq!(w.binds[&r.core.layout.userns_mount(&c, 0)], Some(tree.ns()));
    }
    r.core.start_container(&c).await.unwrap();
    r.core.stop_pod_sandbox(&id).await.unwrap();
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn each_failing_step_of_a_userns_run_pod_sandbox_leaves_nothing() {
    for step in USERNS_RUN_STEPS {
        let r = rig();
        r.fake.fail(step);
        let e = r
            .core
            .run_pod_sandbox(userns_pod("web", 100000))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        r.assert_empty();
    }
}

#[tokio::test]
async fn each_failing_step_of_a_userns_create_container_leaves_nothing_of_it() {
    for step in [
        "files.mount_rootfs",
        "files.bind",
        "files.create_dirs",
        "files.idmapped_bind",
        "files.write_spec",
    ] {
        let r = rig();
        let pod_id = r
            .core
            .run_pod_sandbox(userns_pod("web", 100000))
            .await
            .unwrap();
        let before = r.fake.world.lock().unwrap().binds.clone();
        r.fake.fail(step);
        let host = r._dir.path().join("data");
        let e = r
            .core
            .create_container(idmapped_container(&pod_id, "app", &host))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        assert!(r.core.containers.list().is_empty(), "{step}: record left");
        let w = r.fake.world.lock().unwrap();
        assert!(w.rootfs_mounted.is_empty(), "{step}: rootfs left");
        assert_eq!(w.binds, before, "{step}: a container bind left");
    }
}

#[tokio::test]
async fn bad_userns_requests_make_nothing() {
    let r = rig();
    let mut bad = Vec::new();
    let mut two = userns_pod("a", 100000);
    let ns = |req: &mut SandboxRequest| -> v1::UserNamespace {
        req.config
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap()
            .namespace_options
            .as_ref()
            .unwrap()
            .userns_options
            .clone()
            .unwrap()
    };
    let mut u = ns(&mut two);
    u.uids.push(userns_map(300000));
    bad.push(u.clone());
    let mut u2 = ns(&mut two);
    u2.mode = v1::NamespaceMode::Container as i32;
    bad.push(u2);
    let mut u3 = ns(&mut two);
    u3.gids = vec![v1::IdMapping {
        container_id: 0,
        host_id: 0,
        length: 65536,
    }];
    bad.push(u3);
    for u in bad {
        let mut req = userns_pod("bad", 100000);
        req.config
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .namespace_options
            .as_mut()
            .unwrap()
            .userns_options = Some(u);
        let e = r.core.run_pod_sandbox(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    }
    assert!(r.fake.steps().is_empty(), "{:?}", r.fake.steps());
    // A container asking for an idmapped mount in a pod without a userns,
    // or for another range than its pod's: refused before anything.
    let plain = r.core.run_pod_sandbox(pod("plain")).await.unwrap();
    let userns = r
        .core
        .run_pod_sandbox(userns_pod("u", 200000))
        .await
        .unwrap();
    let steps = r.fake.steps().len();
    let host = r._dir.path().join("data");
    for pod_id in [&plain, &userns] {
        let e = r
            .core
            .create_container(idmapped_container(pod_id, "app", &host))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    }
    // A container asking for the host's user namespace in a userns pod.
    let mut req = container(&userns, "host-userns");
    req.config.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = r.core.create_container(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    assert_eq!(
        r.fake.steps().len(),
        steps,
        "{:?}",
        &r.fake.steps()[steps..]
    );
}

/// A pod with kubelet's namespaces (pid CONTAINER): nothing needs a pause.
fn kubelet_pod(name: &str) -> SandboxRequest {
    let mut req = pod(name);
    req.config.linux = Some(v1::LinuxPodSandboxConfig {
        security_context: Some(v1::LinuxSandboxSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Container as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    req
}

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
