//! Recording fakes of every mechanism, for unit tests of the core without
//! root: one [`Fake`] plays the network, namespaces, host files, runtime,
//! images and event sink, keeps what "exists" (netns, attachments, files,
//! mounts, runtime containers), logs every call, and fails the steps a test
//! names.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use berth_shim::{ContainerStatus, ExitInfo, ShimOptions, ShimState};
use oci_spec::runtime::Spec;
use tokio::sync::watch;
use tonic::async_trait;

use super::mechanisms::*;
use crate::container::rootfs::ContainerDirs;
use crate::error::Error;
use crate::sandbox::files::SandboxFiles;

/// A runtime container the fake runtime holds.
#[derive(Debug, Clone)]
pub struct FakeContainer {
    pub started: bool,
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
    /// Pinned user namespaces and their mappings.
    pub userns: BTreeMap<PathBuf, berth_spec::UserNamespace>,
    /// Mount points of idmapped (`Some(userns)`) and plain (`None`) binds.
    pub binds: BTreeMap<PathBuf, Option<PathBuf>>,
    /// The idmaps of the rootfs mounts, by container id.
    pub rootfs_idmaps: BTreeMap<String, super::mechanisms::RootfsIdmap>,
    pub runtime: BTreeMap<String, FakeContainer>,
    /// Dir entries a recovery test lays out.
    pub entries: BTreeMap<PathBuf, Vec<String>>,
    pub events: Vec<(EventKind, String)>,
    /// The bundles' specs as written, by path.
    pub specs: BTreeMap<PathBuf, Spec>,
    /// Resources applied to running containers, by id, in order.
    pub updates: Vec<(String, oci_spec::runtime::LinuxResources)>,
    /// What an ExecSync answers.
    pub exec_output: berth_shim::ExecOutput,
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
            files: fake.clone(),
            runtime: Arc::new(fake.clone()),
            images: fake.clone(),
            events: fake.clone(),
        }
    }

    pub fn add_image(&self, name: &str, id: &str) {
        let image = berth_oci_image::Image {
            id: id.into(),
            repo_tags: vec![format!("docker.io/library/{name}:latest")],
            repo_digests: Vec::new(),
            size: 1,
            uid: None,
            username: String::new(),
            pinned: false,
            config: berth_oci_image::ImageConfig {
                cmd: vec!["/bin/sh".into()],
                ..Default::default()
            },
            layers: Vec::new(),
            manifests: Vec::new(),
            generation: 0,
        };
        self.images
            .lock()
            .unwrap()
            .insert(name.to_string(), image.clone());
        self.images.lock().unwrap().insert(id.to_string(), image);
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

    /// The steps called, in order, without ids.
    pub fn steps(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.split(' ').next().unwrap_or_default().to_string())
            .collect()
    }

    /// How many times `step` ran.
    pub fn count(&self, step: &str) -> usize {
        self.steps().iter().filter(|s| *s == step).count()
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

/// Ids of runtime containers are the sandbox or container id.
fn shim_id(shim_dir: &Path) -> String {
    shim_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[async_trait]
impl Network for Fake {
    async fn add(
        &self,
        id: &str,
        attachment: &berth_cni::Attachment,
    ) -> Result<Vec<String>, Error> {
        self.added.lock().unwrap().push(attachment.clone());
        self.call("cni.add", id).await?;
        self.world.lock().unwrap().attached.insert(id.to_string());
        Ok(vec!["10.88.0.2".into()])
    }
    async fn del(&self, id: &str, _attachment: &berth_cni::Attachment) -> Result<(), Error> {
        self.call("cni.del", id).await?;
        self.world.lock().unwrap().attached.remove(id);
        Ok(())
    }
    fn attachments(&self) -> Vec<(String, String)> {
        let world = self.world.lock().unwrap();
        world
            .attached
            .iter()
            .map(|id| (id.clone(), "eth0".to_string()))
            .collect()
    }
}

#[async_trait]
impl Namespaces for Fake {
    async fn create_netns(
        &self,
        id: &str,
        path: &Path,
        userns: Option<&super::mechanisms::UsernsPin>,
    ) -> Result<(), Error> {
        self.call("netns.create", id).await?;
        let mut world = self.world.lock().unwrap();
        world.netns.insert(path.to_path_buf());
        if let Some(u) = userns {
            world.userns.insert(u.path.clone(), u.mapping);
        }
        Ok(())
    }
    async fn remove_netns(&self, id: &str, path: &Path) -> Result<(), Error> {
        self.call("netns.remove", id).await?;
        let mut world = self.world.lock().unwrap();
        world.netns.remove(path);
        if let Some(tree) = crate::layout::pod_userns_of_netns(path) {
            world.userns.retain(|p, _| !p.starts_with(&tree.root));
            world.binds.retain(|p, _| !p.starts_with(&tree.root));
        }
        Ok(())
    }
    async fn pin(
        &self,
        id: &str,
        dir: &Path,
        _req: super::mechanisms::PinRequest,
    ) -> Result<(), Error> {
        self.call("ns.pin", id).await?;
        self.world.lock().unwrap().pins.insert(dir.to_path_buf());
        Ok(())
    }
    async fn unpin(&self, id: &str, dir: &Path) -> Result<(), Error> {
        self.call("ns.unpin", id).await?;
        self.world.lock().unwrap().pins.remove(dir);
        Ok(())
    }
    fn is_pinned(&self, dir: &Path, _req: &super::mechanisms::PinRequest) -> bool {
        self.world.lock().unwrap().pins.contains(dir)
    }
    fn is_netns(&self, path: &Path) -> bool {
        self.world.lock().unwrap().netns.contains(path)
    }
}

#[async_trait]
impl HostFiles for Fake {
    async fn write_pod_files(
        &self,
        id: &str,
        _files: &SandboxFiles,
        content: PodFileContent,
    ) -> Result<(), Error> {
        self.call("files.pod", id).await?;
        let mut world = self.world.lock().unwrap();
        world.pod_files.insert(id.to_string());
        if content.shm {
            world.shm_mounted.insert(id.to_string());
        }
        Ok(())
    }
    async fn unmount_shm(&self, id: &str, _files: &SandboxFiles) -> Result<(), Error> {
        self.call("files.unmount_shm", id).await?;
        self.world.lock().unwrap().shm_mounted.remove(id);
        Ok(())
    }
    async fn remove_pod_files(&self, id: &str, files: &SandboxFiles) -> Result<(), Error> {
        self.call("files.remove_pod", id).await?;
        let mut world = self.world.lock().unwrap();
        world.shm_mounted.remove(id);
        world.pod_files.remove(id);
        if let Some(tree) = crate::layout::pod_userns_of_state(&files.state) {
            world.binds.retain(|p, _| !p.starts_with(&tree.root));
        }
        Ok(())
    }
    async fn write_pause_bundle(&self, id: &str, bundle: &Path, _spec: &Spec) -> Result<(), Error> {
        self.call("files.pause_bundle", id).await?;
        self.world
            .lock()
            .unwrap()
            .bundles
            .insert(bundle.to_path_buf());
        Ok(())
    }
    async fn mount_idmapped_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
        idmap: &super::mechanisms::RootfsIdmap,
    ) -> Result<(), Error> {
        self.world
            .lock()
            .unwrap()
            .rootfs_idmaps
            .insert(id.to_string(), idmap.clone());
        self.mount_rootfs(id, dirs, lowerdirs).await
    }
    async fn mount_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        _lowerdirs: Vec<PathBuf>,
    ) -> Result<(), Error> {
        self.call("files.mount_rootfs", id).await?;
        // The spec generator reads the rootfs: an empty one will do.
        std::fs::create_dir_all(dirs.rootfs()).map_err(Error::io(id, "creating", dirs.rootfs()))?;
        let mut world = self.world.lock().unwrap();
        world.container_files.insert(id.to_string());
        world.rootfs_mounted.insert(id.to_string());
        Ok(())
    }
    async fn mount_image_volume(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        n: usize,
        _lowerdirs: Vec<PathBuf>,
    ) -> Result<PathBuf, Error> {
        self.call("files.mount_image_volume", id).await?;
        Ok(dirs.image_volume(n))
    }
    async fn mount_idmapped_image_volume(
        &self,
        id: &str,
        target: &Path,
        _lowerdirs: Vec<PathBuf>,
        userns: &Path,
    ) -> Result<(), Error> {
        self.call("files.mount_idmapped_image_volume", id).await?;
        let _ = std::fs::create_dir_all(target);
        self.world
            .lock()
            .unwrap()
            .binds
            .insert(target.to_path_buf(), Some(userns.to_path_buf()));
        Ok(())
    }
    async fn idmapped_bind(
        &self,
        id: &str,
        _source: &Path,
        target: &Path,
        userns: &Path,
    ) -> Result<(), Error> {
        self.call("files.idmapped_bind", id).await?;
        self.world
            .lock()
            .unwrap()
            .binds
            .insert(target.to_path_buf(), Some(userns.to_path_buf()));
        Ok(())
    }
    async fn bind(&self, id: &str, _source: &Path, target: &Path) -> Result<(), Error> {
        self.call("files.bind", id).await?;
        // What the spec generator reads through it: an empty dir will do.
        let _ = std::fs::create_dir_all(target);
        self.world
            .lock()
            .unwrap()
            .binds
            .insert(target.to_path_buf(), None);
        Ok(())
    }
    async fn remove_mounted_tree(&self, id: &str, dir: &Path) -> Result<(), Error> {
        self.call("files.remove_mounted_tree", id).await?;
        self.world
            .lock()
            .unwrap()
            .binds
            .retain(|p, _| !p.starts_with(dir));
        Ok(())
    }
    async fn unmount_rootfs(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        self.call("files.unmount_rootfs", id).await?;
        let mut world = self.world.lock().unwrap();
        world.rootfs_mounted.remove(id);
        if let Some(bound) = crate::layout::userns_container_of_bundle(&dirs.bundle) {
            world.binds.retain(|p, _| !p.starts_with(&bound));
        }
        Ok(())
    }
    async fn remove_container_files(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        self.call("files.remove_container", id).await?;
        let _ = std::fs::remove_dir_all(&dirs.bundle);
        let _ = std::fs::remove_dir_all(&dirs.root);
        let mut world = self.world.lock().unwrap();
        world.rootfs_mounted.remove(id);
        world.container_files.remove(id);
        if let Some(bound) = crate::layout::userns_container_of_bundle(&dirs.bundle) {
            world.binds.retain(|p, _| !p.starts_with(&bound));
        }
        Ok(())
    }
    async fn write_spec(&self, id: &str, path: &Path, spec: &Spec) -> Result<(), Error> {
        self.call("files.write_spec", id).await?;
        let mut world = self.world.lock().unwrap();
        world.specs.insert(path.to_path_buf(), spec.clone());
        Ok(())
    }
    async fn read_spec(&self, id: &str, path: &Path) -> Result<Spec, Error> {
        self.call("files.read_spec", id).await?;
        let world = self.world.lock().unwrap();
        world.specs.get(path).cloned().ok_or_else(|| {
            Error::io(id, "reading the spec", path)(std::io::ErrorKind::NotFound.into())
        })
    }
    async fn create_dirs(&self, id: &str, _dirs: Vec<PathBuf>) -> Result<(), Error> {
        self.call("files.create_dirs", id).await
    }
    async fn remove_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        self.call("files.remove_dir", id).await?;
        let mut world = self.world.lock().unwrap();
        world.bundles.remove(path);
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            if let Some(entries) = world.entries.get_mut(parent) {
                entries.retain(|e| e.as_str() != name.to_string_lossy());
            }
        }
        Ok(())
    }
    fn is_mounted(&self, path: &Path) -> bool {
        let world = self.world.lock().unwrap();
        world.rootfs_mounted.iter().any(|id| {
            path.parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n.to_string_lossy() == *id)
        })
    }
    fn exists(&self, path: &Path) -> bool {
        let world = self.world.lock().unwrap();
        path.file_name()
            .is_some_and(|n| world.runtime.contains_key(n.to_string_lossy().as_ref()))
    }
    fn entries(&self, dir: &Path) -> Vec<String> {
        self.world
            .lock()
            .unwrap()
            .entries
            .get(dir)
            .cloned()
            .unwrap_or_default()
    }
}

