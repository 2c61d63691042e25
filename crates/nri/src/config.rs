//! NRI configuration, with containerd/nri's defaults.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where and how NRI runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The socket external plugins connect to.
    pub socket_path: PathBuf,
    /// Directory of pre-installed plugins (`IDX-NAME` executables).
    pub plugin_path: PathBuf,
    /// Directory of their configuration (`IDX-NAME.conf` or `NAME.conf`).
    pub plugin_config_path: PathBuf,
    /// How long a plugin has to register after connecting or being started.
    pub registration_timeout: Duration,
    /// Bound on every request to a plugin.
    pub request_timeout: Duration,
    /// Refuse external plugins (do not listen on `socket_path`).
    pub disable_connections: bool,
    /// Runtime name and version sent to plugins in Configure.
    pub runtime_name: String,
    pub runtime_version: String,
    /// The built-in default validator.
    pub validator: ValidatorConfig,
}

/// Options of the built-in default validator (containerd/nri's
/// `default-validator`): what container adjustments to reject. Off by
/// default, as in containerd. It is also the daemon's
/// `[nri.default_validator]` section, key for key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValidatorConfig {
    /// Run the validator at all.
    pub enable: bool,
    /// Reject any OCI hook injection.
    pub reject_oci_hook_adjustment: bool,
    /// Reject seccomp policy adjustment of containers with the runtime
    /// default, unconfined, or a custom (localhost) profile.
    pub reject_runtime_default_seccomp_adjustment: bool,
    pub reject_unconfined_seccomp_adjustment: bool,
    pub reject_custom_seccomp_adjustment: bool,
    /// Reject namespace adjustment.
    pub reject_namespace_adjustment: bool,
    /// Reject sysctl adjustment.
    pub reject_sysctl_adjustment: bool,
    /// Plugins (`NAME` or `IDX-NAME`) that must have been consulted for
    /// every container creation (a pod may require more with the
    /// [`REQUIRED_PLUGINS_ANNOTATION`]).
    pub required_plugins: Vec<String>,
    /// An annotation key (empty: none) with which a pod, or one container
    /// of it (`KEY/container.NAME`), says "true" to be created even when
    /// required plugins are missing.
    pub tolerate_missing_plugins_annotation: String,
}

/// The pod annotation (`KEY`, `KEY/pod` or `KEY/container.NAME`) listing,
/// as a YAML list, more plugins a pod's containers require.
pub const REQUIRED_PLUGINS_ANNOTATION: &str = "required-plugins.noderesource.dev";

/// containerd/nri's default socket.
pub const DEFAULT_SOCKET_PATH: &str = "/var/run/nri/nri.sock";
/// containerd/nri's default pre-installed plugin directory.
pub const DEFAULT_PLUGIN_PATH: &str = "/opt/nri/plugins";
/// containerd/nri's default plugin configuration directory.
pub const DEFAULT_PLUGIN_CONFIG_PATH: &str = "/etc/nri/conf.d";

impl Default for Config {
    fn default() -> Self {
        Config {
            socket_path: DEFAULT_SOCKET_PATH.into(),
            plugin_path: DEFAULT_PLUGIN_PATH.into(),
            plugin_config_path: DEFAULT_PLUGIN_CONFIG_PATH.into(),
            registration_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            disable_connections: false,
            runtime_name: "berth".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            validator: ValidatorConfig::default(),
        }
    }
}

impl ValidatorConfig {
    /// Checks the names it holds: every required plugin's, and the
    /// tolerate annotation's key. The error names the field that is wrong.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for p in &self.required_plugins {
            // `IDX-NAME` is also a valid NAME: the name rules cover both.
            crate::check_plugin_name(p).map_err(|e| ("required_plugins", e))?;
        }
        let key = &self.tolerate_missing_plugins_annotation;
        if key.len() > 253 || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err((
                "tolerate_missing_plugins_annotation",
                format!("{key:?} is not an annotation key"),
            ));
        }
        Ok(())
    }
}
