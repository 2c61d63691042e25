//! The mechanisms of [`super::mechanisms`] over berth's crates: CNI,
//! netns, the shim and the OCI runtime, the image store, and the host's
//! files and mounts. Thin: each call moves blocking work (mounts, fsync,
//! runtime execs, setns) off the tokio workers and keeps the cause of a
//! failure with the object's id.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_shim::{ExitInfo, ShimClient, ShimOptions, ShimPaths, ShimState, SpawnOptions};
use oci_spec::runtime::Spec;
use tonic::async_trait;

use super::mechanisms::{
    HostFiles, Images, Namespaces, Network, PinRequest, PodFileContent, RootfsIdmap, Runtime, Task,
    UsernsPin,
};
use crate::container::rootfs::ContainerDirs;
use crate::error::Error;
use crate::layout::{self, Layout};
use crate::sandbox::files::SandboxFiles;

/// Runs blocking work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(Error::join)?
}

/// CNI through [`berth_cni::Cni`].
pub struct Cni(pub berth_cni::Cni);

#[async_trait]
impl Network for Cni {
    async fn add(
        &self,
        id: &str,
        attachment: &berth_cni::Attachment,
    ) -> Result<Vec<String>, Error> {
        let result = self
            .0
            .add(attachment)
            .await
            .map_err(Error::network(id, "setting up the pod network"))?;
        Ok(result
            .sandbox_ips(&attachment.ifname)
            .iter()
            .map(|ip| ip.to_string())
            .collect())
    }

    async fn del(&self, id: &str, attachment: &berth_cni::Attachment) -> Result<(), Error> {
        self.0
            .del(attachment)
            .await
            .map_err(Error::network(id, "tearing down the pod network"))
    }

    fn attachments(&self) -> Vec<(String, String)> {
        self.0.cached_attachments().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "listing the CNI cache");
            Vec::new()
        })
    }
}

/// Network namespaces through [`berth_netns`], each on a fresh thread.
pub struct NetNs;

#[async_trait]
impl Namespaces for NetNs {
    async fn create_netns(
        &self,
        id: &str,
        path: &Path,
        userns: Option<&UsernsPin>,
    ) -> Result<(), Error> {
        let (id, path, userns) = (id.to_string(), path.to_path_buf(), userns.cloned());
        blocking(move || {
            let dir = path.parent().map(PathBuf::from).unwrap_or_default();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let made = match &userns {
                None => berth_netns::NetNs::create(&dir, &name),
                // The network namespace must be owned by the pod's user
                // namespace, or the pod's root could neither join it nor
                // mount sysfs in it. berth makes both itself, in one forked
                // holder process (berth_idmap::Holder), before the pause,
                // as for other pods: CNI ADD runs before the pause exists,
                // so the order of the pod's set-up stays the same for every
                // pod, and it works the same with runc 1.1 and crun 1.8,
                // which only join both namespaces by path. (Letting the
                // runtime make the netns and binding /proc/PID/ns/net
                // afterwards, as containerd 2 does, would move CNI after
                // the pause for these pods only.)
                Some(u) => {
                    let tree = u.path.parent().unwrap_or(Path::new("/"));
                    private_to(tree, u.mapping.host_root_uid(), u.mapping.host_root_gid())
                        .map_err(Error::io(&id, "creating", tree))?;
                    let (uids, gids) = (u.mapping.uids.map_line(), u.mapping.gids.map_line());
                    berth_netns::NetNs::create_owned(&dir, &name, &u.path, &uids, &gids)
                }
            };
            made.map(|_| ()).map_err(|e| {
                Error::io(&id, "creating network namespace", &path)(std::io::Error::other(e))
            })
        })
        .await
    }

