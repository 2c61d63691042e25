//! The `[runtime]` section: the OCI runtime handlers, the cgroup driver, the
//! shim and CDI.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How containers are run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// The handler used when a pod names none.
    pub default_handler: String,
    /// The cgroup driver kubelet must match: `cgroupfs` or `systemd`.
    pub cgroup_driver: CgroupDriver,
    /// OCI runtime handlers by name (the pod's `runtime_handler`).
    pub handlers: BTreeMap<String, RuntimeHandler>,
    /// The berth-shim executable; empty: next to the berth binary, else in PATH.
    pub shim_binary: String,
    /// Keep one shim started ahead ("standby"), which the next container
    /// takes instead of starting its own: its start-up is off the
    /// container's path. `false`: every shim is started when needed.
    pub shim_standby: bool,
    /// On hosts with cgroup v1 hierarchies, start the kernel's wait for the
    /// runtime's first cgroup move (an RCU grace period) as soon as a call
    /// that will run the runtime arrives, beside berth's own work (see
    /// docs/architecture.md, *The cgroup lock warm-up*). `false`: the runtime waits for it
    /// itself, as under containerd and CRI-O.
    pub cgroup_warmup: bool,
    /// Where CDI device specs are, lowest priority first.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// Run pods without a pause process where none is needed (their UTS and
    /// IPC namespaces pinned on files, as CRI-O's `drop_infra_ctr`); a pod
    /// that shares one PID namespace, or has its own user namespace, keeps
    /// one. `false`: every pod gets a pause.
    pub drop_infra_ctr: bool,
}

/// One OCI runtime handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeHandler {
    /// The runtime binary: an absolute path, or a name looked up in `PATH`.
    pub binary: String,
    /// Pod annotations passed to the runtime in the pause's spec, as glob
    /// patterns (`io.katacontainers.*`); berth's own always are, no other.
    #[serde(default)]
    pub pod_annotations: Vec<String>,
    /// Container annotations passed to the runtime, as glob patterns
    /// (`run.oci.*` lets crun act on them); none by default.
    #[serde(default)]
    pub container_annotations: Vec<String>,
}

/// The cgroup driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let handlers = [("runc", "runc"), ("crun", "crun")]
            .into_iter()
            .map(|(name, binary)| {
                (
                    name.to_string(),
                    RuntimeHandler {
                        binary: binary.to_string(),
                        pod_annotations: Vec::new(),
                        container_annotations: Vec::new(),
                    },
                )
            })
            .collect();
        RuntimeConfig {
            default_handler: "runc".into(),
            cgroup_driver: CgroupDriver::Cgroupfs,
            handlers,
            shim_binary: String::new(),
            shim_standby: true,
            cgroup_warmup: true,
            cdi_spec_dirs: berth_spec::DEFAULT_CDI_SPEC_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
            drop_infra_ctr: true,
        }
    }
}

/// True when systemd is the init system (the test systemd itself uses).
pub fn systemd_is_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}