/// A fake shim holding one fake runtime container.
pub struct FakeTask {
    id: String,
    fake: Arc<Fake>,
}

impl FakeTask {
    fn container(&self) -> Result<FakeContainer, Error> {
        self.fake
            .world
            .lock()
            .unwrap()
            .runtime
            .get(&self.id)
            .cloned()
            .ok_or_else(|| Error::FailedPrecondition(format!("{}: no such container", self.id)))
    }
}

#[async_trait]
impl Task for FakeTask {
    async fn start(&self) -> Result<u32, Error> {
        self.fake.call("task.start", &self.id).await?;
        if let Some(c) = self.fake.world.lock().unwrap().runtime.get_mut(&self.id) {
            c.started = true;
        }
        Ok(42)
    }
    async fn wait(&self) -> Result<ExitInfo, Error> {
        let mut rx = self.container()?.exit.subscribe();
        loop {
            if let Some(info) = *rx.borrow_and_update() {
                return Ok(info);
            }
            if !self.container()?.shim_alive {
                return Err(Error::FailedPrecondition(format!(
                    "{}: the shim is gone",
                    self.id
                )));
            }
            // The fake shim also "dies" while waiting: poll for it.
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    return Err(Error::FailedPrecondition(format!("{}: the shim is gone", self.id)));
                },
                _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
            }
        }
    }
    async fn kill(&self, signal: i32, _all: bool) -> Result<(), Error> {
        self.fake.call("task.kill", &self.id).await?;
        if signal == libc::SIGKILL {
            self.fake.exit(&self.id, 137);
        }
        Ok(())
    }
    async fn state(&self) -> Result<ShimState, Error> {
        let c = self.container()?;
        let exit = *c.exit.borrow();
        Ok(ShimState {
            id: self.id.clone(),
            pid: 42,
            shim_pid: 41,
            status: if c.started {
                ContainerStatus::Running
            } else {
                ContainerStatus::Created
            },
            exit,
            exit_file: PathBuf::new(),
        })
    }
    async fn delete(&self, _force: bool) -> Result<(), Error> {
        self.fake.call("task.delete", &self.id).await?;
        self.fake.world.lock().unwrap().runtime.remove(&self.id);
        Ok(())
    }
    async fn exec_sync(
        &self,
        _process: &oci_spec::runtime::Process,
        _timeout: Option<std::time::Duration>,
    ) -> Result<berth_shim::ExecOutput, Error> {
        self.fake.call("task.exec_sync", &self.id).await?;
        Ok(self.fake.world.lock().unwrap().exec_output.clone())
    }
    async fn exec(&self, _opts: &berth_shim::ExecOptions) -> Result<berth_shim::IoStream, Error> {
        self.fake.call("task.exec", &self.id).await?;
        Err(Error::Unimplemented("a stream from the fake shim"))
    }
    async fn attach(
        &self,
        _opts: berth_shim::AttachOptions,
    ) -> Result<berth_shim::IoStream, Error> {
        self.fake.call("task.attach", &self.id).await?;
        Err(Error::Unimplemented("a stream from the fake shim"))
    }
    async fn update(&self, resources: &oci_spec::runtime::LinuxResources) -> Result<(), Error> {
        self.fake.call("task.update", &self.id).await?;
        let mut world = self.fake.world.lock().unwrap();
        world.updates.push((self.id.clone(), resources.clone()));
        Ok(())
    }
    async fn reopen_log(&self) -> Result<(), Error> {
        self.fake.call("task.reopen_log", &self.id).await
    }
}

