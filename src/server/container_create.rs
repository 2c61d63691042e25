//! RuntimeService.CreateContainer: rootfs overlay, OCI spec and bundle,
//! record persisted; the process starts in StartContainer.

use std::path::PathBuf;
use std::sync::Arc;

use cri_api::v1;
use prost::Message;

use super::sandbox_run::{namespace_options, new_id, now_nanos};
use super::Cri;
use crate::container::rootfs::ContainerDirs;
use crate::container::{ContainerMeta, ContainerState, ContainerStatus};
use crate::error::Error;
use crate::failpoint;
use crate::objects::StoreExt;
use crate::sandbox::files::SandboxFiles;
use crate::sandbox::SandboxState;
use crate::undo::Undo;

impl From<berth_spec::Error> for Error {
    fn from(e: berth_spec::Error) -> Error {
        if e.kind() == berth_spec::ErrorKind::InvalidArgument {
            Error::InvalidArgument(e.to_string())
        } else {
            Error::Internal(e.to_string())
        }
    }
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

impl Cri {
    pub async fn create_container(
        self: &Arc<Self>,
        req: v1::CreateContainerRequest,
    ) -> Result<v1::CreateContainerResponse, Error> {
        let config = req
            .config
            .ok_or_else(|| Error::InvalidArgument("CreateContainer needs a config".into()))?;
        let md = config
            .metadata
            .clone()
            .filter(|m| !m.name.is_empty())
            .ok_or_else(|| Error::InvalidArgument("container metadata.name is empty".into()))?;
        let sandbox = self.sandboxes.lookup(&req.pod_sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.meta.id
            )));
        }
        let sandbox_config = sandbox.meta.config();
        let image_name = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .filter(|i| !i.is_empty())
            .ok_or_else(|| Error::InvalidArgument("container image is empty".into()))?;
        let image = self
            .images
            .get(&image_name)
            .ok_or_else(|| Error::NotFound {
                kind: "image",
                id: image_name.clone(),
            })?;
        let pod = sandbox_config.metadata.clone().unwrap_or_default();
        let name = format!(
            "{}_{}_{}_{}_{}",
            md.name, pod.name, pod.namespace, pod.uid, md.attempt
        );
        let id = new_id();
        self.containers.reserve(&name, &id)?;
        let mut undo = Undo::new();
        {
            let cri = self.clone();
            let name = name.clone();
            undo.push("release the container name", async move {
                cri.containers.release_name(&name);
                Ok(())
            });
        }
        let log_path = if sandbox_config.log_directory.is_empty() || config.log_path.is_empty() {
            PathBuf::new()
        } else {
            PathBuf::from(&sandbox_config.log_directory).join(&config.log_path)
        };
        let info = image_info(&image);
        let meta = ContainerMeta {
            id: id.clone(),
            name,
            sandbox_id: sandbox.meta.id.clone(),
            config: config.encode_to_vec(),
            image_name,
            image_id: image.id.clone(),
            log_path,
            runtime: self.runtime_binary(&sandbox.meta.runtime_handler),
            stop_signal: berth_spec::stop_signal(&id, &config, &info)?,
            created_at: now_nanos(),
            decoded: config.clone().into(),
        };
        let result = async {
            let container = self.containers.create(meta, ContainerStatus::default())?;
            failpoint::hit("create_container:after_record");
            {
                let cri = self.clone();
                let container = container.clone();
                undo.push("delete the container record", async move {
                    cri.containers.delete(&container).map_err(|e| e.to_string())
                });
            }
            let dirs = ContainerDirs::new(&self.config.root, &self.config.state, &id);
            {
                let dirs = dirs.clone();
                undo.push("remove the container's rootfs", async move {
                    tokio::task::spawn_blocking(move || dirs.remove())
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())
                });
            }
            let lowerdirs = self.images.lowerdirs(&image);
            {
                let dirs = dirs.clone();
                tokio::task::spawn_blocking(move || dirs.mount(&lowerdirs))
                    .await
                    .map_err(|e| Error::Internal(e.to_string()))?
                    .map_err(|e| Error::Internal(format!("container {id}: {e}")))?;
            }

            // Image volumes: each named image, pulled beforehand, read-only.
            let mut image_mounts = std::collections::BTreeMap::new();
            for (n, mount) in config.mounts.iter().enumerate() {
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
                let volume = self.images.get(&name).ok_or_else(|| Error::NotFound {
                    kind: "image (for an image volume)",
                    id: name.clone(),
                })?;
                let lowerdirs = self.images.lowerdirs(&volume);
                let dirs = dirs.clone();
                let path =
                    tokio::task::spawn_blocking(move || dirs.mount_image_volume(n, &lowerdirs))
                        .await
                        .map_err(|e| Error::Internal(e.to_string()))?
                        .map_err(|e| Error::Internal(format!("container {id}: {e}")))?;
                image_mounts.insert(name, path);
            }

            let status = sandbox.status();
            let ns = namespace_options(sandbox_config);
            let files = SandboxFiles::new(&self.config.root, &self.config.state, &sandbox.meta.id);
            let host_ipc = ns.ipc == v1::NamespaceMode::Node as i32;
            let sandbox_info = berth_spec::SandboxInfo {
                id: sandbox.meta.id.clone(),
                pid: status.pid.unwrap_or_default(),
                netns: sandbox.meta.netns.clone(),
                host_ipc,
                host_pid: ns.pid == v1::NamespaceMode::Node as i32,
                hostname: sandbox_config.hostname.clone(),
                hostname_file: files.hostname(),
                hosts_file: files.hosts(),
                resolv_conf: files.resolv_conf(),
                shm: if host_ipc {
                    PathBuf::from("/dev/shm")
                } else {
                    files.shm()
                },
                cgroup_parent: sandbox_config
                    .linux
                    .as_ref()
                    .map(|l| l.cgroup_parent.clone())
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "/berth".into()),
            };
            let opts = self.spec_options();
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
            let spec = {
                let (id, config, sandbox_config, rootfs) = (
                    id.clone(),
                    config.clone(),
                    sandbox_config.clone(),
                    dirs.rootfs(),
                );
                let volumes_dir = dirs.root.join("volumes");
                tokio::task::spawn_blocking(move || -> Result<_, Error> {
                    let volumes = berth_spec::anonymous_volumes(&config, &info, &volumes_dir);
                    for volume in &volumes {
                        std::fs::create_dir_all(&volume.host_path).map_err(|e| {
                            Error::Internal(format!(
                                "container {id}: creating volume dir {}: {e}",
                                volume.host_path.display()
                            ))
                        })?;
                    }
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
                    Ok(berth_spec::container_spec(&req, &opts)?)
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))??
            };
            failpoint::hit("create_container:after_rootfs");

            let spec_path = dirs.spec();
            tokio::task::spawn_blocking(move || spec.save(&spec_path))
                .await
                .map_err(|e| Error::Internal(e.to_string()))?
                .map_err(|e| {
                    Error::Internal(format!("container {id}: writing config.json: {e}"))
                })?;
            container.update(|s| {
                s.state = ContainerState::Created;
                s.rootfs_mounted = true;
            })?;
            Ok::<(), Error>(())
        }
        .await;
        match result {
            Ok(()) => {
                undo.disarm();
                self.container_created(&id, &sandbox.meta.id).await;
                tracing::info!(container = %id, pod = %sandbox.meta.id, "container created");
                Ok(v1::CreateContainerResponse { container_id: id })
            }
            Err(e) => Err(undo.unwind(e).await),
        }
    }

    /// The pid of a running container (for PID namespace TARGET).
    pub fn container_pid(&self, id: &str) -> Option<u32> {
        let c = self.containers.get(id).ok()?;
        let status = c.status();
        (status.state == ContainerState::Running)
            .then_some(status.pid)
            .flatten()
    }

    /// The OCI runtime binary of a runtime handler (default handler if unknown).
    pub fn runtime_binary(&self, handler: &str) -> String {
        self.config
            .runtime
            .handlers
            .get(handler)
            .unwrap_or_else(|| self.config.default_runtime_handler())
            .binary
            .clone()
    }
}
