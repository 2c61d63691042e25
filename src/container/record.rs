//! What berth keeps about a container: metadata fixed at creation and a
//! status that changes, persisted together as one versioned record.

use std::path::PathBuf;
use std::sync::OnceLock;

use cri_api::v1;
use prost::Message;
use serde::{Deserialize, Serialize};

/// Fixed at creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerMeta {
    pub id: String,
    /// `<name>_<pod name>_<pod namespace>_<pod uid>_<attempt>`, escaped
    /// (`sandbox::facts::container_name`).
    pub name: String,
    pub sandbox_id: String,
    /// The CRI `ContainerConfig`, protobuf-encoded.
    #[serde(with = "crate::sandbox::record::base64_bytes")]
    pub config: Vec<u8>,
    /// The image as the client named it.
    pub image_name: String,
    /// The image id (`sha256:…`).
    pub image_id: String,
    /// The CRI log file, absolute; empty when the pod set no log directory.
    pub log_path: PathBuf,
    /// OCI runtime binary of the pod's handler.
    pub runtime: String,
    /// Image snapshots (chain ids) the rootfs is made of, top first: kept
    /// from garbage collection while the container exists, even once its
    /// image is removed.
    #[serde(default)]
    pub rootfs_snapshots: Vec<String>,
    /// Snapshots of its image volumes, kept the same way.
    #[serde(default)]
    pub volume_snapshots: Vec<String>,
    /// Signal that stops the container gracefully.
    pub stop_signal: i32,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// `config`, decoded on first use (list calls read it for every container).
    #[serde(skip)]
    pub decoded: OnceLock<v1::ContainerConfig>,
}

impl ContainerMeta {
    /// The decoded `ContainerConfig`.
    pub fn config(&self) -> &v1::ContainerConfig {
        self.decoded
            .get_or_init(|| v1::ContainerConfig::decode(self.config.as_slice()).unwrap_or_default())
    }
}

/// Life-cycle state of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    /// Being created, or its fate is not known.
    Unknown,
    Created,
    Running,
    Exited,
}

/// What changes over the container's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerStatus {
    pub state: ContainerState,
    pub pid: Option<u32>,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `StartError`…
    pub reason: String,
    pub message: String,
    /// Whether the rootfs overlay was mounted at create (it is unmounted
    /// once the container has exited and left the runtime, and at removal).
    pub rootfs_mounted: bool,
    /// The CRI `LinuxContainerResources` UpdateContainerResources applied
    /// last, protobuf-encoded; empty: those of the config.
    #[serde(default, with = "crate::sandbox::record::base64_bytes")]
    pub resources: Vec<u8>,
    /// The uid, gid and supplemental groups the process runs with, as the
    /// spec resolved them (image's /etc/group and the groups policy).
    #[serde(default)]
    pub user: Option<RunAs>,
}

/// Who a container's process is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl ContainerStatus {
    /// The resources the container runs with, as CRI names them.
    pub fn resources(&self, meta: &ContainerMeta) -> Option<v1::LinuxContainerResources> {
        if self.resources.is_empty() {
            meta.config()
                .linux
                .as_ref()
                .and_then(|l| l.resources.clone())
        } else {
            v1::LinuxContainerResources::decode(self.resources.as_slice()).ok()
        }
    }
}

impl Default for ContainerStatus {
    fn default() -> Self {
        ContainerStatus {
            state: ContainerState::Unknown,
            pid: None,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            rootfs_mounted: false,
            resources: Vec::new(),
            user: None,
        }
    }
}
