//! What a pod is, worked out once at RunPodSandbox from its config and kept
//! in the sandbox record: CreateContainer, recovery, stats and streaming read
//! these facts and never take the raw pod config apart again.

use cri_api::v1;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The cgroup parent of pods that name none (cgroupfs driver).
pub const DEFAULT_CGROUP_PARENT: &str = "/berth";

/// Facts about a pod, fixed at creation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFacts {
    /// The pod uses the node's network (and UTS) namespace.
    pub host_network: bool,
    pub host_ipc: bool,
    pub host_pid: bool,
    /// The cgroup parent, as kubelet sent it or the default.
    pub cgroup_parent: String,
    /// The pod's hostname (kubelet's, or the node's for host network).
    pub hostname: String,
    /// The pod's own user namespace (`userns_options` mode POD), checked;
    /// `None`: the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<berth_spec::UserNamespace>,
    /// The pod runs without a pause process: its UTS and IPC namespaces
    /// are pinned on files (see [`crate::layout::Layout::pod_ns`]). Records
    /// from before had a pause.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// The pod is privileged (`security_context.privileged`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
}

impl PodFacts {
    /// The facts of a pod config, checked. `node_hostname` is used for
    /// host-network pods.
    pub fn of(
        config: &v1::PodSandboxConfig,
        node_hostname: impl FnOnce() -> String,
    ) -> Result<PodFacts, Error> {
        let ns = namespace_options(config);
        for (field, mode) in [("network", ns.network), ("pid", ns.pid), ("ipc", ns.ipc)] {
            match v1::NamespaceMode::try_from(mode) {
                Ok(v1::NamespaceMode::Pod) | Ok(v1::NamespaceMode::Node) => {}
                Ok(v1::NamespaceMode::Container) if field == "pid" => {}
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "pod namespace_options.{field} {mode} is not a mode a pod can have"
                    )))
                }
            }
        }
        check_port_mappings(&config.port_mappings)?;
        // The kernel's HOST_NAME_MAX; runc (or berth, pinning the UTS
        // namespace) would fail later, with a less clear error.
        const MAX: usize = berth_netns::pin::MAX_HOSTNAME;
        if config.hostname.len() > MAX || config.hostname.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "hostname {:?} is longer than {MAX} bytes or holds a NUL",
                config.hostname
            )));
        }
        bandwidth(&config.annotations)?;
        let name = config.metadata.as_ref().map_or("", |m| m.name.as_str());
        let userns = berth_spec::pod_user_namespace(name, config)?;
        let mut facts = PodFacts::derive(config);
        facts.userns = userns;
        if facts.host_network {
            facts.hostname = node_hostname();
        }
        Ok(facts)
    }

    /// The facts of a pod config, unchecked (records written before the
    /// facts were kept).
    pub fn derive(config: &v1::PodSandboxConfig) -> PodFacts {
        let ns = namespace_options(config);
        PodFacts {
            host_network: ns.network == v1::NamespaceMode::Node as i32,
            host_ipc: ns.ipc == v1::NamespaceMode::Node as i32,
            host_pid: ns.pid == v1::NamespaceMode::Node as i32,
            cgroup_parent: config
                .linux
                .as_ref()
                .map(|l| l.cgroup_parent.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_CGROUP_PARENT.to_string()),
            hostname: config.hostname.clone(),
            userns: berth_spec::pod_user_namespace("pod", config).ok().flatten(),
            pinned: false,
            privileged: config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .is_some_and(|s| s.privileged),
        }
    }

    /// Whether a process must hold one of the pod's namespaces: a PID
    /// namespace its containers share (mode POD), or its own user
    /// namespace (the pause joins it, and its netns is owned by it).
    pub fn needs_pause(&self, config: &v1::PodSandboxConfig) -> bool {
        let shared_pid = namespace_options(config).pid == v1::NamespaceMode::Pod as i32;
        shared_pid || self.userns.is_some()
    }

    /// What to pin for a pod without a pause: a UTS namespace with its
    /// hostname when it has its own network (host network means the host's
    /// UTS), an IPC namespace unless it uses the host's, and a read-write
    /// sysfs of its network namespace `netns` when it is privileged (what a
    /// privileged pause's `/sys` does in a pod with one).
    pub fn pins(&self, netns: Option<&std::path::Path>) -> berth_netns::pin::PinRequest {
        berth_netns::pin::PinRequest {
            uts_hostname: (!self.host_network).then(|| self.hostname.clone()),
            ipc: !self.host_ipc,
            sysfs_of: netns
                .filter(|_| self.privileged && !self.host_network)
                .map(Into::into),
        }
    }
}

