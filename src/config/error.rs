//! Why a configuration could not be loaded, and where a key was set.

use std::path::PathBuf;

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
