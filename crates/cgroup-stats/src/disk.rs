//! Bytes and inodes used by a directory tree, as `du` counts them:
//! allocated blocks, hard-linked files once, one filesystem only.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::Error;

/// What a directory tree uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Allocated bytes (blocks × 512).
    pub bytes: u64,
    /// Files, directories, links and other entries, the root included.
    pub inodes: u64,
}

/// Measures the tree at `root`. Entries that vanish during the walk (a
/// running container deletes files) are skipped; a missing `root` is an
/// error ([`Error::is_not_found`]). Mounts below `root` are not entered.
pub fn disk_usage(root: &Path) -> Result<DiskUsage, Error> {
    let top = std::fs::symlink_metadata(root).map_err(Error::read(root))?;
    let device = top.dev();
    let mut seen = HashSet::new();
    let mut usage = DiskUsage::default();
    let mut count = |md: &std::fs::Metadata, usage: &mut DiskUsage| {
        if md.nlink() <= 1 || md.is_dir() || seen.insert((md.dev(), md.ino())) {
            usage.bytes += md.blocks() * 512;
            usage.inodes += 1;
        }
    };
    count(&top, &mut usage);
    if !top.is_dir() {
        return Ok(usage);
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if vanished(&e) && dir != root => continue,
            Err(e) => return Err(Error::read(dir)(e)),
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(Error::read(&dir)(e)),
            };
            let md = match entry.metadata() {
                Ok(md) => md,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(Error::read(entry.path())(e)),
            };
            if md.dev() != device {
                continue;
            }
            count(&md, &mut usage);
            if md.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(usage)
}

fn vanished(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_dirs_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("upper");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/data"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::hard_link(root.join("a/b/data"), root.join("a/link")).unwrap();
        std::os::unix::fs::symlink("a/b/data", root.join("sym")).unwrap();
        let usage = disk_usage(&root).unwrap();
        // upper, a, b, data (once), sym.
        assert_eq!(usage.inodes, 5);
        assert!(usage.bytes >= 64 * 1024, "{usage:?}");
        assert!(usage.bytes < 64 * 1024 + 5 * 64 * 1024, "{usage:?}");

        std::fs::write(root.join("more"), vec![1u8; 128 * 1024]).unwrap();
        let more = disk_usage(&root).unwrap();
        assert_eq!(more.inodes, 6);
        assert!(more.bytes >= usage.bytes + 128 * 1024);
    }

    #[test]
    fn missing_root_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        assert!(disk_usage(&dir.path().join("nope"))
            .unwrap_err()
            .is_not_found());
    }
}
