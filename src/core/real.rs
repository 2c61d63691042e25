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

use super::layout::Layout;
use super::mechanisms::{HostFiles, Images, Namespaces, Network, PodFileContent, Runtime, Task};
use crate::container::rootfs::ContainerDirs;
use crate::error::Error;
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
    async fn create_netns(&self, id: &str, path: &Path) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || {
            let dir = path.parent().map(PathBuf::from).unwrap_or_default();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            berth_netns::NetNs::create(&dir, &name)
                .map(|_| ())
                .map_err(|e| {
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
            })
        })
        .await
    }
}

/// The host's files and mounts.
pub struct Host;

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
            berth_atomic_file::write(&path, &data, 0o600).map_err(Error::io(&id, "writing", &path))
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
            dirs.unmount()
                .map_err(Error::io(&id, "unmounting", dirs.rootfs()))
        })
        .await
    }

    async fn remove_container_files(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            dirs.remove()
                .map_err(Error::io(&id, "removing the files of", &dirs.root))
        })
        .await
    }

    async fn write_spec(&self, id: &str, path: &Path, spec: &Spec) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        let data = serde_json::to_vec(spec)
            .map_err(|e| Error::Internal(format!("{id}: encoding the spec: {e}")))?;
        blocking(move || {
            berth_atomic_file::write(&path, &data, 0o600).map_err(Error::io(&id, "writing", &path))
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

    async fn remove_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || remove_tree(&id, &path)).await
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
