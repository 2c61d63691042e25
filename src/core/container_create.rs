//! CreateContainer: the rootfs overlay, image volumes, the OCI spec and
//! bundle, the record; the process starts in StartContainer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use berth_shim::LogTarget;
use cri_api::v1;
use prost::Message;

use super::container_spec::image_info;
use super::mechanisms::{chain_ids, ContainerEvent, EventKind};
use super::rollback::Rollback;
use super::{new_id, now_nanos, retry, timed, Core};
use crate::container::{Container, ContainerMeta, ContainerState, ContainerStatus};
use crate::error::Error;
use crate::failpoint;
use crate::objects::{self, StoreExt};
use crate::sandbox::facts::{check_container_metadata, container_name};
use crate::sandbox::{Sandbox, SandboxState};

/// What CreateContainer is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRequest {
    pub sandbox_id: String,
    pub config: v1::ContainerConfig,
}

impl Core {
    /// Makes a created container; its id.
    pub async fn create_container(
        self: &Arc<Self>,
        req: ContainerRequest,
    ) -> Result<String, Error> {
        let request = req.clone();
        let (sandbox, checked) = self.check_container(&req)?;
        let (name, id) = (checked.name.clone(), new_id());
        let reserve = || self.containers.reserve_name(&name, &id).map_err(|e| e.key);
        if let Some(existing) = retry::reserve_or_join(
            &self.containers_in_flight,
            "container",
            &name,
            &request,
            reserve,
        )
        .await?
        {
            return Ok(existing);
        }
        let running = self.containers_in_flight.begin(&name, &request, &id);
        // kubelet starts it right after: the runtime's cgroup move then
        // finds its wait begun, or over.
        self.mech.runtime.warm_up(&id);
        // The pod's lock: a RemovePodSandbox racing this call waits, and
        // never leaves a container of a removed pod behind.
        let _pod = sandbox.lifecycle.lock().await;
        let mut undo = Rollback::new(self, &id);
        undo.push_forget(
            "release the container name",
            name.clone(),
            |core, id, name| async move {
                core.containers.release_name_of(&name, &id);
                Ok(())
            },
        );
        // Plugins being synchronized see the container whole, or hear of it.
        let sync = self.mech.plugins.block_sync().await;
        let built = match self.container_meta(&id, checked, &sandbox, req.config) {
            Ok((meta, info)) => self.build_container(&mut undo, meta, &sandbox, info).await,
            Err(e) => Err(e),
        };
        let result = match built {
            Ok(()) => {
                undo.disarm();
                self.mech
                    .events
                    .emit(EventKind::Created, &id, &sandbox.meta.id)
                    .await;
                tracing::info!(container = %id, pod = %sandbox.meta.id, "container created");
                Ok(id.clone())
            }
            Err(e) => Err(undo.unwind(e).await),
        };
        drop(sync);
        if let (Ok(_), Ok(container)) = (&result, self.containers.lookup(&id)) {
            self.notify_container(ContainerEvent::PostCreate, &sandbox, &container)
                .await;
        }
        retry::end(
            &self.containers_in_flight,
            running,
            &name,
            &id,
            result.is_ok(),
        );
        result
    }

