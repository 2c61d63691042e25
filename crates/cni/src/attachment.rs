//! What the runtime asks for: one container (pod sandbox) attached to a network
//! through one interface, with the pod's identity (`CNI_ARGS`) and the
//! capability arguments (`runtimeConfig`) defined by the CNI conventions.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::is_valid_name;
use crate::error::Error;

/// The interface name pods get when the caller has no other preference.
pub const DEFAULT_IFNAME: &str = "eth0";

/// The pod a sandbox belongs to; becomes the `K8S_POD_*` entries of `CNI_ARGS`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodArgs {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The sandbox id (`K8S_POD_INFRA_CONTAINER_ID`).
    pub infra_container_id: String,
}

/// A host port mapping (`portMappings` capability, used by `portmap`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    #[serde(rename = "hostPort")]
    pub host_port: u16,
    #[serde(rename = "containerPort")]
    pub container_port: u16,
    /// "tcp", "udp" or "sctp" (lower case).
    pub protocol: String,
    /// Host address to bind, empty for all.
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// DNS settings for the pod (`dns` capability).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsCapability {
    #[serde(default)]
    pub servers: Vec<String>,
    #[serde(default)]
    pub searches: Vec<String>,
    #[serde(default)]
    pub options: Vec<String>,
}

/// Traffic shaping (`bandwidth` capability): rates in bits per second, bursts in bits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    pub ingress_rate: u64,
    pub ingress_burst: u64,
    pub egress_rate: u64,
    pub egress_burst: u64,
}

/// An IPAM range requested at runtime (`ipRanges` capability).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpRange {
    pub subnet: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub range_start: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub range_end: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
}

/// Capability arguments offered to the plugins. Each plugin receives, in its
/// `runtimeConfig`, only those it declares in its `capabilities`. Empty fields
/// are not offered at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityArgs {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_ranges: Vec<Vec<IpRange>>,
    /// Any other capability by its convention name (`mac`, `ips`, `cgroupPath`, ...).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl CapabilityArgs {
    /// The arguments by capability name, as JSON.
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // A struct of strings, numbers and maps always serializes to an object.
            _ => Map::new(),
        }
    }
}

/// One container attached to the network through one interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    /// `CNI_CONTAINERID`: the sandbox id.
    pub container_id: String,
    /// `CNI_NETNS`: the namespace path. For DEL it may be gone (or empty).
    pub netns: PathBuf,
    /// `CNI_IFNAME`, usually [`DEFAULT_IFNAME`].
    pub ifname: String,
    pub pod: PodArgs,
    pub capabilities: CapabilityArgs,
}

impl Attachment {
    /// An attachment on [`DEFAULT_IFNAME`] with no capability arguments.
    pub fn new(container_id: impl Into<String>, netns: impl Into<PathBuf>, pod: PodArgs) -> Self {
        Attachment {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: DEFAULT_IFNAME.into(),
            pod,
            capabilities: CapabilityArgs::default(),
        }
    }

    /// `CNI_ARGS`: `IgnoreUnknown=1` and the pod's identity.
    pub fn cni_args(&self) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            self.pod.namespace, self.pod.name, self.pod.infra_container_id, self.pod.uid
        )
    }

    /// Checks the container id, interface name and pod arguments against the
    /// spec's rules, so no plugin ever sees a malformed request.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |reason: String| Error::InvalidAttachment {
            container_id: self.container_id.clone(),
            reason,
        };
        if !is_valid_name(&self.container_id) {
            return Err(bad(
                "container id must be alphanumerics, '_', '.' or '-', starting alphanumeric".into(),
            ));
        }
        validate_ifname(&self.ifname)
            .map_err(|e| bad(format!("interface name {:?}: {e}", self.ifname)))?;
        for (key, value) in [
            ("namespace", &self.pod.namespace),
            ("name", &self.pod.name),
            ("uid", &self.pod.uid),
            ("infra container id", &self.pod.infra_container_id),
        ] {
            if value.contains([';', '\0']) {
                return Err(bad(format!("pod {key} {value:?} contains ';' or NUL")));
            }
        }
        let netns = &self.netns;
        if !netns.as_os_str().is_empty() && !netns.is_absolute() {
            return Err(bad(format!(
                "netns path {} is not absolute",
                netns.display()
            )));
        }
        Ok(())
    }
}

/// Linux interface names: 1 to 15 bytes, not `.`/`..`, no `/`, `:` or whitespace.
pub(crate) fn validate_ifname(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 15 {
        Err("must be 1 to 15 bytes long")
    } else if name == "." || name == ".." {
        Err("must not be '.' or '..'")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
    {
        Err("must not contain '/', ':' or whitespace")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> PodArgs {
        PodArgs {
            namespace: "default".into(),
            name: "web".into(),
            uid: "u-1".into(),
            infra_container_id: "abc".into(),
        }
    }

    #[test]
    fn cni_args_carry_the_pod() {
        let att = Attachment::new("abc", "/run/netns/x", pod());
        assert_eq!(
            att.cni_args(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1"
        );
        att.validate().unwrap();
    }

    #[test]
    fn bad_attachments_are_refused() {
        let mut cases = Vec::new();
        for id in ["", "-x", "a/b", "a+b"] {
            cases.push(Attachment::new(id, "/n", pod()));
        }
        for ifname in ["", ".", "a/b", "a:b", "a b", "0123456789abcdef"] {
            let mut a = Attachment::new("abc", "/n", pod());
            a.ifname = ifname.into();
            cases.push(a);
        }
        let mut a = Attachment::new("abc", "/n", pod());
        a.pod.name = "x;K8S_POD_UID=evil".into();
        cases.push(a);
        cases.push(Attachment::new("abc", "relative/netns", pod()));
        for a in cases {
            assert!(
                matches!(a.validate(), Err(Error::InvalidAttachment { .. })),
                "{a:?} accepted"
            );
        }
    }

    #[test]
    fn capability_args_use_convention_names() {
        let mut caps = CapabilityArgs {
            port_mappings: vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: "127.0.0.1".into(),
            }],
            dns: Some(DnsCapability {
                servers: vec!["10.0.0.10".into()],
                searches: vec!["svc.local".into()],
                options: vec!["ndots:5".into()],
            }),
            bandwidth: Some(Bandwidth {
                ingress_rate: 1000,
                ingress_burst: 2000,
                egress_rate: 3000,
                egress_burst: 4000,
            }),
            ip_ranges: vec![vec![IpRange {
                subnet: "10.1.0.0/24".into(),
                ..Default::default()
            }]],
            other: Map::new(),
        };
        caps.other.insert("mac".into(), json!("c2:11:22:33:44:55"));
        assert_eq!(
            Value::Object(caps.to_map()),
            json!({
                "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "127.0.0.1"}],
                "dns": {"servers": ["10.0.0.10"], "searches": ["svc.local"], "options": ["ndots:5"]},
                "bandwidth": {"ingressRate": 1000, "ingressBurst": 2000, "egressRate": 3000, "egressBurst": 4000},
                "ipRanges": [[{"subnet": "10.1.0.0/24"}]],
                "mac": "c2:11:22:33:44:55"
            })
        );
        assert!(CapabilityArgs::default().to_map().is_empty());
    }
}
