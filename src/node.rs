//! The daemon's parts and their life. A [`Node`] is built complete by the
//! composition root (`crate::compose`) and is the one owner that starts
//! them, in order, once the CRI socket is bound (the streaming server, the
//! default CNI network, recovery, the image import directory, NRI, the
//! gate, the CPU sampler, the metrics endpoint), and stops them at
//! shutdown. The CRI layer (`crate::server::Cri`) only serves RPCs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use berth_oci_image::ImageStore;
use berth_streaming::StreamingServer;
use tokio::task::AbortHandle;

use crate::config::Config;
use crate::container::ContainerState;
use crate::core::Core;
use crate::counters::Gauges;
use crate::error::Error;
use crate::nri::NriPlugins;
use crate::sandbox::SandboxState;
use crate::server::events::Events;
use crate::server::stats::Collector;
use crate::server::{metrics_endpoint, Cri};

/// What a [`Node`] is made of (see `crate::compose::daemon`).
pub struct Parts {
    pub config: Config,
    pub core: Arc<Core>,
    pub cri: Arc<Cri>,
    pub images: Arc<ImageStore>,
    pub events: Arc<Events>,
    /// NRI, when enabled, and the task that serves its requests to the
    /// core's update path.
    pub nri: Option<(Arc<NriPlugins>, AbortHandle)>,
    /// Bound, not yet serving.
    pub streaming: StreamingServer,
    /// The stats RPCs' collector, whose CPU sampler the node runs.
    pub stats: Arc<Collector>,
}

/// The daemon: its parts, and the order they start and stop in.
pub struct Node {
    parts: Parts,
    /// Set at [`Node::stop`]: the CPU sampler ends.
    stop_sampling: Arc<AtomicBool>,
}

impl Node {
    /// The daemon over its parts.
    pub fn new(parts: Parts) -> Arc<Node> {
        Arc::new(Node {
            parts,
            stop_sampling: Arc::default(),
        })
    }

    /// The RPC surface, for the gRPC server (its gate is closed until
    /// [`Node::start`] has finished).
    pub fn cri(&self) -> &Arc<Cri> {
        &self.parts.cri
    }

    /// Starts everything, while the CRI socket answers Unavailable: the
    /// streaming server; the default CNI network; recovery; the node's own
    /// images; NRI; then the gate opens, and the CPU sampler and the
    /// metrics endpoint (on `metrics`, when configured) start.
    pub async fn start(
        self: &Arc<Self>,
        metrics: Option<tokio::net::TcpListener>,
    ) -> Result<(), Error> {
        let streaming = self.parts.streaming.clone();
        tokio::spawn(async move {
            if let Err(e) = streaming.serve().await {
                tracing::error!(error = %e, "streaming server");
            }
        });
        tracing::info!(
            url = self.parts.streaming.base_url(),
            "streaming server listening"
        );
        let config = self.parts.config.clone();
        tokio::task::spawn_blocking(move || ensure_default_network(&config))
            .await
            .map_err(Error::join)??;
        self.recover().await;
        // The node's own images (pause, system images) before kubelet's first call.
        self.import_dir().await;
        self.start_nri().await;
        self.parts.cri.open_gate();
        self.parts.stats.start_sampler(self.stop_sampling.clone());
        if let Some(listener) = metrics {
            match listener.local_addr() {
                Ok(address) => tracing::info!(%address, "serving Prometheus metrics on /metrics"),
                Err(e) => tracing::warn!(error = %e, "metrics endpoint address"),
            }
            let node = self.clone();
            let page: metrics_endpoint::Page = Arc::new(move || node.metrics_page());
            tokio::spawn(metrics_endpoint::serve(listener, page));
        }
        Ok(())
    }

    /// Stops what outlives a call: the streaming server's sessions, the CPU
    /// sampler, and NRI's plugins are told berth is going (bounded by their
    /// timeout).
    pub async fn stop(&self) {
        self.parts.streaming.shutdown();
        self.stop_sampling.store(true, Ordering::Relaxed);
        if let Some((plugins, updates)) = &self.parts.nri {
            if let Some(nri) = plugins.nri() {
                nri.shutdown().await;
            }
            updates.abort();
        }
    }

    /// Brings the records in line with what runs (before the gate opens).
    async fn recover(&self) {
        self.parts.core.recover().await;
        // What no image and no container uses any more (the start-up
        // collection, deferred until the containers were known).
        if let Err(e) = self.parts.images.gc().await {
            tracing::warn!(error = %e, "collecting unused image content");
        }
    }

