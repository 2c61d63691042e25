//! The NRI adaptation: the plugin set, accepting and launching plugins, and
//! synchronizing new plugins with the runtime's state.
//!
//! Like containerd/nri, events are serialized (one at a time, every plugin
//! in index order), and a plugin joins the set only after Synchronize. The
//! sync lock (a read-write lock) closes the gap between the snapshot given
//! to a new plugin and its joining: the runtime holds a read guard
//! ([`Nri::block_plugin_sync`]) from before it creates a pod or container
//! until the object is in the state the snapshot reads, and a plugin's
//! Synchronize holds the write side, so no object is missed by both.

use berth_lock::MutexExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex as StdMutex};

use tokio::sync::{Mutex, OwnedRwLockReadGuard, RwLock};
use tokio::task::JoinHandle;

use crate::api;
use crate::launch;
use crate::plugin::{self, Launch, Plugin};
use crate::{Config, Error, Host, PluginInfo, PluginStats};

pub(crate) struct Inner {
    pub cfg: Config,
    pub host: Arc<dyn Host>,
    /// The active plugins, sorted by index then name.
    pub plugins: StdMutex<Vec<Arc<Plugin>>>,
    /// Serializes events, as NRI's adaptation mutex does.
    pub event_lock: Mutex<()>,
    /// Post-events (PostCreate, PostStart, the PostUpdates) queued for
    /// delivery after the call that posted them has answered: whoever takes
    /// the event lock next delivers them first (see [`Nri::lock_events`]).
    pub posted: StdMutex<std::collections::VecDeque<crate::dispatch::Posted>>,
    /// A task is on its way to deliver the queued post-events.
    pub drain_scheduled: std::sync::atomic::AtomicBool,
    sync_lock: Arc<RwLock<()>>,
    accept: StdMutex<Option<JoinHandle<()>>>,
    /// The counters of dropped plugins, by name, so that they stay.
    retired: StdMutex<Retired>,
}

/// Dropped plugins' counters by `IDX-NAME`: what earlier connections of
/// that name counted, and the counters of the last one (a call it had
/// under way as it was dropped still counts there). Bounded: past
/// [`MAX_RETIRED`] names, new ones count under [`OTHER_PLUGINS`].
#[derive(Default)]
struct Retired(std::collections::BTreeMap<String, (PluginStats, Arc<StdMutex<PluginStats>>)>);

const MAX_RETIRED: usize = 256;
/// The name dropped plugins' counters go under past [`MAX_RETIRED`] names.
pub const OTHER_PLUGINS: &str = "(other dropped plugins)";

fn read(s: &StdMutex<PluginStats>) -> PluginStats {
    s.lock().map(|s| s.clone()).unwrap_or_default()
}

impl Retired {
    fn retire(&mut self, name: String, stats: Arc<StdMutex<PluginStats>>) {
        let name = match self.0.contains_key(&name) || self.0.len() < MAX_RETIRED {
            true => name,
            false => OTHER_PLUGINS.to_string(),
        };
        match self.0.get_mut(&name) {
            Some((base, last)) => {
                base.add(&read(last));
                *last = stats;
            }
            None => {
                self.0.insert(name, (PluginStats::default(), stats));
            }
        }
    }
}

/// The NRI runtime side. Cheap to clone.
#[derive(Clone)]
pub struct Nri {
    pub(crate) inner: Arc<Inner>,
}

