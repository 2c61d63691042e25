//! `berth check`: the host's prerequisites, each reported as ok, missing
//! (required: the exit code is then non-zero), warn (optional, or degraded)
//! or info, with how to fix what is not there.
//!
//! Every look at the host goes through [`berth_host::Host`] (what the Status
//! RPC and the spec builder ask too), so the logic is unit-tested against
//! its fake host.
//!
//! The checks are grouped by what they look at (runtimes, cgroups, the
//! kernel, CNI), each in a module of its own; the report's lines and their
//! printing are in `report`.

mod cgroups;
mod cni;
mod kernel;
mod nri;
mod report;
mod runtimes;

use crate::config::Config;

pub use berth_host::{Host, RealHost};
pub use report::{config_item, passed, render, Item, Status};

use report::item;

/// What the unit tests name from here besides the public items.
#[cfg(test)]
use crate::config::CgroupDriver;

/// Runs every check for `config` on `host`.
pub fn run(config: &Config, host: &dyn Host) -> Vec<Item> {
    let mut items = vec![check_root(host)];
    items.extend(runtimes::check_runtimes(config, host));
    items.push(runtimes::check_shim(config, host));
    items.extend(cgroups::check_cgroups(config, host));
    items.push(kernel::check_overlay(host));
    items.extend(cni::check_cni(config, host));
    items.extend(kernel::check_sysctls(host));
    items.push(kernel::check_idmapped_mounts(host));
    items.extend(kernel::check_security_modules(host));
    items.extend(nri::check_nri(config, host));
    items
}

fn check_root(host: &dyn Host) -> Item {
    match host.euid() {
        0 => item(Status::Ok, "root", "running as root"),
        uid => item(
            Status::Missing,
            "root",
            format!("running as uid {uid}: berth mounts, makes namespaces and cgroups"),
        )
        .fix("run berth (and berth check) as root"),
    }
}

#[cfg(test)]
mod tests;
