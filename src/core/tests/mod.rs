//! Unit tests of the lifecycle rules, with the recording fakes: no root, no
//! runc, no CNI. Each step of RunPodSandbox, CreateContainer and
//! StartContainer fails in turn, and each test asserts what was undone and
//! what was kept; teardown with failing steps, concurrency on one id, and
//! recovery's decisions; resource updates.

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
    let layout = Layout::new(&config.root, &config.state);
    let stores = Stores::open(&layout).unwrap();
    Core::new(config, layout, stores, Fake::mechanisms(fake), options)
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

/// A rig with a pod and a started container in it: (rig, pod id,
/// container id).
async fn running() -> (Rig, String, String) {
    let r = rig();
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(container(&pod_id, "app"))
        .await
        .unwrap();
    r.core.start_container(&id).await.unwrap();
    (r, pod_id, id)
}

/// The spec the fake runtime was given for container `id`.
fn spec_of(r: &Rig, id: &str) -> oci_spec::runtime::Spec {
    let path = r.core.layout.container_dirs(id).spec();
    r.fake.world.lock().unwrap().specs[&path].clone()
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

/// RunPodSandbox of `request` with CNI ADD held up: every step of
/// `steps` is called (within 10 s) while ADD has not returned.
async fn made_while_cni_add_runs(request: SandboxRequest, steps: &[&str]) {
    let r = rig();
    r.fake
        .delay("cni.add", std::time::Duration::from_secs(3600));
    let core = r.core.clone();
    let run = tokio::spawn(async move { core.run_pod_sandbox(request).await });
    let called = async {
        while !steps.iter().all(|s| r.fake.count(s) > 0) {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), called)
        .await
        .unwrap_or_else(|_| panic!("{steps:?} not called in time: {:?}", r.fake.steps()));
    assert!(!run.is_finished(), "ready before CNI ADD returned");
    run.abort();
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

mod containers;
mod image_volumes;
mod pinned;
mod plugins;
mod recovery;
mod retries;
mod sandboxes;
mod update;
mod userns;