/// Held by the runtime while it creates an object, so that a plugin being
/// synchronized either sees the object in its snapshot or gets its events.
pub struct PluginSyncBlock(#[allow(dead_code)] OwnedRwLockReadGuard<()>);

impl Nri {
    /// Starts NRI: launches, registers and synchronizes the pre-installed
    /// plugins (each bounded by the timeouts; failures are logged and the
    /// plugin skipped), then listens for external ones.
    pub async fn start(cfg: Config, host: Arc<dyn Host>) -> Result<Nri, Error> {
        let inner = Arc::new(Inner {
            cfg,
            host,
            plugins: StdMutex::new(Vec::new()),
            event_lock: Mutex::new(()),
            posted: StdMutex::new(std::collections::VecDeque::new()),
            drain_scheduled: std::sync::atomic::AtomicBool::new(false),
            sync_lock: Arc::new(RwLock::new(())),
            accept: StdMutex::new(None),
            retired: StdMutex::new(Retired::default()),
        });
        let found = launch::discover(&inner.cfg.plugin_path, &inner.cfg.plugin_config_path)
            .await
            .map_err(|source| Error::Setup {
                path: inner.cfg.plugin_path.clone(),
                source,
            })?;
        for d in found {
            let name = format!("{}-{}", d.idx, d.name);
            match launch::spawn(&d) {
                Ok((stream, l)) => {
                    if let Err(e) = attach(&inner, stream, Some(l), d.config).await {
                        tracing::warn!(plugin = %name, error = %e, "pre-installed NRI plugin failed to start");
                    }
                }
                Err(e) => tracing::warn!(plugin = %name, error = %e, "cannot launch NRI plugin"),
            }
        }
        if !inner.cfg.disable_connections {
            let listener = listen(&inner.cfg.socket_path)?;
            let weak = Arc::downgrade(&inner);
            let task = tokio::spawn(accept_loop(listener, weak));
            if let Ok(mut a) = inner.accept.lock() {
                *a = Some(task);
            }
        }
        Ok(Nri { inner })
    }

    /// Blocks plugin synchronization until the returned guard is dropped.
    pub async fn block_plugin_sync(&self) -> PluginSyncBlock {
        PluginSyncBlock(self.inner.sync_lock.clone().read_owned().await)
    }

    /// The active plugins, in invocation order.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.active()
            .iter()
            .map(|p| PluginInfo {
                name: p.name.clone(),
                index: p.idx.clone(),
                kind: p.kind,
                pid: p.pid,
                events: p.events().events(),
            })
            .collect()
    }

    /// The bound on every request to a plugin.
    pub fn request_timeout(&self) -> std::time::Duration {
        self.inner.cfg.request_timeout
    }

    /// Per-plugin request counters, by `IDX-NAME`: connected plugins and
    /// dropped ones (monotonic counters do not vanish with a plugin; one
    /// that reconnects under its name counts on).
    pub fn stats(&self) -> Vec<PluginStats> {
        let active = self.active();
        let mut by_name: std::collections::BTreeMap<String, PluginStats> = self
            .inner
            .retired
            .lock_unpoisoned()
            .0
            .iter()
            .map(|(name, (base, last))| {
                let mut s = base.clone();
                s.add(&read(last));
                (name.clone(), s)
            })
            .collect();
        for p in &active {
            let s = by_name.entry(p.full_name()).or_default();
            s.add(&p.stats());
            s.connected = true;
        }
        by_name
            .into_iter()
            .map(|(plugin, s)| PluginStats { plugin, ..s })
            .collect()
    }

    /// Stops listening, tells every plugin (bounded) and disconnects them.
    pub async fn shutdown(&self) {
        if let Some(t) = self.inner.accept.lock().ok().and_then(|mut a| a.take()) {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.inner.cfg.socket_path);
        // Queued post-events go out before the plugins hear of the end.
        drop(self.lock_events().await);
        let plugins = std::mem::take(&mut *self.inner.plugins.lock_unpoisoned());
        self.retire(&plugins);
        for p in plugins {
            let _ = p
                .call(
                    "Shutdown",
                    p.client().shutdown(p.context(), &api::Empty::new()),
                )
                .await;
            p.close();
        }
    }

    /// The plugins still connected (dropping the closed ones).
    pub(crate) fn active(&self) -> Vec<Arc<Plugin>> {
        let mut g = self.inner.plugins.lock_unpoisoned();
        let (closed, open): (Vec<_>, Vec<_>) = g.drain(..).partition(|p| p.is_closed());
        *g = open;
        let active = g.clone();
        drop(g);
        self.retire(&closed);
        active
    }

    /// Keeps the counters of plugins leaving the set.
    fn retire(&self, plugins: &[Arc<Plugin>]) {
        if plugins.is_empty() {
            return;
        }
        let mut r = self.inner.retired.lock_unpoisoned();
        for p in plugins {
            r.retire(p.full_name(), p.shared_stats());
        }
    }
}

/// Creates the NRI socket: parent directory 0700 if missing, socket 0600.
fn listen(path: &Path) -> Result<tokio::net::UnixListener, Error> {
    let setup = |source| Error::Setup {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(setup)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(setup)?;
        }
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(setup(e)),
    }
    let l = tokio::net::UnixListener::bind(path).map_err(setup)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(setup)?;
    Ok(l)
}

