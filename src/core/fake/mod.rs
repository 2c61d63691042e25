//! Recording fakes of every mechanism, for unit tests of the core without
//! root: one [`Fake`] plays the network, namespaces, host files, runtime,
//! images and event sink, keeps what "exists" (netns, attachments, files,
//! mounts, runtime containers), logs every call, and fails the steps a test
//! names.

mod files;
mod images;
mod mounts;
mod net;
mod plugins;
mod shims;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use berth_shim::ExitInfo;
use oci_spec::runtime::Spec;
use tokio::sync::watch;

use super::mechanisms::{EventKind, Mechanisms, RootfsIdmap};
use crate::error::Error;

/// The start time fake shims report: not a time the core takes itself.
pub const FAKE_STARTED_AT: i64 = 1_600_000_000_000_000_000;

/// A runtime container the fake runtime holds.
#[derive(Debug, Clone)]
pub struct FakeContainer {
    pub started: bool,
    /// When its shim says it was started ([`FAKE_STARTED_AT`]).
    pub started_at_ns: Option<i64>,
    /// Sent once the container's init has exited.
    pub exit: watch::Sender<Option<ExitInfo>>,
    /// Whether its shim answers.
    pub shim_alive: bool,
}

/// What exists, as the fakes see it.
#[derive(Debug, Default)]
pub struct World {
    pub netns: BTreeSet<PathBuf>,
    /// Dirs with a pod's pinned UTS/IPC namespaces.
    pub pins: BTreeSet<PathBuf>,
    /// Sandbox ids with a CNI attachment.
    pub attached: BTreeSet<String>,
    pub pod_files: BTreeSet<String>,
    pub shm_mounted: BTreeSet<String>,
    pub bundles: BTreeSet<PathBuf>,
    pub rootfs_mounted: BTreeSet<String>,
    pub container_files: BTreeSet<String>,
    /// Directories `create_dirs` and `make_volumes` made (host paths,
    /// anonymous volumes).
    pub dirs: BTreeSet<PathBuf>,
    /// Pinned user namespaces and their mappings.
    pub userns: BTreeMap<PathBuf, berth_spec::UserNamespace>,
    /// Mount points of idmapped (`Some(userns)`) and plain (`None`) binds.
    pub binds: BTreeMap<PathBuf, Option<PathBuf>>,
    /// The idmaps of the rootfs mounts, by container id.
    pub rootfs_idmaps: BTreeMap<String, RootfsIdmap>,
    pub runtime: BTreeMap<String, FakeContainer>,
    /// Dir entries a recovery test lays out.
    pub entries: BTreeMap<PathBuf, Vec<String>>,
    pub events: Vec<(EventKind, String)>,
    /// The bundles' specs as written, by path.
    pub specs: BTreeMap<PathBuf, Spec>,
    /// Resources applied to running containers, by id, in order.
    pub updates: Vec<(String, oci_spec::runtime::LinuxResources)>,
    /// The OOM score adjustment set on a running container, by id.
    pub oom_score_adj: BTreeMap<String, i32>,
    /// What an ExecSync answers.
    pub exec_output: berth_shim::ExecOutput,
}

impl World {
    /// Records a bind mount on `target`: idmapped through `userns`, or plain.
    pub fn bind(&mut self, target: &Path, userns: Option<&Path>) {
        self.binds
            .insert(target.to_path_buf(), userns.map(Path::to_path_buf));
    }

    /// Forgets every bind mount at or below `dir`.
    pub fn unbind_below(&mut self, dir: &Path) {
        self.binds.retain(|p, _| !p.starts_with(dir));
        // A pinned user namespace is a bind mount too.
        self.userns.retain(|p, _| !p.starts_with(dir));
    }
}

/// The fake of every mechanism.
#[derive(Default)]
pub struct Fake {
    pub log: Mutex<Vec<String>>,
    failing: Mutex<HashSet<String>>,
    delays: Mutex<BTreeMap<String, std::time::Duration>>,
    pub world: Mutex<World>,
    pub images: Mutex<BTreeMap<String, berth_oci_image::Image>>,
    /// The attachments CNI ADD was given.
    pub added: Mutex<Vec<berth_cni::Attachment>>,
    /// Env the fake NRI CreateContainer hook adds.
    pub nri_env: Mutex<Vec<String>>,
    /// CPU shares the fake NRI UpdateContainer hook sets.
    pub nri_cpu_shares: Mutex<Option<i64>>,
    /// (hook, the state of its pod or container) as each NRI hook ran.
    pub hook_states: Mutex<Vec<(String, String)>>,
}

impl Fake {
    pub fn new() -> Arc<Fake> {
        let fake = Arc::new(Fake::default());
        fake.add_image("busybox", "sha256:1111");
        fake
    }

