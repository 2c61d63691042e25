//! Finding a container's memory cgroup and reading its OOM-kill counter, on
//! cgroup v1 (`memory.oom_control`: `oom_kill N`) and v2 (`memory.events`:
//! `oom_kill N`). Which one is used follows `/proc/<pid>/cgroup` and
//! `/proc/self/mountinfo`, so hybrid hosts work too.

use std::io;
use std::path::{Path, PathBuf};

/// The file holding a container's OOM-kill counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCounter {
    file: PathBuf,
}

impl OomCounter {
    /// The counter of the memory cgroup process `pid` is in (read while it lives).
    pub fn for_pid(pid: u32) -> io::Result<Option<OomCounter>> {
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
        let mountinfo = std::fs::read_to_string(berth_mountinfo::SELF)?;
        Ok(locate(&cgroups, &mountinfo).map(|file| OomCounter { file }))
    }

    /// The counter of the cgroup an OCI spec names (`linux.cgroupsPath`,
    /// absolute or systemd's `slice:prefix:name`), for a process that may
    /// already be gone: the cgroup stays until the runtime deletes it.
    pub fn for_cgroups_path(cgroups_path: &str) -> io::Result<Option<OomCounter>> {
        let Some(path) = hierarchy_path(cgroups_path) else {
            return Ok(None);
        };
        let mountinfo = std::fs::read_to_string(berth_mountinfo::SELF)?;
        Ok(locate_path(&path, &mountinfo).map(|file| OomCounter { file }))
    }

    /// The file the counter is read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// How many processes the OOM killer has killed in the cgroup.
    pub fn read(&self) -> io::Result<u64> {
        let text = std::fs::read_to_string(&self.file)?;
        Ok(parse_oom_kill(&text).unwrap_or(0))
    }
}

/// The counter file for the cgroups in `cgroups` (the text of
/// `/proc/<pid>/cgroup`) given the mounts in `mountinfo`.
fn locate(cgroups: &str, mountinfo: &str) -> Option<PathBuf> {
    let mut v1 = None;
    let mut v2 = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        } else if controllers.is_empty() {
            v2 = Some(path);
        }
    }
    // A memory controller on v1 wins: on hybrid hosts v2 has no memory controller.
    if let Some(path) = v1 {
        let dir = mount_for(
            mountinfo,
            |m| m.fs_type == "cgroup" && m.has_super_option("memory"),
            path,
        )?;
        return Some(dir.join("memory.oom_control"));
    }
    let path = v2?;
    let dir = mount_for(mountinfo, |m| m.fs_type == "cgroup2", path)?;
    Some(dir.join("memory.events"))
}

/// The directory of cgroup `path` under the first mount matching `wanted`.
fn mount_for(
    mountinfo: &str,
    wanted: impl Fn(&berth_mountinfo::Mount) -> bool,
    path: &str,
) -> Option<PathBuf> {
    let m = berth_mountinfo::mounts(mountinfo).find(wanted)?;
    let rel = path.strip_prefix(m.root.as_str()).unwrap_or(path);
    let rel = rel.trim_start_matches('/');
    let mut dir = m.mount_point;
    if !rel.is_empty() {
        dir.push(rel);
    }
    Some(dir)
}

/// The counter file of hierarchy path `path`: in the v1 memory hierarchy
/// where one is mounted, else in the unified one.
fn locate_path(path: &str, mountinfo: &str) -> Option<PathBuf> {
    // As /proc/PID/cgroup would say it, on each version.
    locate(&format!("1:memory:{path}\n"), mountinfo)
        .or_else(|| locate(&format!("0::{path}\n"), mountinfo))
}

/// Where in the hierarchy a spec's `cgroupsPath` is: an absolute path as
/// it is; `slice:prefix:name` as runc's systemd driver lays it out
/// (`a-b.slice` → `/a.slice/a-b.slice`, then `prefix-name.scope`; no slice
/// is `system.slice`, `-.slice` the root). Relative paths: unknown.
fn hierarchy_path(cgroups_path: &str) -> Option<String> {
    if cgroups_path.starts_with('/') {
        return Some(cgroups_path.to_string());
    }
    let mut parts = cgroups_path.split(':');
    let (slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || name.is_empty() {
        return None;
    }
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let stem = slice.strip_suffix(".slice")?;
    let mut path = String::new();
    if stem != "-" {
        let mut acc = String::new();
        for piece in stem.split('-') {
            if piece.is_empty() {
                return None;
            }
            if !acc.is_empty() {
                acc.push('-');
            }
            acc.push_str(piece);
            path.push('/');
            path.push_str(&acc);
            path.push_str(".slice");
        }
    }
    let unit = if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    Some(format!("{path}/{unit}"))
}

/// The `oom_kill` value of a `memory.oom_control` or `memory.events` text.
fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == "oom_kill").then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
25 1 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
33 25 0:29 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory
34 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
";
    const V2_MOUNTS: &str = "\
29 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn v1_memory_controller() {
        let cg = "12:cpu,cpuacct:/x\n4:memory:/berth-test/c1\n0::/\n";
        assert_eq!(
            locate(cg, HYBRID_MOUNTS),
            Some(PathBuf::from(
                "/sys/fs/cgroup/memory/berth-test/c1/memory.oom_control"
            ))
        );
    }

    #[test]
    fn v2_unified() {
        assert_eq!(
            locate("0::/kubepods/pod1/c1\n", V2_MOUNTS),
            Some(PathBuf::from(
                "/sys/fs/cgroup/kubepods/pod1/c1/memory.events"
            ))
        );
        assert_eq!(locate("0::/x\n", ""), None);
    }

    #[test]
    fn mount_root_is_stripped() {
        let mounts = "40 1 0:26 /outer /mnt/cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            locate("0::/outer/inner\n", mounts),
            Some(PathBuf::from("/mnt/cg/inner/memory.events"))
        );
    }

    #[test]
    fn spec_cgroups_paths() {
        assert_eq!(
            hierarchy_path("/berth/pod1/c1").as_deref(),
            Some("/berth/pod1/c1")
        );
        assert_eq!(
            hierarchy_path("kubepods-besteffort-pod1.slice:berth:c1").as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/berth-c1.scope")
        );
        assert_eq!(
            hierarchy_path(":berth:c1").as_deref(),
            Some("/system.slice/berth-c1.scope")
        );
        assert_eq!(hierarchy_path("-.slice::c1").as_deref(), Some("/c1.scope"));
        for bad in [
            "relative/path",
            "a.slice:b",
            "a.slice:b:",
            "notaslice:b:c",
            "a--b.slice:p:c",
        ] {
            assert_eq!(hierarchy_path(bad), None, "{bad}");
        }
        // On a hybrid host: the v1 memory hierarchy.
        assert_eq!(
            locate_path("/berth/c1", HYBRID_MOUNTS),
            Some(PathBuf::from(
                "/sys/fs/cgroup/memory/berth/c1/memory.oom_control"
            ))
        );
        assert_eq!(
            locate_path("/berth/c1", V2_MOUNTS),
            Some(PathBuf::from("/sys/fs/cgroup/berth/c1/memory.events"))
        );
    }

    #[test]
    fn counters() {
        assert_eq!(
            parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"),
            Some(3)
        );
        assert_eq!(
            parse_oom_kill("low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\n"),
            Some(1)
        );
        assert_eq!(parse_oom_kill("oom 2\n"), None);
    }
}
