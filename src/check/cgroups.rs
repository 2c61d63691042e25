//! The cgroup hierarchy, its controllers and the cgroup driver.

use std::path::Path;

use berth_host::{cgroup_mode, enabled_v1_controllers, CgroupMode};

use crate::config::{CgroupDriver, Config};

use super::{item, Host, Item, Status};

pub(super) fn check_cgroups(config: &Config, host: &dyn Host) -> Vec<Item> {
    let mut items = Vec::new();
    let mountinfo = host
        .read(Path::new("/proc/self/mountinfo"))
        .unwrap_or_default();
    let mode = cgroup_mode(&mountinfo);
    let (mode_text, required, available): (&str, &[&str], Vec<String>) = match mode {
        CgroupMode::V2 => (
            "v2 (unified)",
            &["cpu", "memory", "pids"],
            host.read(Path::new("/sys/fs/cgroup/cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        ),
        CgroupMode::V1 | CgroupMode::Hybrid => (
            if mode == CgroupMode::V1 {
                "v1"
            } else {
                "v1 (hybrid: v2 mounted beside, not used for containers)"
            },
            &["cpu", "cpuacct", "memory", "pids", "devices"],
            enabled_v1_controllers(&host.read(Path::new("/proc/cgroups")).unwrap_or_default()),
        ),
        CgroupMode::None => {
            items.push(
                item(
                    Status::Missing,
                    "cgroups",
                    "no cgroup filesystem is mounted",
                )
                .fix("mount cgroup2 on /sys/fs/cgroup (or boot with systemd, which does)"),
            );
            return items;
        }
    };
    items.push(item(Status::Ok, "cgroup mode", mode_text));
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|c| !available.iter().any(|a| a == c))
        .collect();
    if missing.is_empty() {
        items.push(item(Status::Ok, "cgroup controllers", available.join(" ")));
    } else {
        items.push(
            item(
                Status::Missing,
                "cgroup controllers",
                format!("{} not enabled (have: {})", missing.join(", "), available.join(" ")),
            )
            .fix("enable them on the kernel command line (e.g. cgroup_enable=memory) or, on v2, in cgroup.subtree_control"),
        );
    }
    items.push(check_driver(config, host));
    items
}

/// The line for the configured cgroup driver: systemd needs systemd as init.
fn check_driver(config: &Config, host: &dyn Host) -> Item {
    let systemd = host.is_dir(Path::new("/run/systemd/system"));
    match config.runtime.cgroup_driver {
        CgroupDriver::Systemd if systemd => {
            item(Status::Ok, "cgroup driver", "systemd (systemd is init)")
        }
        CgroupDriver::Systemd => item(
            Status::Missing,
            "cgroup driver",
            "systemd chosen, but systemd is not init here (no /run/systemd/system)",
        )
        .fix("set runtime.cgroup_driver = \"cgroupfs\" (and kubelet's cgroupDriver to match)"),
        CgroupDriver::Cgroupfs => item(
            Status::Info,
            "cgroup driver",
            if systemd {
                "cgroupfs; systemd is init: kubeadm's default is the systemd driver, and kubelet's cgroupDriver must match berth's"
            } else {
                "cgroupfs (systemd is not init; kubelet's cgroupDriver must be cgroupfs too)"
            },
        ),
    }
}
