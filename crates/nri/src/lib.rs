//! berth-nri: the runtime side of NRI (Node Resource Interface),
//! wire-compatible with containerd/nri v0.12 plugins.
//!
//! Plugins connect to the NRI socket (or are launched from the plugin
//! directory with a pre-connected socket as fd 3), register, are configured
//! and synchronized with the runtime's pods and containers, and then get
//! the lifecycle events they subscribed to. CreateContainer replies are
//! merged with NRI's per-field ownership rules ([`merge`]). The transport is
//! NRI's multiplexed trunk ([`mux`]) carrying two ttrpc sessions.
//!
//! The daemon implements [`Host`] and calls the event methods of [`Nri`]
//! around its own CRI operations.

use std::time::Duration;

/// A module of code generated from `proto/api.proto` (build.rs): lints and
/// formatting are not ours to hold it to.
macro_rules! generated {
    ($name:ident, $file:literal) => {
#[allow(
            clippy::all,
            dead_code,
            missing_docs,
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            unused_imports,
            unused_mut,
            unused_variables,
            deprecated,
            unused_results,
            unknown_lints,
            unsafe_code
        )]
        #[rustfmt::skip]
        pub mod $name {
            include!(concat!(env!("OUT_DIR"), $file));
        }
    };
}
generated!(api, "/api.rs");
generated!(api_ttrpc, "/api_ttrpc.rs");
mod config;
mod dispatch;
mod error;
pub mod events;
pub mod launch;
pub mod merge;
pub mod mux;
mod nri;
mod plugin;
pub mod sync;
mod validate;

pub use config::{
    Config, ValidatorConfig, DEFAULT_PLUGIN_CONFIG_PATH, DEFAULT_PLUGIN_PATH, DEFAULT_SOCKET_PATH,
    REQUIRED_PLUGINS_ANNOTATION,
};
pub use dispatch::MAX_POSTED;
pub use error::Error;
pub use nri::{Nri, PluginSyncBlock};
pub use plugin::{check_plugin_index, check_plugin_name, PluginKind};

/// The NRI version we tell plugins we speak.
pub const NRI_VERSION: &str = "v0.12.2";

/// What NRI needs from the runtime.
#[async_trait::async_trait]
pub trait Host: Send + Sync + 'static {
    /// Every pod and container, for synchronizing a new plugin.
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>);
    /// Applies updates and evictions a plugin asked for (in Synchronize
    /// replies, or unsolicited), returning the updates that failed.
    async fn update_containers(
        &self,
        plugin: &str,
        updates: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate>;
}

/// The merged outcome of CreateContainer.
#[derive(Debug, Clone, Default)]
pub struct CreateResult {
    /// The adjustment to apply to the container being created.
    pub adjust: api::ContainerAdjustment,
    /// Updates to other containers.
    pub updates: Vec<api::ContainerUpdate>,
    /// Containers to evict.
    pub evict: Vec<api::ContainerEviction>,
    /// Which plugin set which field (for logs or audit).
    pub owners: api::OwningPlugins,
}

/// The merged outcome of UpdateContainer (and of StopContainer, whose
/// resources are empty and which evicts nothing).
#[derive(Debug, Clone, Default)]
pub struct UpdateResult {
    /// The resources to give the updated container.
    pub resources: api::LinuxResources,
    /// Updates to other containers.
    pub updates: Vec<api::ContainerUpdate>,
    /// Containers to evict.
    pub evict: Vec<api::ContainerEviction>,
    /// Which plugin set which field.
    pub owners: api::OwningPlugins,
}

/// An active plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginInfo {
    pub name: String,
    pub index: String,
    pub kind: PluginKind,
    /// The pid, for plugins we launched.
    pub pid: Option<u32>,
    pub events: Vec<api::Event>,
}

/// Request counters of one plugin (`IDX-NAME`): since berth started, over
/// every connection of that name, dropped ones included.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginStats {
    /// `IDX-NAME`.
    pub plugin: String,
    /// Connected now.
    pub connected: bool,
    pub requests: u64,
    /// Requests answered with an error, timed out, or broken.
    pub failures: u64,
    pub timeouts: u64,
    pub latency_sum: Duration,
}

impl PluginStats {
    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &PluginStats) {
        self.requests += other.requests;
        self.failures += other.failures;
        self.timeouts += other.timeouts;
        self.latency_sum += other.latency_sum;
    }
}