/// The namespace options of a pod (defaults: pod-level namespaces).
pub fn namespace_options(config: &v1::PodSandboxConfig) -> v1::NamespaceOption {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// Pod annotations kubelet sets for traffic shaping.
pub const INGRESS_BANDWIDTH: &str = "kubernetes.io/ingress-bandwidth";
pub const EGRESS_BANDWIDTH: &str = "kubernetes.io/egress-bandwidth";

/// A Kubernetes quantity (`10M`, `1Gi`, `500k`, `1000000`) as an integer.
fn quantity(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let n: u64 = number.parse().ok()?;
    let scale: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// The pod's bandwidth limits (bits per second) from its annotations, as
/// the CNI `bandwidth` capability, like containerd: burst unbounded
/// (u32::MAX bytes). kubelet's range is 1k..=1P; anything else is refused.
pub fn bandwidth(
    annotations: &std::collections::HashMap<String, String>,
) -> Result<Option<berth_cni::Bandwidth>, Error> {
    let rate = |key: &str| -> Result<u64, Error> {
        let Some(text) = annotations.get(key) else {
            return Ok(0);
        };
        quantity(text)
            .filter(|v| (1_000..=1_000_000_000_000_000).contains(v))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "annotation {key} {text:?} is not a bandwidth between 1k and 1P bits per second"
                ))
            })
    };
    let (ingress, egress) = (rate(INGRESS_BANDWIDTH)?, rate(EGRESS_BANDWIDTH)?);
    if ingress == 0 && egress == 0 {
        return Ok(None);
    }
    let burst = |r: u64| if r == 0 { 0 } else { u64::from(u32::MAX) };
    Ok(Some(berth_cni::Bandwidth {
        ingress_rate: ingress,
        ingress_burst: burst(ingress),
        egress_rate: egress,
        egress_burst: burst(egress),
    }))
}

/// Ports are 16-bit: a larger number is refused, never truncated.
fn check_port_mappings(mappings: &[v1::PortMapping]) -> Result<(), Error> {
    for (n, p) in mappings.iter().enumerate() {
        for (field, port, min) in [
            ("host_port", p.host_port, 0),
            ("container_port", p.container_port, 1),
        ] {
            if !(min..=65535).contains(&port) {
                return Err(Error::InvalidArgument(format!(
                    "port_mappings[{n}].{field} {port} is out of range ({min}..=65535)"
                )));
            }
        }
    }
    Ok(())
}

/// Checks the pod's metadata and returns its sandbox name,
/// `<name>_<namespace>_<uid>_<attempt>`.
pub fn sandbox_name(config: &v1::PodSandboxConfig) -> Result<String, Error> {
    let md = config
        .metadata
        .as_ref()
        .ok_or_else(|| Error::InvalidArgument("pod sandbox config has no metadata".into()))?;
    for (field, value) in [
        ("name", &md.name),
        ("namespace", &md.namespace),
        ("uid", &md.uid),
    ] {
        if value.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "pod sandbox metadata.{field} is empty"
            )));
        }
        if value.contains('_') && field != "uid" || value.contains('/') {
            return Err(Error::InvalidArgument(format!(
                "pod sandbox metadata.{field} {value:?} contains a character that is not allowed"
            )));
        }
    }
    Ok(format!(
        "{}_{}_{}_{}",
        md.name, md.namespace, md.uid, md.attempt
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: v1::NamespaceOption) -> v1::PodSandboxConfig {
        v1::PodSandboxConfig {
            hostname: "web-0".into(),
            linux: Some(v1::LinuxPodSandboxConfig {
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn facts_of_a_host_network_pod() {
        let config = pod(v1::NamespaceOption {
            network: v1::NamespaceMode::Node as i32,
            ipc: v1::NamespaceMode::Node as i32,
            ..Default::default()
        });
        let facts = PodFacts::of(&config, || "node-1".into()).unwrap();
        assert!(facts.host_network && facts.host_ipc && !facts.host_pid);
        assert_eq!(facts.hostname, "node-1");
        assert_eq!(facts.cgroup_parent, DEFAULT_CGROUP_PARENT);
        let facts = PodFacts::of(&pod(Default::default()), || unreachable!()).unwrap();
        assert_eq!(facts.hostname, "web-0");
    }

    #[test]
    fn out_of_range_ports_and_modes_are_refused() {
        let mut config = pod(Default::default());
        config.port_mappings.push(v1::PortMapping {
            host_port: 70000,
            container_port: 80,
            ..Default::default()
        });
        let e = PodFacts::of(&config, String::new).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.to_string().contains("port_mappings[0].host_port 70000"),
            "{e}"
        );
        let config = pod(v1::NamespaceOption {
            network: v1::NamespaceMode::Target as i32,
            ..Default::default()
        });
        assert!(PodFacts::of(&config, String::new).is_err());
    }

    #[test]
    fn bandwidth_annotations() {
        let ann = |i: &str, e: &str| {
            let mut m = std::collections::HashMap::new();
            if !i.is_empty() {
                m.insert(INGRESS_BANDWIDTH.to_string(), i.to_string());
            }
            if !e.is_empty() {
                m.insert(EGRESS_BANDWIDTH.to_string(), e.to_string());
            }
            m
        };
        assert!(bandwidth(&ann("", "")).unwrap().is_none());
        let b = bandwidth(&ann("10M", "1Gi")).unwrap().unwrap();
        assert_eq!((b.ingress_rate, b.egress_rate), (10_000_000, 1 << 30));
        assert_eq!(b.ingress_burst, u64::from(u32::MAX));
        let b = bandwidth(&ann("", "500k")).unwrap().unwrap();
        assert_eq!(
            (b.ingress_rate, b.ingress_burst, b.egress_rate),
            (0, 0, 500_000)
        );
        for bad in ["10X", "1", "2P", "-5M", "lots"] {
            assert!(bandwidth(&ann(bad, "")).is_err(), "{bad}");
        }
    }

    #[test]
    fn sandbox_names() {
        let mut config = v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u_1".into(),
                attempt: 2,
            }),
            ..Default::default()
        };
        assert_eq!(sandbox_name(&config).unwrap(), "web_default_u_1_2");
        config.metadata.as_mut().unwrap().name = "a/b".into();
        assert!(sandbox_name(&config).is_err());
    }
}
