//! `berth check`: the host's prerequisites, each reported as ok, missing
//! (required: the exit code is then non-zero), warn (optional, or degraded)
//! or info, with how to fix what is not there.
//!
//! Every look at the host goes through [`Host`], so the logic is unit-tested
//! against a fake host; [`RealHost`] is the machine berth runs on.
//!
//! The checks are grouped by what they look at (runtimes, cgroups, the
//! kernel, CNI), each in a module of its own; the report's lines and their
//! printing are in `report`, the real host in `host`.

mod cgroups;
mod cni;
mod host;
mod kernel;
mod nri;
mod report;
mod runtimes;

use std::path::{Path, PathBuf};

use crate::config::Config;

pub use host::RealHost;
pub use report::{config_item, passed, render, Item, Status};

use report::item;

/// What the unit tests name from here besides the public items.
#[cfg(test)]
use {
    crate::config::CgroupDriver,
    cgroups::{cgroup_mode, CgroupMode},
    host::run_version,
    kernel::kernel_version,
    std::time::Duration,
};

/// What the checks may ask of the host.
pub trait Host {
    /// The contents of a small file (`/proc`, `/sys`, CNI configs), or None.
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Whether `path` is a file with an execute bit.
    fn is_executable(&self, path: &Path) -> bool;
    /// The entries of a directory, sorted; empty when it cannot be read.
    fn list_dir(&self, path: &Path) -> Vec<PathBuf>;
    /// The directories of `PATH`.
    fn path_dirs(&self) -> Vec<PathBuf>;
    /// The first line of `binary --version`, or why it could not be had.
    fn version(&self, binary: &Path) -> Result<String, String>;
    /// The running kernel's release (`uname -r`).
    fn kernel_release(&self) -> String;
    /// The effective user id.
    fn euid(&self) -> u32;
    /// The directory of the running berth binary.
    fn exe_dir(&self) -> Option<PathBuf>;
}

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
