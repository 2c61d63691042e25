//! CreateContainer: the rootfs overlay, image volumes, the OCI spec and
//! bundle, the record; the process starts in StartContainer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cri_api::v1;
use prost::Message;

use super::mechanisms::{chain_ids, EventKind};
use super::{new_id, now_nanos, retry, timed, Core};
use crate::container::{Container, ContainerMeta, ContainerState, ContainerStatus};
use crate::error::Error;
use crate::failpoint;
use crate::objects::{self, StoreExt};
use crate::sandbox::{Sandbox, SandboxState};
use crate::undo::Undo;

/// What CreateContainer is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRequest {
    pub sandbox_id: String,
    pub config: v1::ContainerConfig,
}

/// The image-config part the spec needs.
fn image_info(image: &berth_oci_image::Image) -> berth_spec::ImageInfo {
    let c = &image.config;
    berth_spec::ImageInfo {
        name: image
            .repo_tags
            .first()
            .cloned()
            .unwrap_or_else(|| image.id.clone()),
        env: c.env.clone(),
        entrypoint: c.entrypoint.clone(),
        cmd: c.cmd.clone(),
        working_dir: c.working_dir.clone(),
        user: c.user.clone(),
        volumes: c.volumes.clone(),
        stop_signal: c.stop_signal.clone(),
    }
}

