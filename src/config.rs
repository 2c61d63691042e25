//! berth's configuration: embedded defaults, an optional TOML file on top,
//! then the drop-in files of a directory (`config.d/*.toml`, in lexical
//! order), and command-line flags on top of that. Unknown keys and bad values
//! are errors that name the file and the key; [`Layers`] remembers which file
//! (or flag) set each key, for `berth config show`.

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
    #[error("config: key `{key}` (set by {origin}): {message}")]
    ValueFrom {
        key: String,
        origin: Origin,
        message: String,
    },
    #[error("config file {path}: larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("reading drop-in directory {path}: {source}")]
    ReadDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("drop-in directory {path}: more than {max} files")]
    TooManyFiles { path: PathBuf, max: usize },
}

/// Where a key of the effective configuration was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A config file (the main file or a drop-in).
    File(PathBuf),
    /// A command-line flag, such as `--socket`.
    Flag(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Flag(flag) => f.write_str(flag),
        }
    }
}

/// A config file larger than this is refused (the real ones are a few KiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// A drop-in directory with more `.toml` files than this is refused.
pub const MAX_DROP_INS: usize = 256;

/// The configuration being assembled: the embedded defaults, then each file
/// merged on top (tables merged key by key, any other value replaced whole),
/// then flags. Each file is also checked on its own, so an unknown key or a
/// bad value names the file it is in.
#[derive(Debug, Default)]
pub struct Layers {
    table: toml::Table,
    origins: BTreeMap<String, Origin>,
    files: Vec<PathBuf>,
}

/// The effective configuration and where each key that is not an embedded
/// default was set.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// Dotted key (`cni.conf_dir`, `registry.mirrors."docker.io".endpoints`)
    /// to the file or flag that set it last.
    pub origins: BTreeMap<String, Origin>,
    /// The files read, in the order they were merged.
    pub files: Vec<PathBuf>,
}

impl Layers {
    /// Nothing but the embedded defaults.
    pub fn new() -> Layers {
        Layers::default()
    }

    /// Merges a TOML document read from `path` on top of what is there.
    pub fn add_toml(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        // On its own first: errors then name this file and the key in it.
        Config::from_toml(text, path)?;
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    path: path.to_path_buf(),
                    message: e.to_string().trim().to_string(),
                })?;
        let origin = Origin::File(path.to_path_buf());
        merge(&mut self.table, table, "", &origin, &mut self.origins);
        self.files.push(path.to_path_buf());
        Ok(())
    }

    /// Reads `path` (at most [`MAX_FILE_BYTES`]) and merges it.
    pub fn add_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = read_bounded(path)?;
        self.add_toml(&text, path)
    }

    /// Merges every `*.toml` file of `dir` in lexical order of their names
    /// (hidden files skipped). A missing directory adds nothing unless
    /// `required`.
    pub fn add_dir(&mut self, dir: &Path, required: bool) -> Result<(), ConfigError> {
        for path in drop_in_files(dir, required)? {
            self.add_file(&path)?;
        }
        Ok(())
    }

    /// Records that a flag set `key` (its value is applied by the caller).
    pub fn flag(&mut self, key: &str, flag: &'static str) {
        self.origins.insert(key.to_string(), Origin::Flag(flag));
    }

    /// The merged configuration on top of the embedded defaults (not yet
    /// validated: see [`Loaded::validate`]), with `apply` run on it for the
    /// flags.
    pub fn finish(self, apply: impl FnOnce(&mut Config)) -> Result<Loaded, ConfigError> {
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(self.table))
            .map_err(|e| ConfigError::Value {
            key: e.path().to_string(),
            message: e.into_inner().message().trim().to_string(),
        })?;
        apply(&mut config);
        Ok(Loaded {
            config,
            origins: self.origins,
            files: self.files,
        })
    }
}

impl Loaded {
    /// [`Config::validate`], with the error naming the file or flag that set
    /// the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.config.validate() {
            Err(ConfigError::Value { key, message }) => match self.origin_of(&key) {
                Some(origin) => Err(ConfigError::ValueFrom {
                    key,
                    origin: origin.clone(),
                    message,
                }),
                None => Err(ConfigError::Value { key, message }),
            },
            other => other,
        }
    }

    /// Who set `key`, or a key below it (`registry` → `registry.plain_http`).
    pub fn origin_of(&self, key: &str) -> Option<&Origin> {
        if let Some(origin) = self.origins.get(key) {
            return Some(origin);
        }
        let prefix = format!("{key}.");
        self.origins
            .iter()
            .rev()
            .find(|(k, _)| k.starts_with(&prefix))
            .map(|(_, origin)| origin)
    }
}

/// The drop-in files of `dir`: `*.toml`, not hidden, sorted by name.
pub fn drop_in_files(dir: &Path, required: bool) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::ReadDir {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::ReadDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".toml") {
            continue;
        }
        let path = entry.path();
        // Follows symlinks: a drop-in may link to a file kept elsewhere.
        if !path.is_file() {
            continue;
        }
        if files.len() == MAX_DROP_INS {
            return Err(ConfigError::TooManyFiles {
                path: dir.to_path_buf(),
                max: MAX_DROP_INS,
            });
        }
        files.push(path);
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// Reads a config file of at most [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_FILE_BYTES,
        });
    }
    Ok(text)
}

