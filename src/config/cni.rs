//! The `[cni]` section: where the network configuration and plugins are, and
//! berth's own default network.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the CNI network configuration and plugins are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CniConfig {
    /// Directory of `.conflist` / `.conf` / `.json` network configurations.
    pub conf_dir: PathBuf,
    /// Directories searched for plugin binaries, in order.
    pub bin_dirs: Vec<PathBuf>,
    /// The network to use, by name; empty: the first file in lexical order.
    pub network_name: String,
    /// Time limit of one plugin call, in seconds.
    pub timeout_secs: u64,
    /// Write berth's own network into `conf_dir` when it holds none.
    pub write_default_network: bool,
    /// Subnet of berth's default network (no masquerade, no route out).
    pub default_subnet: String,
    /// Bridge of berth's default network.
    pub default_bridge: String,
    /// Let portmap SNAT hostPort traffic from the node itself (127.0.0.1 and
    /// hairpin), so a hostPort answers on 127.0.0.1. Pod traffic to the
    /// outside is never masqueraded.
    pub hostport_snat: bool,
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            conf_dir: PathBuf::from("/etc/cni/net.d"),
            bin_dirs: vec![PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")],
            network_name: String::new(),
            timeout_secs: 60,
            write_default_network: true,
            default_subnet: "10.88.0.0/16".into(),
            default_bridge: "berth0".into(),
            hostport_snat: true,
        }
    }
}
