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
        let mut facts = PodFacts::derive(config);
        // A host-network pod has the node's UTS namespace: a hostname of its
        // own could not be set (runc refuses it, so containerd does).
        if facts.host_network && !config.hostname.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "hostname {:?} is set for a pod with namespace_options.network NODE, \
                 which has the node's hostname (leave hostname empty)",
                config.hostname
            )));
        }
        let name = config.metadata.as_ref().map_or("", |m| m.name.as_str());
        facts.userns = berth_spec::pod_user_namespace(name, config)?;
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

/// The longest metadata name, namespace or uid accepted: Kubernetes'
/// longest name (a DNS subdomain).
pub const MAX_NAME: usize = 253;

/// Checks a metadata field that becomes part of a derived name: refused
/// when empty, holding `/` or NUL, `.` or `..`, or over [`MAX_NAME`] bytes.
fn check_name_field(what: &str, value: &str) -> Result<(), Error> {
    let bad = |why: &str| Err(Error::InvalidArgument(format!("{what} {value:?} {why}")));
    if value.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} is empty")));
    }
    if value.contains(['/', '\0']) {
        return bad("holds '/' or NUL");
    }
    if value == "." || value == ".." {
        return bad("is not a name");
    }
    if value.len() > MAX_NAME {
        return bad(&format!("is longer than {MAX_NAME} bytes"));
    }
    Ok(())
}

/// A checked name with each `_` written as `/` (which no checked name
/// holds): one-to-one, no `_` left to be taken for the separator of a
/// derived name, and names without `_` are unchanged.
fn escaped(value: &str) -> String {
    value.replace('_', "/")
}

/// Checks the pod's metadata and returns its sandbox name,
/// `<name>_<namespace>_<uid>_<attempt>` with `_` of the name and namespace
/// escaped ([`escaped`]); the uid, between them and the attempt, may keep
/// its own. Two different metadata never make the same name.
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
        check_name_field(&format!("pod sandbox metadata.{field}"), value)?;
    }
    Ok(format!(
        "{}_{}_{}_{}",
        escaped(&md.name),
        escaped(&md.namespace),
        md.uid,
        md.attempt
    ))
}

/// Checks a container's metadata name (as [`check_name_field`]).
pub fn check_container_metadata(md: &v1::ContainerMetadata) -> Result<(), Error> {
    check_name_field("container metadata.name", &md.name)
}

/// Checks a container's metadata and returns its name in pod `pod`,
/// `<name>_<pod name>_<pod namespace>_<pod uid>_<attempt>`, escaped as
/// [`sandbox_name`]: unique for each container metadata and pod metadata.
pub fn container_name(
    md: &v1::ContainerMetadata,
    pod: &v1::PodSandboxMetadata,
) -> Result<String, Error> {
    check_container_metadata(md)?;
    Ok(format!(
        "{}_{}_{}_{}_{}",
        escaped(&md.name),
        escaped(&pod.name),
        escaped(&pod.namespace),
        pod.uid,
        md.attempt
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
        let e = PodFacts::of(&config, || "node-1".into()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.to_string().contains("hostname \"web-0\""), "{e}");
        let config = v1::PodSandboxConfig {
            hostname: String::new(),
            ..config
        };
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
        let pod = |name: &str, namespace: &str, uid: &str, attempt| v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.into(),
                namespace: namespace.into(),
                uid: uid.into(),
                attempt,
            }),
            ..Default::default()
        };
        let name = |n, ns, uid, a| sandbox_name(&pod(n, ns, uid, a)).unwrap();
        assert_eq!(name("web", "default", "u_1", 2), "web_default_u_1_2");
        assert_eq!(name("a_b", "c", "u", 0), "a/b_c_u_0");
        // Joined with `_` as they are, each pair would make one name.
        let pairs = [
            [("a_b", "c", "u", 0), ("a", "b_c", "u", 0)],
            [("a", "b_c", "u", 0), ("a", "b", "c_u", 0)],
            [("a_b", "c", "u", 0), ("a", "b", "c_u", 0)],
        ];
        for [x, y] in pairs {
            assert_ne!(name(x.0, x.1, x.2, x.3), name(y.0, y.1, y.2, y.3));
        }
        let long = "x".repeat(MAX_NAME + 1);
        for (n, ns, uid, field) in [
            ("a/b", "c", "u", "metadata.name"),
            ("a", "", "u", "metadata.namespace"),
            ("a", "..", "u", "metadata.namespace"),
            ("a", "b", "u\0", "metadata.uid"),
            (".", "b", "u", "metadata.name"),
            ("a", "b", &long, "metadata.uid"),
        ] {
            let e = sandbox_name(&pod(n, ns, uid, 0)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.to_string().contains(field), "{e}");
        }
        assert!(sandbox_name(&pod(&"x".repeat(MAX_NAME), "b", "u", 0)).is_ok());
    }

    #[test]
    fn container_names() {
        let pod = |name: &str, namespace: &str| v1::PodSandboxMetadata {
            name: name.into(),
            namespace: namespace.into(),
            uid: "u".into(),
            attempt: 0,
        };
        let c = |name: &str| v1::ContainerMetadata {
            name: name.into(),
            attempt: 1,
        };
        assert_eq!(
            container_name(&c("app"), &pod("web", "default")).unwrap(),
            "app_web_default_u_1"
        );
        assert_ne!(
            container_name(&c("a_b"), &pod("c", "d")).unwrap(),
            container_name(&c("a"), &pod("b_c", "d")).unwrap()
        );
        for bad in ["", "a/b", "..", "a\0"] {
            let e = container_name(&c(bad), &pod("web", "default")).unwrap_err();
            assert!(e.to_string().contains("container metadata.name"), "{e}");
        }
    }
}