/// One key as it is written in TOML: bare when it can be, else quoted.
fn key_segment(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

/// Merges `from` into `into`: tables key by key, anything else replaced whole.
/// Every value set is recorded in `origins` under its dotted key.
fn merge(
    into: &mut toml::Table,
    from: toml::Table,
    prefix: &str,
    origin: &Origin,
    origins: &mut BTreeMap<String, Origin>,
) {
    for (key, value) in from {
        let path = format!("{prefix}{}", key_segment(&key));
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(existing)), toml::Value::Table(table)) => {
                merge(existing, table, &format!("{path}."), origin, origins);
            }
            (_, value) => {
                // What was below this key is gone: so are its origins.
                let below = format!("{path}.");
                origins.retain(|k, _| !k.starts_with(&below));
                record(&value, &path, origin, origins);
                into.insert(key, value);
            }
        }
    }
}

/// Records `origin` for `value` at `path`, and for every key below it.
fn record(
    value: &toml::Value,
    path: &str,
    origin: &Origin,
    origins: &mut BTreeMap<String, Origin>,
) {
    match value {
        toml::Value::Table(table) if !table.is_empty() => {
            for (key, value) in table {
                record(
                    value,
                    &format!("{path}.{}", key_segment(key)),
                    origin,
                    origins,
                );
            }
        }
        _ => {
            origins.insert(path.to_string(), origin.clone());
        }
    }
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

/// The HTTP server behind the URLs of Exec, Attach and PortForward: plain
/// HTTP, or HTTPS with `enable_tls` (containerd's `enable_tls_streaming`).
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
    /// Serve HTTPS only.
    pub enable_tls: bool,
    /// With `enable_tls`: the PEM certificate (chain) file; empty: a
    /// self-signed certificate made at each start.
    pub tls_cert_file: PathBuf,
    /// The PEM private key of `tls_cert_file`.
    pub tls_key_file: PathBuf,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            address: "127.0.0.1".into(),
            port: 0,
            token_ttl: "1m".into(),
            idle_timeout: "4h".into(),
            enable_tls: false,
            tls_cert_file: PathBuf::new(),
            tls_key_file: PathBuf::new(),
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
        let (cert, key) = (&self.tls_cert_file, &self.tls_key_file);
        for (name, path) in [
            ("streaming.tls_cert_file", cert),
            ("streaming.tls_key_file", key),
        ] {
            if !path.as_os_str().is_empty() && !path.is_absolute() {
                return Err((
                    name,
                    format!("must be an absolute path, got {}", path.display()),
                ));
            }
        }
        match (cert.as_os_str().is_empty(), key.as_os_str().is_empty()) {
            (false, true) => {
                return Err((
                    "streaming.tls_key_file",
                    "is needed with tls_cert_file".into(),
                ))
            }
            (true, false) => {
                return Err((
                    "streaming.tls_cert_file",
                    "is needed with tls_key_file".into(),
                ))
            }
            (false, false) if !self.enable_tls => {
                return Err((
                    "streaming.enable_tls",
                    "must be true when tls_cert_file is set".into(),
                ))
            }
            _ => {}
        }
        // The certificate itself is read (or made) when the server starts.
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
    /// Where CDI device specs are, lowest priority first.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// Run pods without a pause process where none is needed (their UTS and
    /// IPC namespaces pinned on files, as CRI-O's `drop_infra_ctr`); a pod
    /// that shares one PID namespace, or has its own user namespace, keeps
    /// one. `false`: every pod gets a pause.
    pub drop_infra_ctr: bool,
}

/// One OCI runtime handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeHandler {
    /// The runtime binary: an absolute path, or a name looked up in `PATH`.
    pub binary: String,
    /// Pod annotations passed to the runtime in the pause's spec, as glob
    /// patterns (`io.katacontainers.*`); berth's own always are, no other.
    #[serde(default)]
    pub pod_annotations: Vec<String>,
    /// Container annotations passed to the runtime, as glob patterns
    /// (`run.oci.*` lets crun act on them); none by default.
    #[serde(default)]
    pub container_annotations: Vec<String>,
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
                        pod_annotations: Vec::new(),
                        container_annotations: Vec::new(),
                    },
                )
            })
            .collect();
        RuntimeConfig {
            default_handler: "runc".into(),
            cgroup_driver: CgroupDriver::Cgroupfs,
            handlers,
            shim_binary: String::new(),
            cdi_spec_dirs: berth_spec::DEFAULT_CDI_SPEC_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
            drop_infra_ctr: true,
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
            hostport_snat: true,
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

    /// The embedded defaults, as the TOML that `berth config default` prints.
    pub fn default_toml() -> String {
        toml::to_string_pretty(&Config::default()).expect("the default config serializes")
    }

    /// The embedded defaults as a config file to install: every key commented
    /// out, under a header that says how the files are layered.
    pub fn commented_default_toml() -> String {
        let mut out = String::from(COMMENTED_HEADER);
        for line in Config::default_toml().lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str("# ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out
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

/// The top of the installed `/etc/berth/config.toml`.
const COMMENTED_HEADER: &str = "\
# berth's configuration file (/etc/berth/config.toml).
#
# Every key below is commented out and shows its embedded default: uncomment
# and change only what you need. berth reads the embedded defaults, then this
# file, then the drop-ins /etc/berth/config.d/*.toml in lexical order of their
# names (later files win; tables are merged key by key, other values replaced
# whole), then command-line flags. Unknown keys and bad values stop the start
# with a message that names the file and the key.
#
#   berth config show   # the effective configuration and which file set each key
#   berth check         # are the host's prerequisites there?

";

/// True when systemd is the init system (the test systemd itself uses).
pub fn systemd_is_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

#[cfg(test)]
mod tests;
