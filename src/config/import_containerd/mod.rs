//! `berth config import-containerd FILE`: a containerd configuration
//! (version 2, as containerd 1.6 and 1.7 write it, or version 3, as 2.x
//! writes it) turned into the berth configuration that does the same, as
//! TOML text that `berth config show` loads unchanged.
//!
//! Every key of the file is accounted for: it is carried over to a berth
//! key (the line says where from), or it is listed at the end as a comment
//! `# containerd KEY = VALUE: not mapped: WHY`, under "check these" (berth
//! behaves otherwise, or the value cannot be used) or "nothing to do"
//! (berth already behaves so, or the key has no meaning in berth).
//! Credentials are never copied into the output.

mod reasons;
mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use toml::Value;

use self::reasons::{handler_reason, reason, Group};
use self::values::{berth_duration, dotted, inline, is_empty, segment, Out};
use super::{layers::read_bounded, ConfigError, Layers};

/// The CRI plugin: all of CRI in version 2, the streaming server in 3.
const CRI: &str = "io.containerd.grpc.v1.cri";
/// Version 3's CRI runtime plugin (containers, CNI, handlers).
const RUNTIME: &str = "io.containerd.cri.v1.runtime";
/// Version 3's CRI images plugin (registries, pulls).
const IMAGES: &str = "io.containerd.cri.v1.images";
/// The NRI plugin (containerd 1.7 and 2.x).
const NRI: &str = "io.containerd.nri.v1.nri";

/// Why a containerd configuration could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("containerd config: {0}")]
    File(ConfigError),
    #[error("containerd config {path}: {message}")]
    Syntax { path: String, message: String },
    #[error("containerd config {path}: {message}")]
    Version { path: String, message: String },
    #[error(
        "containerd config {path}: the berth config made from it does not load (a bug of the \
         importer): {source}"
    )]
    Output { path: String, source: ConfigError },
}

/// A containerd config version this importer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// containerd 1.6 and 1.7 (2.x reads it too).
    V2,
    /// containerd 2.x.
    V3,
}

impl Version {
    fn number(self) -> u8 {
        match self {
            Version::V2 => 2,
            Version::V3 => 3,
        }
    }
}

/// Reads the containerd config at `path` and returns the berth config.
pub fn import_file(path: &Path) -> Result<String, ImportError> {
    let text = read_bounded(path).map_err(ImportError::File)?;
    import_toml(&text, path)
}

/// The berth config equivalent to containerd config `text` (read from `path`).
pub fn import_toml(text: &str, path: &Path) -> Result<String, ImportError> {
    let shown = path.display().to_string();
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ImportError::Syntax {
            path: shown.clone(),
            message: e.to_string().trim().to_string(),
        })?;
    let version = match doc.get("version") {
        Some(Value::Integer(2)) => Version::V2,
        Some(Value::Integer(3)) => Version::V3,
        None | Some(Value::Integer(1)) => {
            return Err(ImportError::Version {
                path: shown,
                message: "a version 1 config (no `version` key, or `version = 1`: containerd \
                          1.0 to 1.2's format), which berth does not import; berth imports version 2 \
                          (containerd 1.6/1.7) and 3 (2.x): `containerd config migrate` writes \
                          version 3"
                    .into(),
            })
        }
        Some(other) => {
            return Err(ImportError::Version {
                path: shown,
                message: format!(
                    "unknown `version = {}`: berth imports version 2 (containerd 1.6/1.7) and \
                     3 (2.x)",
                    inline(other)
                ),
            })
        }
    };
    let mut import = Import::new(&doc, version);
    import.run();
    let text = import.render(&shown);
    check_output(&text, &shown)?;
    Ok(text)
}

/// The output must load as berth's own files do; a value that cannot work
/// is a bug of the importer, except the systemd cgroup driver on a host
/// without systemd (the import may well run elsewhere than the node).
fn check_output(text: &str, shown: &str) -> Result<(), ImportError> {
    let output = |source| ImportError::Output {
        path: shown.to_string(),
        source,
    };
    let mut layers = Layers::new();
    layers
        .add_toml(text, Path::new("<imported>"))
        .map_err(output)?;
    let loaded = layers.finish(|_| {}).map_err(output)?;
    match loaded.config.validate() {
        Err(ConfigError::Value { key, .. }) if key == "runtime.cgroup_driver" => Ok(()),
        other => other.map_err(output),
    }
}

/// One key of the file that is not carried over.
struct Note {
    path: Vec<String>,
    value: Value,
    group: Group,
    reason: String,
}

/// The import of one document.
struct Import<'a> {
    doc: &'a toml::Table,
    version: Version,
    /// Every leaf of the document (a value that is not a table), in file order.
    leaves: Vec<(Vec<String>, &'a Value)>,
    /// The leaves carried over or noted.
    done: BTreeSet<Vec<String>>,
    notes: Vec<Note>,
    /// Lines for the top of the output.
    warnings: Vec<String>,
    out: Out,
}

/// The berth section of runtime handler `name`.
fn handler_section(name: &str) -> String {
    format!("runtime.handlers.{}", segment(name))
}