#[async_trait]
impl Runtime for Arc<Fake> {
    async fn create(&self, opts: ShimOptions) -> Result<Arc<dyn Task>, Error> {
        self.call("runtime.create", &opts.id).await?;
        let (exit, _) = watch::channel(None);
        self.world.lock().unwrap().runtime.insert(
            opts.id.clone(),
            FakeContainer {
                started: false,
                exit,
                shim_alive: true,
            },
        );
        Ok(Arc::new(FakeTask {
            id: opts.id,
            fake: self.clone(),
        }))
    }
    async fn connect(&self, id: &str, _shim_dir: &Path) -> Result<Arc<dyn Task>, Error> {
        let alive = self
            .world
            .lock()
            .unwrap()
            .runtime
            .get(id)
            .is_some_and(|c| c.shim_alive);
        if !alive {
            return Err(Error::FailedPrecondition(format!("{id}: no shim")));
        }
        Ok(Arc::new(FakeTask {
            id: id.to_string(),
            fake: self.clone(),
        }))
    }
    async fn delete(&self, id: &str, shim_dir: &Path, _runtime: &str) -> Result<(), Error> {
        self.call("runtime.delete", id).await?;
        let _ = shim_id(shim_dir);
        let mut world = self.world.lock().unwrap();
        if let Some(c) = world.runtime.remove(id) {
            // Deleting kills what runs.
            if c.exit.borrow().is_none() {
                c.exit.send_replace(Some(ExitInfo {
                    pid: 42,
                    exit_code: 137,
                    exited_at_ns: 1,
                    oom_killed: false,
                }));
            }
        }
        Ok(())
    }
    fn exit_file(&self, _shim_dir: &Path) -> Option<ExitInfo> {
        None
    }
    fn check(&self, _id: &str, _runtime: &str) -> Result<(), Error> {
        Ok(())
    }
}

#[async_trait]
impl Images for Fake {
    async fn collect_garbage(&self) -> Result<(), Error> {
        self.call("images.gc", "").await
    }
    fn get(&self, name: &str) -> Option<berth_oci_image::Image> {
        self.images.lock().unwrap().get(name).cloned()
    }
    fn snapshot_dirs(&self, chain_ids: &[String]) -> Vec<PathBuf> {
        chain_ids
            .iter()
            .map(|c| PathBuf::from("/snapshots").join(c))
            .collect()
    }
}

#[async_trait]
impl EventSink for Fake {
    async fn emit(&self, kind: EventKind, id: &str, _sandbox_id: &str) {
        self.world
            .lock()
            .unwrap()
            .events
            .push((kind, id.to_string()));
    }
}
