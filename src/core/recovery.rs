//! Recovery at start-up, before the socket answers calls.
//!
//! Assumptions: every record was persisted before the step it describes
//! (RunPodSandbox and CreateContainer write their record first, in state
//! Unknown, and only mark it Ready/Created at the end), shims outlive the
//! daemon and write an exit file before they answer anyone, and nothing but
//! berth creates entries in its root and state dirs. A few writes are not
//! synced (`objects::save_volatile`): a power cut may take back a
//! container's Running or Exited, or a pod's NotReady, and what is here
//! derives each again from the shim, its exit file, or the pause and pins.
//!
//! So: a sandbox or container still Unknown was cut short and is rolled
//! back whole (its name is free again); a Ready sandbox whose pause is gone
//! becomes NotReady; a Running container is watched again through its shim,
//! or gets the exit its shim recorded; what no record owns (netns mounts,
//! sandbox and container dirs, shim dirs, runc state, CNI attachments) is
//! removed. A record that cannot be read owns what is named after its id
//! too: it is moved aside to `records/quarantine/` and everything of it is
//! left alone — a running container, its netns, its IP — until an operator
//! deletes the quarantined record (the next start then sweeps its objects).
//! Each item has its own timeout; a failure is logged and the item left as
//! it is, never fatal.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::container_start::record_exit;
use super::{now_nanos, Core};
use crate::container::ContainerState;
use crate::error::Error;
use crate::layout::{EntryKind, Layout, Owner};
use crate::objects::{self, StoreExt};
use crate::sandbox::{Sandbox, SandboxState};

/// Time one item of recovery may take.
const ITEM_TIMEOUT: Duration = Duration::from_secs(60);

/// One change recovery makes (or, in a dry run, would make).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A record that cannot be read: move it aside, touch nothing it owns.
    Quarantine { id: String, problem: String },
    /// A sandbox cut short during RunPodSandbox: tear down and forget.
    RollBackSandbox(String),
    /// A ready sandbox whose pause (or pinned namespaces) is gone.
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
    /// A CNI attachment of a sandbox no record owns: DEL it, so its IP
    /// lease and host-side interfaces go.
    ReleaseOrphanNetwork {
        container_id: String,
        ifname: String,
    },
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Quarantine { id, problem } => {
                write!(
                    f,
                    "quarantine unreadable record {id} and leave what it owns alone ({problem})"
                )
            }
            Action::RollBackSandbox(id) => write!(f, "roll back half-made pod sandbox {id}"),
            Action::SandboxNotReady(id) => {
                write!(
                    f,
                    "mark pod sandbox {id} not ready (its pause or namespaces gone)"
                )
            }
            Action::RollBackContainer(id) => write!(f, "roll back half-made container {id}"),
            Action::WatchContainer(id) => write!(f, "reconnect to running container {id}"),
            Action::ContainerExited(id) => write!(f, "record the exit of container {id}"),
            Action::RemountContainer(id) => write!(f, "remount the rootfs of container {id}"),
            Action::AdoptStarted(id) => write!(f, "adopt started container {id}"),
            Action::ReleaseExited(id) => write!(f, "delete exited container {id} from the runtime"),
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

