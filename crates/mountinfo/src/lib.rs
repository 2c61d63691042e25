//! `/proc/<pid>/mountinfo` (proc_pid_mountinfo(5)), parsed: one [`Mount`]
//! per line, with the kernel's octal escapes (`\040` for a space) undone in
//! paths. No dependencies, so the static shim can use it too.
//!
//! A line reads
//! `id parent major:minor root mount_point options [optional…] - fstype source super_options`.

use std::io;
use std::path::{Path, PathBuf};

/// This process's mount table.
pub const SELF: &str = "/proc/self/mountinfo";

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u32,
    pub parent: u32,
    /// The directory of the filesystem that is the root of this mount.
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,nosuid,…`).
    pub options: String,
    /// Optional fields: `shared:N`, `master:N`, `propagate_from:N`, `unbindable`.
    pub optional: Vec<String>,
    pub fs_type: String,
    pub source: String,
    /// Per-superblock options (for cgroup v1: the controllers, among others).
    pub super_options: String,
}

impl Mount {
    /// Whether the mount is in a shared peer group.
    pub fn is_shared(&self) -> bool {
        self.optional.iter().any(|f| f.starts_with("shared:"))
    }

    /// Whether the mount receives propagation from a peer group.
    pub fn is_slave(&self) -> bool {
        self.optional.iter().any(|f| f.starts_with("master:"))
    }

    /// Whether `option` is one of the superblock options.
    pub fn has_super_option(&self, option: &str) -> bool {
        self.super_options.split(',').any(|o| o == option)
    }

    /// Parses one line; `None` when it is not a mountinfo line.
    pub fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let mut fields = left.split(' ');
        let id = fields.next()?.parse().ok()?;
        let parent = fields.next()?.parse().ok()?;
        let _device = fields.next()?;
        let root = unescape(fields.next()?);
        let mount_point = PathBuf::from(unescape(fields.next()?));
        let options = fields.next()?.to_string();
        let optional = fields.map(str::to_string).collect();
        let mut tail = right.split(' ');
        Some(Mount {
            id,
            parent,
            root,
            mount_point,
            options,
            optional,
            fs_type: tail.next()?.to_string(),
            source: unescape(tail.next()?),
            super_options: tail.next()?.to_string(),
        })
    }
}

/// Every mount of a mountinfo text, in order; lines that do not parse are
/// skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    mounts(text).collect()
}

/// The mounts of a mountinfo text, one line at a time (for callers that
/// look for one and must not hold the whole table, like the shim).
pub fn mounts(text: &str) -> impl Iterator<Item = Mount> + '_ {
    text.lines().filter_map(Mount::parse)
}

/// The mounts of `file` (e.g. [`SELF`]).
pub fn read(file: impl AsRef<Path>) -> io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string(file)?))
}

/// The mount points of a mountinfo text at or below `dir`, deepest first
/// (the order they can be unmounted in); a point with mounts stacked on it
/// comes once for each.
pub fn points_below(text: &str, dir: &Path) -> Vec<PathBuf> {
    let mut points: Vec<PathBuf> = mounts(text)
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points
}

/// The mount `path` lies on: the deepest mount point above it and, of
/// mounts stacked on one point, the last.
pub fn mount_of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts.iter().filter(|m| path.starts_with(&m.mount_point)) {
        let deeper = best.is_none_or(|b| {
            m.mount_point.components().count() >= b.mount_point.components().count()
        });
        if deeper {
            best = Some(m);
        }
    }
    best
}

/// Undoes mountinfo's octal escapes (`\040` → space, `\011`, `\012`, `\134`).
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                let v = (d[0] - b'0') as u32 * 64 + (d[1] - b'0') as u32 * 8 + (d[2] - b'0') as u32;
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
30 27 0:40 / /mnt/shared rw,relatime shared:5 - tmpfs tmpfs rw
31 27 0:41 / /mnt/slave rw,relatime master:5 - tmpfs tmpfs rw
32 27 0:42 / /mnt/with\\040space rw,relatime shared:9 master:2 - tmpfs my\\040src rw
33 27 0:43 /sub /mnt/shared rw - tmpfs tmpfs rw
40 35 0:35 /kubepods /sys/fs/cgroup/memory rw,nosuid shared:17 - cgroup cgroup rw,memory
not a mountinfo line
";

    #[test]
    fn parses_every_field() {
        let mounts = parse(TEXT);
        assert_eq!(mounts.len(), 6);
        let m = &mounts[3];
        assert_eq!((m.id, m.parent), (32, 27));
        assert_eq!(m.root, "/");
        assert_eq!(m.mount_point, Path::new("/mnt/with space"));
        assert_eq!(m.options, "rw,relatime");
        assert_eq!(m.optional, ["shared:9", "master:2"]);
        assert_eq!(m.fs_type, "tmpfs");
        assert_eq!(m.source, "my src");
        assert!(m.is_shared() && m.is_slave());
        assert!(!mounts[0].is_shared() && !mounts[0].is_slave());
        assert!(mounts[5].has_super_option("memory"));
        assert!(!mounts[5].has_super_option("mem"));
        assert_eq!(mounts[5].root, "/kubepods");
    }

    #[test]
    fn points_below_a_dir_come_deepest_first_once_per_mount() {
        let text = "\
1 0 0:1 / /a rw - tmpfs t rw
2 1 0:2 / /a/b rw - tmpfs t rw
3 2 0:3 / /a/b/c rw - tmpfs t rw
4 1 0:4 / /a/b rw - tmpfs t rw
5 0 0:5 / /ab rw - tmpfs t rw
";
        let below = points_below(text, Path::new("/a/b"));
        assert_eq!(
            below,
            [Path::new("/a/b/c"), Path::new("/a/b"), Path::new("/a/b")]
        );
        assert_eq!(points_below(text, Path::new("/a")).len(), 4, "not /ab");
        assert!(points_below(text, Path::new("/x")).is_empty());
    }

    #[test]
    fn finds_the_deepest_and_last_mount_of_a_path() {
        let mounts = parse(TEXT);
        let of = |p: &str| mount_of(&mounts, Path::new(p)).map(|m| m.id);
        assert_eq!(of("/mnt/shared/x/y"), Some(33));
        assert_eq!(of("/mnt/slave"), Some(31));
        assert_eq!(of("/mnt/sharedx"), Some(27));
        assert_eq!(of("/etc"), Some(27));
        assert_eq!(mount_of(&[], Path::new("/")), None);
    }

    #[test]
    fn unescapes_octal_only() {
        assert_eq!(unescape(r"a\040b\011c\134d"), "a b\tc\\d");
        assert_eq!(unescape(r"\09x\04"), r"\09x\04");
        assert_eq!(unescape("plain"), "plain");
    }

    #[test]
    fn reads_this_process_table() {
        let mounts = read(SELF).unwrap();
        assert!(mount_of(&mounts, Path::new("/proc/self")).is_some_and(|m| m.fs_type == "proc"));
    }
}
