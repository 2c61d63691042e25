//! berth's configuration: embedded defaults, an optional TOML file on top,
//! then the drop-in files of a directory (`config.d/*.toml`, in lexical
//! order), and command-line flags on top of that. Unknown keys and bad values
//! are errors that name the file and the key; [`Layers`] remembers which file
//! (or flag) set each key, for `berth config show`.
//!
//! Each section of the file, and each job (loading in layers, validation,
//! the default file), is a module of its own; their items are re-exported here.

mod cni;
mod default_file;
mod error;
mod import_containerd;
mod layers;
mod nri;
mod runtime;
mod streaming;
mod validate;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use cni::CniConfig;
pub use error::{ConfigError, Origin};
pub use import_containerd::import_file as import_containerd_file;
pub use layers::{Layers, Loaded};
pub use nri::NriConfig;
pub use runtime::{systemd_is_running, CgroupDriver, RuntimeConfig, RuntimeHandler};
pub use streaming::StreamingConfig;

/// What the unit tests name from here besides the public items.
#[cfg(test)]
use {default_file::COMMENTED_HEADER, layers::MAX_FILE_BYTES};

/// The whole configuration of the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Unix socket that serves CRI v1.
    pub socket: PathBuf,
    /// Persistent state (records, images, snapshots).
    pub root: PathBuf,
    /// Runtime state that does not survive a reboot (bundles, netns, shim sockets).
    pub state: PathBuf,
    /// Default log filter (`error`, `warn`, `info`, `debug`, `trace`, or a tracing filter).
    pub log_level: String,
    /// `text` (human readable) or `json`.
    pub log_format: LogFormat,
    pub runtime: RuntimeConfig,
    pub cni: CniConfig,
    /// Image registries: mirrors, plain-HTTP hosts, download limits.
    pub registry: berth_oci_image::RegistryConfig,
    /// The Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// The streaming server (exec, attach, port-forward).
    pub streaming: StreamingConfig,
    /// NRI plugins.
    pub nri: NriConfig,
    /// Image archives loaded at start-up.
    pub images: ImagesConfig,
}

/// Images berth loads itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImagesConfig {
    /// A directory whose `*.tar` archives (docker or OCI) are imported at
    /// every start, after recovery and before CRI calls are served, in name
    /// order (as k3s's agent images directory); empty: none.
    pub import_dir: PathBuf,
}

/// berth's own Prometheus metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `host:port` to serve `/metrics` on; empty: no endpoint.
    pub address: String,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: PathBuf::from("/run/berth/berth.sock"),
            root: PathBuf::from("/var/lib/berth"),
            state: PathBuf::from("/run/berth"),
            log_level: "info".into(),
            log_format: LogFormat::Text,
            runtime: RuntimeConfig::default(),
            cni: CniConfig::default(),
            registry: berth_oci_image::RegistryConfig::default(),
            metrics: MetricsConfig::default(),
            streaming: StreamingConfig::default(),
            nri: NriConfig::default(),
            images: ImagesConfig::default(),
        }
    }
}

impl Config {
    /// Parses a TOML document on top of the embedded defaults.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let deserializer = toml::Deserializer::parse(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim().to_string(),
        })?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let key = e.path().to_string();
            let message = e.into_inner().message().trim().to_string();
            ConfigError::Invalid {
                path: path.to_path_buf(),
                key,
                message,
            }
        })
    }

    /// The handler that runs pods which name none.
    pub fn default_runtime_handler(&self) -> &RuntimeHandler {
        &self.runtime.handlers[&self.runtime.default_handler]
    }
}

#[cfg(test)]
mod tests;