    async fn remove_netns(&self, id: &str, path: &Path) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || {
            berth_netns::remove_path(&path).map_err(|e| {
                Error::io(&id, "removing network namespace", &path)(std::io::Error::other(e))
            })?;
            match layout::pod_userns_of_netns(&path) {
                Some(tree) => remove_mounted_tree(&id, &tree.root),
                None => Ok(()),
            }
        })
        .await
    }

    async fn pin(&self, id: &str, dir: &Path, req: PinRequest) -> Result<(), Error> {
        let (id, dir) = (id.to_string(), dir.to_path_buf());
        blocking(move || {
            berth_netns::pin::pin(&dir, &req).map(|_| ()).map_err(|e| {
                Error::io(&id, "pinning the pod's namespaces in", &dir)(std::io::Error::other(e))
            })
        })
        .await
    }

    async fn unpin(&self, id: &str, dir: &Path) -> Result<(), Error> {
        let (id, dir) = (id.to_string(), dir.to_path_buf());
        blocking(move || {
            berth_netns::pin::unpin(&dir).map_err(|e| {
                Error::io(&id, "removing the pod's pinned namespaces in", &dir)(
                    std::io::Error::other(e),
                )
            })
        })
        .await
    }

    fn is_pinned(&self, dir: &Path, req: &PinRequest) -> bool {
        berth_netns::pin::is_pinned(&req.files(dir)).unwrap_or(false)
    }

    fn is_netns(&self, path: &Path) -> bool {
        berth_netns::is_namespace(path).unwrap_or(false)
    }
}

/// The host's files and mounts.
pub struct Host;

/// Makes `dir` and its missing parents with mode 0711 (traversable, not
/// listable: see [`Layout::userns_dir`]).
fn make_traversable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
}

/// Makes `dir` (parents 0711) owned by the host ids of a pod's root, mode
/// 0700: its runtime set-up (which runs as that root) passes, and no other
/// local user does (the pod's /dev/shm and files are bound below it).
fn private_to(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    make_traversable(dir)?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The mount points at or below `dir`, deepest first.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(berth_mountinfo::SELF).unwrap_or_default();
    let mut points: Vec<PathBuf> = berth_mountinfo::mounts(&text)
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    points
}

/// Unmounts everything at or below `dir`, then removes it; never removes
/// through a mount that could not be undone.
fn remove_mounted_tree(id: &str, dir: &Path) -> Result<(), Error> {
    for point in mounts_below(dir) {
        berth_idmap::unmount(&point)
            .map_err(|e| Error::io(id, "unmounting", &point)(std::io::Error::other(e)))?;
    }
    if let Some(left) = mounts_below(dir).first() {
        return Err(Error::io(id, "unmounting", left)(std::io::Error::other(
            "still mounted",
        )));
    }
    remove_tree(id, dir)
}

/// Makes the mount point for a bind of `source`: a dir (or, for a file, a
/// file), with its parents traversable.
fn mount_point(id: &str, source: &Path, target: &Path) -> Result<(), Error> {
    if source.is_dir() {
        return make_traversable(target).map_err(Error::io(id, "creating", target));
    }
    if let Some(parent) = target.parent() {
        make_traversable(parent).map_err(Error::io(id, "creating", parent))?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(target)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(id, "creating", target)(e)),
    }
}

/// The overlay of `lowerdirs` on `dirs.rootfs()`, over idmapped views of
/// each layer (see [`overlay_of_idmapped`]), with the upper dir owned by
/// the namespace's root: files of the image owned by root show owned by
/// root inside, and what the container writes lands in its upper dir owned
/// by its host ids. Nothing of the shared layers is changed.
fn mount_idmapped_rootfs(
    id: &str,
    dirs: &ContainerDirs,
    lowerdirs: &[PathBuf],
    idmap: &RootfsIdmap,
) -> Result<(), Error> {
    for dir in [dirs.upper(), dirs.work(), dirs.rootfs()] {
        std::fs::create_dir_all(&dir).map_err(Error::io(id, "creating", &dir))?;
    }
    let upper = dirs.upper();
    std::os::unix::fs::chown(&upper, Some(idmap.uid), Some(idmap.gid))
        .map_err(Error::io(id, "chown", &upper))?;
    // The container's userns tree: only the pod's root may pass.
    if let Some(tree) = layout::userns_container_of_bundle(&dirs.bundle) {
        private_to(&tree, idmap.uid, idmap.gid).map_err(Error::io(id, "creating", &tree))?;
    }
    overlay_of_idmapped(
        id,
        &dirs.rootfs(),
        lowerdirs,
        Some((&upper, &dirs.work())),
        &idmap.userns,
        &dirs.bundle.join("idmap"),
    )
}

