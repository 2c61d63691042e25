//! The seams between the lifecycle core and the host: each mechanism the
//! core uses (CNI, namespaces, files and mounts, the runtime through shims,
//! images, events) is a small trait. [`super::real`] implements them over
//! berth's crates; the unit tests use recording fakes that can fail any call.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Duration;

use berth_shim::{
    AttachOptions, ExecOptions, ExecOutput, ExitInfo, IoStream, ShimOptions, ShimState,
};
use cri_api::v1;
use oci_spec::runtime::{LinuxResources, Process, Spec};
use tonic::async_trait;

use crate::container::rootfs::ContainerDirs;
use crate::container::Container;
use crate::error::Error;
use crate::sandbox::files::SandboxFiles;
use crate::sandbox::Sandbox;

/// A pod's network through CNI.
#[async_trait]
pub trait Network: Send + Sync {
    /// ADD: the pod's IPs, primary first.
    async fn add(&self, id: &str, attachment: &berth_cni::Attachment)
        -> Result<Vec<String>, Error>;
    /// DEL: works from the cache when the netns is gone; idempotent.
    async fn del(&self, id: &str, attachment: &berth_cni::Attachment) -> Result<(), Error>;
    /// (sandbox id, interface) of every attachment DEL can still release.
    fn attachments(&self) -> Vec<(String, String)>;
    /// Whether a network configuration is there to attach pods with; why
    /// not (blocks: not on a worker).
    fn ready(&self) -> Result<(), String>;
}

/// The user namespace of a pod (`userns_options` mode POD): where it is to
/// be pinned, and its mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsernsPin {
    pub path: PathBuf,
    pub mapping: berth_spec::UserNamespace,
}

/// How a container's rootfs is to be mapped for a pod's user namespace:
/// the image's layers through idmapped mounts (never chowned: they are
/// shared), the writable layer owned by the namespace's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsIdmap {
    /// A user namespace file with the pod's mapping.
    pub userns: PathBuf,
    /// The host uid and gid of the namespace's root.
    pub uid: u32,
    pub gid: u32,
}

/// A pod's namespaces (network; UTS and IPC without a pause), pinned by
/// bind mounts.
#[async_trait]
pub trait Namespaces: Send + Sync {
    /// A new network namespace at `path`; with `userns`, owned by a new
    /// user namespace with that mapping, pinned at `userns.path`.
    async fn create_netns(
        &self,
        id: &str,
        path: &Path,
        userns: Option<&UsernsPin>,
    ) -> Result<(), Error>;
    /// Idempotent: an absent namespace is fine. Removes the pod's userns
    /// tree too (see [`crate::layout::Layout::pod_userns`]).
    async fn remove_netns(&self, id: &str, path: &Path) -> Result<(), Error>;
    /// A new user namespace with `userns.mapping`, owning nothing, pinned
    /// at `userns.path`: a pod in its own user namespace on the host's
    /// network. Removed with the pod's userns tree
    /// ([`Binds::remove_mounted_tree`]).
    async fn create_userns(&self, id: &str, userns: &UsernsPin) -> Result<(), Error>;
    /// Pins a pod's new UTS (with its hostname) and IPC namespaces as
    /// `req` asks, in `dir`: a pod without a pause process.
    async fn pin(&self, id: &str, dir: &Path, req: PinRequest) -> Result<(), Error>;
    /// Idempotent: removes whatever pins are in `dir`, and `dir`.
    async fn unpin(&self, id: &str, dir: &Path) -> Result<(), Error>;
    /// Whether the pins `req` asked for in `dir` are all still there.
    fn is_pinned(&self, dir: &Path, req: &PinRequest) -> bool;
    /// Whether `path` is a network namespace.
    fn is_netns(&self, path: &Path) -> bool;
}

pub use berth_netns::pin::PinRequest;

/// What a pod's shared files hold.
#[derive(Debug, Clone, Default)]
pub struct PodFileContent {
    pub hostname: String,
    pub host_network: bool,
    pub dns: Option<v1::DnsConfig>,
    /// Mount the pod's own /dev/shm tmpfs.
    pub shm: bool,
}