    /// Starts NRI (after recovery: plugins are synchronized with what is
    /// there). A failure is logged: pods run on without plugins.
    async fn start_nri(&self) {
        self.try_start_nri().await;
        // The exits found by recovery, to the plugins now synchronized.
        self.parts.core.plugins_started().await;
    }

    async fn try_start_nri(&self) {
        let Some((nri, _)) = &self.parts.nri else {
            return;
        };
        let cfg = match self.parts.config.nri.nri_config() {
            Ok(cfg) => cfg,
            Err((key, e)) => return tracing::error!(key, error = %e, "NRI not started"),
        };
        match nri.start(cfg).await {
            Ok(()) => {
                tracing::info!(socket = %self.parts.config.nri.socket_path.display(), "NRI started")
            }
            Err(e) => tracing::error!(error = %e, "NRI not started"),
        }
    }

    /// Imports the `*.tar` archives of `images.import_dir` (if set and
    /// present), in name order; a failure is logged with the file's name
    /// and the next archive is imported.
    async fn import_dir(&self) {
        let dir = self.parts.config.images.import_dir.clone();
        if dir.as_os_str().is_empty() {
            return;
        }
        let mut names = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "tar"))
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                return tracing::error!(dir = %dir.display(), error = %e, "reading the image import directory")
            }
        };
        names.sort();
        for path in names {
            match self.parts.images.import(&path).await {
                Ok(images) => {
                    let tags: Vec<&String> = images.iter().flat_map(|i| &i.repo_tags).collect();
                    tracing::info!(archive = %path.display(), images = images.len(), ?tags, "image archive imported at start-up")
                }
                Err(e) => {
                    tracing::error!(archive = %path.display(), error = %e, "image archive not imported")
                }
            }
        }
    }

    /// The metrics page, its gauges read from the stores, the event hub
    /// and NRI now.
    fn metrics_page(&self) -> String {
        crate::counters::render(&self.gauges())
    }

    fn gauges(&self) -> Gauges {
        let containers: Vec<ContainerState> = self
            .parts
            .core
            .all_containers()
            .iter()
            .map(|c| c.status().state)
            .collect();
        let sandboxes: Vec<(SandboxState, bool)> = self
            .parts
            .core
            .all_sandboxes()
            .iter()
            .map(|s| {
                let status = s.status();
                (status.state, status.pid.is_some())
            })
            .collect();
        let count = |state| containers.iter().filter(|s| **s == state).count();
        let count_pods = |state| sandboxes.iter().filter(|(s, _)| *s == state).count();
        Gauges {
            containers: vec![
                ("created", count(ContainerState::Created)),
                ("running", count(ContainerState::Running)),
                ("exited", count(ContainerState::Exited)),
                ("unknown", count(ContainerState::Unknown)),
            ],
            sandboxes: vec![
                ("ready", count_pods(SandboxState::Ready)),
                ("notready", count_pods(SandboxState::NotReady)),
                ("unknown", count_pods(SandboxState::Unknown)),
            ],
            shims: count(ContainerState::Running) + sandboxes.iter().filter(|(_, p)| *p).count(),
            subscribers: self.parts.events.subscribers(),
            nri_plugins: self
                .parts
                .nri
                .as_ref()
                .and_then(|(n, _)| n.nri())
                .map(|nri| nri.stats())
                .unwrap_or_default()
                .into_iter()
                .map(|s| crate::counters::NriPluginStats {
                    plugin: s.plugin,
                    connected: s.connected,
                    requests: s.requests,
                    failures: s.failures,
                    timeouts: s.timeouts,
                    seconds: s.latency_sum.as_secs_f64(),
                })
                .collect(),
        }
    }
}

/// Writes berth's default CNI network when the config dir holds none.
fn ensure_default_network(config: &Config) -> Result<(), Error> {
    if !config.cni.write_default_network {
        return Ok(());
    }
    let subnet = config.cni.default_subnet.parse().map_err(|e| {
        Error::InvalidArgument(format!(
            "cni.default_subnet {:?}: {e}",
            config.cni.default_subnet
        ))
    })?;
    let name = match config.cni.network_name.as_str() {
        "" => "berth",
        name => name,
    };
    let mut net = berth_cni::DefaultNetwork::new(name, subnet, &config.cni.default_bridge);
    net.hostport_snat = config.cni.hostport_snat;
    crate::host_dirs::make_dirs(&config.cni.conf_dir, 0o755).map_err(Error::io(
        "cni",
        "creating",
        &config.cni.conf_dir,
    ))?;
    berth_cni::write_default_network(&config.cni.conf_dir, &net)
        .map(|_| ())
        .map_err(|e| Error::Internal(format!("writing the default CNI network: {e}")))
}
