//! The CNI exec protocol, written for berth (no Go libcni): network
//! configurations loaded from directories and re-read when they change, plugins
//! run from bin dirs with the `CNI_*` environment and their configuration on
//! stdin, ADD / DEL / CHECK / STATUS for spec versions 0.3.0 to 1.1.0, results
//! parsed into one [`CniResult`] type, and every attachment recorded on disk so
//! DEL and CHECK work after a daemon restart.
//!
//! How the operations run (spec section 3):
//! - ADD runs the plugins in order, each getting the previous plugin's result
//!   as `prevResult`, and a `runtimeConfig` holding only the capability
//!   arguments it declares. The attachment (configuration, capability
//!   arguments, `CNI_ARGS`) is cached *before* the first plugin runs and the
//!   final result added after the last; if a plugin fails, ADD runs DEL for the
//!   whole list itself and returns the plugin's error. If the `add` future is
//!   dropped half-way, the cached record lets a later [`Cni::del`] clean up.
//! - DEL runs the plugins in reverse with the cached configuration, arguments
//!   and result (`prevResult` from 0.4.0 on), even when the current
//!   configuration changed or is gone; when the namespace no longer exists it
//!   passes an empty `CNI_NETNS`, as the spec allows, so plugins release what
//!   they hold (IPAM leases, host veths, iptables rules). The cache entry is
//!   removed after a successful DEL.
//! - CHECK (0.4.0+, unless `disableCheck`) runs the plugins in order with the
//!   cached result.
//! - STATUS (1.1.0) runs every plugin of the current network; for older
//!   versions only the presence of the plugin binaries is checked.
//!
//! At most one operation runs at a time per (container, interface).
//! Loopback is not handled here: `berth-netns` brings `lo` up when it creates a
//! namespace. Blocking file work runs on `spawn_blocking`; the synchronous
//! methods ([`Cni::network`], [`Cni::network_ready`], [`Cni::cached_result`])
//! block and belong on `spawn_blocking` in async code.

mod attachment;
mod cache;
mod config;
mod default_network;
mod error;
mod exec;
mod result;
mod version;

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Map, Value};

pub use attachment::{
    Attachment, Bandwidth, CapabilityArgs, DnsCapability, IpRange, PodArgs, PortMapping,
    DEFAULT_IFNAME,
};
pub use config::{NetworkConfigList, PluginConfig, CONFIG_EXTENSIONS};
pub use default_network::{write_default_network, DefaultNetwork, DEFAULT_NETWORK_VERSION};
pub use error::{Command, Error, PluginCall, PluginFailure};
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use version::{SpecVersion, UnsupportedVersion};

use cache::{Cache, Entry};
use config::ConfDirs;
use exec::{Call, ContainerEnv, Exec};

/// The usual configuration directory.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";
/// Where plugins usually are: Debian's package, then the upstream default.
pub const DEFAULT_BIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];
/// Default time a single plugin call may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where configurations, plugins and cached attachments are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniOptions {
    /// Configuration dirs, searched in order.
    pub conf_dirs: Vec<PathBuf>,
    /// Plugin dirs, searched in order; also `CNI_PATH`.
    pub bin_dirs: Vec<PathBuf>,
    /// Where attachments are recorded; must survive daemon restarts (and
    /// reboots, since IPAM leases do).
    pub cache_dir: PathBuf,
    /// The network to use; None: the first valid one.
    pub network_name: Option<String>,
    /// Time limit for each plugin call; the plugin is killed after it.
    pub timeout: Duration,
}

impl Default for CniOptions {
    fn default() -> Self {
        CniOptions {
            conf_dirs: vec![PathBuf::from(DEFAULT_CONF_DIR)],
            bin_dirs: DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect(),
            cache_dir: PathBuf::from("/var/lib/berth/cni"),
            network_name: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The network in use, as reported for the runtime's NetworkReady condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkInfo {
    pub name: String,
    pub cni_version: SpecVersion,
    /// The configuration file.
    pub source: Option<PathBuf>,
    /// Plugin types, in ADD order.
    pub plugins: Vec<String>,
}

impl NetworkInfo {
    fn of(net: &NetworkConfigList) -> Self {
        NetworkInfo {
            name: net.name.clone(),
            cni_version: net.cni_version,
            source: net.source.clone(),
            plugins: net.plugins.iter().map(|p| p.plugin_type.clone()).collect(),
        }
    }
}

/// What CHECK concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Every plugin confirmed the attachment.
    Passed,
    /// CHECK was not run, and why (spec version before 0.4.0, `disableCheck`).
    Skipped(String),
}

/// A CNI client. Cheap to clone; share one per daemon.
#[derive(Debug, Clone)]
pub struct Cni {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    opts: CniOptions,
    confs: ConfDirs,
    cache: Cache,
    exec: Exec,
    /// One lock per (container, interface): the spec forbids parallel
    /// operations on the same attachment.
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

/// The per-container inputs of a plugin call.
struct Target {
    container_id: String,
    netns: String,
    ifname: String,
    cni_args: String,
    caps: Map<String, Value>,
}

impl Inner {
    fn current(&self) -> Result<Arc<NetworkConfigList>, Error> {
        self.confs.select(self.opts.network_name.as_deref())
    }

