//! berth's own network, written when the configuration directory has none, so
//! a fresh machine runs pods with no CNI setup.
//!
//! The list is `bridge` (the node's end is the gateway, `isGateway`; no
//! `ipMasq`, no default gateway) with `host-local` IPAM on a private subnet
//! and no routes (pods reach their subnet only), then `portmap` for hostPort
//! mappings. Nothing is masqueraded and nothing routes pods to the outside.
//!
//! portmap's default `"snat": true` adds a `CNI-HOSTPORT-MASQ` chain to nat
//! POSTROUTING that masquerades hostPort traffic coming from 127.0.0.1 or from
//! the pod itself (hairpin) — only that: pods' own traffic is never
//! masqueraded. berth keeps that default ([`DefaultNetwork::hostport_snat`]),
//! so a hostPort answers on the node's 127.0.0.1 as kubelet users expect;
//! with it off, a hostPort is reachable only through the node's other
//! addresses (a packet from 127.0.0.1 cannot leave the host unmasqueraded).
//!
//! Loopback is not in the list: `berth-netns` brings `lo` up when it creates
//! the namespace, which is what the `loopback` plugin would do.

use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde_json::{json, Value};

use crate::attachment::validate_ifname;
use crate::cache::write_atomic;
use crate::config::{is_valid_name, ConfDirs};
use crate::error::Error;
use crate::version::SpecVersion;

/// The spec version of the default list: the highest that Debian 12's
/// containernetworking-plugins (1.1.1) speak.
pub const DEFAULT_NETWORK_VERSION: SpecVersion = SpecVersion::V1_0_0;

/// Parameters of berth's default network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultNetwork {
    /// Network name (also the host-local lease dir: /var/lib/cni/networks/<name>).
    pub name: String,
    /// The pod subnet; host bits are ignored.
    pub subnet: IpNet,
    /// The bridge's interface name.
    pub bridge: String,
    /// portmap's `snat`: masquerade hostPort traffic from 127.0.0.1 and
    /// hairpin traffic. Off by default (see the module docs).
    pub hostport_snat: bool,
}

impl DefaultNetwork {
    /// A default network with portmap's SNAT off.
    pub fn new(name: impl Into<String>, subnet: IpNet, bridge: impl Into<String>) -> Self {
        DefaultNetwork {
            name: name.into(),
            subnet,
            bridge: bridge.into(),
            hostport_snat: true,
        }
    }

    /// The file name the list is written to.
    pub fn file_name(&self) -> String {
        format!("10-{}.conflist", self.name)
    }

    /// The network configuration list, as JSON.
    pub fn to_conflist(&self) -> Result<Value, Error> {
        let invalid = |reason: String| Error::InvalidConfig {
            source_name: format!("default network {:?}", self.name),
            reason,
        };
        if !is_valid_name(&self.name) {
            return Err(invalid("invalid network name".into()));
        }
        validate_ifname(&self.bridge)
            .map_err(|e| invalid(format!("bridge name {:?}: {e}", self.bridge)))?;
        let max_prefix = if self.subnet.addr().is_ipv4() {
            30
        } else {
            126
        };
        if self.subnet.prefix_len() > max_prefix {
            return Err(invalid(format!(
                "subnet {} is too small for pods",
                self.subnet
            )));
        }
        Ok(json!({
            "cniVersion": DEFAULT_NETWORK_VERSION.as_str(),
            "name": self.name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": true,
                    "isDefaultGateway": false,
                    "ipMasq": false,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.subnet.trunc().to_string()}]],
                        "routes": []
                    }
                },
                {
                    "type": "portmap",
                    "capabilities": {"portMappings": true},
                    "snat": self.hostport_snat,
                    "masqAll": false
                }
            ]
        }))
    }
}

/// Writes `net` into `conf_dir` (atomically, as `10-<name>.conflist`) when the
/// directory holds no valid network configuration. Returns the file written,
/// or None when a configuration was already there (nothing is changed then).
/// Blocking.
pub fn write_default_network(
    conf_dir: &Path,
    net: &DefaultNetwork,
) -> Result<Option<PathBuf>, Error> {
    let conflist = net.to_conflist()?;
    match ConfDirs::new(vec![conf_dir.to_owned()]).select(None) {
        Ok(_) => return Ok(None),
        Err(Error::NoNetwork { .. }) => {}
        Err(e) => return Err(e),
    }
    let path = conf_dir.join(net.file_name());
    let mut bytes = serde_json::to_vec_pretty(&conflist).map_err(|e| Error::InvalidConfig {
        source_name: path.display().to_string(),
        reason: e.to_string(),
    })?;
    bytes.push(b'\n');
    write_atomic(conf_dir, &path, &bytes)?;
    tracing::info!(
        "wrote berth's default CNI network {:?} to {}",
        net.name,
        path.display()
    );
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NetworkConfigList;

    fn net() -> DefaultNetwork {
        DefaultNetwork::new("berth", "10.88.0.0/16".parse().unwrap(), "berth0")
    }

    #[test]
    fn conflist_has_no_masquerade_and_no_routes() {
        let v = net().to_conflist().unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["isDefaultGateway"], false);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["routes"], json!([]));
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.88.0.0/16");
        let portmap = &v["plugins"][1];
        assert_eq!(
            portmap["snat"], true,
            "hairpin SNAT on, as portmap defaults"
        );
        assert_eq!(portmap["capabilities"]["portMappings"], true);
        let list = NetworkConfigList::from_bytes(v.to_string().as_bytes(), None).unwrap();
        assert_eq!(list.cni_version, DEFAULT_NETWORK_VERSION);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut n = net();
        n.bridge = "a-much-too-long-bridge".into();
        assert!(n.to_conflist().is_err());
        let mut n = net();
        n.name = "bad name".into();
        assert!(n.to_conflist().is_err());
        let mut n = net();
        n.subnet = "10.1.1.1/32".parse().unwrap();
        assert!(n.to_conflist().is_err());
        let mut n = net();
        n.subnet = "10.88.7.9/16".parse().unwrap();
        assert_eq!(
            n.to_conflist().unwrap()["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.88.0.0/16"
        );
    }

    #[test]
    fn written_only_when_no_network_exists() {
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("net.d");
        // An invalid file does not count as a network.
        std::fs::create_dir_all(&conf_dir).unwrap();
        std::fs::write(conf_dir.join("00-broken.conf"), b"{").unwrap();
        let path = write_default_network(&conf_dir, &net()).unwrap().unwrap();
        assert_eq!(path, conf_dir.join("10-berth.conflist"));
        let list = NetworkConfigList::from_bytes(&std::fs::read(&path).unwrap(), None).unwrap();
        assert_eq!(list.name, "berth");
        let before = std::fs::read(&path).unwrap();
        let mut other = net();
        other.subnet = "10.99.0.0/16".parse().unwrap();
        assert_eq!(write_default_network(&conf_dir, &other).unwrap(), None);
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
}