// Files, directories and mounts of pods and containers: four traits, by job.

/// The files a pod's containers share, and the pause's bundle.
#[async_trait]
pub trait PodFiles: Send + Sync {
    /// hostname, hosts, resolv.conf, and the /dev/shm tmpfs.
    async fn write_pod_files(
        &self,
        id: &str,
        files: &SandboxFiles,
        content: PodFileContent,
    ) -> Result<(), Error>;
    /// Unmounts the pod's /dev/shm; not mounted is fine.
    async fn unmount_shm(&self, id: &str, files: &SandboxFiles) -> Result<(), Error>;
    /// Unmounts and removes the pod's files; absent is fine.
    async fn remove_pod_files(&self, id: &str, files: &SandboxFiles) -> Result<(), Error>;
    /// The pause's bundle: its rootfs and `config.json`.
    async fn write_pause_bundle(&self, id: &str, bundle: &Path, spec: &Spec) -> Result<(), Error>;
}

/// A container's rootfs and image volumes: mounted, unmounted, removed.
#[async_trait]
pub trait ContainerMounts: Send + Sync {
    /// Mounts the container's overlay rootfs over the image's snapshots.
    async fn mount_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
    ) -> Result<(), Error>;
    /// Mounts the rootfs of a container of a userns pod: the overlay over
    /// idmapped views of the snapshots (see [`RootfsIdmap`]).
    async fn mount_idmapped_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
        idmap: &RootfsIdmap,
    ) -> Result<(), Error>;
    /// Mounts an image read-only at `target` (made, with its parents, mode
    /// 0711) for an image volume of a userns pod: over idmapped views of
    /// its snapshots, through the user namespace file `userns`.
    async fn mount_idmapped_image_volume(
        &self,
        id: &str,
        target: &Path,
        lowerdirs: Vec<PathBuf>,
        userns: &Path,
    ) -> Result<(), Error>;
    /// Mounts an image read-only for an image volume; where it is.
    async fn mount_image_volume(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        n: usize,
        lowerdirs: Vec<PathBuf>,
    ) -> Result<PathBuf, Error>;
    /// Unmounts the rootfs and image volumes (and the rootfs's bind for a
    /// userns pod); not mounted is fine.
    async fn unmount_rootfs(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error>;
    /// Unmounts and removes the container's dirs; absent is fine. They are
    /// gone from their paths when this returns (their contents may be
    /// freed after).
    async fn remove_container_files(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error>;
    /// Whether something is mounted on `path`.
    fn is_mounted(&self, path: &Path) -> bool;
}

/// Bind mounts, plain and idmapped, into the userns trees of pods and
/// containers (see [`crate::layout::Layout::userns_dir`]), and their removal.
#[async_trait]
pub trait Binds: Send + Sync {
    /// An idmapped bind mount of `source` (a dir or a file) on `target`
    /// (made, with its parents, mode 0711), through the user namespace
    /// file `userns`.
    async fn idmapped_bind(
        &self,
        id: &str,
        source: &Path,
        target: &Path,
        userns: &Path,
    ) -> Result<(), Error>;
    /// A plain bind mount of `source` (a dir) on `target` (made, with its
    /// parents, mode 0711).
    async fn bind(&self, id: &str, source: &Path, target: &Path) -> Result<(), Error>;
    /// Unmounts every mount at or below `dir`, then removes it; absent is
    /// fine. Never removes through a mount that is left.
    async fn remove_mounted_tree(&self, id: &str, dir: &Path) -> Result<(), Error>;
}

/// Bundle specs, directories, and what recovery reads of the host's files.
#[async_trait]
pub trait Files: Send + Sync {
    /// Replaces the bundle's `config.json` atomically.
    async fn write_spec(&self, id: &str, path: &Path, spec: &Spec) -> Result<(), Error>;
    /// Reads the bundle's `config.json`.
    async fn read_spec(&self, id: &str, path: &Path) -> Result<Spec, Error>;
    /// Makes directories (host paths, the log dir).
    async fn create_dirs(&self, id: &str, dirs: Vec<PathBuf>) -> Result<(), Error>;
    /// Makes the container's anonymous volumes that do not exist yet, each
    /// with what the image has at its path in the mounted `rootfs` (see
    /// [`crate::container::volumes`]); `userns`: the pod's.
    async fn make_volumes(
        &self,
        id: &str,
        rootfs: &Path,
        volumes: Vec<berth_spec::AnonymousVolume>,
        userns: Option<berth_spec::UserNamespace>,
    ) -> Result<(), Error>;
    /// Removes a directory tree (unmounting what is below it first); absent
    /// is fine. It is gone from its path when this returns (its contents
    /// may be freed after).
    async fn remove_dir(&self, id: &str, path: &Path) -> Result<(), Error>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Names of the entries of `dir` (none when it is absent).
    fn entries(&self, dir: &Path) -> Vec<String>;
}

/// One container (or pause) held by its shim.
#[async_trait]
pub trait Task: Send + Sync {
    /// `runc start`: the pid.
    async fn start(&self) -> Result<u32, Error>;
    /// Until the container's init exits.
    async fn wait(&self) -> Result<ExitInfo, Error>;
    async fn kill(&self, signal: i32, all: bool) -> Result<(), Error>;
    async fn state(&self) -> Result<ShimState, Error>;
    /// Deletes the runtime's container; the shim exits afterwards.
    async fn delete(&self, force: bool) -> Result<(), Error>;
    /// Runs `process` in the container and collects its output; the shim
    /// kills it after `timeout` and says so.
    async fn exec_sync(
        &self,
        process: &Process,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput, Error>;
    /// Starts a process in the container and streams its stdio.
    async fn exec(&self, opts: &ExecOptions) -> Result<IoStream, Error>;
    /// Streams the container's own stdio.
    async fn attach(&self, opts: AttachOptions) -> Result<IoStream, Error>;
    /// Applies new resources to the running container.
    async fn update(&self, resources: &LinuxResources) -> Result<(), Error>;
    /// Sets the OOM score adjustment of every process of the running
    /// container (runc cannot change it after the start).
    async fn set_oom_score_adj(&self, value: i32) -> Result<(), Error>;
    /// Reopens the CRI log file (after kubelet rotated it).
    async fn reopen_log(&self) -> Result<(), Error>;
}

/// The OCI runtime, through one shim per container.
#[async_trait]
pub trait Runtime: Send + Sync {
    /// Spawns a shim that runs `runc create`.
    async fn create(&self, opts: ShimOptions) -> Result<Arc<dyn Task>, Error>;
    /// The live shim in `shim_dir`, if it answers.
    async fn connect(&self, id: &str, shim_dir: &Path) -> Result<Arc<dyn Task>, Error>;
    /// Deletes the runtime's container, through its shim when it answers,
    /// else with the runtime itself; gone is fine.
    async fn delete(&self, id: &str, shim_dir: &Path, runtime: &str) -> Result<(), Error>;
    /// The exit the shim recorded, if any.
    fn exit_file(&self, shim_dir: &Path) -> Option<ExitInfo>;
    /// Whether the runtime binary `runtime` (a path, or a name in PATH) can
    /// be run, for pod `id`.
    fn check(&self, id: &str, runtime: &str) -> Result<(), Error>;
    /// A call that will run the runtime for `id` (a container's or a
    /// pause's start, an exec) has arrived: start now what the runtime's
    /// first cgroup move would wait for (see `real::cgroup_warmup`). A
    /// hint: it returns at once and never fails the call.
    fn warm_up(&self, id: &str);
}

/// The images containers are made from.
#[async_trait]
pub trait Images: Send + Sync {
    /// Removes content no image and no container uses any more.
    async fn collect_garbage(&self) -> Result<(), Error>;
    fn get(&self, name: &str) -> Option<berth_oci_image::Image>;
    /// The dirs of snapshots (chain ids), in the order given.
    fn snapshot_dirs(&self, chain_ids: &[String]) -> Vec<PathBuf>;
}

/// The snapshots (chain ids) of an image, top layer first (overlay order);
/// each once (an artifact's files share one).
pub fn chain_ids(image: &berth_oci_image::Image) -> Vec<String> {
    let mut ids = image.chain_ids();
    ids.reverse();
    ids
}

/// A life-cycle change to report (GetContainerEvents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// Where the core reports life-cycle changes.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Container (or, for a sandbox, the sandbox id) `id` of pod `sandbox_id`.
    async fn emit(&self, kind: EventKind, id: &str, sandbox_id: &str);
}

/// A pod's life-cycle change that NRI plugins hear of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEvent {
    /// Set up, before it is ready (a failure fails RunPodSandbox).
    Run,
    /// Its containers stopped, before the pause and network go.
    Stop,
    /// Before its record goes.
    Remove,
    /// UpdatePodSandboxResources recorded.
    PostUpdate,
}

