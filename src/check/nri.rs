//! NRI: the socket plugins connect to and the pre-installed plugins.

use crate::config::Config;

use super::{item, Host, Item, Status};

pub(super) fn check_nri(config: &Config, host: &dyn Host) -> Vec<Item> {
    let nri = &config.nri;
    if !nri.enable {
        return vec![item(Status::Info, "nri", "disabled ([nri] enable = false)")];
    }
    let mut items = Vec::new();
    let socket = nri.socket_path.display();
    items.push(match nri.socket_path.parent() {
        _ if nri.disable_connections => item(
            Status::Info,
            "nri socket",
            format!("external plugins refused ([nri] disable_connections): no socket at {socket}"),
        ),
        _ if host.is_dir(&nri.socket_path) => item(
            Status::Missing,
            "nri socket",
            format!("{socket} is a directory: berth cannot listen there"),
        )
        .fix("remove it, or set [nri] socket_path"),
        Some(dir) if host.is_dir(dir) => item(
            Status::Ok,
            "nri socket",
            format!("plugins connect to {socket} (made when berth starts; another runtime's socket there is replaced)"),
        ),
        _ => item(
            Status::Ok,
            "nri socket",
            format!("plugins connect to {socket} (its directory is made, 0700, when berth starts)"),
        ),
    });
    let dir = &nri.plugin_path;
    if !host.is_dir(dir) {
        items.push(item(
            Status::Info,
            "nri plugins",
            format!(
                "no pre-installed plugins ({} does not exist)",
                dir.display()
            ),
        ));
        return items;
    }
    let (mut launched, mut skipped) = (Vec::new(), Vec::new());
    for path in host.list_dir(dir) {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let valid = name
            .split_once('-')
            .is_some_and(|(idx, n)| berth_nri::check_plugin_index(idx).is_ok() && !n.is_empty());
        match valid && host.is_executable(&path) {
            true => launched.push(name),
            false => skipped.push(name),
        }
    }
    items.push(item(
        Status::Ok,
        "nri plugins",
        format!(
            "{} pre-installed plugin(s) in {} launched at start: {}",
            launched.len(),
            dir.display(),
            launched.join(", ")
        ),
    ));
    if !skipped.is_empty() {
        items.push(
            item(
                Status::Warn,
                "nri plugins",
                format!(
                    "not launched (not an executable IDX-NAME): {}",
                    skipped.join(", ")
                ),
            )
            .fix("name plugins NN-name (two-digit index) and make them executable"),
        );
    }
    items
}
