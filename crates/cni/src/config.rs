//! Network configurations: parsing and validating `.conflist`, `.conf` and
//! `.json` files, turning a plugin entry into the JSON a plugin reads on stdin,
//! and loading the configuration directories again whenever they change.
//!
//! A file is a list when it has `plugins`, and a single plugin configuration
//! (wrapped into a one-plugin list) when it has `type`, whatever its extension.
//! Files are taken directory by directory, in lexical order of file name;
//! invalid ones are skipped and reported.

use berth_lock::MutexExt;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::error::Error;
use crate::version::SpecVersion;

/// File extensions that hold network configurations.
pub const CONFIG_EXTENSIONS: [&str; 3] = ["conflist", "conf", "json"];

/// A validated network configuration list.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    /// The network name (`name`).
    pub name: String,
    /// The spec version used with the plugins (`cniVersion`, or the highest
    /// supported entry of `cniVersions`).
    pub cni_version: SpecVersion,
    /// `disableCheck`: never run CHECK for this network.
    pub disable_check: bool,
    /// The plugins, in ADD order (never empty).
    pub plugins: Vec<PluginConfig>,
    /// The file it was loaded from, if any.
    pub source: Option<PathBuf>,
}

/// One plugin entry of a list, kept as written (unknown keys pass through).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// `type`: the binary to run.
    pub plugin_type: String,
    /// `ipam.type`, when the plugin delegates IPAM.
    pub ipam_type: Option<String>,
    /// Capabilities the plugin declares with `true`.
    pub capabilities: BTreeSet<String>,
    raw: Map<String, Value>,
}

/// Whether `s` is a valid CNI network name or container id: an alphanumeric
/// character, then alphanumerics, `_`, `.` or `-`.
pub(crate) fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Paths as text, joined with `sep`.
pub(crate) fn join_paths(paths: &[PathBuf], sep: &str) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

/// Whether `t` can be a plugin binary name (no path separators, no `.`/`..`).
fn is_valid_type(t: &str) -> bool {
    !t.is_empty() && t != "." && t != ".." && !t.contains('/') && !t.contains('\0')
}

impl NetworkConfigList {
    /// Parses and validates a configuration (a list, or a single plugin
    /// configuration that becomes a one-plugin list).
    pub fn from_bytes(bytes: &[u8], source: Option<&Path>) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidConfig {
            source_name: source.map_or_else(|| "(inline)".into(), |p| p.display().to_string()),
            reason,
        };
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(format!("not JSON: {e}")))?;
        Self::from_value(value, source).map_err(invalid)
    }

    fn from_value(value: Value, source: Option<&Path>) -> Result<Self, String> {
        let Value::Object(top) = value else {
            return Err("not a JSON object".into());
        };
        let name = match top.get("name") {
            Some(Value::String(n)) if is_valid_name(n) => n.clone(),
            Some(Value::String(n)) => return Err(format!("invalid network name {n:?}")),
            _ => return Err("missing \"name\"".into()),
        };
        let cni_version = pick_version(&top)?;
        let disable_check = match top.get("disableCheck") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) if s == "true" || s == "false" => s == "true",
            Some(other) => return Err(format!("invalid \"disableCheck\": {other}")),
        };
        let raw_plugins = match top.get("plugins") {
            Some(Value::Array(list)) => list.clone(),
            Some(_) => return Err("\"plugins\" is not a list".into()),
            // A single plugin configuration (a `.conf` file).
            None if top.contains_key("type") => vec![Value::Object(top.clone())],
            None => return Err("neither \"plugins\" nor \"type\"".into()),
        };
        if raw_plugins.is_empty() {
            return Err("\"plugins\" is empty".into());
        }
        let plugins = raw_plugins
            .into_iter()
            .enumerate()
            .map(|(i, p)| PluginConfig::from_value(p).map_err(|e| format!("plugin {i}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NetworkConfigList {
            name,
            cni_version,
            disable_check,
            plugins,
            source: source.map(Path::to_owned),
        })
    }

    /// The list as JSON (what the cache keeps to undo an attachment later).
    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "cniVersion": self.cni_version.as_str(),
            "name": self.name,
            "disableCheck": self.disable_check,
            "plugins": self.plugins.iter().map(|p| Value::Object(p.raw.clone())).collect::<Vec<_>>(),
        })
    }

    /// Parses what [`NetworkConfigList::to_value`] produced.
    pub(crate) fn from_cached(value: Value, source: &Path) -> Result<Self, Error> {
        Self::from_value(value, None).map_err(|reason| Error::InvalidConfig {
            source_name: source.display().to_string(),
            reason,
        })
    }
}

