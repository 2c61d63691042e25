//! The host's facts a container's spec follows: cgroups, kernel, seccomp,
//! security modules, the bounding set.

use std::path::Path;

use crate::{cgroup_mode, CgroupMode, Host};

/// What this host offers containers, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub cgroup: CgroupMode,
    /// Swap limits: v2's `memory.swap.max` in berth's own cgroup, v1's
    /// `memory.memsw.limit_in_bytes`.
    pub swap_available: bool,
    pub hugetlb_available: bool,
    /// `major.minor` of the running kernel, when it parses.
    pub kernel: Option<(u32, u32)>,
    /// The kernel filters system calls (`Seccomp:` in `/proc/self/status`).
    pub seccomp_available: bool,
    pub apparmor_enabled: bool,
    pub selinux_enabled: bool,
    /// This process's capability bounding set, as a mask.
    pub bounding_set: Option<u64>,
}

impl Facts {
    /// Reads them from `host`.
    pub fn detect(host: &dyn Host) -> Facts {
        let read = |p: &str| host.read(Path::new(p));
        let cgroup = cgroup_mode(&read("/proc/self/mountinfo").unwrap_or_default());
        let (swap_available, hugetlb_available) = if cgroup == CgroupMode::V2 {
            let own = read("/proc/self/cgroup")
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
                })
                .unwrap_or_default();
            let dir = Path::new("/sys/fs/cgroup").join(own.trim_start_matches('/'));
            (
                host.read(&dir.join("memory.swap.max")).is_some(),
                read("/sys/fs/cgroup/cgroup.controllers")
                    .is_some_and(|c| c.split_whitespace().any(|c| c == "hugetlb")),
            )
        } else {
            (
                read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").is_some(),
                host.is_dir(Path::new("/sys/fs/cgroup/hugetlb")),
            )
        };
        let status = read("/proc/self/status").unwrap_or_default();
        Facts {
            cgroup,
            swap_available,
            hugetlb_available,
            kernel: kernel_version(&host.kernel_release()),
            seccomp_available: status.lines().any(|l| l.starts_with("Seccomp:")),
            apparmor_enabled: read("/sys/module/apparmor/parameters/enabled")
                .is_some_and(|s| s.trim() == "Y"),
            selinux_enabled: read("/sys/fs/selinux/enforce").is_some(),
            bounding_set: bounding_set(&status),
        }
    }

    /// Whether the kernel is at least `major.minor`.
    pub fn kernel_at_least(&self, major: u32, minor: u32) -> bool {
        self.kernel.is_some_and(|v| v >= (major, minor))
    }

    /// Recursive read-only mounts need mount_setattr (5.12).
    pub fn rro_kernel(&self) -> bool {
        self.kernel_at_least(5, 12)
    }
}

/// `major.minor` of a kernel release such as `6.1.0-18-amd64`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The `CapBnd:` mask of a `/proc/PID/status`.
pub fn bounding_set(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapBnd:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeHost;

    #[test]
    fn a_v2_host() {
        let mut host = FakeHost {
            kernel: "6.1.0-18-amd64".into(),
            ..FakeHost::default()
        };
        host.file(
            "/proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        host.file("/proc/self/cgroup", "0::/system.slice/berth.service\n");
        host.file(
            "/sys/fs/cgroup/system.slice/berth.service/memory.swap.max",
            "max\n",
        );
        host.file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpu memory pids hugetlb\n",
        );
        host.file(
            "/proc/self/status",
            "Name:\tberth\nCapBnd:\t000001ffffffffff\nSeccomp:\t0\n",
        );
        host.file("/sys/module/apparmor/parameters/enabled", "Y\n");
        let facts = Facts::detect(&host);
        assert_eq!(
            facts,
            Facts {
                cgroup: CgroupMode::V2,
                swap_available: true,
                hugetlb_available: true,
                kernel: Some((6, 1)),
                seccomp_available: true,
                apparmor_enabled: true,
                selinux_enabled: false,
                bounding_set: Some(0x1ff_ffff_ffff),
            }
        );
        assert!(facts.rro_kernel());
    }

    #[test]
    fn a_v1_host_without_swap_accounting() {
        let mut host = FakeHost {
            kernel: "5.10.0".into(),
            ..FakeHost::default()
        };
        host.file(
            "/proc/self/mountinfo",
            "27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        );
        host.dirs.insert("/sys/fs/cgroup/hugetlb".into());
        let facts = Facts::detect(&host);
        assert_eq!(facts.cgroup, CgroupMode::V1);
        assert!(!facts.swap_available);
        assert!(facts.hugetlb_available);
        assert!(!facts.rro_kernel());
        assert!(!facts.seccomp_available);
        assert_eq!(facts.bounding_set, None);
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("5.19.17"), Some((5, 19)));
        assert_eq!(kernel_version("4.19\n"), Some((4, 19)));
        assert_eq!(kernel_version("weird"), None);
    }
}