    /// Every mechanism, played by `fake`.
    pub fn mechanisms(fake: &Arc<Fake>) -> Mechanisms {
        Mechanisms {
            network: fake.clone(),
            namespaces: fake.clone(),
            pod_files: fake.clone(),
            mounts: fake.clone(),
            binds: fake.clone(),
            files: fake.clone(),
            runtime: Arc::new(fake.clone()),
            images: fake.clone(),
            events: fake.clone(),
            plugins: fake.clone(),
        }
    }

    pub fn add_image(&self, name: &str, id: &str) {
        let mut image = image_named(name, id);
        image.config.cmd = vec!["/bin/sh".into()];
        self.put_image(name, image);
    }

    /// An OCI artifact `name` (id `id`), as the store records one: one
    /// snapshot of files.
    pub fn add_artifact(&self, name: &str, id: &str) {
        let mut image = image_named(name, id);
        image.layers = vec![berth_oci_image::Layer {
            digest: "sha256:blob".into(),
            media_type: "application/octet-stream".into(),
            size: 1,
            diff_id: "sha256:blob".into(),
            chain_id: format!("{id}-files"),
            file: Some("model.bin".into()),
        }];
        image.manifests = vec![id.into()];
        image.artifact = Some(berth_oci_image::Artifact {
            artifact_type: "application/vnd.lab.model.v1".into(),
            config: "sha256:config".into(),
        });
        self.put_image(name, image);
    }

    fn put_image(&self, name: &str, image: berth_oci_image::Image) {
        let mut images = self.images.lock().unwrap();
        images.insert(name.to_string(), image.clone());
        images.insert(image.id.clone(), image);
    }

    /// Makes every later call of `step` fail.
    pub fn fail(&self, step: &str) {
        self.failing.lock().unwrap().insert(step.to_string());
    }

    /// Lets `step` succeed again.
    pub fn heal(&self, step: &str) {
        self.failing.lock().unwrap().remove(step);
    }

    /// Makes every later call of `step` take `delay`.
    pub fn delay(&self, step: &str, delay: std::time::Duration) {
        self.delays.lock().unwrap().insert(step.to_string(), delay);
    }

    /// Logs a call of `step` for `id`, delaying or failing it when asked to.
    async fn call(&self, step: &str, id: &str) -> Result<(), Error> {
        self.log.lock().unwrap().push(format!("{step} {id}"));
        let fails = self.failing.lock().unwrap().contains(step);
        let delay = self.delays.lock().unwrap().get(step).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        if fails {
            return Err(Error::Internal(format!("{id}: injected failure of {step}")));
        }
        Ok(())
    }

    /// The NRI hooks called, in order (without `nri.` and ids).
    pub fn hooks(&self) -> Vec<String> {
        self.all_steps()
            .into_iter()
            .filter_map(|s| s.strip_prefix("nri.").map(str::to_string))
            .filter(|s| s != "block_sync")
            .collect()
    }

    /// Every step called (the NRI hooks too), in order, without ids.
    pub fn all_steps(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.split(' ').next().unwrap_or_default().to_string())
            .collect()
    }

    /// The mechanisms' steps called (not the NRI hooks, nor the runtime's
    /// warm-ups: hints that change nothing), in order, without ids.
    pub fn steps(&self) -> Vec<String> {
        let mut steps = self.all_steps();
        steps.retain(|s| !s.starts_with("nri.") && s != "runtime.warm_up");
        steps
    }

    /// Every call logged, with its id (`step id`), in order.
    pub fn calls(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// How many times `step` ran.
    pub fn count(&self, step: &str) -> usize {
        self.all_steps().iter().filter(|s| *s == step).count()
    }

    /// Makes container `id`'s init exit with `code`.
    pub fn exit(&self, id: &str, code: i32) {
        if let Some(c) = self.world.lock().unwrap().runtime.get(id) {
            c.exit.send_replace(Some(ExitInfo {
                pid: 42,
                exit_code: code,
                exited_at_ns: 1,
                oom_killed: false,
            }));
        }
    }

    /// Kills the shim of `id` (the container goes on, unwatched).
    pub fn kill_shim(&self, id: &str) {
        if let Some(c) = self.world.lock().unwrap().runtime.get_mut(id) {
            c.shim_alive = false;
        }
    }
}

/// An image `name` (id `id`) with nothing in it.
fn image_named(name: &str, id: &str) -> berth_oci_image::Image {
    berth_oci_image::Image {
        id: id.into(),
        repo_tags: vec![format!("docker.io/library/{name}:latest")],
        repo_digests: Vec::new(),
        size: 1,
        uid: None,
        username: String::new(),
        pinned: false,
        config: Default::default(),
        layers: Vec::new(),
        manifests: Vec::new(),
        generation: 0,
        artifact: None,
    }
}
