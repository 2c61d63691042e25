//! `berth config import-containerd FILE`: the file read as berth reads its
//! own config files, turned into berth's config by
//! `berth_containerd_import`, and the output checked to load as
//! `berth config show` loads it (the config types live here, not in that
//! crate).

use std::path::{Path, PathBuf};

use super::{layers::read_bounded, ConfigError, Layers};

/// Why a containerd configuration could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("containerd config: {0}")]
    File(ConfigError),
    #[error(transparent)]
    Import(#[from] berth_containerd_import::ImportError),
    #[error(
        "containerd config {path}: the berth config made from it does not load (a bug of the \
         importer): {source}"
    )]
    Output { path: PathBuf, source: ConfigError },
}

/// Reads the containerd config at `path` and returns the berth config.
pub fn import_file(path: &Path) -> Result<String, ImportError> {
    let text = read_bounded(path).map_err(ImportError::File)?;
    import_toml(&text, path)
}

/// The berth config equivalent to containerd config `text` (read from
/// `path`), checked to load.
pub fn import_toml(text: &str, path: &Path) -> Result<String, ImportError> {
    let text = berth_containerd_import::import_toml(text, path)?;
    check_output(&text, path)?;
    Ok(text)
}

/// The output must load as berth's own files do; a value that cannot work
/// is a bug of the importer, except the systemd cgroup driver on a host
/// without systemd (the import may well run elsewhere than the node).
fn check_output(text: &str, path: &Path) -> Result<(), ImportError> {
    let output = |source| ImportError::Output {
        path: path.to_path_buf(),
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

#[cfg(test)]
mod tests;