/// A container's life-cycle change that NRI plugins hear of (CreateContainer
/// and UpdateContainer, which may adjust, have methods of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerEvent {
    PostCreate,
    /// Before it runs (a failure fails StartContainer).
    Start,
    PostStart,
    PostUpdate,
    /// Once, when it has exited (stopped or by itself).
    Stop,
    /// Before its record goes.
    Remove,
}

/// Held while a pod or container is being made: plugin synchronization
/// waits, so a new plugin sees it in its snapshot or gets its events.
pub type SyncBlock = Box<dyn std::any::Any + Send>;

/// NRI plugins, told of pods and containers at the points containerd tells
/// them, and adjusting containers as they are made. Takes berth's own
/// records; the conversion to NRI's types is the implementation's. Updates
/// plugins ask for other containers go through the core's update path.
/// Without NRI every call is a no-op.
#[async_trait]
pub trait Plugins: Send + Sync {
    /// Blocks plugin synchronization until dropped.
    async fn block_sync(&self) -> SyncBlock;
    /// A pod's event; an error names the plugin.
    async fn pod_event(&self, event: PodEvent, pod: &Sandbox) -> Result<(), Error>;
    /// UpdatePodSandboxResources, before the new resources are recorded.
    async fn update_pod(
        &self,
        pod: &Sandbox,
        overhead: Option<&v1::LinuxContainerResources>,
        resources: Option<&v1::LinuxContainerResources>,
    ) -> Result<(), Error>;
    /// CreateContainer, between spec generation and the bundle: the
    /// plugins' merged adjustment applied to `spec`, or why not (naming
    /// the plugin).
    async fn create_container(
        &self,
        pod: &Sandbox,
        container: &Container,
        spec: &mut Spec,
    ) -> Result<(), Error>;
    /// UpdateContainerResources, before they are applied: plugins may
    /// change `resources`.
    async fn update_container(
        &self,
        pod: &Sandbox,
        container: &Container,
        resources: &mut v1::LinuxContainerResources,
    ) -> Result<(), Error>;
    /// A container's other events.
    async fn container_event(
        &self,
        event: ContainerEvent,
        pod: &Sandbox,
        container: &Container,
    ) -> Result<(), Error>;
}

/// Every mechanism the core uses.
#[derive(Clone)]
pub struct Mechanisms {
    pub network: Arc<dyn Network>,
    pub namespaces: Arc<dyn Namespaces>,
    pub pod_files: Arc<dyn PodFiles>,
    pub mounts: Arc<dyn ContainerMounts>,
    pub binds: Arc<dyn Binds>,
    pub files: Arc<dyn Files>,
    pub runtime: Arc<dyn Runtime>,
    pub images: Arc<dyn Images>,
    pub events: Arc<dyn EventSink>,
    pub plugins: Arc<dyn Plugins>,
}
