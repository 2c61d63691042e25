//! Why a containerd key is not carried over: one reason per key berth has
//! no setting for, and whether that matters (berth behaves otherwise, or the
//! value cannot be used) or not (berth already behaves so, or the key has
//! no meaning in berth). The keys themselves are the tables of `keys`.

use super::keys::{self, Owner, Row};
use super::values::{is_empty, key_segment};
use super::{Version, CRI, IMAGES, NRI, RUNTIME};
use toml::Value;

/// Which list of the output a key that is not carried over goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// berth behaves otherwise, or the value cannot be used as it is: the
    /// operator has to decide.
    Check,
    /// berth already behaves so, the setting has no meaning in berth, or the
    /// key belongs to something that is not carried over as a whole.
    Nothing,
}

use Group::{Check, Nothing};

/// The values at which a key does nothing worth checking (its group is
/// then `Nothing`, else `Check`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Inert {
    /// Whatever the value.
    Always,
    /// At no value.
    Never,
    /// What an unset key decodes to: `""`, `0`, `false`, empty.
    Empty,
    Bool(bool),
    Int(i64),
    /// One of these strings.
    Str(&'static [&'static str]),
}

impl Inert {
    fn group(self, value: &Value) -> Group {
        let inert = match self {
            Inert::Always => true,
            Inert::Never => false,
            Inert::Empty => is_empty(value),
            Inert::Bool(b) => *value == Value::Boolean(b),
            Inert::Int(i) => *value == Value::Integer(i),
            Inert::Str(list) => value.as_str().is_some_and(|s| list.contains(&s)),
        };
        if inert {
            Nothing
        } else {
            Check
        }
    }
}

/// The group and reason of the first row of `rows` matching `path`.
fn lookup<'r>(
    rows: impl IntoIterator<Item = &'r Row>,
    path: &[&str],
    value: &Value,
) -> Option<(Group, String)> {
    rows.into_iter()
        .find(|(pattern, ..)| keys::matches(pattern, path))
        .map(|(_, inert, reason)| (inert.group(value), reason.to_string()))
}

/// Why the key at `path` (as written in the file) is not carried over.
pub fn reason(version: Version, path: &[&str], value: &Value) -> (Group, String) {
    match path {
        ["plugins", id, rest @ ..] => plugin_reason(version, id, rest, value),
        ["proxy_plugins", name, ..] => (
            Check,
            format!("berth loads no containerd proxy plugins ({name})"),
        ),
        ["root"] => state_dir("root", "/var/lib/containerd", "/var/lib/berth", value),
        ["state"] => state_dir("state", "/run/containerd", "/run/berth", value),
        _ => match keys::moved_to(path) {
            Some((id, key)) if version == Version::V4 => (
                Nothing,
                format!(
                    "containerd reads this key only in files of version 2 and 3; in version 4 \
                     it is plugins.{}.{key}, so it was not in effect",
                    key_segment(id)
                ),
            ),
            _ => lookup(keys::TOP, path, value).unwrap_or_else(|| (Check, unknown(version))),
        },
    }
}

fn unknown(version: Version) -> String {
    format!(
        "unknown to berth's importer (not a key of containerd's version {} config that it knows)",
        version.number()
    )
}

fn state_dir(
    key: &str,
    containerd_default: &str,
    berth_default: &str,
    value: &Value,
) -> (Group, String) {
    match value.as_str() {
        Some(dir) if dir == containerd_default => (
            Nothing,
            format!(
                "berth keeps its own {key} ({berth_default}, in its own layout); containerd's is \
                 neither read nor needed"
            ),
        ),
        Some(dir) => {
            let parent = std::path::Path::new(dir)
                .parent()
                .unwrap_or(std::path::Path::new("/"));
            (
                Check,
                format!(
                    "berth keeps its own {key} in its own layout, not containerd's; to keep it on \
                     the same file system, set {key} = \"{}\"",
                    parent.join("berth").display()
                ),
            )
        }
        None => (Check, "not a string".into()),
    }
}

/// The reasons for the keys of `plugins.ID`.
fn plugin_reason(version: Version, id: &str, rest: &[&str], value: &Value) -> (Group, String) {
    let cri_roots: &[&str] = match version {
        Version::V2 => &[CRI],
        Version::V3 | Version::V4 => &[CRI, RUNTIME, IMAGES],
    };
    if cri_roots.contains(&id) {
        return cri_reason(version, id, rest, value);
    }
    if id == NRI {
        return (Check, unknown(version));
    }
    if let Some(old) = keys::moved_from(id, rest) {
        return moved_reason(version, old, value);
    }
    let rows = keys::PLUGINS
        .iter()
        .filter(|(plugin, _)| *plugin == id)
        .map(|(_, row)| row);
    lookup(rows, rest, value).unwrap_or_else(|| {
        (
            Nothing,
            format!(
                "berth has no containerd plugin {id}: it does that job its own way, or not at \
                 all"
            ),
        )
    })
}

/// Why a server plugin key that version 4 moved from top-level key `old` is
/// not carried over: the reason of the key it was (containerd 2.4 reads the
/// plugin key in a file of any version, before the top-level one).
fn moved_reason(version: Version, old: &str, value: &Value) -> (Group, String) {
    let path: Vec<&str> = old.split('.').collect();
    lookup(keys::TOP, &path, value).unwrap_or_else(|| (Check, unknown(version)))
}

/// The reasons for the keys of the CRI plugin(s).
fn cri_reason(version: Version, id: &str, rest: &[&str], value: &Value) -> (Group, String) {
    let Some(&(owner, (_, inert, reason))) = keys::CRI
        .iter()
        .find(|(_, (pattern, ..))| keys::matches(pattern, rest))
    else {
        return (Check, unknown(version));
    };
    if version != Version::V2 {
        let here = match id {
            RUNTIME => Owner::Runtime,
            IMAGES => Owner::Images,
            _ => Owner::Server,
        };
        let read_here = owner == here || (owner == Owner::Either && here != Owner::Server);
        if !read_here {
            return (
                Nothing,
                format!(
                    "containerd 2.x does not read this key in plugin {id} (it is a version 2 key, \
                     or belongs to another plugin), so it was not in effect"
                ),
            );
        }
    }
    (inert.group(value), reason.to_string())
}

/// Why a key of runtime handler `name` (a runc one, carried over) is not
/// itself carried over; `rest` is below `containerd.runtimes.NAME`.
pub fn handler_reason(rest: &[&str], value: &Value) -> (Group, String) {
    lookup(keys::HANDLER, rest, value).unwrap_or_else(|| {
        (
            Check,
            "unknown to berth's importer (not a runtime key that it knows)".into(),
        )
    })
}
