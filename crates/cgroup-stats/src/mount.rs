//! Where the cgroup hierarchies are mounted (`/proc/self/mountinfo`), and
//! which cgroup mode the host runs.

use std::path::{Path, PathBuf};

use crate::Error;

/// The host's cgroup mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only v1 hierarchies, one per controller (or group of controllers).
    V1,
    /// v1 controllers plus a v2 hierarchy without (most) controllers,
    /// usually at `/sys/fs/cgroup/unified`.
    Hybrid,
    /// One v2 hierarchy holding every controller.
    V2,
}

/// One mounted hierarchy: the cgroup its mount shows (`root`) and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    /// The cgroup path the mount's root is (`/` unless a sub-tree was mounted).
    pub root: String,
    pub mountpoint: PathBuf,
}

impl Hierarchy {
    /// The directory of cgroup `path` (as `/proc/<pid>/cgroup` names it) in this hierarchy.
    pub fn dir_of(&self, path: &str) -> PathBuf {
        let rel = if self.root == "/" {
            path
        } else {
            path.strip_prefix(self.root.as_str()).unwrap_or(path)
        };
        let rel = rel.trim_start_matches('/');
        if rel.is_empty() {
            self.mountpoint.clone()
        } else {
            self.mountpoint.join(rel)
        }
    }
}

/// The cgroup hierarchies mounted on this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// v1 hierarchies with their controllers (named ones such as
    /// `name=systemd` are left out: they hold no resource counters).
    pub(crate) v1: Vec<(Vec<String>, Hierarchy)>,
    /// The v2 (unified) hierarchy.
    pub(crate) v2: Option<Hierarchy>,
}

const MOUNTINFO: &str = berth_mountinfo::SELF;

impl Mounts {
    /// The hierarchies mounted in this process's mount namespace.
    pub fn read() -> Result<Mounts, Error> {
        let text = std::fs::read_to_string(MOUNTINFO).map_err(Error::read(MOUNTINFO))?;
        Ok(Mounts::parse(&text))
    }

    /// The hierarchies in a `mountinfo` text; other mounts are skipped.
    pub fn parse(mountinfo: &str) -> Mounts {
        let mut mounts = Mounts::default();
        for m in berth_mountinfo::mounts(mountinfo) {
            let hierarchy = Hierarchy {
                root: m.root,
                mountpoint: m.mount_point,
            };
            match m.fs_type.as_str() {
                "cgroup2" if mounts.v2.is_none() => mounts.v2 = Some(hierarchy),
                "cgroup" => {
                    let controllers: Vec<String> = m
                        .super_options
                        .split(',')
                        .filter(|o| is_controller(o))
                        .map(str::to_string)
                        .collect();
                    let known = |c: &String| mounts.v1.iter().any(|(cs, _)| cs.contains(c));
                    if !controllers.is_empty() && !controllers.iter().any(known) {
                        mounts.v1.push((controllers, hierarchy));
                    }
                }
                _ => {}
            }
        }
        mounts
    }

    /// The host's mode; `None` when no cgroup hierarchy is mounted at all.
    pub fn mode(&self) -> Option<Mode> {
        match (self.v1.is_empty(), &self.v2) {
            (false, Some(_)) => Some(Mode::Hybrid),
            (false, None) => Some(Mode::V1),
            (true, Some(_)) => Some(Mode::V2),
            (true, None) => None,
        }
    }

    /// The v1 hierarchy that holds `controller`.
    pub(crate) fn v1_hierarchy(&self, controller: &str) -> Option<&Hierarchy> {
        self.v1
            .iter()
            .find(|(cs, _)| cs.iter().any(|c| c == controller))
            .map(|(_, h)| h)
    }

    /// Where the v2 hierarchy is mounted, if it is.
    pub fn v2_mountpoint(&self) -> Option<&Path> {
        self.v2.as_ref().map(|h| h.mountpoint.as_path())
    }
}

/// The v1 mount options that name controllers (not mount flags or `name=`).
fn is_controller(option: &str) -> bool {
    matches!(
        option,
        "cpu"
            | "cpuacct"
            | "cpuset"
            | "memory"
            | "devices"
            | "freezer"
            | "net_cls"
            | "net_prio"
            | "blkio"
            | "perf_event"
            | "hugetlb"
            | "pids"
            | "rdma"
            | "misc"
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// This project's CI host: v1 controllers, each on its own, and v2 at `unified`.
    pub const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    pub const V2: &str = "\
22 1 0:21 / / rw - ext4 /dev/sda1 rw
29 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    pub const V1: &str = "\
25 1 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
34 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 25 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";

    #[test]
    fn modes() {
        assert_eq!(Mounts::parse(HYBRID).mode(), Some(Mode::Hybrid));
        assert_eq!(Mounts::parse(V2).mode(), Some(Mode::V2));
        assert_eq!(Mounts::parse(V1).mode(), Some(Mode::V1));
        assert_eq!(Mounts::parse("").mode(), None);
    }

    #[test]
    fn controllers_and_named_hierarchies() {
        let m = Mounts::parse(V1);
        assert_eq!(
            m.v1_hierarchy("cpuacct").unwrap().mountpoint,
            Path::new("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert_eq!(
            m.v1_hierarchy("cpu"),
            m.v1_hierarchy("cpuacct"),
            "one hierarchy for both"
        );
        let m = Mounts::parse(HYBRID);
        assert!(m.v1_hierarchy("systemd").is_none());
        assert_eq!(m.v1.len(), 4);
        assert_eq!(m.v2_mountpoint(), Some(Path::new("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn second_mount_of_a_controller_is_ignored() {
        let text = format!("{V1}50 1 0:31 /x /mnt/mem rw - cgroup cgroup rw,memory\n");
        let m = Mounts::parse(&text);
        assert_eq!(
            m.v1_hierarchy("memory").unwrap().mountpoint,
            Path::new("/sys/fs/cgroup/memory")
        );
    }

    #[test]
    fn mount_root_is_stripped_and_escapes_undone() {
        let m = Mounts::parse("40 1 0:26 /outer /mnt/c\\040g rw - cgroup2 cgroup2 rw\n");
        let h = m.v2.unwrap();
        assert_eq!(h.mountpoint, Path::new("/mnt/c g"));
        assert_eq!(h.dir_of("/outer/inner"), Path::new("/mnt/c g/inner"));
        assert_eq!(h.dir_of("/outer"), Path::new("/mnt/c g"));
    }
}
