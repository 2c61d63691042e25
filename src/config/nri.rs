//! The `[nri]` section: NRI (Node Resource Interface) plugins, with
//! containerd 2.x's defaults (on, the standard socket and directories).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where NRI plugins connect and are installed, and how long they may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NriConfig {
    /// Host NRI plugins at all (`false`: no socket, no plugins, no hooks).
    pub enable: bool,
    /// The socket external plugins connect to.
    pub socket_path: PathBuf,
    /// Pre-installed plugins (`IDX-NAME` executables), launched at start.
    pub plugin_path: PathBuf,
    /// Their configuration (`IDX-NAME.conf` or `NAME.conf`).
    pub plugin_config_path: PathBuf,
    /// How long a plugin has to register, e.g. `"5s"`.
    pub plugin_registration_timeout: String,
    /// Bound on every request to a plugin, e.g. `"2s"`: a plugin that takes
    /// longer is disconnected.
    pub plugin_request_timeout: String,
    /// Refuse external plugins (do not listen on `socket_path`).
    pub disable_connections: bool,
    /// The built-in validator of plugins' adjustments (containerd 2.x's
    /// `[plugins."io.containerd.nri.v1.nri".default_validator]`).
    pub default_validator: berth_nri::ValidatorConfig,
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            enable: true,
            socket_path: berth_nri::DEFAULT_SOCKET_PATH.into(),
            plugin_path: berth_nri::DEFAULT_PLUGIN_PATH.into(),
            plugin_config_path: berth_nri::DEFAULT_PLUGIN_CONFIG_PATH.into(),
            plugin_registration_timeout: "5s".into(),
            plugin_request_timeout: "2s".into(),
            disable_connections: false,
            default_validator: berth_nri::ValidatorConfig::default(),
        }
    }
}

impl NriConfig {
    /// berth-nri's configuration, or the key that is wrong and why.
    pub fn nri_config(&self) -> Result<berth_nri::Config, (&'static str, String)> {
        for (key, path) in [
            ("nri.socket_path", &self.socket_path),
            ("nri.plugin_path", &self.plugin_path),
            ("nri.plugin_config_path", &self.plugin_config_path),
        ] {
            if !path.is_absolute() {
                return Err((
                    key,
                    format!("must be an absolute path, got {}", path.display()),
                ));
            }
        }
        let duration = |key: &'static str, text: &str| {
            let d = berth_oci_image::parse_duration(text).map_err(|e| (key, e))?;
            match d.is_zero() {
                true => Err((key, "must be above 0".to_string())),
                false => Ok(d),
            }
        };
        Ok(berth_nri::Config {
            socket_path: self.socket_path.clone(),
            plugin_path: self.plugin_path.clone(),
            plugin_config_path: self.plugin_config_path.clone(),
            registration_timeout: duration(
                "nri.plugin_registration_timeout",
                &self.plugin_registration_timeout,
            )?,
            request_timeout: duration("nri.plugin_request_timeout", &self.plugin_request_timeout)?,
            disable_connections: self.disable_connections,
            validator: self.validator()?,
            ..berth_nri::Config::default()
        })
    }

    /// The validator's section, checked; an error names its key.
    fn validator(&self) -> Result<berth_nri::ValidatorConfig, (&'static str, String)> {
        self.default_validator
            .check()
            .map_err(|(field, e)| match field {
                "required_plugins" => ("nri.default_validator.required_plugins", e),
                _ => (
                    "nri.default_validator.tolerate_missing_plugins_annotation",
                    e,
                ),
            })?;
        Ok(self.default_validator.clone())
    }
}
