//! berth's configuration: embedded defaults, an optional TOML file on top,
//! and command-line flags on top of that. Unknown keys and bad values are
//! errors that name the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config file {path}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("config: key `{key}`: {message}")]
    Value { key: String, message: String },
}

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
}

/// The HTTP server behind the URLs of Exec, Attach and PortForward. Plain
/// HTTP: kubelet reaches it on the node itself (no TLS yet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamingConfig {
    /// IP address to listen on.
    pub address: String,
    /// Port; 0: a free port chosen at start.
    pub port: u16,
    /// How long a returned URL stays valid (single use), e.g. `"1m"`.
    pub token_ttl: String,
    /// A session with no traffic for this long is closed, e.g. `"4h"`.
    pub idle_timeout: String,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            address: "127.0.0.1".into(),
            port: 0,
            token_ttl: "1m".into(),
            idle_timeout: "4h".into(),
        }
    }
}

impl StreamingConfig {
    /// The server's configuration, or the key that is wrong and why.
    pub fn server_config(&self) -> Result<berth_streaming::Config, (&'static str, String)> {
        let ip: std::net::IpAddr = self.address.parse().map_err(|_| {
            (
                "streaming.address",
                format!("{:?} is not an IP address", self.address),
            )
        })?;
        let token_ttl = berth_oci_image::parse_duration(&self.token_ttl)
            .map_err(|e| ("streaming.token_ttl", e))?;
        if token_ttl.is_zero() {
            return Err(("streaming.token_ttl", "must be above 0".into()));
        }
        let idle_timeout = berth_oci_image::parse_duration(&self.idle_timeout)
            .map_err(|e| ("streaming.idle_timeout", e))?;
        if idle_timeout.is_zero() {
            return Err(("streaming.idle_timeout", "must be above 0".into()));
        }
        Ok(berth_streaming::Config {
            addr: std::net::SocketAddr::new(ip, self.port),
            token_ttl,
            idle_timeout,
            ..berth_streaming::Config::default()
        })
    }
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

/// How containers are run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// The handler used when a pod names none.
    pub default_handler: String,
    /// The cgroup driver kubelet must match: `cgroupfs` or `systemd`.
    pub cgroup_driver: CgroupDriver,
    /// OCI runtime handlers by name (the pod's `runtime_handler`).
    pub handlers: BTreeMap<String, RuntimeHandler>,
    /// The berth-shim executable; empty: next to the berth binary, else in PATH.
    pub shim_binary: String,
}

/// One OCI runtime handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeHandler {
    /// The runtime binary: an absolute path, or a name looked up in `PATH`.
    pub binary: String,
}

/// The cgroup driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

