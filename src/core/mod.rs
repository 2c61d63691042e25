//! The lifecycle core: pods and containers, and every rule about the order
//! of steps, what is undone on failure, locking, and recovery.
//!
//! It takes typed inputs (decoded CRI configs), owns the stores, and reaches
//! the host only through the traits of [`mechanisms`] — real ones over
//! berth's crates ([`real`]), recording fakes in the unit tests. The CRI
//! layer (`crate::server`) only decodes requests, calls the core, and
//! encodes answers.

pub mod caller;
pub mod mechanisms;
pub mod real;
pub mod recovery;
mod retry;
mod rollback;

mod container_create;
mod container_exec;
mod container_spec;
mod container_start;
mod container_stop;
mod container_update;
mod plugin_hooks;
mod sandbox_run;
mod sandbox_stop;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::Config;
use crate::container::{Container, ContainerState, ContainerStore};
use crate::error::Error;
pub use crate::layout::Layout;
use crate::objects::StoreExt;
use crate::sandbox::{Sandbox, SandboxStore};
pub use container_create::ContainerRequest;
pub use mechanisms::{EventKind, Mechanisms};
pub use sandbox_run::SandboxRequest;

/// Pods, containers and the mechanisms they are made with.
pub struct Core {
    config: Config,
    layout: Layout,
    sandboxes: Arc<SandboxStore>,
    containers: Arc<ContainerStore>,
    mech: Mechanisms,
    /// What the host supports and the configured policies, for spec generation.
    spec_options: berth_spec::SpecOptions,
    /// Records that could not be loaded at open: recovery quarantines them.
    broken: Vec<berth_store::Broken>,
    /// Sandbox creations by name, for retries of abandoned calls.
    pods_in_flight: retry::Inflight<SandboxRequest>,
    /// Container creations by name, for retries of abandoned calls.
    containers_in_flight: retry::Inflight<ContainerRequest>,
    /// Containers whose exit the NRI plugins have been told of.
    plugin_stopped: std::sync::Mutex<std::collections::HashSet<String>>,
    /// From recovery until the plugins are started and synchronized: the
    /// containers whose exit they are to hear of then (those that exited
    /// while berth was down, or before the plugins were there).
    deferred_stops: std::sync::Mutex<Option<Vec<String>>>,
}

/// The record stores, opened from the layout before anything that uses
/// them is built (the image store's garbage collection and the events read
/// them too).
pub struct Stores {
    pub sandboxes: Arc<SandboxStore>,
    pub containers: Arc<ContainerStore>,
    /// Records that could not be loaded: recovery quarantines them.
    pub broken: Vec<berth_store::Broken>,
}

impl Stores {
    /// Opens the stores under the layout. Records that cannot be read are
    /// logged and left on disk.
    pub fn open(layout: &Layout) -> Result<Stores, Error> {
        let open = |dir: PathBuf| move |e| Error::io("records", "opening", dir)(e);
        let (sandboxes, mut broken) = SandboxStore::open(&layout.sandbox_records())
            .map_err(open(layout.sandbox_records()))?;
        let (containers, more) = ContainerStore::open(&layout.container_records())
            .map_err(open(layout.container_records()))?;
        broken.extend(more);
        for problem in &broken {
            tracing::error!(%problem, "a record cannot be loaded: what it owns is left alone");
        }
        Ok(Stores {
            sandboxes: Arc::new(sandboxes),
            containers: Arc::new(containers),
            broken,
        })
    }
}

/// Every snapshot some container uses, from the records alone: what image
/// garbage collection must keep, whatever images are removed. `None` (keep
/// everything) while a record older than `rootfs_snapshots` exists: its
/// snapshots are known only from its image, and this runs under the image
/// store's lock, so it cannot ask.
pub fn snapshots_in_use(containers: &ContainerStore) -> Option<Vec<String>> {
    let mut in_use = Vec::new();
    for c in containers.list() {
        if c.meta.rootfs_snapshots.is_empty() {
            return None;
        }
        in_use.extend(c.meta.rootfs_snapshots.iter().cloned());
        in_use.extend(c.meta.volume_snapshots.iter().cloned());
    }
    Some(in_use)
}

impl Core {
    /// The core over opened stores and built mechanisms (see `crate::compose`).
    pub fn new(
        config: Config,
        layout: Layout,
        stores: Stores,
        mech: Mechanisms,
        spec_options: berth_spec::SpecOptions,
    ) -> Arc<Core> {
        Arc::new(Core {
            config,
            layout,
            sandboxes: stores.sandboxes,
            containers: stores.containers,
            mech,
            spec_options,
            broken: stores.broken,
            pods_in_flight: Default::default(),
            containers_in_flight: Default::default(),
            plugin_stopped: Default::default(),
            deferred_stops: Default::default(),
        })
    }

