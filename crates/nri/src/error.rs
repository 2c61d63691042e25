//! Errors of the NRI runtime side. Each names the plugin and the event, so
//! that the daemon can turn a plugin's refusal into the CRI call's error.

use std::path::PathBuf;

use crate::merge::MergeError;

/// An NRI error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plugin answered an event with an error (it refuses the operation).
    #[error("NRI plugin {plugin} failed to handle {event}: {reason}")]
    Plugin {
        plugin: String,
        event: &'static str,
        reason: String,
    },
    /// The replies of the plugins could not be merged.
    #[error("NRI {event}: {source}")]
    Merge {
        event: &'static str,
        #[source]
        source: MergeError,
    },
    /// A validator (plugin or built-in) rejected the merged adjustment.
    #[error(
        "NRI validator {validator} rejected the adjustment of container {container}: {reason}"
    )]
    Rejected {
        validator: String,
        container: String,
        reason: String,
    },
    /// Setting up the NRI socket or plugin directory failed.
    #[error("NRI setup at {path}: {source}")]
    Setup {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// NRI was shut down.
    #[error("NRI is shut down")]
    Shutdown,
}
