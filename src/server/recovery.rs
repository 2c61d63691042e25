//! Recovery at start-up, before the socket answers calls.
//!
//! Assumptions: every record was persisted before the step it describes
//! (RunPodSandbox and CreateContainer write their record first, in state
//! Unknown, and only mark it Ready/Created at the end), shims outlive the
//! daemon and write an exit file before they answer anyone, and nothing but
//! berth creates entries in its root and state dirs.
//!
//! So: a sandbox or container still Unknown was cut short and is rolled
//! back whole (its name is free again); a Ready sandbox whose pause is gone
//! becomes NotReady; a Running container is watched again through its shim,
//! or gets the exit its shim recorded; what no record owns (netns mounts,
//! sandbox and container dirs, shim dirs) is removed. Each item has its own
//! timeout; a failure is logged and the item left as it is, never fatal.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_shim::{ShimClient, ShimPaths};

use super::container_start::record_exit;
use super::sandbox_run::now_nanos;
use super::Cri;
use crate::container::rootfs::ContainerDirs;
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::files::SandboxFiles;
use crate::sandbox::{Sandbox, SandboxState};

/// Time one item of recovery may take.
const ITEM_TIMEOUT: Duration = Duration::from_secs(60);

/// One change recovery makes (or, in a dry run, would make).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A sandbox cut short during RunPodSandbox: tear down and forget.
    RollBackSandbox(String),
    /// A ready sandbox whose pause is gone.
    SandboxNotReady(String),
    /// A container cut short during CreateContainer: remove.
    RollBackContainer(String),
    /// A running container whose shim answers: watch it again.
    WatchContainer(String),
    /// A running container whose shim is gone: record its exit (from the
    /// exit file, or as unknown).
    ContainerExited(String),
    /// A created container whose rootfs is not mounted (after a reboot).
    RemountContainer(String),
    /// A created container whose shim runs: StartContainer was cut short
    /// after the start; adopt it as running (or exited).
    AdoptStarted(String),
    /// An exited container runc still holds or whose rootfs is still
    /// mounted (berth died between recording the exit and releasing it).
    ReleaseExited(String),
    /// Something on disk that no record owns.
    RemoveOrphan(PathBuf),
    /// A CNI attachment (cached result) of a sandbox no record owns: DEL it,
    /// so its IP lease and host-side interfaces go.
    ReleaseOrphanNetwork {
        container_id: String,
        ifname: String,
    },
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::RollBackSandbox(id) => write!(f, "roll back half-made pod sandbox {id}"),
            Action::SandboxNotReady(id) => {
                write!(f, "mark pod sandbox {id} not ready (pause gone)")
            }
            Action::RollBackContainer(id) => write!(f, "roll back half-made container {id}"),
            Action::WatchContainer(id) => write!(f, "reconnect to running container {id}"),
            Action::ContainerExited(id) => write!(f, "record the exit of container {id}"),
            Action::RemountContainer(id) => write!(f, "remount the rootfs of container {id}"),
            Action::AdoptStarted(id) => write!(f, "adopt started container {id}"),
            Action::ReleaseExited(id) => {
                write!(f, "delete exited container {id} from the runtime")
            }
            Action::RemoveOrphan(path) => write!(f, "remove orphan {}", path.display()),
            Action::ReleaseOrphanNetwork {
                container_id,
                ifname,
            } => {
                write!(f, "CNI DEL for orphan attachment {container_id}/{ifname}")
            }
        }
    }
}

async fn shim_alive(socket: &Path) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(5), ShimClient::connect(socket)).await,
        Ok(Ok(_))
    )
}

fn is_mounted(path: &Path) -> bool {
    let target = path.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(4) == Some(target.as_str()))
        })
        .unwrap_or(false)
}