    /// Container `id` (or the one its unique prefix names).
    pub fn container(&self, id: &str) -> Result<Arc<Container>, Error> {
        self.containers.lookup(id)
    }

    /// Sandbox `id` (or the one its unique prefix names).
    pub fn sandbox(&self, id: &str) -> Result<Arc<Sandbox>, Error> {
        self.sandboxes.lookup(id)
    }

    /// Every container record.
    pub fn all_containers(&self) -> Vec<Arc<Container>> {
        self.containers.list()
    }

    /// Every sandbox record.
    pub fn all_sandboxes(&self) -> Vec<Arc<Sandbox>> {
        self.sandboxes.list()
    }

    /// How many times the containers have changed (see `crates/store`).
    pub fn container_changes(&self) -> u64 {
        self.containers.changes()
    }

    /// How many times the sandboxes have changed (see `crates/store`).
    pub fn sandbox_changes(&self) -> u64 {
        self.sandboxes.changes()
    }

    /// What the host supports and the configured policies.
    pub fn spec_options(&self) -> &berth_spec::SpecOptions {
        &self.spec_options
    }

    /// Whether the pod network is ready (blocks: not on a worker).
    pub fn network_ready(&self) -> Result<(), String> {
        self.mech.network.ready()
    }

    /// The OCI runtime binary of a runtime handler (the default handler's
    /// for an unknown one).
    pub fn runtime_binary(&self, handler: &str) -> String {
        self.config
            .runtime
            .handlers
            .get(handler)
            .unwrap_or_else(|| self.config.default_runtime_handler())
            .binary
            .clone()
    }

    /// The live shim of container (or sandbox) `id`.
    pub(crate) async fn shim_of(&self, id: &str) -> Result<Arc<dyn mechanisms::Task>, Error> {
        self.mech
            .runtime
            .connect(id, &self.layout.shim_dir(id))
            .await
    }

    /// The spec options for pods and containers of runtime handler
    /// `handler`: the annotations it lets through.
    pub fn spec_options_for(&self, handler: &str) -> berth_spec::SpecOptions {
        let mut opts = self.spec_options.clone();
        if let Some(h) = self.config.runtime.handlers.get(handler) {
            opts.pod_annotations = h.pod_annotations.clone();
            opts.container_annotations = h.container_annotations.clone();
        }
        opts
    }

    /// A sandbox's containers, oldest first.
    pub fn sandbox_containers(&self, sandbox_id: &str) -> Vec<Arc<Container>> {
        crate::container::oldest_first(self.containers.in_group(sandbox_id))
    }

    /// The pid of a running container (for a PID namespace TARGET).
    pub fn container_pid(&self, id: &str) -> Option<u32> {
        let c = self.containers.get(id).ok()?;
        let status = c.status();
        (status.state == ContainerState::Running)
            .then_some(status.pid)
            .flatten()
    }

    /// The snapshots a container's rootfs is made of (from its record; for
    /// records older than that, from its image).
    pub fn rootfs_snapshots(&self, container: &Container) -> Result<Vec<String>, Error> {
        if !container.meta.rootfs_snapshots.is_empty() {
            return Ok(container.meta.rootfs_snapshots.clone());
        }
        let image = self
            .mech
            .images
            .get(&container.meta.image_id)
            .ok_or_else(|| Error::NotFound {
                kind: "image",
                id: container.meta.image_id.clone(),
            })?;
        Ok(mechanisms::chain_ids(&image))
    }

    /// Reports a container's change; STOPPED only for one that has exited.
    async fn container_event(&self, container: &Container, kind: EventKind) {
        if kind == EventKind::Stopped && container.status().state != ContainerState::Exited {
            return;
        }
        self.mech
            .events
            .emit(kind, &container.meta.id, &container.meta.sandbox_id)
            .await;
    }

    /// Reports a sandbox's change (its id stands for the container id).
    async fn sandbox_event(&self, id: &str, kind: EventKind) {
        self.mech.events.emit(kind, id, id).await;
    }
}

/// The berth-shim executable: from config, else next to this binary, else in PATH.
pub fn shim_binary(config: &Config) -> PathBuf {
    if !config.runtime.shim_binary.is_empty() {
        return PathBuf::from(&config.runtime.shim_binary);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("berth-shim")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("berth-shim"))
}

/// A fresh 64-hex-digit id.
pub fn new_id() -> String {
    let mut bytes = [0u8; 32];
    if let Err(e) = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
    {
        // Fall back to time and pid: ids must still be unique, not secret.
        tracing::warn!(error = %e, "reading /dev/urandom");
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
            ^ u128::from(std::process::id());
        bytes[..16].copy_from_slice(&seed.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Nanoseconds since the epoch.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

pub(crate) use crate::counters::timed;
