//! The result of an ADD, parsed from any supported spec version (0.3.0 to
//! 1.1.0) into one type. The raw JSON is kept elsewhere (the cache), because
//! `prevResult` must be passed to plugins exactly as the previous one wrote it.
//!
//! Differences handled: 0.3.0 plugins may write `ip` for `ips`; 0.3.x/0.4.0 IP
//! entries carry a `version` field (ignored: the address tells); 1.1.0 adds
//! route `mtu`/`advmss`/`priority`/`table`/`scope` and interface
//! `mtu`/`socketPath`/`pciID`.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::version::SpecVersion;

/// An interface created by the attachment (on the host or in the sandbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    /// The namespace path for interfaces in the sandbox; None on the host.
    pub sandbox: Option<String>,
    pub mtu: Option<u32>,
    pub socket_path: Option<String>,
    pub pci_id: Option<String>,
}

/// An address assigned by the attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// The address with its prefix length, e.g. 10.88.0.5/16.
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
    /// Index into [`CniResult::interfaces`].
    pub interface: Option<usize>,
}

/// A route created by the attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u32>,
}

/// DNS settings the network suggests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

/// The final result of an ADD, in one shape whatever the spec version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResult {
    /// The version the result was written in.
    pub cni_version: SpecVersion,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireResult {
    cni_version: Option<String>,
    #[serde(default)]
    interfaces: Vec<WireInterface>,
    #[serde(default, alias = "ip")]
    ips: Vec<WireIp>,
    #[serde(default)]
    routes: Vec<WireRoute>,
    #[serde(default)]
    dns: Option<WireDns>,
    // Pre-0.3.0 results: recognized only to be refused with a clear message.
    ip4: Option<Value>,
    ip6: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireInterface {
    name: String,
    mac: Option<String>,
    sandbox: Option<String>,
    mtu: Option<u32>,
    socket_path: Option<String>,
    #[serde(rename = "pciID")]
    pci_id: Option<String>,
}

#[derive(Deserialize)]
struct WireIp {
    address: String,
    gateway: Option<String>,
    interface: Option<i64>,
}

#[derive(Deserialize)]
struct WireRoute {
    dst: String,
    gw: Option<String>,
    mtu: Option<u32>,
    advmss: Option<u32>,
    priority: Option<u32>,
    table: Option<u32>,
    scope: Option<u32>,
}

#[derive(Deserialize, Default)]
struct WireDns {
    #[serde(default)]
    nameservers: Option<Vec<String>>,
    domain: Option<String>,
    #[serde(default)]
    search: Option<Vec<String>>,
    #[serde(default)]
    options: Option<Vec<String>>,
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn parse_ip(what: &str, s: Option<String>) -> Result<Option<IpAddr>, String> {
    match non_empty(s) {
        None => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{what} {s:?} is not an IP address")),
    }
}

fn parse_net(what: &str, s: &str) -> Result<IpNet, String> {
    s.parse()
        .map_err(|_| format!("{what} {s:?} is not an address in CIDR notation"))
}

impl CniResult {
    /// Parses a plugin's result. `version` is the network's version, used
    /// when the result does not say its own.
    pub fn parse(value: &Value, version: SpecVersion) -> Result<CniResult, String> {
        let wire: WireResult =
            serde_json::from_value(value.clone()).map_err(|e| format!("not a CNI result: {e}"))?;
        let cni_version = match wire.cni_version.as_deref() {
            None | Some("") => version,
            Some(v) => v.parse().map_err(|e| format!("result: {e}"))?,
        };
        if wire.ip4.is_some() || wire.ip6.is_some() {
            return Err("pre-0.3.0 result (ip4/ip6) is not supported".into());
        }
        let interfaces: Vec<Interface> = wire
            .interfaces
            .into_iter()
            .map(|i| Interface {
                name: i.name,
                mac: non_empty(i.mac),
                sandbox: non_empty(i.sandbox),
                mtu: i.mtu.filter(|m| *m != 0),
                socket_path: non_empty(i.socket_path),
                pci_id: non_empty(i.pci_id),
            })
            .collect();
        let ips = wire
            .ips
            .into_iter()
            .map(|ip| {
                let interface = match ip.interface {
                    None => None,
                    Some(i) if i >= 0 && (i as usize) < interfaces.len() => Some(i as usize),
                    Some(i) => {
                        return Err(format!(
                            "ip {} refers to interface {i}, which does not exist",
                            ip.address
                        ))
                    }
                };
                Ok(IpConfig {
                    address: parse_net("ip address", &ip.address)?,
                    gateway: parse_ip("gateway", ip.gateway)?,
                    interface,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let routes = wire
            .routes
            .into_iter()
            .map(|r| {
                Ok(Route {
                    dst: parse_net("route dst", &r.dst)?,
                    gw: parse_ip("route gw", r.gw)?,
                    mtu: r.mtu,
                    advmss: r.advmss,
                    priority: r.priority,
                    table: r.table,
                    scope: r.scope,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let dns = wire.dns.unwrap_or_default();
        Ok(CniResult {
            cni_version,
            interfaces,
            ips,
            routes,
            dns: Dns {
                nameservers: dns.nameservers.unwrap_or_default(),
                domain: non_empty(dns.domain),
                search: dns.search.unwrap_or_default(),
                options: dns.options.unwrap_or_default(),
            },
        })
    }

    /// The addresses of the pod: those on the sandbox interface `ifname` (or
    /// on no interface in particular), IPv4 first, in result order otherwise.
    pub fn sandbox_ips(&self, ifname: &str) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = self
            .ips
            .iter()
            .filter(
                |ip| match ip.interface.and_then(|i| self.interfaces.get(i)) {
                    Some(iface) => iface.sandbox.is_some() && iface.name == ifname,
                    None => true,
                },
            )
            .map(|ip| ip.address.addr())
            .collect();
        ips.sort_by_key(|ip| ip.is_ipv6());
        ips
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_0_3_1_with_versions_and_index() {
        let r = CniResult::parse(
            &json!({
                "cniVersion": "0.3.1",
                "interfaces": [
                    {"name": "cni0", "mac": "aa:bb:cc:dd:ee:ff"},
                    {"name": "veth1", "mac": "aa:bb:cc:dd:ee:01"},
                    {"name": "eth0", "mac": "aa:bb:cc:dd:ee:02", "sandbox": "/run/netns/x"}
                ],
                "ips": [
                    {"version": "6", "address": "fd00::5/64", "gateway": "fd00::1", "interface": 2},
                    {"version": "4", "address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 2}
                ],
                "dns": {}
            }),
            SpecVersion::V0_3_1,
        )
        .unwrap();
        assert_eq!(r.cni_version, SpecVersion::V0_3_1);
        assert_eq!(r.interfaces.len(), 3);
        assert_eq!(r.interfaces[0].sandbox, None);
        assert_eq!(r.ips[1].address.to_string(), "10.88.0.5/16");
        assert_eq!(r.ips[1].gateway, Some("10.88.0.1".parse().unwrap()));
        assert_eq!(r.ips[1].interface, Some(2));
        assert_eq!(
            r.sandbox_ips("eth0"),
            vec![
                "10.88.0.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
        assert!(r.sandbox_ips("eth1").is_empty());
    }

    #[test]
    fn parses_0_3_0_ip_alias_and_0_4_0() {
        let r = CniResult::parse(
            &json!({"cniVersion": "0.3.0", "ip": [{"version": "4", "address": "10.1.0.2/24"}]}),
            SpecVersion::V0_3_0,
        )
        .unwrap();
        assert_eq!(r.ips.len(), 1);
        assert_eq!(r.ips[0].interface, None);
        let r = CniResult::parse(
            &json!({
                "cniVersion": "0.4.0",
                "ips": [{"version": "4", "address": "10.1.0.2/24", "gateway": ""}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}],
                "dns": {"nameservers": ["10.1.0.1"], "domain": "local", "search": ["a"], "options": ["ndots:1"]}
            }),
            SpecVersion::V0_4_0,
        )
        .unwrap();
        assert_eq!(r.cni_version, SpecVersion::V0_4_0);
        assert_eq!(r.ips[0].gateway, None);
        assert_eq!(r.routes[0].gw, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(r.dns.nameservers, ["10.1.0.1"]);
        assert_eq!(r.dns.domain.as_deref(), Some("local"));
    }

    #[test]
    fn parses_1_0_0_and_1_1_0() {
        let r = CniResult::parse(
            &json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": "/n"}],
                "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1", "interface": 0}],
                "routes": [{"dst": "10.2.0.0/16"}]
            }),
            SpecVersion::V1_0_0,
        )
        .unwrap();
        assert_eq!(r.routes[0].gw, None);
        assert_eq!(
            r.sandbox_ips("eth0"),
            ["10.1.0.2".parse::<IpAddr>().unwrap()]
        );
        let r = CniResult::parse(
            &json!({
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0", "sandbox": "/n", "mtu": 1400, "socketPath": "/s", "pciID": "0000:00:01.0"}],
                "ips": [{"address": "10.1.0.2/24", "interface": 0}],
                "routes": [{"dst": "10.2.0.0/16", "mtu": 1300, "advmss": 1200, "priority": 5, "table": 100, "scope": 253}]
            }),
            SpecVersion::V1_1_0,
        )
        .unwrap();
        assert_eq!(r.interfaces[0].mtu, Some(1400));
        assert_eq!(r.interfaces[0].pci_id.as_deref(), Some("0000:00:01.0"));
        assert_eq!(r.routes[0].table, Some(100));
        assert_eq!(r.routes[0].scope, Some(253));
        // Without its own version, the network's is assumed.
        let r = CniResult::parse(&json!({"ips": []}), SpecVersion::V1_0_0).unwrap();
        assert_eq!(r.cni_version, SpecVersion::V1_0_0);
    }

    #[test]
    fn bad_results_are_refused() {
        let cases = [
            json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.2/24"}}),
            json!({"cniVersion": "1.0.0", "ip4": {"ip": "10.1.0.2/24"}}),
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2"}]}),
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24", "interface": 3}]}),
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24", "gateway": "x"}]}),
            json!({"cniVersion": "1.0.0", "routes": [{"dst": "nope"}]}),
            json!("text"),
        ];
        for case in cases {
            assert!(
                CniResult::parse(&case, SpecVersion::V1_0_0).is_err(),
                "{case}"
            );
        }
    }
}