/// Entries of `dir` (names), or none.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What recovery would change, changing nothing: from the records and
/// what runs. Also what `berth recover --dry-run` prints.
pub async fn plan(
    config: &crate::config::Config,
    sandboxes: &crate::sandbox::SandboxStore,
    containers: &crate::container::ContainerStore,
) -> Vec<Action> {
    let shim_dir = |id: &str| super::shim_dir(&config.state, id);
    {
        let mut plan = Vec::new();
        let sandboxes = sandboxes.list();
        let containers = containers.list();
        for s in &sandboxes {
            match s.status().state {
                SandboxState::Unknown => plan.push(Action::RollBackSandbox(s.meta.id.clone())),
                SandboxState::Ready => {
                    if !shim_alive(&ShimPaths::new(shim_dir(&s.meta.id)).socket()).await {
                        plan.push(Action::SandboxNotReady(s.meta.id.clone()));
                    }
                }
                SandboxState::NotReady => {}
            }
        }
        for c in &containers {
            let id = c.meta.id.clone();
            match c.status().state {
                ContainerState::Unknown => plan.push(Action::RollBackContainer(id)),
                ContainerState::Running => {
                    if shim_alive(&ShimPaths::new(shim_dir(&id)).socket()).await {
                        plan.push(Action::WatchContainer(id));
                    } else {
                        plan.push(Action::ContainerExited(id));
                    }
                }
                ContainerState::Created => {
                    if shim_alive(&ShimPaths::new(shim_dir(&id)).socket()).await {
                        plan.push(Action::AdoptStarted(id));
                        continue;
                    }
                    let dirs = ContainerDirs::new(&config.root, &config.state, &id);
                    if !is_mounted(&dirs.rootfs()) {
                        plan.push(Action::RemountContainer(id));
                    }
                }
                ContainerState::Exited => {
                    let dirs = ContainerDirs::new(&config.root, &config.state, &id);
                    if super::runtime_root(&config.state).join(&id).exists()
                        || shim_alive(&ShimPaths::new(shim_dir(&id)).socket()).await
                        || is_mounted(&dirs.rootfs())
                    {
                        plan.push(Action::ReleaseExited(id));
                    }
                }
            }
        }
        // Orphans: entries named after no record.
        let ids: HashSet<String> = sandboxes
            .iter()
            .map(|s| s.meta.id.clone())
            .chain(containers.iter().map(|c| c.meta.id.clone()))
            .collect();
        let shim_names: HashSet<String> = ids
            .iter()
            .map(|id| id[..id.len().min(24)].to_string())
            .collect();
        let state = &config.state;
        let root = &config.root;
        for (dir, names) in [
            // First: runc's own state, so orphan containers are killed first.
            (super::runtime_root(state), &ids),
            (state.join("netns"), &ids),
            (state.join("sandboxes"), &ids),
            (root.join("sandboxes"), &ids),
            (state.join("containers"), &ids),
            (root.join("containers"), &ids),
            (state.join("s"), &shim_names),
        ] {
            for name in entries(&dir) {
                if !names.contains(&name) {
                    plan.push(Action::RemoveOrphan(dir.join(name)));
                }
            }
        }
        // Cached CNI results are `<network>+<container id>+<ifname>.json`.
        for name in entries(&root.join("cni")) {
            let Some(stem) = name.strip_suffix(".json") else {
                continue;
            };
            let parts: Vec<&str> = stem.split('+').collect();
            if let [_, container_id, ifname] = parts[..] {
                if !ids.contains(container_id) {
                    plan.push(Action::ReleaseOrphanNetwork {
                        container_id: container_id.to_string(),
                        ifname: ifname.to_string(),
                    });
                }
            }
        }
        plan
    }
}

