//! Files of the host: a pod's shared files and the pause's bundle, bundle
//! specs, directories, and what recovery reads.

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;
use tonic::async_trait;

use super::mounts::remove_mounted_tree;
use super::{blocking, Host};
use crate::core::mechanisms::{Files, PodFileContent, PodFiles};
use crate::error::Error;
use crate::layout;
use crate::sandbox::files::SandboxFiles;

#[async_trait]
impl PodFiles for Host {
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
        let data = serde_json::to_vec(spec).map_err(|e| Error::Spec {
            id: id.clone(),
            op: "encoding the pause spec",
            why: e.to_string(),
        })?;
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
}

#[async_trait]
impl Files for Host {
    async fn write_spec(&self, id: &str, path: &Path, spec: &Spec) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        let data = serde_json::to_vec(spec).map_err(|e| Error::Spec {
            id: id.clone(),
            op: "encoding the spec",
            why: e.to_string(),
        })?;
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
                e => Error::Spec {
                    id: id.clone(),
                    op: "reading its spec",
                    why: format!("{}: {e}", path.display()),
                },
            })
        })
        .await
    }

    /// Each missing directory (and parent) is made 0755, root's, whatever
    /// the umask: a CRI mount's missing host path is a directory on the
    /// host others may look into, as containerd and CRI-O make it.
    async fn create_dirs(&self, id: &str, dirs: Vec<PathBuf>) -> Result<(), Error> {
        let id = id.to_string();
        blocking(move || {
            for dir in &dirs {
                crate::host_dirs::make_dirs(dir, 0o755).map_err(Error::io(&id, "creating", dir))?;
            }
            Ok(())
        })
        .await
    }

    /// The copy runs on a blocking thread; a bound it reaches is
    /// ResourceExhausted, a volume path that is no directory in the image
    /// FailedPrecondition.
    async fn make_volumes(
        &self,
        id: &str,
        rootfs: &Path,
        volumes: Vec<berth_spec::AnonymousVolume>,
        userns: Option<berth_spec::UserNamespace>,
    ) -> Result<(), Error> {
        use crate::container::volumes::{make_volumes, CopyLimits, CopyUpError};
        let (id, rootfs) = (id.to_string(), rootfs.to_path_buf());
        blocking(move || {
            let left_out = make_volumes(&rootfs, &volumes, userns.as_ref(), &CopyLimits::default())
                .map_err(|e| match e {
                    CopyUpError::Io { op, path, source } => Error::Io {
                        id: id.clone(),
                        op,
                        path,
                        source,
                    },
                    e @ CopyUpError::NotADirectory { .. } => {
                        Error::FailedPrecondition(format!("container {id}: {e}"))
                    }
                    e @ CopyUpError::TooLarge { .. } => {
                        Error::ResourceExhausted(format!("container {id}: {e}"))
                    }
                })?;
            if !left_out.is_empty() {
                tracing::warn!(
                    container = %id,
                    ?left_out,
                    "image volumes: device nodes, sockets or xattrs not copied"
                );
            }
            Ok(())
        })
        .await
    }

    /// Unmounts whatever is mounted below `path` first (a userns tree holds
    /// binds of pod files and host paths): a removal never recurses into
    /// a mount.
    /// Moved aside here, emptied after the call answers
    /// ([`super::trash`]).
    async fn remove_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        let (id, path) = (id.to_string(), path.to_path_buf());
        blocking(move || super::trash::discard(&id, &path, remove_mounted_tree)).await
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