/// An overlay on `target` of idmapped views of `lowerdirs` (top first)
/// through the user namespace file `userns`, attached in `staging` only
/// until the overlay holds its own private clones of them (overlayfs
/// clones its layers at mount time), then detached and removed. Without
/// `upper` it is read-only (a single layer is then its read-only idmapped
/// bind: overlayfs needs two lower layers without an upper one).
fn overlay_of_idmapped(
    id: &str,
    target: &Path,
    lowerdirs: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    userns: &Path,
    staging: &Path,
) -> Result<(), Error> {
    use nix::mount::{mount, MsFlags};
    use std::os::fd::AsFd;
    if lowerdirs.is_empty() {
        return Err(Error::io(id, "mounting on", target)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the image has no layers",
        )));
    }
    let fd = berth_idmap::open_userns(userns)
        .map_err(|e| Error::io(id, "opening", userns)(std::io::Error::other(e)))?;
    if let ([only], None) = (lowerdirs, upper) {
        berth_idmap::bind(only, target, fd.as_fd(), false)
            .map_err(|e| Error::io(id, "idmapping the layer", only)(std::io::Error::other(e)))?;
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        return mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(|e| {
            let _ = berth_idmap::unmount(target);
            Error::io(id, "making read-only", target)(e.into())
        });
    }
    let result = (|| {
        let mut lower = Vec::new();
        for (n, layer) in lowerdirs.iter().enumerate() {
            let view = staging.join(n.to_string());
            std::fs::create_dir_all(&view).map_err(Error::io(id, "creating", &view))?;
            berth_idmap::bind(layer, &view, fd.as_fd(), false).map_err(|e| {
                Error::io(id, "idmapping the layer", layer)(std::io::Error::other(e))
            })?;
            lower.push(view.display().to_string());
        }
        let (data, flags) = match upper {
            Some((upper, work)) => (
                format!(
                    "lowerdir={},upperdir={},workdir={}",
                    lower.join(":"),
                    upper.display(),
                    work.display()
                ),
                MsFlags::empty(),
            ),
            None => (format!("lowerdir={}", lower.join(":")), MsFlags::MS_RDONLY),
        };
        mount(
            Some("overlay"),
            target,
            Some("overlay"),
            flags,
            Some(data.as_str()),
        )
        .map_err(|e| Error::io(id, "mounting an overlay on", target)(e.into()))
    })();
    let cleanup = remove_mounted_tree(id, staging);
    result.and(cleanup)
}

fn remove_tree(id: &str, path: &Path) -> Result<(), Error> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A plain file (or a mount point that is not a dir).
        Err(e) => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::io(id, "removing", path)(e)),
        },
    }
}

#[async_trait]
impl HostFiles for Host {
    async fn write_pod_files(
        &self,
        id: &str,
        files: &SandboxFiles,
        content: PodFileContent,
    ) -> Result<(), Error> {
        let (id, files) = (id.to_string(), files.clone());
        blocking(move || {
            files
                .write(
                    &content.hostname,
                    content.host_network,
                    content.dns.as_ref(),
                )
                .map_err(Error::io(&id, "writing the pod's files in", &files.root))?;
            if content.shm {
                files
                    .mount_shm()
                    .map_err(Error::io(&id, "mounting /dev/shm on", files.shm()))?;
            }
            Ok(())
        })
        .await
    }

    async fn unmount_shm(&self, id: &str, files: &SandboxFiles) -> Result<(), Error> {
        let (id, files) = (id.to_string(), files.clone());
        blocking(move || {
            files
                .unmount_shm()
                .map_err(Error::io(&id, "unmounting /dev/shm on", files.shm()))
        })
        .await
    }