impl Cri {
    /// Brings every record in line with what really runs, then removes orphans.
    pub async fn recover(self: &Arc<Self>) {
        let plan = plan(&self.config, &self.sandboxes, &self.containers).await;
        for action in plan {
            tracing::info!(%action, "recovery");
            let result = tokio::time::timeout(ITEM_TIMEOUT, self.apply(&action)).await;
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(%action, error = %e, "recovery step failed; left as it is")
                }
                Err(_) => tracing::error!(%action, "recovery step timed out; left as it is"),
            }
        }
    }

    async fn apply(self: &Arc<Self>, action: &Action) -> Result<(), Error> {
        match action {
            Action::RollBackSandbox(id) => {
                let sandbox = self.sandboxes.lookup(id)?;
                self.roll_back_sandbox(&sandbox).await
            }
            Action::SandboxNotReady(id) => {
                let sandbox = self.sandboxes.lookup(id)?;
                sandbox.update(|s| {
                    s.state = SandboxState::NotReady;
                    s.pid = None;
                })?;
                Ok(())
            }
            Action::RollBackContainer(id) => {
                let container = self.containers.lookup(id)?;
                self.remove(&container).await
            }
            Action::WatchContainer(id) => {
                let container = self.containers.lookup(id)?;
                let socket = ShimPaths::new(self.shim_dir(id)).socket();
                let client = ShimClient::connect(&socket)
                    .await
                    .map_err(|e| Error::Internal(format!("container {id}: {e}")))?;
                self.watch_exit(container, client);
                Ok(())
            }
            Action::ContainerExited(id) => {
                let container = self.containers.lookup(id)?;
                self.record_lost_exit(&container)
            }
            Action::RemountContainer(id) => {
                let container = self.containers.lookup(id)?;
                let image =
                    self.images
                        .get(&container.meta.image_id)
                        .ok_or_else(|| Error::NotFound {
                            kind: "image",
                            id: container.meta.image_id.clone(),
                        })?;
                let lowerdirs = self.images.lowerdirs(&image);
                let dirs = ContainerDirs::new(&self.config.root, &self.config.state, id);
                tokio::task::spawn_blocking(move || dirs.mount(&lowerdirs))
                    .await
                    .map_err(|e| Error::Internal(e.to_string()))?
                    .map_err(|e| Error::Internal(format!("container {id}: {e}")))
            }
            Action::AdoptStarted(id) => {
                let container = self.containers.lookup(id)?;
                let socket = ShimPaths::new(self.shim_dir(id)).socket();
                let client = ShimClient::connect(&socket)
                    .await
                    .map_err(|e| Error::Internal(format!("container {id}: {e}")))?;
                let state = client
                    .state()
                    .await
                    .map_err(|e| Error::Internal(format!("container {id}: {e}")))?;
                match state.status {
                    berth_shim::ContainerStatus::Created => {
                        // Never started: delete the runtime's container; StartContainer may run again.
                        client
                            .delete(true)
                            .await
                            .map_err(|e| Error::Internal(format!("container {id}: {e}")))?;
                    }
                    _ => {
                        container.update(|s| {
                            s.state = ContainerState::Running;
                            s.pid = Some(state.pid);
                            s.started_at = now_nanos();
                        })?;
                        if let Some(info) = state.exit {
                            record_exit(&container, &info)?;
                        }
                        // Records the exit when it comes, and deletes it then.
                        self.watch_exit(container, client);
                    }
                }
                Ok(())
            }
            Action::ReleaseExited(id) => {
                let container = self.containers.lookup(id)?;
                self.release_exited(&container).await;
                Ok(())
            }
            Action::RemoveOrphan(path) => self.remove_orphan(path).await,
            Action::ReleaseOrphanNetwork {
                container_id,
                ifname,
            } => {
                // DEL uses the cached config, arguments and result; the netns may be gone.
                let mut attachment = berth_cni::Attachment::new(
                    container_id.clone(),
                    self.netns_dir().join(container_id),
                    berth_cni::PodArgs {
                        infra_container_id: container_id.clone(),
                        ..Default::default()
                    },
                );
                attachment.ifname = ifname.clone();
                self.cni
                    .del(&attachment)
                    .await
                    .map_err(|e| Error::Internal(format!("CNI DEL of {container_id}: {e}")))
            }
        }
    }

    /// Tears down whatever a cut-short RunPodSandbox made, and forgets it.
    async fn roll_back_sandbox(self: &Arc<Self>, sandbox: &Sandbox) -> Result<(), Error> {
        if sandbox.meta.netns.is_some() && !sandbox.status().network_attached {
            // ADD may have run without its result being recorded: DEL anyway
            // (it is idempotent, and works from the CNI cache or the config).
            sandbox.update(|s| s.network_attached = true)?;
        }
        self.remove_pod_sandbox(cri_api::v1::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox.meta.id.clone(),
        })
        .await
        .map(|_| ())
    }

    /// A running container whose shim is gone: its exit file, or unknown.
    fn record_lost_exit(&self, container: &Container) -> Result<(), Error> {
        let exit_file = ShimPaths::new(self.shim_dir(&container.meta.id)).exit_file();
        match berth_shim::read_exit_file(&exit_file) {
            Ok(Some(info)) => record_exit(container, &info),
            _ => {
                container.update(|s| {
                    s.state = ContainerState::Exited;
                    s.exit_code = 255;
                    s.finished_at = now_nanos();
                    s.pid = None;
                    s.reason = "Unknown".into();
                    s.message = "the container's shim was gone when berth restarted".into();
                })?;
                Ok(())
            }
        }
    }

    /// A container runc holds that no record owns: `runc delete --force`
    /// kills what runs in it and removes its cgroup. Which handler made it
    /// is unknown: each configured one is asked until one succeeds.
    async fn delete_orphan_container(&self, path: &Path) -> Result<(), Error> {
        let id = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut binaries = vec![self.config.default_runtime_handler().binary.clone()];
        for handler in self.config.runtime.handlers.values() {
            if !binaries.contains(&handler.binary) {
                binaries.push(handler.binary.clone());
            }
        }
        // Ok as soon as one deletes it (or finds it gone).
        let mut last = None;
        for binary in binaries {
            let runtime = berth_shim::runc::Runtime::new(&binary, self.runtime_root());
            match berth_shim::delete_container(&self.shim_dir(&id), &runtime, &id).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(Error::Internal(format!(
                "deleting orphan container {id} from the runtime: {e}"
            ))),
            None => Ok(()),
        }
    }

    /// Removes an entry that no record owns: unmounts first, deletes the
    /// runtime container of a live shim.
    async fn remove_orphan(&self, path: &Path) -> Result<(), Error> {
        let path = path.to_path_buf();
        if path.starts_with(self.netns_dir()) {
            return super::sandbox_run::remove_netns(path).await;
        }
        if path.starts_with(self.runtime_root()) {
            return self.delete_orphan_container(&path).await;
        }
        if path.starts_with(self.config.state.join("s")) {
            let socket = ShimPaths::new(&path).socket();
            if let Ok(client) = ShimClient::connect(&socket).await {
                let _ = client.kill(libc::SIGKILL, true).await;
                let _ = tokio::time::timeout(Duration::from_secs(10), client.wait()).await;
                let _ = client.delete(true).await;
            }
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (root, state) = (self.config.root.clone(), self.config.state.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if path.starts_with(state.join("sandboxes")) || path.starts_with(root.join("sandboxes"))
            {
                SandboxFiles::new(&root, &state, &name).unmount_shm()?;
            }
            if path.starts_with(state.join("containers")) {
                ContainerDirs::new(&root, &state, &name).unmount()?;
            }
            match std::fs::remove_dir_all(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    // A plain file (or a mount point that is not a dir).
                    std::fs::remove_file(&path).or(Err(e))
                }
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Internal(format!("removing an orphan: {e}")))
    }
}