async fn accept_loop(l: tokio::net::UnixListener, inner: std::sync::Weak<Inner>) {
    loop {
        let stream = match l.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accepting NRI plugin connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(inner) = inner.upgrade() else { return };
        // Each connection registers on its own task: a plugin that never
        // registers must not hold up the next one.
        tokio::spawn(async move {
            if let Err(e) = attach(&inner, stream, None, String::new()).await {
                tracing::warn!(error = %e, "external NRI plugin failed to start");
            }
        });
    }
}

/// Registers, configures and synchronizes one plugin, then adds it to the
/// set.
async fn attach(
    inner: &Arc<Inner>,
    stream: tokio::net::UnixStream,
    launch: Option<Launch>,
    config: String,
) -> Result<(), String> {
    let cfg = &inner.cfg;
    let p = plugin::connect(
        stream,
        launch,
        inner.host.clone(),
        cfg.registration_timeout,
        cfg.request_timeout,
    )
    .await?;
    let req = api::ConfigureRequest {
        config,
        runtime_name: cfg.runtime_name.clone(),
        runtime_version: cfg.runtime_version.clone(),
        registration_timeout: cfg.registration_timeout.as_millis() as i64,
        request_timeout: cfg.request_timeout.as_millis() as i64,
        NRI_version: crate::NRI_VERSION.into(),
        ..Default::default()
    };
    if let Err(e) = p.configure(req).await {
        p.close();
        return Err(format!("{}: configure: {e}", p.full_name()));
    }
    let _sync = inner.sync_lock.write().await;
    let (pods, containers) = inner.host.snapshot().await;
    // Synchronize is part of a plugin's start-up and carries the whole
    // node: it is bounded by the registration timeout (5 s by default)
    // where that is the longer, not the per-event request timeout (2 s).
    // NRI's own adaptation uses the request timeout, so a plugin that takes
    // 2 s to synchronize is dropped there and the containers made meanwhile
    // never reach it (cri-tools' two Synchronize specs skip on containerd
    // for that); new containers wait on `sync_lock` meanwhile either way.
    let sync_timeout = cfg.registration_timeout.max(cfg.request_timeout);
    let updates = match crate::sync::synchronize(&p, pods, containers, sync_timeout).await {
        Ok(u) => u,
        Err(e) => {
            p.close();
            return Err(format!("{}: synchronize: {e}", p.full_name()));
        }
    };
    if !updates.is_empty() {
        let failed = inner
            .host
            .update_containers(&p.full_name(), updates, Vec::new())
            .await;
        if !failed.is_empty() {
            tracing::warn!(plugin = %p.full_name(), failed = failed.len(), "NRI sync updates failed");
        }
    }
    let _events = inner.event_lock.lock().await;
    let mut g = inner.plugins.lock_unpoisoned();
    g.push(p.clone());
    g.sort_by(|a, b| (&a.idx, &a.name).cmp(&(&b.idx, &b.name)));
    tracing::info!(plugin = %p.full_name(), kind = ?p.kind, "NRI plugin connected and synchronized");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(requests: u64) -> Arc<StdMutex<PluginStats>> {
        Arc::new(StdMutex::new(PluginStats {
            requests,
            failures: 1,
            ..Default::default()
        }))
    }

    fn total(r: &Retired, name: &str) -> PluginStats {
        let (base, last) = &r.0[name];
        let mut s = base.clone();
        s.add(&read(last));
        s
    }

    #[test]
    fn dropped_plugins_counters_stay_and_add_up() {
        let mut r = Retired::default();
        let first = counted(3);
        r.retire("10-x".into(), first.clone());
        // A call under way as it was dropped still counts.
        first.lock().unwrap().requests += 1;
        assert_eq!(total(&r, "10-x").requests, 4);
        // Reconnected under its name and dropped again: counts on.
        r.retire("10-x".into(), counted(5));
        let t = total(&r, "10-x");
        assert_eq!((t.requests, t.failures), (9, 2));
        for i in 0..MAX_RETIRED + 5 {
            r.retire(format!("{i}-many"), counted(1));
        }
        assert_eq!(r.0.len(), MAX_RETIRED + 1, "bounded");
        assert_eq!(total(&r, "10-x").requests, 9, "kept past the bound");
        assert!(total(&r, OTHER_PLUGINS).requests >= 5);
    }
}
