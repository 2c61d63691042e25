//! What this host lets berth measure beyond what every cgroup host has,
//! probed once at start: pressure stall information, huge pages, and where
//! the v1 `blkio` hierarchy is (the cgroup-stats crate reads the other
//! controllers). ListMetricDescriptors offers a metric only where it can
//! be measured here.

use std::path::{Path, PathBuf};

use berth_cgroup_stats::{Mode, Mounts};

/// A v1 hierarchy: the cgroup its mount shows and where it is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct V1Hierarchy {
    pub(super) root: String,
    pub(super) mountpoint: PathBuf,
}

impl V1Hierarchy {
    /// The directory of cgroup `path` (as `/proc/<pid>/cgroup` names it).
    pub(super) fn dir_of(&self, path: &str) -> PathBuf {
        let rel = match self.root.as_str() {
            "/" => path,
            root => path.strip_prefix(root).unwrap_or(path),
        };
        match rel.trim_start_matches('/') {
            "" => self.mountpoint.clone(),
            rel => self.mountpoint.join(rel),
        }
    }
}

/// What the host offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Host {
    /// The cgroup mode.
    pub(super) mode: Option<Mode>,
    /// The kernel keeps pressure stall information and there is a v2
    /// hierarchy to read it from.
    pub(super) pressure: bool,
    /// The hugetlb controller is there.
    pub(super) hugetlb: bool,
    /// Huge page peaks are kept (v1's `max_usage_in_bytes`; v2 has none).
    pub(super) hugetlb_peak: bool,
    /// The v1 `blkio` hierarchy (I/O on v2 is `io.stat` in the unified one).
    pub(super) blkio: Option<V1Hierarchy>,
}

impl Host {
    /// Probes this host (plain file reads).
    pub(super) fn probe(mounts: &Mounts) -> Host {
        let mountinfo = std::fs::read_to_string(berth_mountinfo::SELF).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading the mount table: no v1 I/O or huge page metrics");
            String::new()
        });
        let v2_controllers = mounts
            .v2_mountpoint()
            .and_then(|m| std::fs::read_to_string(m.join("cgroup.controllers")).ok())
            .unwrap_or_default();
        Host::from_parts(
            mounts,
            &mountinfo,
            &v2_controllers,
            Path::new("/proc/pressure/cpu").exists(),
        )
    }

    /// What a host with these mounts, v2 root controllers and kernel PSI
    /// offers.
    pub(super) fn from_parts(
        mounts: &Mounts,
        mountinfo: &str,
        v2_controllers: &str,
        psi: bool,
    ) -> Host {
        let mode = mounts.mode();
        let v1_with = |controller: &str| {
            berth_mountinfo::mounts(mountinfo)
                .find(|m| m.fs_type == "cgroup" && m.has_super_option(controller))
                .map(|m| V1Hierarchy {
                    root: m.root,
                    mountpoint: m.mount_point,
                })
        };
        let v1_hugetlb = v1_with("hugetlb").is_some();
        let v2_hugetlb =
            mode == Some(Mode::V2) && v2_controllers.split_whitespace().any(|c| c == "hugetlb");
        Host {
            mode,
            pressure: psi && mounts.v2_mountpoint().is_some(),
            hugetlb: v1_hugetlb || v2_hugetlb,
            hugetlb_peak: v1_hugetlb,
            blkio: v1_with("blkio"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio
33 25 0:29 / /sys/fs/cgroup/hugetlb rw - cgroup cgroup rw,hugetlb
";
    const V2: &str = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

    #[test]
    fn hybrid_host() {
        let host = Host::from_parts(&Mounts::parse(HYBRID), HYBRID, "", true);
        assert_eq!(host.mode, Some(Mode::Hybrid));
        assert!(host.pressure && host.hugetlb && host.hugetlb_peak);
        let blkio = host.blkio.unwrap();
        assert_eq!(
            blkio.dir_of("/kubepods/pod1/c1"),
            Path::new("/sys/fs/cgroup/blkio/kubepods/pod1/c1")
        );
        assert_eq!(blkio.dir_of("/"), Path::new("/sys/fs/cgroup/blkio"));
    }

    #[test]
    fn v2_host() {
        let mounts = Mounts::parse(V2);
        let host = Host::from_parts(&mounts, V2, "cpuset cpu io memory hugetlb pids", false);
        assert_eq!(host.mode, Some(Mode::V2));
        assert!(!host.pressure, "no PSI in the kernel");
        assert!(host.hugetlb && !host.hugetlb_peak);
        assert_eq!(host.blkio, None);
        let host = Host::from_parts(&mounts, V2, "cpu io memory pids", true);
        assert!(host.pressure && !host.hugetlb);
    }

    #[test]
    fn sub_tree_mount() {
        let h = V1Hierarchy {
            root: "/kubepods".into(),
            mountpoint: "/sys/fs/cgroup/blkio".into(),
        };
        assert_eq!(
            h.dir_of("/kubepods/pod1"),
            Path::new("/sys/fs/cgroup/blkio/pod1")
        );
    }
}