impl Core {
    /// Ids whose objects must be left alone: records that could not be
    /// loaded now, and those quarantined before.
    fn protected_ids(&self) -> HashSet<String> {
        let mut ids: HashSet<String> = self.broken.iter().map(|b| b.id.clone()).collect();
        // Records are files like the stores' own, not a mechanism.
        if let Ok(dir) = std::fs::read_dir(self.layout.quarantine()) {
            ids.extend(dir.flatten().filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").map(str::to_string)
            }));
        }
        ids
    }

    async fn shim_alive(&self, id: &str) -> bool {
        self.shim_of(id).await.is_ok()
    }

    /// Whether a ready pod still holds its namespaces: its pause runs, or
    /// (a pod without one) its pins and network namespace are there (a
    /// reboot takes them).
    async fn holds_namespaces(&self, sandbox: &Sandbox) -> bool {
        let id = &sandbox.meta.id;
        let facts = sandbox.meta.facts();
        if !facts.pinned {
            return self.shim_alive(id).await;
        }
        let netns = sandbox
            .meta
            .netns
            .as_ref()
            .is_none_or(|path| self.mech.namespaces.is_netns(path));
        netns
            && self.mech.namespaces.is_pinned(
                &self.layout.pod_ns(id),
                &facts.pins(sandbox.meta.netns.as_deref()),
            )
    }

    /// What recovery would change, changing nothing: from the records and
    /// what runs. Also what `berth recover --dry-run` prints.
    pub async fn plan(&self) -> Vec<Action> {
        let mut plan: Vec<Action> = self
            .broken
            .iter()
            .map(|b| Action::Quarantine {
                id: b.id.clone(),
                problem: b.problem.clone(),
            })
            .collect();
        let sandboxes = self.sandboxes.list();
        let containers = self.containers.list();
        for s in &sandboxes {
            let id = s.meta.id.clone();
            match s.status().state {
                SandboxState::Unknown => plan.push(Action::RollBackSandbox(id)),
                SandboxState::Ready if !self.holds_namespaces(s).await => {
                    plan.push(Action::SandboxNotReady(id))
                }
                _ => {}
            }
        }
        for c in &containers {
            let id = c.meta.id.clone();
            let rootfs = self.layout.container_dirs(&id).rootfs();
            match c.status().state {
                ContainerState::Unknown => plan.push(Action::RollBackContainer(id)),
                ContainerState::Running if self.shim_alive(&id).await => {
                    plan.push(Action::WatchContainer(id))
                }
                ContainerState::Running => plan.push(Action::ContainerExited(id)),
                ContainerState::Created if self.shim_alive(&id).await => {
                    plan.push(Action::AdoptStarted(id))
                }
                ContainerState::Created if !self.mech.mounts.is_mounted(&rootfs) => {
                    plan.push(Action::RemountContainer(id))
                }
                ContainerState::Created => {}
                ContainerState::Exited => {
                    if self
                        .mech
                        .files
                        .exists(&self.layout.runtime_root().join(&id))
                        || self.shim_alive(&id).await
                        || self.mech.mounts.is_mounted(&rootfs)
                    {
                        plan.push(Action::ReleaseExited(id));
                    }
                }
            }
        }
        // Orphans: entries named after no record (and no protected id).
        let ids: HashSet<String> = sandboxes
            .iter()
            .map(|s| s.meta.id.clone())
            .chain(containers.iter().map(|c| c.meta.id.clone()))
            .chain(self.protected_ids())
            .collect();
        let shim_names: HashSet<String> = ids
            .iter()
            .map(|id| Layout::shim_dir_name(id).to_string())
            .collect();
        for (dir, owner) in self.layout.owned_dirs() {
            let names = match owner {
                Owner::Id => &ids,
                Owner::ShimPrefix => &shim_names,
            };
            for name in self.mech.files.entries(&dir) {
                if !names.contains(&name) {
                    plan.push(Action::RemoveOrphan(dir.join(name)));
                }
            }
        }
        // Temp files of atomic writes a crash cut short (records, the CNI
        // cache): only one berth runs per root, so none is being written.
        for dir in [
            self.layout.sandbox_records(),
            self.layout.container_records(),
            self.layout.quarantine(),
            self.layout.cni_cache(),
        ] {
            for name in self.mech.files.entries(&dir) {
                if is_stale_temp(&name) {
                    plan.push(Action::RemoveOrphan(dir.join(name)));
                }
            }
        }
        for (container_id, ifname) in self.mech.network.attachments() {
            if !ids.contains(&container_id) {
                plan.push(Action::ReleaseOrphanNetwork {
                    container_id,
                    ifname,
                });
            }
        }
        plan
    }

    /// Brings every record in line with what really runs, then removes orphans.
    pub async fn recover(self: &Arc<Self>) {
        // The exits recovery finds are told to the plugins once they are
        // started ([`Core::plugins_started`]).
        self.defer_plugin_stops();
        for action in self.plan().await {
            tracing::info!(%action, "recovery");
            match tokio::time::timeout(ITEM_TIMEOUT, self.apply(&action)).await {
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
            Action::Quarantine { id, problem } => self.quarantine(id, problem),
            Action::RollBackSandbox(id) => {
                let sandbox = self.sandboxes.lookup(id)?;
                let _lifecycle = sandbox.lifecycle.lock().await;
                if sandbox.meta.netns.is_some() && !sandbox.status().network_attached {
                    // ADD may have run without being recorded: DEL anyway
                    // (idempotent; works from the CNI cache or the config).
                    objects::save(&sandbox, move |s| s.network_attached = true).await?;
                }
                self.remove_sandbox(&sandbox).await
            }
            Action::SandboxNotReady(id) => {
                let sandbox = self.sandboxes.lookup(id)?;
                // Found again at the next start if lost: not synced.
                objects::save_volatile(&sandbox, move |s| {
                    s.state = SandboxState::NotReady;
                    s.pid = None;
                })
                .await?;
                Ok(())
            }
            Action::RollBackContainer(id) => {
                let container = self.containers.lookup(id)?;
                let _lifecycle = container.lifecycle.lock().await;
                self.remove(&container).await
            }
            Action::WatchContainer(id) => {
                let container = self.containers.lookup(id)?;
                let task = self.shim_of(id).await?;
                self.watch_exit(container, task);
                Ok(())
            }
            Action::ContainerExited(id) => {
                let container = self.containers.lookup(id)?;
                self.record_lost_exit(&container).await;
                self.release_exited(&container).await;
                Ok(())
            }
            Action::RemountContainer(id) => {
                let container = self.containers.lookup(id)?;
                let snapshots = self.rootfs_snapshots(&container)?;
                // As at CreateContainer: idmapped layers in a userns pod.
                let sandbox = self.sandboxes.lookup(&container.meta.sandbox_id)?;
                self.mount_container_rootfs(id, &snapshots, &sandbox).await
            }
            Action::AdoptStarted(id) => self.adopt_started(id).await,
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
                    self.layout.netns(container_id),
                    berth_cni::PodArgs {
                        infra_container_id: container_id.clone(),
                        ..Default::default()
                    },
                );
                attachment.ifname = ifname.clone();
                self.mech.network.del(container_id, &attachment).await
            }
        }
    }

    /// A created container whose shim runs: StartContainer was cut short
    /// after the start, or its (unsynced) Running write was lost. Adopted as
    /// running (or exited) with the pid and start time its shim reports, or,
    /// never started, deleted from the runtime so that StartContainer may
    /// run again.
    async fn adopt_started(self: &Arc<Self>, id: &str) -> Result<(), Error> {
        let container = self.containers.lookup(id)?;
        let task = self.shim_of(id).await?;
        let state = task.state().await?;
        match state.status {
            // Never started: delete the runtime's container; StartContainer may run again.
            berth_shim::ContainerStatus::Created => task.delete(true).await,
            _ => {
                // A shim older than `started_at_ns` does not say: now, as before.
                let started_at = state.started_at_ns.unwrap_or_else(now_nanos);
                // What the shim says again at the next start: not synced.
                objects::save_volatile(&container, move |s| {
                    s.state = ContainerState::Running;
                    s.pid = Some(state.pid);
                    s.started_at = started_at;
                })
                .await?;
                if let Some(info) = state.exit {
                    record_exit(&container, &info).await?;
                }
                // Records the exit when it comes, and deletes it then.
                self.watch_exit(container, task);
                Ok(())
            }
        }
    }

    /// Moves an unreadable record aside, leaving everything it owns alone.
    fn quarantine(&self, id: &str, problem: &str) -> Result<(), Error> {
        let dir = self.layout.quarantine();
        let moved = match self.sandboxes.move_aside(id, &dir) {
            Ok(path) => path,
            Err(_) => self.containers.move_aside(id, &dir).map_err(Error::io(
                id,
                "moving aside the record of",
                &dir,
            ))?,
        };
        tracing::error!(
            record = %moved.display(),
            %problem,
            "a record could not be read: it was moved aside, and its container, netns, files and IP are left as they are; \
             delete the quarantined record to let the next start remove them"
        );
        Ok(())
    }

    /// A container runc holds that no record owns: `runc delete --force`
    /// kills what runs in it and removes its cgroup. Which handler made it
    /// is unknown: each configured one is asked until one succeeds.
    async fn delete_orphan_container(&self, id: &str) -> Result<(), Error> {
        let mut binaries = vec![self.config.default_runtime_handler().binary.clone()];
        for handler in self.config.runtime.handlers.values() {
            if !binaries.contains(&handler.binary) {
                binaries.push(handler.binary.clone());
            }
        }
        let mut last = None;
        for binary in binaries {
            match self
                .mech
                .runtime
                .delete(id, &self.layout.shim_dir(id), &binary)
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        last.map_or(Ok(()), Err)
    }

    /// Removes an entry that no record owns: unmounts first, deletes the
    /// runtime container of a live shim.
    async fn remove_orphan(&self, path: &std::path::Path) -> Result<(), Error> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match self.layout.entry_kind(path) {
            EntryKind::Netns => return self.mech.namespaces.remove_netns(&name, path).await,
            EntryKind::RuntimeContainer => return self.delete_orphan_container(&name).await,
            EntryKind::ShimDir => {
                if let Ok(task) = self.mech.runtime.connect(&name, path).await {
                    let _ = task.kill(libc::SIGKILL, true).await;
                    let _ = tokio::time::timeout(Duration::from_secs(10), task.wait()).await;
                    let _ = task.delete(true).await;
                }
            }
            EntryKind::SandboxDir => {
                self.mech
                    .pod_files
                    .unmount_shm(&name, &self.layout.sandbox_files(&name))
                    .await?;
            }
            EntryKind::ContainerBundle => {
                self.mech
                    .mounts
                    .unmount_rootfs(&name, &self.layout.container_dirs(&name))
                    .await?;
            }
            EntryKind::Other => {}
        }
        self.mech.files.remove_dir(&name, path).await
    }
}

/// Whether `name` is a temp file of `berth_atomic_file::write`
/// (`.NAME.tmp-PID-N`).
fn is_stale_temp(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}
