//! The binaries berth runs: the OCI runtime of each handler and berth-shim.

use crate::config::Config;

use super::{item, Host, Item, Status};

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
        let Some(path) = host.resolve(&handler.binary) else {
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
            Ok(version) => match berth_host::runtime::refusal_of_version(host, &version) {
                // It runs, but not on this host's cgroups: no pod of this
                // handler would start (Status claims no feature for it).
                Some(reason) => items.push(
                    item(
                        absent,
                        label,
                        format!("{}: {version}{role}: {reason}", path.display()),
                    )
                    .fix(format!(
                        "use runc for runtime.handlers.{name}, or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"
                    )),
                ),
                None => items.push(item(
                    Status::Ok,
                    label,
                    format!("{}: {version}{role}", path.display()),
                )),
            },
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
        host.resolve(&config.runtime.shim_binary)
    } else {
        host.exe_dir()
            .map(|dir| dir.join("berth-shim"))
            .filter(|p| host.is_executable(p))
            .or_else(|| host.resolve("berth-shim"))
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