impl Core {
    /// Makes a created container; its id.
    pub async fn create_container(
        self: &Arc<Self>,
        req: ContainerRequest,
    ) -> Result<String, Error> {
        let request = req.clone();
        let config = req.config;
        let md = config
            .metadata
            .clone()
            .filter(|m| !m.name.is_empty())
            .ok_or_else(|| Error::InvalidArgument("container metadata.name is empty".into()))?;
        let sandbox = self.sandboxes.lookup(&req.sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.meta.id
            )));
        }
        let sandbox_config = sandbox.meta.config();
        // Checked before anything is made: the user namespace asked for
        // (the pod's), and what is to be idmapped.
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
        berth_spec::idmapped_mounts(&md.name, &config, pod_userns.as_ref())?;
        let (image_name, image) = self.image_of(&config)?;
        let log_path = log_path(&sandbox_config.log_directory, &config.log_path)?;
        let pod = sandbox_config.metadata.clone().unwrap_or_default();
        let name = format!(
            "{}_{}_{}_{}_{}",
            md.name, pod.name, pod.namespace, pod.uid, md.attempt
        );
        let id = new_id();
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
        // The pod's lock: a RemovePodSandbox racing this call waits, and
        // never leaves a container of a removed pod behind.
        let _pod = sandbox.lifecycle.lock().await;
        let mut undo = Undo::new();
        {
            let core = self.clone();
            let (name, id) = (name.clone(), id.clone());
            undo.push_forget("release the container name", async move {
                core.containers.release_name_of(&name, &id);
                Ok(())
            });
        }
        let info = image_info(&image);
        // Every snapshot the container will use, recorded before it is used.
        let volume_snapshots = self.volume_snapshots(&config)?;
        let meta = ContainerMeta {
            id: id.clone(),
            name: name.clone(),
            sandbox_id: sandbox.meta.id.clone(),
            config: config.encode_to_vec(),
            image_name,
            image_id: image.id.clone(),
            rootfs_snapshots: chain_ids(&image),
            volume_snapshots,
            log_path,
            runtime: self.runtime_binary(&sandbox.meta.runtime_handler),
            stop_signal: berth_spec::stop_signal(&id, &config, &info)?,
            created_at: now_nanos(),
            decoded: config.into(),
        };
        let built = match self.sandboxes.lookup(&sandbox.meta.id) {
            Ok(s) if s.status().state == SandboxState::Ready => {
                self.build_container(&mut undo, meta, &sandbox, info).await
            }
            _ => Err(Error::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.meta.id
            ))),
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
        retry::end(
            &self.containers_in_flight,
            running,
            &name,
            &id,
            result.is_ok(),
        );
        result
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
            .ok_or_else(|| Error::InvalidArgument("container image is empty".into()))?;
        let image = self
            .mech
            .images
            .get(&image_name)
            .ok_or_else(|| Error::NotFound {
                kind: "image",
                id: image_name.clone(),
            })?;
        Ok((image_name, image))
    }

    /// The snapshots of the container's image volumes.
    fn volume_snapshots(&self, config: &v1::ContainerConfig) -> Result<Vec<String>, Error> {
        let mut volume_snapshots = Vec::new();
        for mount in &config.mounts {
            if let Some(name) = mount
                .image
                .as_ref()
                .map(|i| &i.image)
                .filter(|i| !i.is_empty())
            {
                let volume = self.mech.images.get(name).ok_or_else(|| Error::NotFound {
                    kind: "image (for an image volume)",
                    id: name.clone(),
                })?;
                volume_snapshots.extend(chain_ids(&volume));
            }
        }
        Ok(volume_snapshots)
    }

    /// Every step after the name is reserved; each registers its undo first.
    async fn build_container(
        self: &Arc<Self>,
        undo: &mut Undo,
        meta: ContainerMeta,
        sandbox: &Sandbox,
        info: berth_spec::ImageInfo,
    ) -> Result<(), Error> {
        let id = meta.id.clone();
        let (container, _lifecycle) =
            objects::create(self.containers.clone(), meta, ContainerStatus::default()).await?;
        failpoint::hit("create_container:after_record");
        {
            let core = self.clone();
            let container = container.clone();
            undo.push_forget("delete the container record", async move {
                objects::delete(core.containers.clone(), &container)
                    .await
                    .map_err(|e| e.to_string())
            });
        }
        let dirs = self.layout.container_dirs(&id);
        {
            let core = self.clone();
            let (id, dirs) = (id.clone(), dirs.clone());
            undo.push("remove the container's rootfs", async move {
                core.mech
                    .files
                    .remove_container_files(&id, &dirs)
                    .await
                    .map_err(|e| e.to_string())
            });
        }
        self.mount_container_rootfs(&id, &container.meta.rootfs_snapshots, sandbox)
            .await?;
        let image_mounts = self.mount_image_volumes(&container, sandbox).await?;
        let spec = self
            .container_spec(&container, sandbox, info, image_mounts)
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
                self.mech.files.mount_rootfs(id, &dirs, lowerdirs),
            )
            .await;
        };
        let idmap = super::mechanisms::RootfsIdmap {
            userns: self.layout.pod_userns(&sandbox.meta.id).ns(),
            uid: u.host_root_uid(),
            gid: u.host_root_gid(),
        };
        self.mech
            .files
            .mount_idmapped_rootfs(id, &dirs, lowerdirs, &idmap)
            .await?;
        self.mech
            .files
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
            let Some(name) = mount
                .image
                .as_ref()
                .map(|i| i.image.clone())
                .filter(|i| !i.is_empty())
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
                        .files
                        .mount_image_volume(id, &dirs, n, lowerdirs)
                        .await?
                }
                Some(ns) => {
                    let target = self.layout.userns_image_volume(id, n);
                    self.mech
                        .files
                        .mount_idmapped_image_volume(id, &target, lowerdirs, ns)
                        .await?;
                    target
                }
            };
            image_mounts.insert(name, path);
        }
        Ok(image_mounts)
    }

    /// The container's OCI spec, from its config, the pod's facts and files,
    /// and the image.
    async fn container_spec(
        &self,
        container: &Container,
        sandbox: &Sandbox,
        info: berth_spec::ImageInfo,
        image_mounts: BTreeMap<String, PathBuf>,
    ) -> Result<oci_spec::runtime::Spec, Error> {
        let id = container.meta.id.clone();
        let config = container.meta.config().clone();
        let facts = sandbox.meta.facts();
        let mut files = self.layout.sandbox_files(&sandbox.meta.id);
        if facts.userns.is_some() {
            // The idmapped view of the pod's files, which its root reaches.
            files.root = self.layout.pod_userns(&sandbox.meta.id).files();
        }
        let pins = self.pod_pins(sandbox);
        let sandbox_info = berth_spec::SandboxInfo {
            id: sandbox.meta.id.clone(),
            pid: sandbox.status().pid.unwrap_or_default(),
            uts_ns: pins.uts,
            ipc_ns: pins.ipc,
            netns: sandbox.meta.netns.clone(),
            host_ipc: facts.host_ipc,
            host_pid: facts.host_pid,
            hostname: facts.hostname.clone(),
            hostname_file: files.hostname(),
            hosts_file: files.hosts(),
            resolv_conf: files.resolv_conf(),
            shm: self.pod_shm(sandbox),
            cgroup_parent: facts.cgroup_parent.clone(),
        };
        let target_pid = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|sc| sc.namespace_options.as_ref())
            .filter(|ns| ns.pid == v1::NamespaceMode::Target as i32)
            .map(|ns| {
                self.container_pid(&ns.target_id).ok_or_else(|| {
                    Error::FailedPrecondition(format!(
                        "PID namespace target {:?} is not a running container",
                        ns.target_id
                    ))
                })
            })
            .transpose()?;
        let dirs = self.layout.container_dirs(&id);
        let mut volumes = berth_spec::anonymous_volumes(&config, &info, &dirs.volumes());
        // Anonymous volumes, and host paths that do not exist yet: made as
        // directories, as containerd and CRI-O do for hostPath type "".
        let mut create: Vec<PathBuf> = volumes.iter().map(|v| v.host_path.clone()).collect();
        create.extend(berth_spec::host_paths_to_create(&config));
        timed("container.dirs", self.mech.files.create_dirs(&id, create)).await?;
        if facts.userns.is_some() {
            // The container's own volumes live under berth's 0700 dirs:
            // idmapped views of them where the pod's root reaches them
            // (root-owned on disk, root's inside).
            let ns = self.layout.pod_userns(&sandbox.meta.id).ns();
            for (n, v) in volumes.iter_mut().enumerate() {
                let view = self.layout.userns_volume(&id, n);
                self.mech
                    .files
                    .idmapped_bind(&id, &v.host_path, &view, &ns)
                    .await?;
                v.host_path = view;
            }
        }
        // Host paths asking for an idmapped mount (uidMappings: the pod's),
        // seen through the pod's user namespace; removed with the
        // container's userns tree.
        let mut idmapped = BTreeMap::new();
        for (n, host) in berth_spec::idmapped_mounts(&id, &config, facts.userns.as_ref())? {
            let view = self.layout.userns_mount(&id, n);
            self.mech
                .files
                .idmapped_bind(
                    &id,
                    &host,
                    &view,
                    &self.layout.pod_userns(&sandbox.meta.id).ns(),
                )
                .await?;
            idmapped.insert(n, view);
        }
        let sandbox_config = sandbox.meta.config().clone();
        let opts = self.spec_options_for(&sandbox.meta.runtime_handler);
        let rootfs = match facts.userns {
            Some(_) => self.layout.userns_rootfs(&id),
            None => dirs.rootfs(),
        };
        // Reads the rootfs's /etc/passwd and group, host paths and devices.
        tokio::task::spawn_blocking(move || -> Result<_, Error> {
            let mut req = berth_spec::SpecRequest::new(
                &id,
                &config,
                &sandbox_config,
                &sandbox_info,
                &info,
                &rootfs,
            );
            req.volumes = volumes;
            req.target_pid = target_pid;
            req.image_mounts = image_mounts;
            req.idmapped = idmapped;
            Ok(berth_spec::container_spec(&req, &opts)?)
        })
        .await
        .map_err(Error::join)?
    }
}

/// The container's CRI log file: inside the pod's log directory, never
/// outside it (an absolute path or a `..` that climbs out is refused).
pub fn log_path(log_directory: &str, log_path: &str) -> Result<PathBuf, Error> {
    if log_directory.is_empty() || log_path.is_empty() {
        return Ok(PathBuf::new());
    }
    let relative = std::path::Path::new(log_path);
    let mut depth = 0usize;
    for part in relative.components() {
        match part {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if depth > 0 => depth -= 1,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "log_path {log_path:?} must be a relative path inside the pod's log directory"
                )))
            }
        }
    }
    if depth == 0 {
        return Err(Error::InvalidArgument(format!(
            "log_path {log_path:?} names no file"
        )));
    }
    Ok(PathBuf::from(log_directory).join(relative))
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
        // `..` that stays inside is fine.
        assert!(log_path("/var/log/pods/x", "c/../d/0.log").is_ok());
    }
}
