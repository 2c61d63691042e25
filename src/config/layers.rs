//! Loading in layers: the embedded defaults, the main file, the drop-ins of
//! `config.d/` and the flags merged in that order, with the file or flag
//! that set each key remembered.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Origin};
// How TOML spells one key: the importer writes TOML keys too, and owns it.
use berth_containerd_import::key_segment;

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
pub(super) fn read_bounded(path: &Path) -> Result<String, ConfigError> {
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