    fn ready(&self) -> Result<(Arc<NetworkConfigList>, NetworkInfo), Error> {
        let net = self.current()?;
        for plugin in &net.plugins {
            self.exec.find(&net.name, &plugin.plugin_type)?;
            if let Some(ipam) = &plugin.ipam_type {
                self.exec.find(&net.name, ipam)?;
            }
        }
        let info = NetworkInfo::of(&net);
        Ok((net, info))
    }

    /// The cached entry of an attachment, looked up under the current network
    /// first, then under any network.
    fn find(&self, container_id: &str, ifname: &str) -> Result<Option<cache::Found>, Error> {
        let current = self.current().ok().map(|n| n.name.clone());
        self.cache.find(current.as_deref(), container_id, ifname)
    }
}

impl Cni {
    /// A client for these options. Does no I/O.
    pub fn new(opts: CniOptions) -> Cni {
        Cni {
            inner: Arc::new(Inner {
                confs: ConfDirs::new(opts.conf_dirs.clone()),
                cache: Cache::new(opts.cache_dir.clone()),
                exec: Exec::new(opts.bin_dirs.clone(), opts.timeout),
                locks: Mutex::new(HashMap::new()),
                opts,
            }),
        }
    }

    /// (container id, interface) of every attachment in the cache: what DEL
    /// can still release after a restart. Blocking.
    pub fn cached_attachments(&self) -> Result<Vec<(String, String)>, Error> {
        self.inner.cache.list()
    }

    /// The options this client was made with.
    pub fn options(&self) -> &CniOptions {
        &self.inner.opts
    }

    /// The network ADD would use now (configuration dirs re-read if changed).
    /// Blocking.
    pub fn network(&self) -> Result<Arc<NetworkConfigList>, Error> {
        self.inner.current()
    }

    /// Whether a network is usable: a valid configuration is found and all its
    /// plugins (and IPAM plugins) are in the bin dirs. Blocking; runs nothing.
    pub fn network_ready(&self) -> Result<NetworkInfo, Error> {
        self.inner.ready().map(|(_, info)| info)
    }

    /// [`Cni::network_ready`], then STATUS on every plugin when the network's
    /// version has it (1.1.0); older versions are reported ready.
    pub async fn status(&self) -> Result<NetworkInfo, Error> {
        let (net, info) = self.blocking(|inner| inner.ready()).await?;
        if net.cni_version.supports_status() {
            for plugin in &net.plugins {
                self.run_plugin(Command::Status, &net, plugin, None, None)
                    .await?;
            }
        }
        Ok(info)
    }

    /// Attaches the container to the current network and returns the final
    /// result. Refused with [`Error::AlreadyAttached`] while a cached entry
    /// exists for the same container and interface (DEL it first). On failure nothing is left attached (unless the undo failed too:
    /// [`Error::AddRollback`]; the cached entry then lets [`Cni::del`] retry).
    pub async fn add(&self, att: &Attachment) -> Result<CniResult, Error> {
        att.validate()?;
        require_namespace(att)?;
        let _guard = self.lock(att).await;
        // All plugins must be there, and the attachment must not exist yet
        // (a second ADD's undo would tear down the first), before anything is done.
        let (container_id, ifname) = (att.container_id.clone(), att.ifname.clone());
        let (net, existing) = self
            .blocking(move |inner| {
                let (net, _) = inner.ready()?;
                Ok((net, inner.find(&container_id, &ifname)?))
            })
            .await?;
        if let Some(found) = existing {
            return Err(Error::AlreadyAttached {
                container_id: att.container_id.clone(),
                ifname: att.ifname.clone(),
                cache_entry: found.path,
            });
        }
        let target = Target {
            container_id: att.container_id.clone(),
            netns: att.netns.display().to_string(),
            ifname: att.ifname.clone(),
            cni_args: att.cni_args(),
            caps: att.capabilities.to_map(),
        };
        let mut entry = Entry::new(
            &net.name,
            &att.container_id,
            &att.ifname,
            &att.netns,
            target.cni_args.clone(),
            net.to_value(),
            target.caps.clone(),
        );
        // Persist before acting: DEL needs this even if we crash half-way.
        let cache_path = {
            let entry = entry.clone();
            self.blocking(move |inner| inner.cache.write(&entry))
                .await?
        };

        let mut prev: Option<(Value, CniResult)> = None;
        for plugin in &net.plugins {
            let step = self
                .run_plugin(
                    Command::Add,
                    &net,
                    plugin,
                    Some(&target),
                    prev.as_ref().map(|p| &p.0),
                )
                .await
                .and_then(|out| parse_result(&net, plugin, &target, &out));
            match step {
                Ok(result) => prev = Some(result),
                Err(error) => {
                    let partial = prev.map(|p| p.0);
                    return Err(self
                        .undo_add(&net, &target, partial.as_ref(), cache_path, error)
                        .await);
                }
            }
        }
        let Some((raw, result)) = prev else {
            // Unreachable: a validated list has at least one plugin.
            return Err(Error::InvalidConfig {
                source_name: net.name.clone(),
                reason: "no plugins".into(),
            });
        };
        entry.result = Some(raw.clone());
        if let Err(error) = self.blocking(move |inner| inner.cache.write(&entry)).await {
            return Err(self
                .undo_add(&net, &target, Some(&raw), cache_path, error)
                .await);
        }
        Ok(result)
    }

