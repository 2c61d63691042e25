//! The CNI error type and the CNI commands it refers to.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A CNI operation, as passed in `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
}

impl Command {
    /// The value of `CNI_COMMAND`.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a CNI operation can fail with. Each variant names the network, plugin,
/// container or path it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No configuration directory holds a usable network configuration.
    #[error(
        "no valid CNI network configuration found in {dirs}{}",
        problems_suffix(problems)
    )]
    NoNetwork { dirs: String, problems: Vec<String> },
    /// The configured network name is not in any configuration directory.
    #[error(
        "CNI network {name:?} not found in {dirs}{}",
        problems_suffix(problems)
    )]
    NetworkNotFound {
        name: String,
        dirs: String,
        problems: Vec<String>,
    },
    /// A network configuration is malformed or unsupported.
    #[error("invalid CNI network configuration {source_name}: {reason}")]
    InvalidConfig { source_name: String, reason: String },
    /// A plugin binary is in none of the bin dirs.
    #[error("CNI plugin {plugin:?} of network {network:?} not found in {dirs}")]
    PluginNotFound {
        network: String,
        plugin: String,
        dirs: String,
    },
    /// The request itself is invalid (bad container id, interface name, ...).
    #[error("invalid CNI attachment for container {container_id:?}: {reason}")]
    InvalidAttachment {
        container_id: String,
        reason: String,
    },
    /// CHECK was asked for an attachment that has no cached ADD result.
    #[error("container {container_id:?} ({ifname}) has no cached CNI ADD result: not attached")]
    NotAttached {
        container_id: String,
        ifname: String,
    },
    /// ADD was asked for an attachment that exists (or whose earlier ADD was
    /// interrupted): it must be deleted first.
    #[error("container {container_id:?} ({ifname}) is already attached (cache entry {}): DEL it first", cache_entry.display())]
    AlreadyAttached {
        container_id: String,
        ifname: String,
        cache_entry: PathBuf,
    },
    /// The plugin ran and reported a failure.
    #[error("CNI plugin {call} failed: {failure}")]
    Plugin {
        call: Box<PluginCall>,
        failure: Box<PluginFailure>,
    },
    /// The plugin did not finish within the timeout; it was killed.
    #[error("CNI plugin {call} timed out after {timeout:?} and was killed")]
    Timeout {
        call: Box<PluginCall>,
        timeout: Duration,
    },
    /// The plugin succeeded but its result cannot be used.
    #[error("CNI plugin {call} returned a bad result: {reason}")]
    BadResult {
        call: Box<PluginCall>,
        reason: String,
    },
    /// Running the plugin binary failed.
    #[error("run CNI plugin {}: {source}", path.display())]
    Exec {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file (cache entry, configuration) could not be read or written.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// ADD failed, and the DEL that should have undone it failed too.
    #[error("{error}; undoing the ADD failed too: {cleanup}")]
    AddRollback {
        error: Box<Error>,
        cleanup: Box<Error>,
    },
    /// A blocking helper task could not be joined.
    #[error("CNI background task failed: {0}")]
    Task(String),
}

/// Which plugin call an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCall {
    pub network: String,
    /// The plugin type (binary name).
    pub plugin: String,
    pub command: Command,
    /// Empty for STATUS.
    pub container_id: String,
}

impl fmt::Display for PluginCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} (network {:?}",
            self.plugin, self.command, self.network
        )?;
        if !self.container_id.is_empty() {
            write!(f, ", container {:?}", self.container_id)?;
        }
        f.write_str(")")
    }
}

/// What a failed plugin reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginFailure {
    /// The CNI error code, when the plugin printed a CNI error object.
    pub code: Option<u64>,
    /// The error's `msg`, or the plugin's output when it printed no CNI error.
    pub msg: String,
    /// The error's `details`.
    pub details: String,
    /// The plugin's stderr (logs), possibly empty.
    pub stderr: String,
    /// The exit status, e.g. "exit status: 1".
    pub status: String,
}

impl fmt::Display for PluginFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)?;
        if !self.details.is_empty() {
            write!(f, ": {}", self.details)?;
        }
        if let Some(code) = self.code {
            write!(f, " (code {code})")?;
        }
        write!(f, " [{}]", self.status)
    }
}

fn problems_suffix(problems: &[String]) -> String {
    if problems.is_empty() {
        String::new()
    } else {
        format!(" (skipped: {})", problems.join("; "))
    }
}

pub(crate) fn io_err(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.into(),
        source,
    }
}
