//! The binaries berth runs: the OCI runtime of each handler and berth-shim.

use std::path::PathBuf;

use crate::config::Config;

use super::{item, Host, Item, Status};

/// A binary named by an absolute path, or looked up in `PATH`.
fn resolve(host: &dyn Host, binary: &str) -> Option<PathBuf> {
    if binary.contains('/') {
        let path = PathBuf::from(binary);
        return host.is_executable(&path).then_some(path);
    }
    host.path_dirs()
        .into_iter()
        .map(|dir| dir.join(binary))
        .find(|p| host.is_executable(p))
}

pub(super) fn check_runtimes(config: &Config, host: &dyn Host) -> Vec<Item> {
    let mut items = Vec::new();
    // The default handler first: it is the one every pod without a handler uses.
    let mut handlers: Vec<_> = config.runtime.handlers.iter().collect();
    handlers.sort_by_key(|(name, _)| **name != config.runtime.default_handler);
    for (name, handler) in handlers {
        let default = *name == config.runtime.default_handler;
        let role = if default { " (default handler)" } else { "" };
        let label = format!("runtime {name}");
        // A handler other than the default is only needed by pods that ask for it.
        let absent = if default {
            Status::Missing
        } else {
            Status::Warn
        };
        let install = format!(
            "install it (apt-get install {}) or set runtime.handlers.{name}.binary",
            handler.binary.rsplit('/').next().unwrap_or(&handler.binary)
        );
        let Some(path) = resolve(host, &handler.binary) else {
            items.push(
                item(
                    absent,
                    label,
                    format!("{:?} not found in PATH{role}", handler.binary),
                )
                .fix(install),
            );
            continue;
        };
        match host.version(&path) {
            Ok(version) => items.push(item(
                Status::Ok,
                label,
                format!("{}: {version}{role}", path.display()),
            )),
            Err(e) => items.push(
                item(
                    absent,
                    label,
                    format!("{} does not run: {e}{role}", path.display()),
                )
                .fix(install),
            ),
        }
    }
    items
}

pub(super) fn check_shim(config: &Config, host: &dyn Host) -> Item {
    // As the daemon looks for it: the configured path, else next to berth, else PATH.
    let found = if !config.runtime.shim_binary.is_empty() {
        resolve(host, &config.runtime.shim_binary)
    } else {
        host.exe_dir()
            .map(|dir| dir.join("berth-shim"))
            .filter(|p| host.is_executable(p))
            .or_else(|| resolve(host, "berth-shim"))
    };
    match found {
        Some(path) => item(Status::Ok, "berth-shim", path.display().to_string()),
        None => item(
            Status::Missing,
            "berth-shim",
            "not found next to berth nor in PATH",
        )
        .fix("install berth-shim beside berth (the package does), or set runtime.shim_binary"),
    }
}
