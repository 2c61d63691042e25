//! The CNI network berth will use and the plugins it names.

use std::collections::BTreeMap;

use crate::config::{CniConfig, Config};

use super::{item, Host, Item, Status};

pub(super) fn check_cni(config: &Config, host: &dyn Host) -> Vec<Item> {
    let cni = &config.cni;
    let mut items = Vec::new();
    let networks = read_networks(cni, host, &mut items);
    let chosen = if cni.network_name.is_empty() {
        networks.first()
    } else {
        networks.iter().find(|n| n.name == cni.network_name)
    };
    let plugins = check_network(cni, chosen, &mut items);
    items.extend(check_plugins(cni, host, plugins));
    items
}

/// The network configurations of `cni.conf_dir` that parse; a line in
/// `items` for each file that does not.
fn read_networks(
    cni: &CniConfig,
    host: &dyn Host,
    items: &mut Vec<Item>,
) -> Vec<berth_cni::NetworkConfigList> {
    let mut networks = Vec::new();
    for path in host.list_dir(&cni.conf_dir) {
        let is_config = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| berth_cni::CONFIG_EXTENSIONS.contains(&e));
        if !is_config {
            continue;
        }
        let Some(text) = host.read(&path) else {
            continue;
        };
        match berth_cni::NetworkConfigList::from_bytes(text.as_bytes(), Some(&path)) {
            Ok(net) => networks.push(net),
            Err(e) => items.push(
                item(Status::Warn, "cni config", format!("{e}"))
                    .fix("fix or remove the file: berth skips it"),
            ),
        }
    }
    networks
}

/// The line for the network berth will use (`chosen`, or its own default
/// one), pushed on `items`; the plugin types that network runs.
fn check_network(
    cni: &CniConfig,
    chosen: Option<&berth_cni::NetworkConfigList>,
    items: &mut Vec<Item>,
) -> Vec<String> {
    match chosen {
        Some(net) => {
            items.push(item(
                Status::Ok,
                "cni network",
                format!(
                    "{:?} from {}",
                    net.name,
                    net.source
                        .as_deref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                ),
            ));
            net.plugins
                .iter()
                .flat_map(|p| std::iter::once(p.plugin_type.clone()).chain(p.ipam_type.clone()))
                .collect()
        }
        None if !cni.network_name.is_empty() => {
            items.push(
                item(
                    Status::Missing,
                    "cni network",
                    format!(
                        "no network named {:?} in {}",
                        cni.network_name,
                        cni.conf_dir.display()
                    ),
                )
                .fix(
                    "write that network's .conflist into cni.conf_dir, or change cni.network_name",
                ),
            );
            Vec::new()
        }
        None if cni.write_default_network => {
            items.push(item(
                Status::Ok,
                "cni network",
                format!(
                    "none in {} yet: berth writes its default network ({}, bridge {}) at start",
                    cni.conf_dir.display(),
                    cni.default_subnet,
                    cni.default_bridge
                ),
            ));
            ["bridge", "host-local", "portmap"]
                .map(String::from)
                .to_vec()
        }
        None => {
            items.push(
                item(
                    Status::Missing,
                    "cni network",
                    format!("no network configuration in {}", cni.conf_dir.display()),
                )
                .fix("install your CNI's configuration, or set cni.write_default_network = true"),
            );
            Vec::new()
        }
    }
}

/// A line for each plugin type, found in `cni.bin_dirs` or not.
fn check_plugins(cni: &CniConfig, host: &dyn Host, plugins: Vec<String>) -> Vec<Item> {
    let mut items = Vec::new();
    let mut seen = BTreeMap::new();
    for plugin in plugins {
        if seen.insert(plugin.clone(), ()).is_some() {
            continue;
        }
        let found = cni
            .bin_dirs
            .iter()
            .map(|d| d.join(&plugin))
            .find(|p| host.is_executable(p));
        let dirs = cni
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        items.push(match found {
            Some(path) => item(
                Status::Ok,
                format!("cni plugin {plugin}"),
                path.display().to_string(),
            ),
            None => item(
                Status::Missing,
                format!("cni plugin {plugin}"),
                format!("not in {dirs}"),
            )
            .fix(
                "apt-get install containernetworking-plugins, or add its directory to cni.bin_dirs",
            ),
        });
    }
    items
}