/// `cniVersions` (1.1.0): the highest version berth supports; else `cniVersion`.
fn pick_version(top: &Map<String, Value>) -> Result<SpecVersion, String> {
    if let Some(Value::Array(list)) = top.get("cniVersions") {
        let best = list
            .iter()
            .filter_map(|v| v.as_str()?.parse::<SpecVersion>().ok())
            .max();
        if let Some(v) = best {
            return Ok(v);
        }
    }
    match top.get("cniVersion") {
        Some(Value::String(v)) => v.parse().map_err(|e| format!("{e}")),
        _ => Err("missing \"cniVersion\"".into()),
    }
}

impl PluginConfig {
    fn from_value(value: Value) -> Result<Self, String> {
        let Value::Object(raw) = value else {
            return Err("not a JSON object".into());
        };
        let plugin_type = match raw.get("type") {
            Some(Value::String(t)) if is_valid_type(t) => t.clone(),
            Some(Value::String(t)) => return Err(format!("invalid \"type\" {t:?}")),
            _ => return Err("missing \"type\"".into()),
        };
        let ipam_type = match raw.get("ipam").and_then(|i| i.get("type")) {
            None => None,
            Some(Value::String(t)) if is_valid_type(t) => Some(t.clone()),
            Some(t) => return Err(format!("invalid \"ipam.type\" {t}")),
        };
        let capabilities = match raw.get("capabilities") {
            None | Some(Value::Null) => BTreeSet::new(),
            Some(Value::Object(caps)) => caps
                .iter()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect(),
            Some(_) => return Err("\"capabilities\" is not an object".into()),
        };
        Ok(PluginConfig {
            plugin_type,
            ipam_type,
            capabilities,
            raw,
        })
    }

    /// The configuration this plugin reads on stdin: the entry as written, minus
    /// `capabilities`, plus `name`, `cniVersion`, a `runtimeConfig` with only the
    /// capability arguments the plugin declares (when there are any), and
    /// `prevResult` (when given).
    pub fn exec_config(
        &self,
        network: &NetworkConfigList,
        capability_args: &Map<String, Value>,
        prev_result: Option<&Value>,
    ) -> Value {
        let mut conf = self.raw.clone();
        conf.remove("capabilities");
        conf.insert("name".into(), Value::String(network.name.clone()));
        conf.insert(
            "cniVersion".into(),
            Value::String(network.cni_version.as_str().into()),
        );
        let runtime_config: Map<String, Value> = capability_args
            .iter()
            .filter(|(k, _)| self.capabilities.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !runtime_config.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(runtime_config));
        }
        match prev_result {
            Some(prev) => conf.insert("prevResult".into(), prev.clone()),
            None => conf.remove("prevResult"),
        };
        Value::Object(conf)
    }
}

/// What identifies the content of the configuration dirs: each dir's listing
/// and each file's size, mtime and inode. Cheap to compute, changes on edit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    path: PathBuf,
    len: u64,
    mtime: Option<SystemTime>,
    ino: u64,
}

type Loaded = Vec<Result<Arc<NetworkConfigList>, String>>;

/// The configuration directories, re-read when their content changes.
#[derive(Debug)]
pub(crate) struct ConfDirs {
    dirs: Vec<PathBuf>,
    cached: Mutex<Option<(Vec<Stamp>, Arc<Loaded>)>>,
}

impl ConfDirs {
    pub(crate) fn new(dirs: Vec<PathBuf>) -> Self {
        ConfDirs {
            dirs,
            cached: Mutex::new(None),
        }
    }

    fn dirs_display(&self) -> String {
        join_paths(&self.dirs, ", ")
    }