impl<'a> Import<'a> {
    fn new(doc: &'a toml::Table, version: Version) -> Import<'a> {
        let mut leaves = Vec::new();
        collect_leaves(doc, &mut Vec::new(), &mut leaves);
        Import {
            doc,
            version,
            leaves,
            done: BTreeSet::new(),
            notes: Vec::new(),
            warnings: Vec::new(),
            out: Out::default(),
        }
    }

    /// The plugin ids holding runtime, images and streaming keys.
    fn roots(&self) -> (&'static str, &'static str, &'static str) {
        match self.version {
            Version::V2 => (CRI, CRI, CRI),
            Version::V3 => (RUNTIME, IMAGES, CRI),
        }
    }

    fn lookup(&self, path: &[&str]) -> Option<&'a Value> {
        let (last, parents) = path.split_last()?;
        let mut table = self.doc;
        for p in parents {
            table = table.get(*p)?.as_table()?;
        }
        table.get(*last)
    }

    /// The leaf at `path`, marked as dealt with.
    fn take(&mut self, path: &[&str]) -> Option<&'a Value> {
        let value = self.lookup(path)?;
        if !value.is_table() {
            self.done.insert(owned(path));
        }
        Some(value)
    }

    /// Notes the leaf at `path` as not carried over.
    fn note(&mut self, path: &[&str], value: &Value, group: Group, reason: impl Into<String>) {
        self.done.insert(owned(path));
        self.notes.push(Note {
            path: owned(path),
            value: value.clone(),
            group,
            reason: reason.into(),
        });
    }

    /// The string at `path`; a value of another type is noted.
    fn string(&mut self, path: &[&str]) -> Option<&'a str> {
        let value = self.take(path)?;
        match value.as_str() {
            Some(s) => Some(s),
            None => {
                self.note(
                    path,
                    value,
                    Group::Check,
                    "not a string (containerd refuses it too)",
                );
                None
            }
        }
    }

    fn boolean(&mut self, path: &[&str]) -> Option<bool> {
        let value = self.take(path)?;
        match value.as_bool() {
            Some(b) => Some(b),
            None => {
                self.note(
                    path,
                    value,
                    Group::Check,
                    "not a boolean (containerd refuses it too)",
                );
                None
            }
        }
    }

    fn integer(&mut self, path: &[&str]) -> Option<i64> {
        let value = self.take(path)?;
        match value.as_integer() {
            Some(i) => Some(i),
            None => {
                self.note(
                    path,
                    value,
                    Group::Check,
                    "not an integer (containerd refuses it too)",
                );
                None
            }
        }
    }

    fn strings(&mut self, path: &[&str]) -> Option<Vec<String>> {
        let value = self.take(path)?;
        let list: Option<Vec<String>> = value
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_str().map(String::from)).collect());
        if list.is_none() {
            self.note(
                path,
                value,
                Group::Check,
                "not a list of strings (containerd refuses it too)",
            );
        }
        list
    }

    /// The names of the sub-tables of the table at `path` (other values
    /// there are left to the generic notes).
    fn table_keys(&self, path: &[&str]) -> Vec<String> {
        match self.lookup(path).and_then(Value::as_table) {
            Some(t) => t
                .iter()
                .filter(|(_, v)| v.is_table())
                .map(|(k, _)| k.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// An absolute path at `path`, or a note saying why not; `""` is noted
    /// as empty.
    fn absolute(&mut self, path: &[&str], berth_key: &str) -> Option<String> {
        let value = self.lookup(path)?;
        let dir = self.string(path)?;
        if dir.is_empty() {
            self.note(
                path,
                value,
                Group::Nothing,
                format!("empty: {berth_key} keeps berth's default"),
            );
            return None;
        }
        if !Path::new(dir).is_absolute() {
            self.note(
                path,
                value,
                Group::Check,
                format!("not an absolute path, which berth needs for {berth_key}"),
            );
            return None;
        }
        Some(dir.to_string())
    }

    /// Sets berth's `key` in `section` to `value`, citing the containerd
    /// keys it comes `from` and, when it is not copied as it is, `why`.
    fn put(&mut self, section: &str, key: &str, value: Value, from: &[&[&str]], why: &str) {
        let mut comment = String::new();
        if !from.is_empty() {
            let keys: Vec<String> = from.iter().map(|p| dotted(p)).collect();
            comment = format!("from {}", keys.join(", "));
        }
        if !why.is_empty() {
            if !comment.is_empty() {
                comment.push_str(": ");
            }
            comment.push_str(why);
        }
        self.out.set(section, key, value, &comment);
    }

    fn run(&mut self) {
        self.done.insert(vec!["version".into()]);
        self.plugins_disabled();
        self.logging();
        self.runtime();
        self.cni();
        self.registry();
        self.streaming();
        self.metrics();
        self.nri();
        // Everything else: one note each.
        for (path, value) in self.leaves.clone() {
            if self.done.contains(&path) {
                continue;
            }
            let segments: Vec<&str> = path.iter().map(String::as_str).collect();
            let (group, why) = reason(self.version, &segments, value);
            self.note(&segments, value, group, why);
        }
    }

    /// `disabled_plugins` naming CRI (then nothing of it was in use).
    fn plugins_disabled(&mut self) {
        let Some(Value::Array(list)) = self.lookup(&["disabled_plugins"]) else {
            return;
        };
        let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
        if names.iter().any(|n| *n == CRI || *n == "cri") {
            self.warnings.push(
                "containerd's CRI plugin is disabled in this file (disabled_plugins): kubelet did \
                 not use this containerd; what follows is what the file says all the same"
                    .into(),
            );
        }
    }

    /// `[debug] level` and `format`.
    fn logging(&mut self) {
        if let Some(level) = self.string(&["debug", "level"]) {
            let value = Value::String(level.into());
            match level {
                "" => self.note(
                    &["debug", "level"],
                    &value,
                    Group::Nothing,
                    "empty: info, berth's default log_level",
                ),
                "trace" | "debug" | "info" | "warn" | "error" => {
                    self.put("", "log_level", value, &[&["debug", "level"]], "")
                }
                "warning" => self.put(
                    "",
                    "log_level",
                    Value::String("warn".into()),
                    &[&["debug", "level"]],
                    "",
                ),
                _ => self.note(
                    &["debug", "level"],
                    &value,
                    Group::Check,
                    "berth's log levels are error, warn, info, debug and trace",
                ),
            }
        }
        if let Some(format) = self.string(&["debug", "format"]) {
            let value = Value::String(format.into());
            match format {
                "" => self.note(
                    &["debug", "format"],
                    &value,
                    Group::Nothing,
                    "empty: text, berth's default log_format",
                ),
                "text" | "json" => self.put("", "log_format", value, &[&["debug", "format"]], ""),
                _ => self.note(
                    &["debug", "format"],
                    &value,
                    Group::Check,
                    "berth's log formats are text and json",
                ),
            }
        }
    }

    /// Handlers, the default handler, the cgroup driver, CDI dirs.
    fn runtime(&mut self) {
        let (r, _, _) = self.roots();
        let base = ["plugins", r, "containerd"];
        let names = self.table_keys(&[&base[..], &["runtimes"]].concat());
        // (name, SystemdCgroup, where it was set)
        let mut mapped: Vec<(String, bool, Option<Vec<String>>)> = Vec::new();
        for name in &names {
            if let Some(systemd) = self.handler(r, name) {
                mapped.push((name.clone(), systemd.0, systemd.1));
            }
        }
        let default_path = [&base[..], &["default_runtime_name"]].concat();
        let wanted = self
            .string(&default_path)
            .map(str::to_string)
            .unwrap_or_else(|| "runc".into());
        let default = if names.is_empty() {
            // No runtimes in the file: berth's embedded runc and crun stay.
            self.out.comment(
                "runtime",
                "No containerd.runtimes in the file: berth's embedded handlers (runc, crun) stay.",
            );
            (wanted == "runc" || wanted == "crun").then_some(wanted.clone())
        } else if mapped.iter().any(|(n, ..)| *n == wanted) {
            Some(wanted.clone())
        } else {
            None
        };
        match (&default, self.lookup(&default_path)) {
            (Some(name), Some(_)) => self.put(
                "runtime",
                "default_handler",
                Value::String(name.clone()),
                &[&default_path],
                "",
            ),
            (Some(_), None) => {}
            (None, value) => {
                let fallback = mapped
                    .iter()
                    .find(|(n, ..)| n == "runc")
                    .or(mapped.first())
                    .map(|(n, ..)| n.clone());
                let why = match &fallback {
                    Some(f) => format!(
                        "handler {wanted:?} is not carried over (see its runtime_type); berth's \
                         default handler is {f:?} instead"
                    ),
                    None => format!(
                        "handler {wanted:?} is not carried over (see its runtime_type), nor any \
                         other: berth keeps its embedded handlers (runc, crun)"
                    ),
                };
                let value = value.cloned().unwrap_or(Value::String(wanted.clone()));
                self.note(&default_path, &value, Group::Check, why);
                if let Some(f) = fallback {
                    self.put(
                        "runtime",
                        "default_handler",
                        Value::String(f),
                        &[],
                        "containerd's default handler is not carried over",
                    );
                }
            }
        }
        // One cgroup driver for all: the default handler's, else the first's.
        let driver_from = mapped
            .iter()
            .find(|(n, ..)| Some(n) == default.as_ref())
            .or(mapped.first())
            .cloned();
        if let Some((from, systemd, _)) = driver_from {
            let driver = if systemd { "systemd" } else { "cgroupfs" };
            let sources: Vec<Vec<&str>> = mapped
                .iter()
                .filter(|(_, s, _)| *s == systemd)
                .filter_map(|(_, _, at)| at.as_ref())
                .map(|at| at.iter().map(String::as_str).collect())
                .collect();
            let sources: Vec<&[&str]> = sources.iter().map(Vec::as_slice).collect();
            let why = match sources.is_empty() {
                true => format!("SystemdCgroup is not set for handler {from}"),
                false => String::new(),
            };
            self.put(
                "runtime",
                "cgroup_driver",
                Value::String(driver.into()),
                &sources,
                &why,
            );
            for (name, other, at) in &mapped {
                if *other != systemd {
                    if let Some(at) = at {
                        let at: Vec<&str> = at.iter().map(String::as_str).collect();
                        self.note(
                            &at,
                            &Value::Boolean(*other),
                            Group::Check,
                            format!(
                                "berth has one cgroup driver for every handler: \
                                 runtime.cgroup_driver = {driver:?} (from handler {from}), \
                                 not this handler's ({name})"
                            ),
                        );
                    }
                }
            }
        }
        let cdi_path = ["plugins", r, "cdi_spec_dirs"];
        if let Some(dirs) = self.strings(&cdi_path) {
            self.put(
                "runtime",
                "cdi_spec_dirs",
                Value::Array(dirs.into_iter().map(Value::String).collect()),
                &[&cdi_path],
                "",
            );
        }
    }

    /// Runtime handler `name` under plugin `r`: carried over when it is a
    /// runc one; returns its SystemdCgroup and where that was set.
    fn handler(&mut self, r: &str, name: &str) -> Option<(bool, Option<Vec<String>>)> {
        let base = ["plugins", r, "containerd", "runtimes", name];
        let at = |rest: &[&'static str]| cat(&base, rest);
        let type_path = at(&["runtime_type"]);
        let runtime_type = self.string(&type_path).unwrap_or("");
        let runc = matches!(
            runtime_type,
            "io.containerd.runc.v2" | "io.containerd.runc.v1"
        );
        let own_leaves: Vec<Vec<String>> = self
            .leaves
            .iter()
            .filter(|(p, _)| p.len() > base.len() && p[..base.len()] == base)
            .map(|(p, _)| p.clone())
            .collect();
        if !runc {
            let why = match runtime_type {
                "" => format!(
                    "handler {name} has no runtime_type; berth runs runc-compatible runtimes \
                     only (io.containerd.runc.v2): the handler is not carried over"
                ),
                "io.containerd.runtime.v1.linux" => format!(
                    "containerd 1.x's old v1 shim: rewrite handler {name} as \
                     io.containerd.runc.v2 (BinaryName) in containerd, or add it as \
                     runtime.handlers.{name} by hand; not carried over"
                ),
                other => format!(
                    "berth runs runc-compatible runtimes only (berth-shim drives the runtime's \
                     runc command line), not {other}: handler {name} is not carried over"
                ),
            };
            let value = Value::String(runtime_type.into());
            self.note(&type_path, &value, Group::Check, why);
            for path in own_leaves {
                if self.done.contains(&path) {
                    continue;
                }
                let value = self.lookup_owned(&path);
                let segments: Vec<&str> = path.iter().map(String::as_str).collect();
                self.note(
                    &segments,
                    &value,
                    Group::Nothing,
                    format!("belongs to handler {name}, which is not carried over"),
                );
            }
            return None;
        }
        let section = handler_section(name);
        let binary_path = at(&["options", "BinaryName"]);
        let binary = self.string(&binary_path).unwrap_or("");
        let (binary, why) = match binary {
            "" => ("runc", "runc.v2 runs runc when BinaryName is empty"),
            b => (b, ""),
        };
        let from: Vec<&[&str]> = match self.lookup(&binary_path) {
            Some(_) => vec![&type_path, &binary_path],
            None => vec![&type_path],
        };
        self.put(&section, "binary", Value::String(binary.into()), &from, why);
        for key in ["pod_annotations", "container_annotations"] {
            let path = at(&[key]);
            if let Some(list) = self.strings(&path) {
                self.put(
                    &section,
                    key,
                    Value::Array(list.into_iter().map(Value::String).collect()),
                    &[&path],
                    "",
                );
            }
        }
        let systemd_path = at(&["options", "SystemdCgroup"]);
        let systemd = self.boolean(&systemd_path);
        for path in own_leaves {
            if self.done.contains(&path) {
                continue;
            }
            let value = self.lookup_owned(&path);
            let (group, why) = handler_reason(
                &path[base.len()..]
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                &value,
            );
            let segments: Vec<&str> = path.iter().map(String::as_str).collect();
            self.note(&segments, &value, group, why);
        }
        let set_at = systemd.map(|_| owned(&systemd_path));
        Some((systemd.unwrap_or(false), set_at))
    }

    fn lookup_owned(&self, path: &[String]) -> Value {
        let segments: Vec<&str> = path.iter().map(String::as_str).collect();
        self.lookup(&segments)
            .cloned()
            .unwrap_or(Value::Boolean(false))
    }

    /// `[cni]`: dirs, and no default network of berth's own.
    fn cni(&mut self) {
        let (r, _, _) = self.roots();
        let at = |key: &'static str| ["plugins", r, "cni", key];
        if let Some(dir) = self.absolute(&at("conf_dir"), "cni.conf_dir") {
            self.put(
                "cni",
                "conf_dir",
                Value::String(dir),
                &[&at("conf_dir")],
                "",
            );
        }
        self.cni_bin_dirs(r);
        if let Some(n) = self.integer(&at("max_conf_num")) {
            let value = Value::Integer(n);
            if n == 1 {
                self.note(
                    &at("max_conf_num"),
                    &value,
                    Group::Nothing,
                    "berth attaches each pod to one network (cni.network_name, else the first \
                     file of cni.conf_dir), as containerd with 1",
                );
            } else {
                self.note(
                    &at("max_conf_num"),
                    &value,
                    Group::Check,
                    "berth attaches each pod to one network only (cni.network_name, else the \
                     first file of cni.conf_dir)",
                );
            }
        }
        self.put(
            "cni",
            "write_default_network",
            Value::Boolean(false),
            &[],
            "containerd writes no network of its own: wait for the cluster's CNI",
        );
    }

    /// `cni.bin_dirs` from `bin_dir` (containerd 1.x, deprecated in 2.1) or
    /// `bin_dirs` (2.1+): containerd takes `bin_dir` when it is set and
    /// `bin_dirs` is its default, and refuses both set.
    fn cni_bin_dirs(&mut self, r: &'static str) {
        let dir_path = ["plugins", r, "cni", "bin_dir"];
        let dirs_path = ["plugins", r, "cni", "bin_dirs"];
        let dir_value = self.lookup(&dir_path);
        let dirs_value = self.lookup(&dirs_path);
        let dir = self.string(&dir_path).filter(|d| !d.is_empty());
        let dirs = self.strings(&dirs_path);
        let (chosen, from): (Vec<String>, &[&str]) = match (dir, dirs) {
            (Some(dir), dirs) => {
                if let (Some(dirs), Some(value)) = (dirs, dirs_value) {
                    let (group, why) = if dirs.is_empty() || dirs == ["/opt/cni/bin"] {
                        (Group::Nothing, "containerd's default, replaced by bin_dir")
                    } else {
                        (
                            Group::Check,
                            "containerd refuses bin_dir and bin_dirs together; bin_dir is taken",
                        )
                    };
                    self.note(&dirs_path, value, group, why);
                }
                (vec![dir.to_string()], &dir_path)
            }
            (None, dirs) => {
                if let Some(value) = dir_value {
                    if value.as_str() == Some("") {
                        self.note(&dir_path, value, Group::Nothing, "empty: not used");
                    }
                }
                match (dirs, dirs_value) {
                    (Some(dirs), Some(value)) if dirs.is_empty() => {
                        self.note(
                            &dirs_path,
                            value,
                            Group::Nothing,
                            "empty: cni.bin_dirs keeps berth's default",
                        );
                        return;
                    }
                    (Some(dirs), _) => (dirs, &dirs_path),
                    _ => return,
                }
            }
        };
        if chosen.iter().all(|d| Path::new(d).is_absolute()) {
            self.put(
                "cni",
                "bin_dirs",
                Value::Array(chosen.into_iter().map(Value::String).collect()),
                &[from],
                "",
            );
        } else if let Some(value) = self.lookup(from) {
            self.note(
                from,
                value,
                Group::Check,
                "not all absolute paths, which berth needs for cni.bin_dirs",
            );
        }
    }

    /// `[registry]`: hosts.toml dir, mirrors, downloads, progress timeout;
    /// TLS settings and credentials are told where to go.
    fn registry(&mut self) {
        let (_, i, _) = self.roots();
        let reg = ["plugins", i, "registry"];
        let config_path = [&reg[..], &["config_path"]].concat();
        let mut uses_config_path = false;
        if let Some(value) = self.lookup(&config_path) {
            if let Some(text) = self.string(&config_path) {
                let dirs: Vec<&str> = text.split(':').filter(|d| !d.is_empty()).collect();
                match dirs.as_slice() {
                    [] => self.note(
                        &config_path,
                        value,
                        Group::Nothing,
                        "empty: no hosts.toml directory, as in berth by default",
                    ),
                    [dir] if Path::new(dir).is_absolute() => {
                        uses_config_path = true;
                        self.put(
                            "registry",
                            "config_path",
                            Value::String(dir.to_string()),
                            &[&config_path],
                            "its hosts.toml files are read as they are",
                        );
                    }
                    [_] => self.note(
                        &config_path,
                        value,
                        Group::Check,
                        "not an absolute path, which berth needs for registry.config_path",
                    ),
                    _ => self.note(
                        &config_path,
                        value,
                        Group::Check,
                        "berth reads one hosts.toml directory: merge these into one and set \
                         registry.config_path to it",
                    ),
                }
            }
        }
        self.mirrors(&reg, uses_config_path);
        self.registry_configs(&reg);
        let downloads = ["plugins", i, "max_concurrent_downloads"];
        if let Some(n) = self.integer(&downloads) {
            if n >= 1 {
                self.put(
                    "registry",
                    "max_concurrent_downloads",
                    Value::Integer(n),
                    &[&downloads],
                    "",
                );
            } else {
                self.note(
                    &downloads,
                    &Value::Integer(n),
                    Group::Check,
                    "berth needs at least 1 for registry.max_concurrent_downloads",
                );
            }
        }
        let timeout = ["plugins", i, "image_pull_progress_timeout"];
        if let Some(text) = self.string(&timeout) {
            let value = Value::String(text.into());
            match berth_duration(text) {
                Ok((_, d)) => self.put(
                    "registry",
                    "progress_timeout",
                    Value::String(d),
                    &[&timeout],
                    "",
                ),
                Err(e) => self.note(&timeout, &value, Group::Check, e),
            }
        }
    }

    /// `registry.mirrors."HOST".endpoint`.
    fn mirrors(&mut self, reg: &[&str], uses_config_path: bool) {
        let base = [reg, &["mirrors"]].concat();
        for host in self.table_keys(&base) {
            let path = [&base[..], &[host.as_str(), "endpoint"]].concat();
            let Some(value) = self.lookup(&path) else {
                continue;
            };
            let Some(endpoints) = self.strings(&path) else {
                continue;
            };
            if uses_config_path {
                self.note(
                    &path,
                    value,
                    Group::Check,
                    "containerd refuses mirrors together with config_path, and so does berth: \
                     write them as hosts.toml files",
                );
                continue;
            }
            let mut check = berth_oci_image::RegistryConfig::default();
            check.mirrors.insert(
                host.clone(),
                berth_oci_image::Mirror {
                    endpoints: endpoints.clone(),
                    mirror_only: false,
                },
            );
            if let Err(e) = check.validate() {
                self.note(&path, value, Group::Check, format!("berth refuses it: {e}"));
                continue;
            }
            self.put(
                &format!("registry.mirrors.{}", segment(&host)),
                "endpoints",
                Value::Array(endpoints.into_iter().map(Value::String).collect()),
                &[&path],
                "then the registry itself, as containerd",
            );
        }
    }

    /// `registry.configs."HOST".tls|auth` and `registry.auths`: berth has
    /// no inline TLS or credentials; each key says where it goes.
    fn registry_configs(&mut self, reg: &[&str]) {
        let configs = [reg, &["configs"]].concat();
        let auths = [reg, &["auths"]].concat();
        let leaves: Vec<(Vec<String>, &Value)> = self
            .leaves
            .iter()
            .filter(|(p, _)| {
                (p.len() > configs.len() && p[..configs.len()] == configs[..])
                    || (p.len() > auths.len() && p[..auths.len()] == auths[..])
            })
            .cloned()
            .collect();
        for (path, value) in leaves {
            let segments: Vec<&str> = path.iter().map(String::as_str).collect();
            let rest = &segments[reg.len()..];
            let (group, why) = match rest {
                ["configs", host, "tls", key] => {
                    let tls = [&configs[..], &[host, "tls"]].concat();
                    let file = |k: &str| {
                        let path = [&tls[..], &[k]].concat();
                        self.lookup(&path).and_then(Value::as_str).unwrap_or("")
                    };
                    let pair = (file("cert_file"), file("key_file"));
                    tls_recipe(host, key, value, pair)
                }
                ["configs", host, "auth", key] | ["auths", host, key] => {
                    let host = host
                        .trim_start_matches("https://")
                        .trim_start_matches("http://");
                    let shown = if *key == "username" {
                        value.clone()
                    } else {
                        Value::String("<redacted>".into())
                    };
                    let why = format!(
                        "berth has no inline credentials: write them for {host:?} into a docker \
                         config.json (mode 0600; {{\"auths\": {{\"{host}\": {{\"auth\": \
                         \"BASE64(user:password)\"}}}}}}, or \"identitytoken\") and set \
                         registry.auth_file to it"
                    );
                    self.note(&segments, &shown, Group::Check, why);
                    continue;
                }
                _ => (
                    Group::Check,
                    "unknown to berth's importer (not a registry key that it knows)".into(),
                ),
            };
            self.note(&segments, value, group, why);
        }
    }

    /// `[streaming]`: address, port, idle timeout, TLS.
    fn streaming(&mut self) {
        let (_, _, s) = self.roots();
        let at = |key: &'static str| ["plugins", s, key];
        if let Some(address) = self.string(&at("stream_server_address")) {
            let value = Value::String(address.into());
            if address.parse::<std::net::IpAddr>().is_ok() {
                self.put(
                    "streaming",
                    "address",
                    value,
                    &[&at("stream_server_address")],
                    "",
                );
            } else if address.is_empty() {
                self.note(
                    &at("stream_server_address"),
                    &value,
                    Group::Check,
                    "empty: containerd listened on the address of the default route's interface; \
                     berth needs an IP address (streaming.address), so it keeps 127.0.0.1",
                );
            } else {
                self.note(
                    &at("stream_server_address"),
                    &value,
                    Group::Check,
                    "not an IP address, which berth needs for streaming.address",
                );
            }
        }
        if let Some(value) = self.take(&at("stream_server_port")) {
            let port = match value {
                Value::String(s) => s.parse::<u16>().ok(),
                Value::Integer(i) => u16::try_from(*i).ok(),
                _ => None,
            };
            match port {
                Some(port) => self.put(
                    "streaming",
                    "port",
                    Value::Integer(port.into()),
                    &[&at("stream_server_port")],
                    "",
                ),
                None => self.note(
                    &at("stream_server_port"),
                    value,
                    Group::Check,
                    "not a port number",
                ),
            }
        }
        if let Some(text) = self.string(&at("stream_idle_timeout")) {
            let value = Value::String(text.into());
            match berth_duration(text) {
                Ok((d, _)) if d.is_zero() => self.note(
                    &at("stream_idle_timeout"),
                    &value,
                    Group::Check,
                    "containerd: no idle limit; berth needs one above 0 (streaming.idle_timeout)",
                ),
                Ok((_, d)) => self.put(
                    "streaming",
                    "idle_timeout",
                    Value::String(d),
                    &[&at("stream_idle_timeout")],
                    "",
                ),
                Err(e) => self.note(&at("stream_idle_timeout"), &value, Group::Check, e),
            }
        }
        let tls = self.boolean(&at("enable_tls_streaming"));
        if let Some(tls) = tls {
            self.put(
                "streaming",
                "enable_tls",
                Value::Boolean(tls),
                &[&at("enable_tls_streaming")],
                "",
            );
        }
        let pair = ["plugins", s, "x509_key_pair_streaming"];
        let cert_path = [&pair[..], &["tls_cert_file"]].concat();
        let key_path = [&pair[..], &["tls_key_file"]].concat();
        let cert = self.string(&cert_path).unwrap_or("");
        let key = self.string(&key_path).unwrap_or("");
        let files = [(&cert_path, cert), (&key_path, key)];
        let note_both = |this: &mut Self, group: Group, why: &str| {
            for (path, file) in files {
                if this.lookup(path).is_some() {
                    this.note(path, &Value::String(file.into()), group, why);
                }
            }
        };
        match (cert.is_empty(), key.is_empty()) {
            (true, true) => note_both(
                self,
                Group::Nothing,
                "empty: with enable_tls, berth makes a self-signed certificate, as containerd",
            ),
            _ if tls != Some(true) => note_both(
                self,
                Group::Nothing,
                "containerd uses it only with enable_tls_streaming, which is off",
            ),
            (false, false) if Path::new(cert).is_absolute() && Path::new(key).is_absolute() => {
                self.put(
                    "streaming",
                    "tls_cert_file",
                    Value::String(cert.into()),
                    &[&cert_path],
                    "",
                );
                self.put(
                    "streaming",
                    "tls_key_file",
                    Value::String(key.into()),
                    &[&key_path],
                    "",
                );
            }
            (false, false) => note_both(
                self,
                Group::Check,
                "berth needs absolute paths for streaming.tls_cert_file and tls_key_file",
            ),
            _ => note_both(
                self,
                Group::Check,
                "only one of the pair is set: berth needs both (or neither, for a self-signed \
                 certificate)",
            ),
        }
    }

    /// `[metrics] address`.
    fn metrics(&mut self) {
        if let Some(address) = self.string(&["metrics", "address"]) {
            let value = Value::String(address.into());
            if address.is_empty() {
                self.note(
                    &["metrics", "address"],
                    &value,
                    Group::Nothing,
                    "empty: no metrics endpoint, as in berth by default",
                );
            } else if address.parse::<std::net::SocketAddr>().is_ok() {
                self.out.comment(
                    "metrics",
                    "berth serves /metrics, containerd served /v1/metrics: change the scrape path.",
                );
                self.put("metrics", "address", value, &[&["metrics", "address"]], "");
            } else {
                self.note(
                    &["metrics", "address"],
                    &value,
                    Group::Check,
                    "berth needs IP:PORT for metrics.address",
                );
            }
        }
    }

    /// `[nri]` from `plugins."io.containerd.nri.v1.nri"`.
    fn nri(&mut self) {
        let base = ["plugins", NRI];
        let disabled_by_list = matches!(
            self.lookup(&["disabled_plugins"]),
            Some(Value::Array(l)) if l.iter().any(|v| v.as_str() == Some(NRI))
        );
        let disable_path = [&base[..], &["disable"]].concat();
        let disable = self.boolean(&disable_path);
        let (enable, from, why): (bool, &[&[&str]], &str) = match (disabled_by_list, disable) {
            (true, _) => (false, &[&["disabled_plugins"]], "NRI is disabled"),
            (false, Some(d)) => (!d, &[&disable_path], "the opposite of disable"),
            (false, None) => match self.version {
                Version::V2 => (
                    false,
                    &[],
                    "containerd 1.x runs no NRI plugins unless NRI's disable = false",
                ),
                Version::V3 => (true, &[], "containerd 2.x runs NRI by default"),
            },
        };
        if disabled_by_list {
            if let (Some(d), Some(value)) = (disable, self.lookup(&disable_path)) {
                if !d {
                    self.note(
                        &disable_path,
                        value,
                        Group::Nothing,
                        "NRI is in disabled_plugins all the same",
                    );
                }
            }
        }
        self.put("nri", "enable", Value::Boolean(enable), from, why);
        let at = |key: &'static str| [&base[..], &[key]].concat();
        for key in ["socket_path", "plugin_path", "plugin_config_path"] {
            if let Some(path) = self.absolute(&at(key), &format!("nri.{key}")) {
                self.put("nri", key, Value::String(path), &[&at(key)], "");
            }
        }
        for key in ["plugin_registration_timeout", "plugin_request_timeout"] {
            let path = at(key);
            let Some(value) = self.take(&path) else {
                continue;
            };
            // 1.7 wrote a Go duration string; an integer is nanoseconds.
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Integer(ns) => format!("{ns}ns"),
                _ => String::new(),
            };
            match berth_duration(&text) {
                Ok((d, _)) if d.is_zero() => self.note(
                    &path,
                    value,
                    Group::Check,
                    format!("berth needs nri.{key} above 0"),
                ),
                Ok((_, d)) => self.put("nri", key, Value::String(d), &[&path], ""),
                Err(e) => self.note(&path, value, Group::Check, e),
            }
        }
        if let Some(b) = self.boolean(&at("disable_connections")) {
            self.put(
                "nri",
                "disable_connections",
                Value::Boolean(b),
                &[&at("disable_connections")],
                "",
            );
        }
        let validator = [&base[..], &["default_validator"]].concat();
        for key in [
            "enable",
            "reject_oci_hook_adjustment",
            "reject_runtime_default_seccomp_adjustment",
            "reject_unconfined_seccomp_adjustment",
            "reject_custom_seccomp_adjustment",
            "reject_namespace_adjustment",
            "reject_sysctl_adjustment",
        ] {
            let path = [&validator[..], &[key]].concat();
            if let Some(b) = self.boolean(&path) {
                self.put(
                    "nri.default_validator",
                    key,
                    Value::Boolean(b),
                    &[&path],
                    "",
                );
            }
        }
        let required = [&validator[..], &["required_plugins"]].concat();
        if let Some(list) = self.strings(&required) {
            let bad = list
                .iter()
                .find(|p| berth_nri::check_plugin_name(p).is_err());
            match bad {
                Some(p) => {
                    let value = self
                        .lookup(&required)
                        .cloned()
                        .unwrap_or(Value::Array(vec![]));
                    self.note(
                        &required,
                        &value,
                        Group::Check,
                        format!("{p:?} is not a plugin name berth accepts"),
                    );
                }
                None => self.put(
                    "nri.default_validator",
                    "required_plugins",
                    Value::Array(list.into_iter().map(Value::String).collect()),
                    &[&required],
                    "",
                ),
            }
        }
        let tolerate = [&validator[..], &["tolerate_missing_plugins_annotation"]].concat();
        if let Some(key) = self.string(&tolerate) {
            self.put(
                "nri.default_validator",
                "tolerate_missing_plugins_annotation",
                Value::String(key.into()),
                &[&tolerate],
                "",
            );
        }
    }

    /// The whole output: a header, the berth keys, then every key that is
    /// not carried over.
    fn render(&self, shown: &str) -> String {
        let containerd = match self.version {
            Version::V2 => "containerd 1.6/1.7",
            Version::V3 => "containerd 2.x",
        };
        let mut text = format!(
            "# berth configuration imported from the containerd configuration {shown}\n\
             # (version {}, as {containerd} writes it) by `berth config import-containerd`.\n\
             # Install it as /etc/berth/config.toml (or a drop-in in /etc/berth/config.d/) and\n\
             # check it with `berth config show`. Each key says which containerd key it comes\n\
             # from; what is not carried over is listed at the end, one comment per key.\n",
            self.version.number()
        );
        for w in &self.warnings {
            text.push_str(&format!("#\n# Note: {w}\n"));
        }
        text.push('\n');
        text.push_str(&self.out.render());
        let mut notes: Vec<&Note> = self.notes.iter().collect();
        // File order.
        let position: BTreeMap<&Vec<String>, usize> = self
            .leaves
            .iter()
            .enumerate()
            .map(|(n, (p, _))| (p, n))
            .collect();
        notes.sort_by_key(|n| position.get(&n.path).copied().unwrap_or(usize::MAX));
        for (group, title) in [
            (
                Group::Check,
                "Not carried over, check these: berth behaves otherwise, or the value cannot be \
                 used as it is",
            ),
            (
                Group::Nothing,
                "Not carried over, nothing to do: berth already behaves so, the key has no \
                 meaning in berth, or it belongs to something not carried over",
            ),
        ] {
            let lines: Vec<String> = notes
                .iter()
                .filter(|n| n.group == group)
                .map(|n| {
                    format!(
                        "# containerd {} = {}: not mapped: {}\n",
                        dotted(&n.path),
                        inline(&n.value),
                        n.reason
                    )
                })
                .collect();
            if lines.is_empty() {
                continue;
            }
            text.push_str(&format!("\n# {title}.\n"));
            for line in lines {
                text.push_str(&line);
            }
        }
        text
    }
}

/// What a `registry.configs."HOST".tls.KEY` becomes in a hosts.toml.
/// `pair` is the host's (cert_file, key_file).
fn tls_recipe(host: &str, key: &str, value: &Value, pair: (&str, &str)) -> (Group, String) {
    let file = format!("{host}/hosts.toml under registry.config_path");
    let line = match key {
        "ca_file" => format!("ca = {}", inline(value)),
        "cert_file" | "key_file" => {
            let quoted = |f: &str| Value::String(f.to_string()).to_string();
            match pair {
                ("", _) | (_, "") => {
                    return (
                        Group::Check,
                        "containerd uses a client certificate only with both cert_file and \
                         key_file set"
                            .into(),
                    )
                }
                (cert, key) => format!("client = [[{}, {}]]", quoted(cert), quoted(key)),
            }
        }
        "insecure_skip_verify" => {
            if is_empty(value) {
                return (
                    Group::Nothing,
                    "berth verifies registries' certificates, as containerd with false".into(),
                );
            }
            "skip_verify = true".into()
        }
        _ => {
            return (
                Group::Check,
                "unknown to berth's importer (not a registry TLS key that it knows)".into(),
            )
        }
    };
    if is_empty(value) {
        return (Group::Nothing, "empty".into());
    }
    (
        Group::Check,
        format!(
            "berth has no inline registry TLS settings: put `{line}` under \
             [host.\"https://{host}\"] in {file} (berth reads TLS from hosts.toml only, and \
             config_path replaces inline mirrors)"
        ),
    )
}

/// Every value that is not a table, with its path, in file order.
fn collect_leaves<'a>(
    table: &'a toml::Table,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, &'a Value)>,
) {
    for (key, value) in table {
        prefix.push(key.clone());
        match value {
            Value::Table(t) => collect_leaves(t, prefix, out),
            other => out.push((prefix.clone(), other)),
        }
        prefix.pop();
    }
}

/// `a` then `b`.
fn cat<'s>(a: &[&'s str], b: &[&'s str]) -> Vec<&'s str> {
    [a, b].concat()
}

fn owned(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests;
