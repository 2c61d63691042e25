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
    ///
    /// The hierarchies' usual mount points are tried first
    /// ([`WELL_KNOWN`]): the mount table is read only when the counter is
    /// not there, for reading it costs every mount of the host (3.4–3.6
    /// ms with 500 containers' overlays on the 2-core test VM, on each
    /// container's exit).
    pub fn for_cgroups_path(cgroups_path: &str) -> io::Result<Option<OomCounter>> {
        let Some(path) = hierarchy_path(cgroups_path) else {
            return Ok(None);
        };
        if let Some(file) = locate_well_known(&path, &WELL_KNOWN, is_fs_of_type) {
            return Ok(Some(OomCounter { file }));
        }
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
    match memory_cgroup(cgroups)? {
        MemoryCgroup::V1(path) => {
            let dir = mount_for(
                mountinfo,
                |m| m.fs_type == "cgroup" && m.has_super_option("memory"),
                path,
            )?;
            Some(dir.join("memory.oom_control"))
        }
        MemoryCgroup::V2(path) => {
            let dir = mount_for(mountinfo, |m| m.fs_type == "cgroup2", path)?;
            Some(dir.join("memory.events"))
        }
    }
}

/// A process's memory cgroup: its path in the v1 memory hierarchy, or in
/// the unified one.
enum MemoryCgroup<'a> {
    V1(&'a str),
    V2(&'a str),
}

/// The memory cgroup in `cgroups` (the text of `/proc/<pid>/cgroup`): a
/// memory controller on v1 wins, for on hybrid hosts v2 has none. `None`
/// for neither, or a line that is not `ID:CONTROLLERS:PATH`.
fn memory_cgroup(cgroups: &str) -> Option<MemoryCgroup<'_>> {
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
    v1.map(MemoryCgroup::V1).or(v2.map(MemoryCgroup::V2))
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

/// A hierarchy where it is usually mounted: the mount point, the type of
/// the filesystem there, the counter's file in each cgroup.
struct KnownMount<'a> {
    dir: &'a str,
    fs_type: nix::sys::statfs::FsType,
    counter: &'static str,
}

/// Where hosts mount the hierarchies (systemd's layout, and Debian's
/// without systemd), in [`locate`]'s order: the v1 memory hierarchy wins
/// (on a hybrid host the unified one has no memory controller, and
/// `/sys/fs/cgroup` is a tmpfs), then the unified one at the top.
const WELL_KNOWN: [KnownMount<'static>; 2] = [
    KnownMount {
        dir: "/sys/fs/cgroup/memory",
        fs_type: nix::sys::statfs::CGROUP_SUPER_MAGIC,
        counter: "memory.oom_control",
    },
    KnownMount {
        dir: "/sys/fs/cgroup",
        fs_type: nix::sys::statfs::CGROUP2_SUPER_MAGIC,
        counter: "memory.events",
    },
];

/// Whether the filesystem at `dir` is of type `fs_type`.
fn is_fs_of_type(dir: &Path, fs_type: nix::sys::statfs::FsType) -> bool {
    nix::sys::statfs::statfs(dir).is_ok_and(|s| s.filesystem_type() == fs_type)
}

/// The counter of hierarchy path `path` under the first of `known` whose
/// dir has its filesystem (`is_fs`) and the counter's file for `path`;
/// `None` sends the caller to the mount table. This is the file
/// [`locate_path`] finds from the table for a spec's path whenever the
/// hierarchy is mounted there and the mount's root is not a prefix of
/// `path` (which [`locate_path`] would strip; a spec names its cgroup
/// from the hierarchy's root, so a prefix is a coincidence of names).
fn locate_well_known(
    path: &str,
    known: &[KnownMount<'_>],
    is_fs: impl Fn(&Path, nix::sys::statfs::FsType) -> bool,
) -> Option<PathBuf> {
    let rel = path.trim_start_matches('/');
    known.iter().find_map(|m| {
        let dir = Path::new(m.dir);
        let file = dir.join(rel).join(m.counter);
        (is_fs(dir, m.fs_type) && file.is_file()).then_some(file)
    })
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

    /// [`WELL_KNOWN`]'s mounts moved to `dirs` (a host laid out in a
    /// temporary dir): the v1 memory hierarchy's, then the unified one's.
    fn known_in(dirs: &[String; 2]) -> [KnownMount<'_>; 2] {
        [
            KnownMount {
                dir: &dirs[0],
                ..WELL_KNOWN[0]
            },
            KnownMount {
                dir: &dirs[1],
                ..WELL_KNOWN[1]
            },
        ]
    }

    fn counter_file(dir: &str, path: &str, counter: &str) -> PathBuf {
        let cgroup = Path::new(dir).join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&cgroup).unwrap();
        let file = cgroup.join(counter);
        std::fs::write(&file, "oom_kill 0\n").unwrap();
        file
    }

    #[test]
    fn well_known_mounts_are_tried_in_the_mount_tables_order() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = ["cgroup/memory", "cgroup"].map(|d| tmp.path().join(d).display().to_string());
        let known = known_in(&dirs);
        let path = "/berth/pod1/c1";
        // Nothing there yet: the mount table decides.
        assert_eq!(locate_well_known(path, &known, |_, _| true), None);
        let v2 = counter_file(known[1].dir, path, "memory.events");
        let v2_fs = |d: &Path, t| d == Path::new(known[1].dir) && t == WELL_KNOWN[1].fs_type;
        // A unified host: its memory.events.
        assert_eq!(locate_well_known(path, &known, v2_fs), Some(v2.clone()));
        // A hybrid host: the v1 memory hierarchy wins, the top is a tmpfs.
        let v1 = counter_file(known[0].dir, path, "memory.oom_control");
        let v1_fs = |d: &Path, t| d == Path::new(known[0].dir) && t == WELL_KNOWN[0].fs_type;
        assert_eq!(locate_well_known(path, &known, v1_fs), Some(v1.clone()));
        assert_eq!(locate_well_known(path, &known, |_, _| true), Some(v1));
        // A dir that is not of its filesystem is not looked into.
        assert_eq!(locate_well_known(path, &known, |_, _| false), None);
        // Another cgroup's counter is not this one's.
        assert_eq!(
            locate_well_known("/berth/pod1/c2", &known, |_, _| true),
            None
        );
    }

    #[test]
    fn well_known_mounts_agree_with_the_mount_table_on_this_host() {
        // What the exit monitor finds at once is what the table gives,
        // for the cgroup this test runs in (v1 or v2, whichever the host has).
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let mountinfo = std::fs::read_to_string(berth_mountinfo::SELF).unwrap();
        let from_table = locate(&own, &mountinfo)
            .expect("no memory cgroup hierarchy here: the OOM counters need one");
        let (MemoryCgroup::V1(path) | MemoryCgroup::V2(path)) = memory_cgroup(&own).unwrap();
        // Only a counter outside the usual mount points is left to the table.
        let usual = WELL_KNOWN
            .iter()
            .any(|m| from_table.starts_with(m.dir) && is_fs_of_type(Path::new(m.dir), m.fs_type));
        assert_eq!(
            locate_well_known(path, &WELL_KNOWN, is_fs_of_type),
            usual.then_some(from_table)
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