    /// Candidate files, dir by dir, each dir in lexical order of file name.
    fn stamps(&self) -> Result<Vec<Stamp>, Error> {
        use std::os::unix::fs::MetadataExt;
        let mut stamps = Vec::new();
        for dir in &self.dirs {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(crate::error::io_err("read CNI config dir", dir, e)),
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| CONFIG_EXTENSIONS.contains(&e))
                })
                .collect();
            files.sort();
            for path in files {
                // Follows symlinks; a dangling link or a directory is skipped.
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if meta.is_file() {
                    stamps.push(Stamp {
                        len: meta.len(),
                        mtime: meta.modified().ok(),
                        ino: meta.ino(),
                        path,
                    });
                }
            }
        }
        Ok(stamps)
    }

    /// Every candidate file, parsed; re-read only when the dirs changed.
    fn load(&self) -> Result<Arc<Loaded>, Error> {
        let stamps = self.stamps()?;
        let mut cached = self.cached.lock_unpoisoned();
        if let Some((old, loaded)) = cached.as_ref() {
            if *old == stamps {
                return Ok(loaded.clone());
            }
        }
        let loaded: Loaded = stamps
            .iter()
            .map(|s| {
                let bytes =
                    std::fs::read(&s.path).map_err(|e| format!("{}: {e}", s.path.display()))?;
                NetworkConfigList::from_bytes(&bytes, Some(&s.path))
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .collect();
        for problem in loaded.iter().filter_map(|r| r.as_ref().err()) {
            tracing::warn!("skipping CNI config: {problem}");
        }
        let loaded = Arc::new(loaded);
        *cached = Some((stamps, loaded.clone()));
        Ok(loaded)
    }

    /// The network called `name`, or the first valid one when `name` is None.
    pub(crate) fn select(&self, name: Option<&str>) -> Result<Arc<NetworkConfigList>, Error> {
        let loaded = self.load()?;
        let found = loaded
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .find(|n| name.is_none_or(|name| n.name == name));
        if let Some(net) = found {
            return Ok(net.clone());
        }
        let problems: Vec<String> = loaded.iter().filter_map(|r| r.clone().err()).collect();
        Err(match name {
            Some(name) => Error::NetworkNotFound {
                name: name.to_owned(),
                dirs: self.dirs_display(),
                problems,
            },
            None => Error::NoNetwork {
                dirs: self.dirs_display(),
                problems,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<NetworkConfigList, Error> {
        NetworkConfigList::from_bytes(v.to_string().as_bytes(), None)
    }

    #[test]
    fn names_follow_the_spec() {
        for ok in ["a", "berth", "k8s-pod.net_1", "0abc"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "a+b", "é"] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn single_plugin_config_becomes_a_list() {
        let net = parse(json!({
            "cniVersion": "0.3.1", "name": "single", "type": "bridge", "bridge": "br0",
            "ipam": {"type": "host-local"}
        }))
        .unwrap();
        assert_eq!(net.name, "single");
        assert_eq!(net.cni_version, SpecVersion::V0_3_1);
        assert_eq!(net.plugins.len(), 1);
        assert_eq!(net.plugins[0].plugin_type, "bridge");
        assert_eq!(net.plugins[0].ipam_type.as_deref(), Some("host-local"));
    }

    #[test]
    fn invalid_configs_are_refused() {
        let cases = [
            (
                json!({"cniVersion": "1.0.0", "plugins": [{"type": "x"}]}),
                "name",
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "-x", "plugins": [{"type": "x"}]}),
                "name",
            ),
            (
                json!({"name": "n", "plugins": [{"type": "x"}]}),
                "cniVersion",
            ),
            (
                json!({"cniVersion": "0.2.0", "name": "n", "plugins": [{"type": "x"}]}),
                "0.2.0",
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}),
                "empty",
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"bridge": "x"}]}),
                "type",
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "../x"}]}),
                "type",
            ),
            (json!({"cniVersion": "1.0.0", "name": "n"}), "plugins"),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "plugins": {}}),
                "plugins",
            ),
            (json!([1]), "object"),
        ];
        for (conf, word) in cases {
            let err = parse(conf.clone()).unwrap_err().to_string();
            assert!(err.contains(word), "{conf}: {err}");
        }
    }

    #[test]
    fn cni_versions_picks_the_highest_supported() {
        let net = parse(json!({
            "cniVersion": "0.4.0", "cniVersions": ["0.3.1", "1.0.0", "9.9.9"],
            "name": "n", "plugins": [{"type": "x"}]
        }))
        .unwrap();
        assert_eq!(net.cni_version, SpecVersion::V1_0_0);
        let net = parse(json!({
            "cniVersion": "0.4.0", "cniVersions": ["9.9.9"], "name": "n", "plugins": [{"type": "x"}]
        }))
        .unwrap();
        assert_eq!(net.cni_version, SpecVersion::V0_4_0);
    }

    #[test]
    fn exec_config_filters_capabilities_and_injects_fields() {
        let net = parse(json!({
            "cniVersion": "1.0.0", "name": "n", "plugins": [
                {"type": "a", "capabilities": {"portMappings": true, "dns": false}, "keep": [1, 2]},
                {"type": "b", "runtimeConfig": {"stale": 1}}
            ]
        }))
        .unwrap();
        let caps: Map<String, Value> =
            json!({"portMappings": [{"hostPort": 1}], "dns": {"servers": []}})
                .as_object()
                .unwrap()
                .clone();
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let a = net.plugins[0].exec_config(&net, &caps, Some(&prev));
        assert_eq!(
            a,
            json!({
                "type": "a", "keep": [1, 2], "name": "n", "cniVersion": "1.0.0",
                "runtimeConfig": {"portMappings": [{"hostPort": 1}]},
                "prevResult": prev
            })
        );
        // No declared capability: no runtimeConfig injected (the file's own stays).
        let b = net.plugins[1].exec_config(&net, &caps, None);
        assert_eq!(
            b,
            json!({"type": "b", "name": "n", "cniVersion": "1.0.0", "runtimeConfig": {"stale": 1}})
        );
        // A round trip through the cache keeps everything.
        let back = NetworkConfigList::from_cached(net.to_value(), Path::new("c")).unwrap();
        assert_eq!(back.plugins, net.plugins);
        assert_eq!(back.name, net.name);
    }
}
