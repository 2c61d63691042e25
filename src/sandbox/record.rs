//! What berth keeps about a pod sandbox: metadata fixed at creation, and a
//! status that changes over the sandbox's life. Both are persisted together
//! as one versioned record.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use cri_api::v1;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::sandbox::facts::PodFacts;

/// Fixed at creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxMeta {
    pub id: String,
    /// `<name>_<namespace>_<uid>_<attempt>`, escaped (`facts::sandbox_name`),
    /// unique among live sandboxes.
    pub name: String,
    /// The CRI `PodSandboxConfig`, protobuf-encoded.
    #[serde(with = "base64_bytes")]
    pub config: Vec<u8>,
    /// The handler the pod runs on: the one asked for, or the default's
    /// name for an empty request.
    pub runtime_handler: String,
    /// The handler as RunPodSandbox asked for it (empty: the default), which
    /// the CRI reports. Absent in records written before berth kept it:
    /// those report `runtime_handler`, as they did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_handler: Option<String>,
    /// The pod's network namespace, absent for host-network pods.
    pub netns: Option<PathBuf>,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// What the pod is, worked out once at RunPodSandbox; absent in
    /// records written before berth kept it.
    #[serde(default)]
    pub facts: Option<PodFacts>,
    /// `config`, decoded on first use (list calls read it for every sandbox).
    #[serde(skip)]
    pub decoded: OnceLock<v1::PodSandboxConfig>,
    /// The facts derived from `config`, for records without `facts`.
    #[serde(skip)]
    pub derived: OnceLock<PodFacts>,
}

impl SandboxMeta {
    /// The decoded `PodSandboxConfig`.
    pub fn config(&self) -> &v1::PodSandboxConfig {
        self.decoded.get_or_init(|| {
            v1::PodSandboxConfig::decode(self.config.as_slice()).unwrap_or_default()
        })
    }

    /// The runtime handler as the CRI reports it: the one asked for.
    pub fn reported_handler(&self) -> &str {
        self.requested_handler
            .as_deref()
            .unwrap_or(&self.runtime_handler)
    }

    /// The pod's facts.
    pub fn facts(&self) -> &PodFacts {
        match &self.facts {
            Some(facts) => facts,
            None => self.derived.get_or_init(|| PodFacts::derive(self.config())),
        }
    }
}

/// Life-cycle state of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxState {
    /// Being created: berth died or failed before it became ready.
    Unknown,
    Ready,
    NotReady,
}

/// What changes over the sandbox's life.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxStatus {
    pub state: SandboxState,
    /// Pod IPs from CNI, primary first.
    pub ips: Vec<String>,
    /// Whether CNI ADD succeeded and DEL has not run yet.
    pub network_attached: bool,
    /// The pause process's pid while it runs.
    pub pid: Option<u32>,
    /// Where the pause's shim listens.
    pub shim_socket: Option<PathBuf>,
    /// Whether the /dev/shm tmpfs is mounted.
    pub shm_mounted: bool,
    /// Free-form notes shown in verbose status.
    pub info: BTreeMap<String, String>,
    /// The pod-level resources kubelet last applied
    /// (UpdatePodSandboxResources), absent until it sends them.
    #[serde(default)]
    pub resources: Option<PodResources>,
}

/// What UpdatePodSandboxResources told berth: kubelet has already set the
/// pod's cgroup; berth keeps it for status (and for NRI-like consumers),
/// as CRI-O does.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PodResources {
    /// The pod overhead, a protobuf-encoded `LinuxContainerResources`.
    #[serde(with = "base64_bytes")]
    pub overhead: Vec<u8>,
    /// The sum of the containers' resources, likewise.
    #[serde(with = "base64_bytes")]
    pub resources: Vec<u8>,
    /// Nanoseconds since the epoch.
    pub updated_at: i64,
}

impl PodResources {
    /// As JSON for verbose status, with kubelet's field names.
    pub fn to_json(&self) -> serde_json::Value {
        let json = |b: &[u8]| {
            let r = v1::LinuxContainerResources::decode(b).unwrap_or_default();
            serde_json::json!({
                "cpu_period": r.cpu_period,
                "cpu_quota": r.cpu_quota,
                "cpu_shares": r.cpu_shares,
                "memory_limit_in_bytes": r.memory_limit_in_bytes,
                "memory_swap_limit_in_bytes": r.memory_swap_limit_in_bytes,
                "oom_score_adj": r.oom_score_adj,
                "cpuset_cpus": r.cpuset_cpus,
                "cpuset_mems": r.cpuset_mems,
                "hugepage_limits": r.hugepage_limits.iter()
                    .map(|h| serde_json::json!({"page_size": h.page_size, "limit": h.limit}))
                    .collect::<Vec<_>>(),
                "unified": r.unified,
            })
        };
        serde_json::json!({
            "overhead": json(&self.overhead),
            "resources": json(&self.resources),
            "updatedAt": self.updated_at,
        })
    }
}

impl Default for SandboxStatus {
    fn default() -> Self {
        SandboxStatus {
            state: SandboxState::Unknown,
            ips: Vec::new(),
            network_attached: false,
            pid: None,
            shim_socket: None,
            shm_mounted: false,
            info: BTreeMap::new(),
            resources: None,
        }
    }
}

pub(crate) mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}