    /// Checks made before anything is: the container's name, its ready pod,
    /// the user namespace asked for (the pod's) and what is to be idmapped,
    /// its image and its log file.
    fn check_container(&self, req: &ContainerRequest) -> Result<(Arc<Sandbox>, Checked), Error> {
        let config = &req.config;
        let md = config.metadata.clone().unwrap_or_default();
        check_container_metadata(&md)?;
        let sandbox = self.sandboxes.lookup(&req.sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(not_ready(&sandbox));
        }
        let sandbox_config = sandbox.meta.config();
        let pod_userns = sandbox.meta.facts().userns;
        berth_spec::check_container_user_namespace(
            &md.name,
            config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|s| s.namespace_options.as_ref()),
            pod_userns.as_ref(),
        )?;
        berth_spec::idmapped_mounts(&md.name, config, pod_userns.as_ref())?;
        let (image_name, image) = self.image_of(config)?;
        let log_path = log_path(&sandbox_config.log_directory, &config.log_path)?;
        let pod = sandbox_config.metadata.clone().unwrap_or_default();
        let name = container_name(&md, &pod)?;
        let checked = Checked {
            name,
            image_name,
            image,
            log_path,
        };
        Ok((sandbox, checked))
    }

    /// The record of container `id`, and what the spec takes from its image.
    fn container_meta(
        &self,
        id: &str,
        checked: Checked,
        sandbox: &Sandbox,
        mut config: v1::ContainerConfig,
    ) -> Result<(ContainerMeta, berth_spec::ImageInfo), Error> {
        let image = checked.image;
        let info = image_info(&image);
        // Every snapshot the container will use, recorded before it is used.
        let volume_snapshots = self.pin_image_volumes(&mut config)?;
        let meta = ContainerMeta {
            id: id.to_string(),
            name: checked.name,
            sandbox_id: sandbox.meta.id.clone(),
            config: config.encode_to_vec(),
            image_name: checked.image_name,
            image_id: image.id.clone(),
            rootfs_snapshots: chain_ids(&image),
            volume_snapshots,
            log_path: checked.log_path,
            runtime: self.runtime_binary(&sandbox.meta.runtime_handler),
            stop_signal: berth_spec::stop_signal(id, &config, &info)?,
            created_at: now_nanos(),
            decoded: config.into(),
        };
        Ok((meta, info))
    }

    /// The container's image, as named and as found.
    fn image_of(
        &self,
        config: &v1::ContainerConfig,
    ) -> Result<(String, berth_oci_image::Image), Error> {
        let image_name = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .filter(|i| !i.is_empty())
            .ok_or_else(|| Error::BadField {
                field: "image".into(),
                why: "the container's image is empty".into(),
            })?;
        let image = self
            .mech
            .images
            .get(&image_name)
            .ok_or_else(|| Error::NotFound {
                kind: "image",
                id: image_name.clone(),
            })?;
        // Nothing to run: an artifact has no rootfs, entrypoint or user.
        if let Some(a) = &image.artifact {
            return Err(Error::BadField {
                field: "image".into(),
                why: format!(
                    "{image_name:?} ({}) is an OCI artifact of type {:?}, not a container \
                     image: it can only be mounted as an image volume",
                    image.id, a.artifact_type
                ),
            });
        }
        Ok((image_name, image))
    }

    /// Pins each image volume to the image it names now: its
    /// `ImageSpec.image_ref` (the id kubelet got from PullImage, KEP-5365)
    /// when given, else its name, resolved once here and written into the
    /// recorded config's `image_ref`, so that mounting, a restart and
    /// ContainerStatus all use that very image. An image volume asked for
    /// read-write is refused (they are read-only by definition). Their
    /// snapshots.
    fn pin_image_volumes(&self, config: &mut v1::ContainerConfig) -> Result<Vec<String>, Error> {
        let mut volume_snapshots = Vec::new();
        for (n, mount) in config.mounts.iter_mut().enumerate() {
            let Some(spec) = mount.image.as_mut().filter(|i| !i.image.is_empty()) else {
                continue;
            };
            if !mount.readonly {
                return Err(Error::BadField {
                    field: format!("mounts[{n}]"),
                    why: format!(
                        "image volume {:?} must be readonly (image volumes are read-only)",
                        spec.image
                    ),
                });
            }
            let wanted = berth_spec::image_volume_key(spec).to_string();
            let volume = self
                .mech
                .images
                .get(&wanted)
                .ok_or_else(|| Error::NotFound {
                    kind: "image (for an image volume)",
                    id: wanted.clone(),
                })?;
            spec.image_ref = volume.id.clone();
            volume_snapshots.extend(chain_ids(&volume));
        }
        Ok(volume_snapshots)
    }

    /// Every step after the name is reserved; each registers its undo first.
    async fn build_container(
        &self,
        undo: &mut Rollback,
        meta: ContainerMeta,
        sandbox: &Sandbox,
        info: berth_spec::ImageInfo,
    ) -> Result<(), Error> {
        // Under the pod's lock: it is still there, and still ready.
        match self.sandboxes.lookup(&sandbox.meta.id) {
            Ok(s) if s.status().state == SandboxState::Ready => {}
            _ => return Err(not_ready(sandbox)),
        }
        let id = meta.id.clone();
        let (container, _lifecycle) =
            objects::create(self.containers.clone(), meta, ContainerStatus::default()).await?;
        failpoint::hit("create_container:after_record");
        undo.push_forget(
            "delete the container record",
            container.clone(),
            |core, _, c| async move { objects::delete(core.containers.clone(), &c).await },
        );
        let dirs = self.layout.container_dirs(&id);
        undo.push("remove the container's rootfs", dirs.clone(), |core, id, dirs| {
            async move { core.mech.mounts.remove_container_files(&id, &dirs).await }
        });
        self.mount_container_rootfs(&id, &container.meta.rootfs_snapshots, sandbox)
            .await?;
        let image_mounts = self.mount_image_volumes(&container, sandbox).await?;
        let mut spec = self
            .container_spec(&container, sandbox, info, image_mounts)
            .await?;
        self.create_container_hook(undo, sandbox, &container, &mut spec)
            .await?;
        failpoint::hit("create_container:after_rootfs");
        timed(
            "container.spec",
            self.mech.files.write_spec(&id, &dirs.spec(), &spec),
        )
        .await?;
        let user = spec.process().as_ref().map(|p| crate::container::RunAs {
            uid: p.user().uid(),
            gid: p.user().gid(),
            groups: p.user().additional_gids().clone().unwrap_or_default(),
        });
        objects::save(&container, move |s| {
            s.state = ContainerState::Created;
            s.rootfs_mounted = true;
            s.user = user;
        })
        .await?;
        Ok(())
    }

    /// Mounts the rootfs of container `id` of `sandbox` from its snapshots:
    /// for a userns pod, over idmapped views of the layers (never chowned,
    /// they are shared) and bound where the pod's root reaches it (see
    /// Layout::userns_dir). For CreateContainer and for recovery's remount.
    pub(super) async fn mount_container_rootfs(
        &self,
        id: &str,
        rootfs_snapshots: &[String],
        sandbox: &Sandbox,
    ) -> Result<(), Error> {
        let dirs = self.layout.container_dirs(id);
        let lowerdirs = self.mech.images.snapshot_dirs(rootfs_snapshots);
        let Some(u) = sandbox.meta.facts().userns else {
            return timed(
                "container.rootfs",
                self.mech.mounts.mount_rootfs(id, &dirs, lowerdirs),
            )
            .await;
        };
        let idmap = super::mechanisms::RootfsIdmap {
            userns: self.layout.pod_userns(&sandbox.meta.id).ns(),
            uid: u.host_root_uid(),
            gid: u.host_root_gid(),
        };
        self.mech
            .mounts
            .mount_idmapped_rootfs(id, &dirs, lowerdirs, &idmap)
            .await?;
        self.mech
            .binds
            .bind(id, &dirs.rootfs(), &self.layout.userns_rootfs(id))
            .await
    }

    /// Image volumes: each named image, pulled beforehand, read-only; in a
    /// userns pod, over idmapped views of its snapshots in the container's
    /// userns tree (removed with it).
    async fn mount_image_volumes(
        &self,
        container: &Container,
        sandbox: &Sandbox,
    ) -> Result<BTreeMap<String, PathBuf>, Error> {
        let userns = sandbox
            .meta
            .facts()
            .userns
            .map(|_| self.layout.pod_userns(&sandbox.meta.id).ns());
        let id = &container.meta.id;
        let dirs = self.layout.container_dirs(id);
        let mut image_mounts = BTreeMap::new();
        for (n, mount) in container.meta.config().mounts.iter().enumerate() {
            // Pinned at CreateContainer (`pin_image_volumes`).
            let Some(name) = mount
                .image
                .as_ref()
                .filter(|i| !i.image.is_empty())
                .map(|i| berth_spec::image_volume_key(i).to_string())
            else {
                continue;
            };
            if image_mounts.contains_key(&name) {
                continue;
            }
            let volume = self.mech.images.get(&name).ok_or_else(|| Error::NotFound {
                kind: "image (for an image volume)",
                id: name.clone(),
            })?;
            let lowerdirs = self.mech.images.snapshot_dirs(&chain_ids(&volume));
            let path = match &userns {
                None => {
                    self.mech
                        .mounts
                        .mount_image_volume(id, &dirs, n, lowerdirs)
                        .await?
                }
                Some(ns) => {
                    let target = self.layout.userns_image_volume(id, n);
                    self.mech
                        .mounts
                        .mount_idmapped_image_volume(id, &target, lowerdirs, ns)
                        .await?;
                    target
                }
            };
            image_mounts.insert(name, path);
        }
        Ok(image_mounts)
    }
}