/// Where the CNI network configuration and plugins are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CniConfig {
    /// Directory of `.conflist` / `.conf` / `.json` network configurations.
    pub conf_dir: PathBuf,
    /// Directories searched for plugin binaries, in order.
    pub bin_dirs: Vec<PathBuf>,
    /// The network to use, by name; empty: the first file in lexical order.
    pub network_name: String,
    /// Time limit of one plugin call, in seconds.
    pub timeout_secs: u64,
    /// Write berth's own network into `conf_dir` when it holds none.
    pub write_default_network: bool,
    /// Subnet of berth's default network (no masquerade, no route out).
    pub default_subnet: String,
    /// Bridge of berth's default network.
    pub default_bridge: String,
    /// Let portmap SNAT hostPort traffic from the node itself (127.0.0.1 and
    /// hairpin), so a hostPort answers on 127.0.0.1. Pod traffic to the
    /// outside is never masqueraded.
    pub hostport_snat: bool,
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
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let handlers = [("runc", "runc"), ("crun", "crun")]
            .into_iter()
            .map(|(name, binary)| {
                (
                    name.to_string(),
                    RuntimeHandler {
                        binary: binary.to_string(),
                    },
                )
            })
            .collect();
        RuntimeConfig {
            default_handler: "runc".into(),
            cgroup_driver: CgroupDriver::Cgroupfs,
            handlers,
            shim_binary: String::new(),
        }
    }
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            conf_dir: PathBuf::from("/etc/cni/net.d"),
            bin_dirs: vec![PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")],
            network_name: String::new(),
            timeout_secs: 60,
            write_default_network: true,
            default_subnet: "10.88.0.0/16".into(),
            default_bridge: "berth0".into(),
            hostport_snat: false,
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

    /// Reads and parses a TOML file on top of the embedded defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, path)
    }

    /// The embedded defaults, as the TOML that `berth config default` prints.
    pub fn default_toml() -> String {
        toml::to_string_pretty(&Config::default()).expect("the default config serializes")
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let value = |key: &str, message: String| ConfigError::Value {
            key: key.to_string(),
            message,
        };
        for (key, path) in [
            ("socket", &self.socket),
            ("root", &self.root),
            ("state", &self.state),
            ("cni.conf_dir", &self.cni.conf_dir),
        ] {
            if !path.is_absolute() {
                return Err(value(
                    key,
                    format!("must be an absolute path, got {}", path.display()),
                ));
            }
        }
        if self.cni.default_subnet.parse::<ipnet::IpNet>().is_err() {
            return Err(value(
                "cni.default_subnet",
                format!("{:?} is not an IP network", self.cni.default_subnet),
            ));
        }
        if !self.metrics.address.is_empty()
            && self
                .metrics
                .address
                .parse::<std::net::SocketAddr>()
                .is_err()
        {
            return Err(value(
                "metrics.address",
                format!("{:?} is not host:port", self.metrics.address),
            ));
        }
        if let Err((key, message)) = self.streaming.server_config() {
            return Err(value(key, message));
        }
        if let Err(e) = self.registry.validate() {
            return Err(value("registry", e.to_string()));
        }
        if self.cni.timeout_secs == 0 {
            return Err(value("cni.timeout_secs", "must be above 0".into()));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            return Err(value("log_level", format!("{:?}: {e}", self.log_level)));
        }
        if !self
            .runtime
            .handlers
            .contains_key(&self.runtime.default_handler)
        {
            return Err(value(
                "runtime.default_handler",
                format!(
                    "{:?} is not one of runtime.handlers ({})",
                    self.runtime.default_handler,
                    self.runtime
                        .handlers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        for (name, handler) in &self.runtime.handlers {
            if handler.binary.is_empty() {
                return Err(value(
                    &format!("runtime.handlers.{name}.binary"),
                    "must not be empty".into(),
                ));
            }
        }
        if self.runtime.cgroup_driver == CgroupDriver::Systemd && !systemd_is_running() {
            return Err(value(
                "runtime.cgroup_driver",
                "\"systemd\" needs systemd as init, and it is not running here (no /run/systemd/system)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The handler that runs pods which name none.
    pub fn default_runtime_handler(&self) -> &RuntimeHandler {
        &self.runtime.handlers[&self.runtime.default_handler]
    }
}

/// True when systemd is the init system (the test systemd itself uses).
pub fn systemd_is_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, Path::new("/etc/berth/config.toml"))
    }

    #[test]
    fn default_toml_round_trips() {
        let text = Config::default_toml();
        assert_eq!(parse(&text).unwrap(), Config::default());
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn values_override_defaults() {
        let cfg = parse("root = \"/srv/berth\"\n[runtime]\ndefault_handler = \"crun\"\n").unwrap();
        assert_eq!(cfg.root, PathBuf::from("/srv/berth"));
        assert_eq!(cfg.runtime.default_handler, "crun");
        assert_eq!(cfg.state, PathBuf::from("/run/berth"));
        cfg.validate().unwrap();
    }

    #[test]
    fn unknown_key_is_named() {
        let err = parse("[runtime]\nno_such_key = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no_such_key"), "{err}");
    }

    #[test]
    fn bad_value_names_the_key() {
        let err = parse("[runtime]\ncgroup_driver = \"cgroupv3\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("runtime.cgroup_driver"), "{err}");
        let err = parse("socket = 5\n").unwrap_err().to_string();
        assert!(err.contains("`socket`"), "{err}");
    }

    #[test]
    fn registry_mirrors_in_the_operators_shape() {
        let cfg = parse(
            "[registry.mirrors.\"registry.k8s.io\"]\nendpoints = [\"http://127.0.0.1:5000\"]\n",
        )
        .unwrap();
        assert_eq!(
            cfg.registry.mirrors["registry.k8s.io"].endpoints,
            vec!["http://127.0.0.1:5000".to_string()]
        );
        cfg.validate().unwrap();
    }

    #[test]
    fn validate_names_the_key() {
        let mut cfg = Config::default();
        cfg.runtime.default_handler = "kata".into();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("runtime.default_handler"), "{err}");

        let cfg = Config {
            root: PathBuf::from("relative"),
            ..Config::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("`root`"), "{err}");
    }

    #[test]
    fn metrics_endpoint_is_off_by_default_and_checked() {
        assert_eq!(Config::default().metrics.address, "");
        let cfg = parse("[metrics]\naddress = \"127.0.0.1:9090\"\n").unwrap();
        assert_eq!(cfg.metrics.address, "127.0.0.1:9090");
        cfg.validate().unwrap();
        let cfg = parse("[metrics]\naddress = \"localhost\"\n").unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("metrics.address"), "{err}");
    }

    #[test]
    fn streaming_defaults_and_checks() {
        let server = Config::default().streaming.server_config().unwrap();
        assert_eq!(server.addr, "127.0.0.1:0".parse().unwrap());
        assert_eq!(server.token_ttl, std::time::Duration::from_secs(60));
        assert_eq!(
            server.idle_timeout,
            std::time::Duration::from_secs(4 * 3600)
        );
        let cfg =
            parse("[streaming]\naddress = \"::1\"\nport = 10010\ntoken_ttl = \"30s\"\n").unwrap();
        cfg.validate().unwrap();
        assert_eq!(
            cfg.streaming.server_config().unwrap().addr,
            "[::1]:10010".parse().unwrap()
        );
        for (text, key) in [
            ("address = \"localhost\"", "streaming.address"),
            ("token_ttl = \"soon\"", "streaming.token_ttl"),
            ("idle_timeout = \"0s\"", "streaming.idle_timeout"),
            ("token_ttl = \"0s\"", "streaming.token_ttl"),
        ] {
            let cfg = parse(&format!("[streaming]\n{text}\n")).unwrap();
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }
}