    /// Detaches the container: the plugins in reverse order, with what ADD
    /// cached (configuration, arguments, result). Works when the namespace is
    /// gone, when the configuration changed, and when nothing was cached (then
    /// with the current network and no `prevResult`). Idempotent.
    pub async fn del(&self, att: &Attachment) -> Result<(), Error> {
        att.validate()?;
        let _guard = self.lock(att).await;
        let netns = if att.netns.as_os_str().is_empty()
            || !berth_netns::is_namespace(&att.netns).unwrap_or(false)
        {
            tracing::debug!(
                "CNI DEL of {}: netns {} is gone, passing an empty CNI_NETNS",
                att.container_id,
                att.netns.display()
            );
            String::new()
        } else {
            att.netns.display().to_string()
        };
        let (container_id, ifname) = (att.container_id.clone(), att.ifname.clone());
        let found = self
            .blocking(move |inner| inner.find(&container_id, &ifname))
            .await?;

        let mut target = Target {
            container_id: att.container_id.clone(),
            netns,
            ifname: att.ifname.clone(),
            cni_args: att.cni_args(),
            caps: att.capabilities.to_map(),
        };
        let (net, prev) = match found
            .as_ref()
            .and_then(|f| f.entry.clone().map(|e| (&f.path, e)))
        {
            Some((path, entry)) => {
                target.cni_args = entry.cni_args;
                target.caps = entry.capability_args;
                let net = NetworkConfigList::from_cached(entry.config, path)?;
                (Arc::new(net), entry.result)
            }
            None => (self.blocking(|inner| inner.current()).await?, None),
        };
        self.del_chain(&net, &target, prev.as_ref()).await?;
        if let Some(found) = found {
            self.blocking(move |inner| inner.cache.remove(&found.path))
                .await?;
        }
        Ok(())
    }

    /// Asks every plugin to confirm the attachment, with the cached result.
    /// [`Error::NotAttached`] if ADD did not complete for it.
    pub async fn check(&self, att: &Attachment) -> Result<CheckOutcome, Error> {
        att.validate()?;
        require_namespace(att)?;
        let _guard = self.lock(att).await;
        let (container_id, ifname) = (att.container_id.clone(), att.ifname.clone());
        let found = self
            .blocking(move |inner| inner.find(&container_id, &ifname))
            .await?;
        let not_attached = || Error::NotAttached {
            container_id: att.container_id.clone(),
            ifname: att.ifname.clone(),
        };
        let found = found.ok_or_else(not_attached)?;
        let entry = found.entry.ok_or_else(not_attached)?;
        let result = entry.result.ok_or_else(not_attached)?;
        let net = NetworkConfigList::from_cached(entry.config, &found.path)?;
        if !net.cni_version.supports_check() {
            return Ok(CheckOutcome::Skipped(format!(
                "network {:?} uses CNI {}, which has no CHECK",
                net.name, net.cni_version
            )));
        }
        if net.disable_check {
            return Ok(CheckOutcome::Skipped(format!(
                "network {:?} sets disableCheck",
                net.name
            )));
        }
        let target = Target {
            container_id: att.container_id.clone(),
            netns: att.netns.display().to_string(),
            ifname: att.ifname.clone(),
            cni_args: entry.cni_args,
            caps: entry.capability_args,
        };
        for plugin in &net.plugins {
            self.run_plugin(Command::Check, &net, plugin, Some(&target), Some(&result))
                .await?;
        }
        Ok(CheckOutcome::Passed)
    }