/// What CreateContainer checked before making anything.
struct Checked {
    /// The container's name: its own, its pod's, its attempt.
    name: String,
    /// The image as named, and as found.
    image_name: String,
    image: berth_oci_image::Image,
    log_path: PathBuf,
}

/// A pod that is gone or not ready when a container is made in it.
fn not_ready(sandbox: &Sandbox) -> Error {
    Error::PodNotReady {
        id: sandbox.meta.id.clone(),
        container: None,
    }
}

/// The container's CRI log file: inside the pod's log directory, never
/// outside it (an absolute path or a `..` that climbs out is refused);
/// `None` when the pod has no log directory or the container no log path.
/// The shim opens it from the directory through no symlink (see
/// [`berth_shim::LogTarget`]).
pub fn log_target(log_directory: &str, log_path: &str) -> Result<Option<LogTarget>, Error> {
    if log_directory.is_empty() || log_path.is_empty() {
        return Ok(None);
    }
    LogTarget::new(log_directory, log_path)
        .map(Some)
        .map_err(|e| Error::BadField {
            field: "log_path".into(),
            why: format!("{log_path:?}: {e}"),
        })
}

/// The container's CRI log file as recorded (and reported by
/// ContainerStatus): [`log_target`]'s full path, empty for none.
pub fn log_path(log_directory: &str, log_path: &str) -> Result<PathBuf, Error> {
    Ok(log_target(log_directory, log_path)?
        .map(|t| t.path())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_paths_stay_in_the_log_directory() {
        assert_eq!(
            log_path("/var/log/pods/x", "c/0.log").unwrap(),
            PathBuf::from("/var/log/pods/x/c/0.log")
        );
        assert_eq!(log_path("", "c/0.log").unwrap(), PathBuf::new());
        for bad in [
            "../../../tmp/x.log",
            "/tmp/x.log",
            "c/../../x.log",
            ".",
            "c/..",
        ] {
            let e = log_path("/var/log/pods/x", bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
        }
        // `..` that stays inside is fine (and cleaned away).
        assert_eq!(
            log_path("/var/log/pods/x", "c/../d/0.log").unwrap(),
            PathBuf::from("/var/log/pods/x/d/0.log")
        );
        // The directory kubelet names is absolute.
        let e = log_path("var/log/pods/x", "c/0.log").unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }
}
