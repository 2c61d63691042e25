//! `berth config import-containerd FILE`: a containerd configuration
//! (version 2, as containerd 1.6 and 1.7 write it, version 3, as 2.0 to 2.3
//! write it, or version 4, as 2.4 writes it) turned into the berth configuration that does the same, as
//! TOML text that `berth config show` loads unchanged.
//!
//! Every key of the file is accounted for: it is carried over to a berth
//! key (the line says where from), or it is listed at the end as a comment
//! `# containerd KEY = VALUE: not mapped: WHY`, under "check these" (berth
//! behaves otherwise, or the value cannot be used) or "nothing to do"
//! (berth already behaves so, or the key has no meaning in berth).
//! Credentials are never copied into the output.
//!
//! This crate makes the text; whether berth loads it is the caller's check
//! (berth's config types live in the daemon, above this crate).

mod keys;
mod reasons;
mod registry;
mod runtime;
mod server;
mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use toml::Value;

use self::reasons::{reason, Group};
pub use self::values::{dotted, key_segment};
use self::values::{inline, Out};

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
    #[error("containerd config {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("containerd config {path}: {message}")]
    Version { path: PathBuf, message: String },
}

/// A containerd config version this importer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// containerd 1.6 and 1.7 (2.x reads it too).
    V2,
    /// containerd 2.0 to 2.3 (2.4 reads it too).
    V3,
    /// containerd 2.4: version 3 with the server's top-level tables
    /// (`grpc`, `ttrpc`, `debug.address`, `metrics`) moved into plugins.
    V4,
}

impl Version {
    fn number(self) -> u8 {
        match self {
            Version::V2 => 2,
            Version::V3 => 3,
            Version::V4 => 4,
        }
    }
}

/// The berth config equivalent to containerd config `text` (read from
/// `path`, which the header and the errors name), as TOML text.
pub fn import_toml(text: &str, path: &Path) -> Result<String, ImportError> {
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ImportError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim().to_string(),
        })?;
    let version = match doc.get("version") {
        Some(Value::Integer(2)) => Version::V2,
        Some(Value::Integer(3)) => Version::V3,
        Some(Value::Integer(4)) => Version::V4,
        None | Some(Value::Integer(1)) => {
            return Err(ImportError::Version {
                path: path.to_path_buf(),
                message: "a version 1 config (no `version` key, or `version = 1`: containerd \
                          1.0 to 1.2's format), which berth does not import; berth imports version 2 \
                          (containerd 1.6/1.7), 3 (2.0 to 2.3) and 4 (2.4): `containerd config \
                          migrate` writes the newest its containerd knows"
                    .into(),
            })
        }
        Some(other) => {
            return Err(ImportError::Version {
                path: path.to_path_buf(),
                message: format!(
                    "unknown `version = {}`: berth imports version 2 (containerd 1.6/1.7), \
                     3 (2.0 to 2.3) and 4 (2.4)",
                    inline(other)
                ),
            })
        }
    };
    let mut import = Import::new(&doc, version);
    import.run();
    Ok(import.render(&path.display().to_string()))
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

impl<'a> Import<'a> {
    fn new(doc: &'a toml::Table, version: Version) -> Import<'a> {
        Import {
            doc,
            version,
            leaves: leaves(doc),
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
            Version::V3 | Version::V4 => (RUNTIME, IMAGES, CRI),
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

    /// The value at `path` as `get` reads it; a value it cannot read is
    /// noted as not `what`.
    fn typed<T>(
        &mut self,
        path: &[&str],
        get: impl Fn(&'a Value) -> Option<T>,
        what: &str,
    ) -> Option<T> {
        let value = self.take(path)?;
        let got = get(value);
        if got.is_none() {
            let why = format!("not {what} (containerd refuses it too)");
            self.note(path, value, Group::Check, why);
        }
        got
    }

    /// The string at `path`; a value of another type is noted.
    fn string(&mut self, path: &[&str]) -> Option<&'a str> {
        self.typed(path, Value::as_str, "a string")
    }

    fn boolean(&mut self, path: &[&str]) -> Option<bool> {
        self.typed(path, Value::as_bool, "a boolean")
    }

    fn integer(&mut self, path: &[&str]) -> Option<i64> {
        self.typed(path, Value::as_integer, "an integer")
    }

    fn strings(&mut self, path: &[&str]) -> Option<Vec<String>> {
        let list = |value: &Value| {
            let items = value.as_array()?.iter();
            items.map(|v| v.as_str().map(String::from)).collect()
        };
        self.typed(path, list, "a list of strings")
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

    fn lookup_owned(&self, path: &[String]) -> Value {
        let segments: Vec<&str> = path.iter().map(String::as_str).collect();
        self.lookup(&segments)
            .cloned()
            .unwrap_or(Value::Boolean(false))
    }

    /// The whole output: a header, the berth keys, then every key that is
    /// not carried over.
    fn render(&self, shown: &str) -> String {
        let containerd = match self.version {
            Version::V2 => "containerd 1.6/1.7",
            Version::V3 => "containerd 2.0 to 2.3",
            Version::V4 => "containerd 2.4",
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

/// Every value of `table` that is not a table, with its path, in file
/// order: the keys an import accounts for, each carried over or noted.
pub fn leaves(table: &toml::Table) -> Vec<(Vec<String>, &Value)> {
    let mut out = Vec::new();
    collect_leaves(table, &mut Vec::new(), &mut out);
    out
}

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