    /// The cached final ADD result of an attachment (e.g. to learn a pod's IPs
    /// after a restart); None if there is none. Blocking.
    pub fn cached_result(
        &self,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<CniResult>, Error> {
        let Some(found) = self.inner.find(container_id, ifname)? else {
            return Ok(None);
        };
        let Some(entry) = found.entry else {
            return Ok(None);
        };
        let Some(raw) = entry.result else {
            return Ok(None);
        };
        let net = NetworkConfigList::from_cached(entry.config, &found.path)?;
        CniResult::parse(&raw, net.cni_version)
            .map(Some)
            .map_err(|reason| {
                error::io_err(
                    "parse CNI cache entry",
                    found.path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
                )
            })
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, Error> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| Error::Task(e.to_string()))?
    }

    async fn lock(&self, att: &Attachment) -> tokio::sync::OwnedMutexGuard<()> {
        let key = format!("{}+{}", att.container_id, att.ifname);
        let mutex = {
            let mut locks = self.inner.locks.lock_unpoisoned();
            locks.retain(|_, lock| lock.strong_count() > 0);
            match locks.get(&key).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    locks.insert(key, Arc::downgrade(&lock));
                    lock
                }
            }
        };
        mutex.lock_owned().await
    }

    async fn run_plugin(
        &self,
        command: Command,
        net: &NetworkConfigList,
        plugin: &PluginConfig,
        target: Option<&Target>,
        prev: Option<&Value>,
    ) -> Result<Vec<u8>, Error> {
        let no_caps = Map::new();
        let caps = target.map_or(&no_caps, |t| &t.caps);
        let stdin = plugin.exec_config(net, caps, prev).to_string().into_bytes();
        let container = target.map(|t| ContainerEnv {
            id: &t.container_id,
            netns: &t.netns,
            ifname: &t.ifname,
            args: &t.cni_args,
        });
        self.inner
            .exec
            .run(Call {
                command,
                network: &net.name,
                plugin: &plugin.plugin_type,
                container,
                stdin,
            })
            .await
    }

    /// DEL for every plugin, in reverse order.
    async fn del_chain(
        &self,
        net: &NetworkConfigList,
        target: &Target,
        prev: Option<&Value>,
    ) -> Result<(), Error> {
        let prev = prev.filter(|_| net.cni_version.prev_result_on_del());
        for plugin in net.plugins.iter().rev() {
            self.run_plugin(Command::Del, net, plugin, Some(target), prev)
                .await?;
        }
        Ok(())
    }

    /// Undoes a failed ADD with DEL (given the last partial result), then drops
    /// the cache entry. Returns the error to report.
    async fn undo_add(
        &self,
        net: &NetworkConfigList,
        target: &Target,
        partial: Option<&Value>,
        cache_path: PathBuf,
        error: Error,
    ) -> Error {
        tracing::warn!("CNI ADD failed, undoing it: {error}");
        if let Err(cleanup) = self.del_chain(net, target, partial).await {
            return Error::AddRollback {
                error: Box::new(error),
                cleanup: Box::new(cleanup),
            };
        }
        if let Err(e) = self
            .blocking(move |inner| inner.cache.remove(&cache_path))
            .await
        {
            tracing::warn!("after undoing a failed CNI ADD: {e}");
        }
        error
    }
}

/// ADD and CHECK need a live network namespace.
fn require_namespace(att: &Attachment) -> Result<(), Error> {
    match berth_netns::is_namespace(&att.netns) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::InvalidAttachment {
            container_id: att.container_id.clone(),
            reason: format!("{} is not a network namespace", att.netns.display()),
        }),
        Err(e) => Err(Error::InvalidAttachment {
            container_id: att.container_id.clone(),
            reason: e.to_string(),
        }),
    }
}

/// A plugin's ADD output: must be a result of a supported version.
fn parse_result(
    net: &NetworkConfigList,
    plugin: &PluginConfig,
    target: &Target,
    out: &[u8],
) -> Result<(Value, CniResult), Error> {
    let bad = |reason: String| Error::BadResult {
        call: Box::new(PluginCall {
            network: net.name.clone(),
            plugin: plugin.plugin_type.clone(),
            command: Command::Add,
            container_id: target.container_id.clone(),
        }),
        reason,
    };
    let raw: Value = serde_json::from_slice(out).map_err(|e| {
        bad(format!(
            "not JSON ({e}): {:?}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        ))
    })?;
    let result = CniResult::parse(&raw, net.cni_version).map_err(bad)?;
    Ok((raw, result))
}
