//! The cgroup hierarchies mounted here and their controllers.

use std::path::{Path, PathBuf};

/// Which cgroup hierarchies are mounted, from mountinfo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    V1,
    /// v1 hierarchies, and cgroup2 mounted somewhere other than
    /// `/sys/fs/cgroup` (not used for containers).
    Hybrid,
    V2,
    None,
}

/// The cgroup mode `mountinfo` shows.
pub fn cgroup_mode(mountinfo: &str) -> CgroupMode {
    let mut v1 = false;
    let mut v2_root = false;
    let mut v2_elsewhere = false;
    for mount in berth_mountinfo::mounts(mountinfo) {
        match mount.fs_type.as_str() {
            "cgroup" => v1 = true,
            "cgroup2" if mount.mount_point == Path::new("/sys/fs/cgroup") => v2_root = true,
            "cgroup2" => v2_elsewhere = true,
            _ => {}
        }
    }
    match (v1, v2_root, v2_elsewhere) {
        (_, true, _) => CgroupMode::V2,
        (true, _, true) => CgroupMode::Hybrid,
        (true, _, false) => CgroupMode::V1,
        _ => CgroupMode::None,
    }
}

/// The cgroup2 mount of a hybrid host (v1 hierarchies, and cgroup2
/// somewhere other than `/sys/fs/cgroup`).
pub fn hybrid_v2_mount(mountinfo: &str) -> Option<PathBuf> {
    let mounts: Vec<_> = berth_mountinfo::mounts(mountinfo).collect();
    let v1 = mounts.iter().any(|m| m.fs_type == "cgroup");
    let v2 = mounts.iter().find(|m| m.fs_type == "cgroup2")?;
    (v1 && v2.mount_point != Path::new("/sys/fs/cgroup")).then(|| v2.mount_point.clone())
}

/// The controllers `/proc/cgroups` lists as enabled.
pub fn enabled_v1_controllers(proc_cgroups: &str) -> Vec<String> {
    proc_cgroups
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.len() >= 4 && fields[3] == "1").then(|| fields[0].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "25 1 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
         26 25 0:24 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
         27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
    const V2: &str = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

    #[test]
    fn modes() {
        assert_eq!(cgroup_mode(HYBRID), CgroupMode::Hybrid);
        assert_eq!(cgroup_mode(V2), CgroupMode::V2);
        let v1 = "27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(cgroup_mode(v1), CgroupMode::V1);
        assert_eq!(cgroup_mode(""), CgroupMode::None);
        assert_eq!(
            hybrid_v2_mount(HYBRID).as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(hybrid_v2_mount(V2), None);
        assert_eq!(hybrid_v2_mount(v1), None);
    }

    #[test]
    fn enabled_controllers() {
        let proc_cgroups = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
             cpu\t3\t1\t1\nmemory\t4\t1\t0\npids\t6\t1\t1\nbad line\n";
        assert_eq!(enabled_v1_controllers(proc_cgroups), ["cpu", "pids"]);
    }
}
