//! A container's OCI spec at CreateContainer: what the pod and the image
//! give the generator (berth_spec), the directories and idmapped views its
//! volumes and host paths need made first, then the spec itself.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cri_api::v1;

use super::{timed, Core};
use crate::container::Container;
use crate::error::Error;
use crate::sandbox::Sandbox;

/// The image-config part the spec needs.
pub(super) fn image_info(image: &berth_oci_image::Image) -> berth_spec::ImageInfo {
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
    /// The container's OCI spec, from its config, the pod's facts and files,
    /// and the image.
    pub(super) async fn container_spec(
        &self,
        container: &Container,
        sandbox: &Sandbox,
        info: berth_spec::ImageInfo,
        image_mounts: BTreeMap<String, PathBuf>,
    ) -> Result<oci_spec::runtime::Spec, Error> {
        let id = container.meta.id.clone();
        let config = container.meta.config().clone();
        let sandbox_info = self.sandbox_info(sandbox);
        let target_pid = self.target_pid(&config)?;
        let volumes = self.container_volumes(&id, &config, &info, sandbox).await?;
        let idmapped = self.idmapped_host_paths(&id, &config, sandbox).await?;
        let sandbox_config = sandbox.meta.config().clone();
        let opts = self.spec_options_for(&sandbox.meta.runtime_handler);
        let rootfs = match sandbox.meta.facts().userns {
            Some(_) => self.layout.userns_rootfs(&id),
            None => self.layout.container_dirs(&id).rootfs(),
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

    /// What the spec takes from the pod: its namespaces, files and facts.
    fn sandbox_info(&self, sandbox: &Sandbox) -> berth_spec::SandboxInfo {
        let facts = sandbox.meta.facts();
        let mut files = self.layout.sandbox_files(&sandbox.meta.id);
        if facts.userns.is_some() {
            // The idmapped view of the pod's files, which its root reaches.
            files.root = self.layout.pod_userns(&sandbox.meta.id).files();
        }
        let pins = self.pod_pins(sandbox);
        berth_spec::SandboxInfo {
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
        }
    }

    /// The pid whose PID namespace the container joins (mode TARGET): a
    /// running container's.
    fn target_pid(&self, config: &v1::ContainerConfig) -> Result<Option<u32>, Error> {
        config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|sc| sc.namespace_options.as_ref())
            .filter(|ns| ns.pid == v1::NamespaceMode::Target as i32)
            .map(|ns| {
                self.container_pid(&ns.target_id)
                    .ok_or_else(|| Error::PidTarget(ns.target_id.clone()))
            })
            .transpose()
    }

    /// The container's anonymous volumes (the image's), made with the host
    /// paths that do not exist yet; in a userns pod, as idmapped views.
    async fn container_volumes(
        &self,
        id: &str,
        config: &v1::ContainerConfig,
        info: &berth_spec::ImageInfo,
        sandbox: &Sandbox,
    ) -> Result<Vec<berth_spec::AnonymousVolume>, Error> {
        let dirs = self.layout.container_dirs(id);
        let mut volumes = berth_spec::anonymous_volumes(config, info, &dirs.volumes());
        // Host paths that do not exist yet: made as directories, as
        // containerd and CRI-O do for hostPath type "".
        let create = berth_spec::host_paths_to_create(config);
        timed("container.dirs", self.mech.files.create_dirs(id, create)).await?;
        let userns = sandbox.meta.facts().userns;
        if !volumes.is_empty() {
            // Each with the image's content at its path, copied from the
            // mounted rootfs (containerd's copy-up); under the container's
            // dirs, which the rootfs' undo removes.
            let rootfs = dirs.rootfs();
            let made = self
                .mech
                .files
                .make_volumes(id, &rootfs, volumes.clone(), userns);
            timed("container.volumes", made).await?;
        }
        if userns.is_some() {
            // The container's own volumes live under berth's 0700 dirs:
            // idmapped views of them where the pod's root reaches them
            // (root-owned on disk, root's inside).
            let ns = self.layout.pod_userns(&sandbox.meta.id).ns();
            for (n, v) in volumes.iter_mut().enumerate() {
                let view = self.layout.userns_volume(id, n);
                self.mech
                    .binds
                    .idmapped_bind(id, &v.host_path, &view, &ns)
                    .await?;
                v.host_path = view;
            }
        }
        Ok(volumes)
    }

    /// Host paths asking for an idmapped mount (uidMappings: the pod's),
    /// seen through the pod's user namespace; removed with the container's
    /// userns tree. Their views, by mount.
    async fn idmapped_host_paths(
        &self,
        id: &str,
        config: &v1::ContainerConfig,
        sandbox: &Sandbox,
    ) -> Result<BTreeMap<usize, PathBuf>, Error> {
        let userns = sandbox.meta.facts().userns;
        let mut idmapped = BTreeMap::new();
        for (n, host) in berth_spec::idmapped_mounts(id, config, userns.as_ref())? {
            let view = self.layout.userns_mount(id, n);
            self.mech
                .binds
                .idmapped_bind(
                    id,
                    &host,
                    &view,
                    &self.layout.pod_userns(&sandbox.meta.id).ns(),
                )
                .await?;
            idmapped.insert(n, view);
        }
        Ok(idmapped)
    }
}