    async fn remove_pod_files(&self, id: &str, files: &SandboxFiles) -> Result<(), Error> {
        let (id, files) = (id.to_string(), files.clone());
        blocking(move || {
            if let Some(tree) = layout::pod_userns_of_state(&files.state) {
                remove_mounted_tree(&id, &tree.root)?;
            }
            files
                .remove()
                .map_err(Error::io(&id, "removing the pod's files in", &files.root))
        })
        .await
    }

    async fn write_pause_bundle(&self, id: &str, bundle: &Path, spec: &Spec) -> Result<(), Error> {
        let (id, bundle) = (id.to_string(), bundle.to_path_buf());
        let data = serde_json::to_vec(spec)
            .map_err(|e| Error::Internal(format!("{id}: encoding the pause spec: {e}")))?;
        blocking(move || {
            let rootfs = bundle.join("rootfs");
            berth_shim::write_pause_rootfs(&rootfs).map_err(Error::io(
                &id,
                "laying out the pause rootfs in",
                &rootfs,
            ))?;
            let path = bundle.join("config.json");
            berth_atomic_file::write_volatile(&path, &data, 0o600)
                .map_err(Error::io(&id, "writing", &path))
        })
        .await
    }

    async fn mount_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
    ) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            dirs.mount(&lowerdirs)
                .map_err(Error::io(&id, "mounting the rootfs on", dirs.rootfs()))
        })
        .await
    }

    async fn mount_idmapped_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
        idmap: &RootfsIdmap,
    ) -> Result<(), Error> {
        let (id, dirs, idmap) = (id.to_string(), dirs.clone(), idmap.clone());
        blocking(move || mount_idmapped_rootfs(&id, &dirs, &lowerdirs, &idmap)).await
    }

    async fn mount_idmapped_image_volume(
        &self,
        id: &str,
        target: &Path,
        lowerdirs: Vec<PathBuf>,
        userns: &Path,
    ) -> Result<(), Error> {
        let (id, target, userns) = (id.to_string(), target.to_path_buf(), userns.to_path_buf());
        blocking(move || {
            mount_point(&id, Path::new("/"), &target)?;
            let staging = target.with_extension("layers");
            overlay_of_idmapped(&id, &target, &lowerdirs, None, &userns, &staging)
        })
        .await
    }

    async fn idmapped_bind(
        &self,
        id: &str,
        source: &Path,
        target: &Path,
        userns: &Path,
    ) -> Result<(), Error> {
        let (id, source, target, userns) = (
            id.to_string(),
            source.to_path_buf(),
            target.to_path_buf(),
            userns.to_path_buf(),
        );
        blocking(move || {
            use std::os::fd::AsFd;
            mount_point(&id, &source, &target)?;
            let fd = berth_idmap::open_userns(&userns)
                .map_err(|e| Error::io(&id, "opening", &userns)(std::io::Error::other(e)))?;
            berth_idmap::bind(&source, &target, fd.as_fd(), false)
                .map_err(|e| Error::io(&id, "idmapped bind of", &source)(std::io::Error::other(e)))
        })
        .await
    }

    async fn bind(&self, id: &str, source: &Path, target: &Path) -> Result<(), Error> {
        let (id, source, target) = (id.to_string(), source.to_path_buf(), target.to_path_buf());
        blocking(move || {
            mount_point(&id, &source, &target)?;
            nix::mount::mount(
                Some(&source),
                &target,
                None::<&str>,
                nix::mount::MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| Error::io(&id, "bind-mounting", &source)(e.into()))
        })
        .await
    }

    async fn remove_mounted_tree(&self, id: &str, dir: &Path) -> Result<(), Error> {
        let (id, dir) = (id.to_string(), dir.to_path_buf());
        blocking(move || remove_mounted_tree(&id, &dir)).await
    }

    async fn mount_image_volume(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        n: usize,
        lowerdirs: Vec<PathBuf>,
    ) -> Result<PathBuf, Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            dirs.mount_image_volume(n, &lowerdirs).map_err(Error::io(
                &id,
                "mounting an image volume on",
                dirs.image_volume(n),
            ))
        })
        .await
    }

    async fn unmount_rootfs(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            if let Some(bound) = layout::userns_container_of_bundle(&dirs.bundle) {
                remove_mounted_tree(&id, &bound)?;
            }
            dirs.unmount()
                .map_err(Error::io(&id, "unmounting", dirs.rootfs()))
        })
        .await
    }

    async fn remove_container_files(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            if let Some(bound) = layout::userns_container_of_bundle(&dirs.bundle) {
                remove_mounted_tree(&id, &bound)?;
            }
            dirs.remove()
                .map_err(Error::io(&id, "removing the files of", &dirs.root))
        })
        .await
    }

    async fn write_spec(&self, id: &str, path: &Path, spec: &Spec) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        let data = serde_json::to_vec(spec)
            .map_err(|e| Error::Internal(format!("{id}: encoding the spec: {e}")))?;
        // The bundle is under the state dir, which a reboot takes: atomic,
        // not fsynced (as runc's and containerd's bundles).
        blocking(move || {
            berth_atomic_file::write_volatile(&path, &data, 0o600)
                .map_err(Error::io(&id, "writing", &path))
        })
        .await
    }

    async fn read_spec(&self, id: &str, path: &Path) -> Result<Spec, Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || {
            Spec::load(&path).map_err(|e| match e {
                oci_spec::OciSpecError::Io(e) => Error::io(&id, "reading the spec", &path)(e),
                e => Error::Internal(format!("{id}: reading its spec {}: {e}", path.display())),
            })
        })
        .await
    }

    async fn create_dirs(&self, id: &str, dirs: Vec<PathBuf>) -> Result<(), Error> {
        let id = id.to_string();
        blocking(move || {
            for dir in &dirs {
                std::fs::create_dir_all(dir).map_err(Error::io(&id, "creating", dir))?;
            }
            Ok(())
        })
        .await
    }

    /// Unmounts whatever is mounted below `path` first (a userns tree holds
    /// binds of pod files and host paths): a removal never recurses into
    /// a mount.
    async fn remove_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || remove_mounted_tree(&id, &path)).await
    }

    fn is_mounted(&self, path: &Path) -> bool {
        std::fs::read_to_string(berth_mountinfo::SELF)
            .map(|text| berth_mountinfo::mounts(&text).any(|m| m.mount_point == path))
            .unwrap_or(false)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn entries(&self, dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One shim.
pub struct Shim(pub ShimClient);

#[async_trait]
impl Task for Shim {
    async fn start(&self) -> Result<u32, Error> {
        self.0
            .start()
            .await
            .map_err(Error::runtime(self.0.id(), "starting"))
    }
    async fn wait(&self) -> Result<ExitInfo, Error> {
        match self.0.wait().await {
            Ok(info) => Ok(info),
            // The shim went away: the exit file tells how it ended, if it did.
            Err(e) => berth_shim::read_exit_file(self.0.exit_file())
                .ok()
                .flatten()
                .ok_or_else(|| Error::runtime(self.0.id(), "waiting for the exit")(e)),
        }
    }
    async fn kill(&self, signal: i32, all: bool) -> Result<(), Error> {
        self.0
            .kill(signal, all)
            .await
            .map_err(Error::runtime(self.0.id(), "signalling"))
    }
    async fn state(&self) -> Result<ShimState, Error> {
        self.0
            .state()
            .await
            .map_err(Error::runtime(self.0.id(), "reading the state"))
    }
    async fn delete(&self, force: bool) -> Result<(), Error> {
        self.0
            .delete(force)
            .await
            .map_err(Error::runtime(self.0.id(), "deleting"))
    }
    async fn exec_sync(
        &self,
        process: &oci_spec::runtime::Process,
        timeout: Option<std::time::Duration>,
    ) -> Result<berth_shim::ExecOutput, Error> {
        self.0
            .exec_sync(process, timeout)
            .await
            .map_err(Error::runtime(self.0.id(), "exec"))
    }
    async fn exec(&self, opts: &berth_shim::ExecOptions) -> Result<berth_shim::IoStream, Error> {
        self.0
            .exec(opts)
            .await
            .map_err(Error::runtime(self.0.id(), "exec"))
    }
    async fn attach(&self, opts: berth_shim::AttachOptions) -> Result<berth_shim::IoStream, Error> {
        self.0
            .attach(opts)
            .await
            .map_err(Error::runtime(self.0.id(), "attach"))
    }
    async fn update(&self, resources: &oci_spec::runtime::LinuxResources) -> Result<(), Error> {
        self.0
            .update(resources)
            .await
            .map_err(Error::runtime(self.0.id(), "update"))
    }
    async fn reopen_log(&self) -> Result<(), Error> {
        self.0
            .reopen_log()
            .await
            .map_err(Error::runtime(self.0.id(), "reopening its log"))
    }
}

/// Shims and the OCI runtime.
pub struct Shims {
    pub layout: Layout,
    pub shim_binary: PathBuf,
}

#[async_trait]
impl Runtime for Shims {
    async fn create(&self, opts: ShimOptions) -> Result<Arc<dyn Task>, Error> {
        let id = opts.id.clone();
        let client = ShimClient::spawn(&SpawnOptions::new(&self.shim_binary, opts))
            .await
            .map_err(Error::runtime(&id, "creating"))?;
        Ok(Arc::new(Shim(client)))
    }

    async fn connect(&self, id: &str, shim_dir: &Path) -> Result<Arc<dyn Task>, Error> {
        let socket = ShimPaths::new(shim_dir).socket();
        let client = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            ShimClient::connect(&socket),
        )
        .await
        .map_err(|_| Error::DeadlineExceeded(format!("{id}: its shim did not answer in 5s")))?
        .map_err(Error::runtime(id, "connecting to the shim"))?;
        Ok(Arc::new(Shim(client)))
    }

    async fn delete(&self, id: &str, shim_dir: &Path, runtime: &str) -> Result<(), Error> {
        let runtime = berth_shim::runc::Runtime::new(runtime, self.layout.runtime_root());
        berth_shim::delete_container(shim_dir, &runtime, id)
            .await
            .map_err(Error::runtime(id, "deleting from the runtime"))
    }

    fn exit_file(&self, shim_dir: &Path) -> Option<ExitInfo> {
        berth_shim::read_exit_file(&ShimPaths::new(shim_dir).exit_file())
            .ok()
            .flatten()
    }

    fn check(&self, id: &str, runtime: &str) -> Result<(), Error> {
        match crate::process::find_executable(runtime) {
            Some(_) => Ok(()),
            // Internal, as a runtime that cannot run is at create (containerd: Unknown).
            None => Err(Error::Internal(format!(
                "pod {id}: runtime {runtime}: cannot run: no such executable (as a path or in PATH)"
            ))),
        }
    }
}

#[async_trait]
impl Images for berth_oci_image::ImageStore {
    async fn collect_garbage(&self) -> Result<(), Error> {
        Ok(self.gc().await?)
    }
    fn get(&self, name: &str) -> Option<berth_oci_image::Image> {
        berth_oci_image::ImageStore::get(self, name)
    }
    fn snapshot_dirs(&self, chain_ids: &[String]) -> Vec<PathBuf> {
        berth_oci_image::ImageStore::snapshot_dirs(self, chain_ids)
    }
}

/// No images at all: for a dry run, which must not open the image store.
pub struct NoImages;

#[async_trait]
impl Images for NoImages {
    async fn collect_garbage(&self) -> Result<(), Error> {
        Ok(())
    }
    fn get(&self, _name: &str) -> Option<berth_oci_image::Image> {
        None
    }
    fn snapshot_dirs(&self, _chain_ids: &[String]) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Events nobody hears: for a dry run.
pub struct NoEvents;

#[async_trait]
impl super::mechanisms::EventSink for NoEvents {
    async fn emit(&self, _kind: super::mechanisms::EventKind, _id: &str, _sandbox_id: &str) {}
}
