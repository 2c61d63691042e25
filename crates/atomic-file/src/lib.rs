//! Crash-safe file replacement, for records, exit files, caches and
//! configuration: the new content goes to a temp file in the target's
//! directory (`.NAME.tmp-PID-N`, a name loaders skip), is fsynced, renamed
//! over the target, and the directory is fsynced. A crash at any point
//! leaves the old content or the new one, never a torn file. No
//! dependencies, so the static shim uses it too.
//!
//! [`write_volatile`] is the same without the fsyncs, for files in a
//! directory that does not outlive the machine's power (the daemon's state
//! dir, a tmpfs on a node: bundles' `config.json`), and for content that
//! can be derived again after a power cut (a record's state change that
//! recovery observes anew): still never torn for a reader or after a
//! crashed process, as runc and containerd write them. After a power cut
//! it leaves the old content or the new one on file systems that order a
//! replacing rename after the new file's data (ext4's default
//! `auto_da_alloc`, btrfs); XFS may leave an empty file instead.
//!
//! [`remove`] deletes a file and fsyncs its directory, so a deletion is as
//! durable as a [`write`].

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `data`, the file getting `mode` (less the umask).
/// The directory must exist.
pub fn write(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    replace(path, data, mode, true)
}

/// [`write`] without the fsyncs: atomic for readers and against a crashed
/// process, not against a power cut (for files under a volatile dir).
pub fn write_volatile(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    replace(path, data, mode, false)
}

/// Removes `path` and fsyncs its directory: once this returns, the file
/// does not come back after a power cut. Absent is fine (`Ok(false)`; the
/// directory is still synced, a crash may have cut short an earlier try).
pub fn remove(path: &Path) -> io::Result<bool> {
    let (_, dir) = name_and_dir(path)?;
    let removed = match std::fs::remove_file(path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    sync(&File::open(dir)?)?;
    Ok(removed)
}

/// The file name of `path` and the directory it is in.
fn name_and_dir(path: &Path) -> io::Result<(&std::ffi::OsStr, &Path)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((name, dir))
}

#[cfg(test)]
thread_local! {
    /// fsyncs made by this thread: what the tests count.
    static SYNCS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn sync(file: &File) -> io::Result<()> {
    #[cfg(test)]
    SYNCS.with(|n| n.set(n.get() + 1));
    file.sync_all()
}

fn replace(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let (name, dir) = name_and_dir(path)?;
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            // A temp file a crashed process with the same pid left.
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(data)?;
        if durable {
            sync(&file)?;
        }
        std::fs::rename(&tmp, path)?;
        if durable {
            sync(&File::open(dir)?)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// What `f` fsyncs on this thread.
    fn syncs(f: impl FnOnce()) -> u32 {
        let before = SYNCS.with(|n| n.get());
        f();
        SYNCS.with(|n| n.get()) - before
    }

    #[test]
    fn a_write_syncs_file_and_dir_and_a_volatile_one_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.json");
        assert_eq!(syncs(|| write(&path, b"one", 0o600).unwrap()), 2);
        assert_eq!(syncs(|| write_volatile(&path, b"two", 0o600).unwrap()), 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(syncs(|| assert!(remove(&path).unwrap())), 1);
        assert!(!path.exists());
        assert_eq!(syncs(|| assert!(!remove(&path).unwrap())), 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn remove_of_a_dir_or_in_a_missing_dir_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(remove(dir.path()).is_err());
        assert!(remove(&dir.path().join("nope/rec.json")).is_err());
        assert!(remove(Path::new("/")).is_err());
    }

    #[test]
    fn a_volatile_write_replaces_content_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        write_volatile(&path, b"one", 0o600).unwrap();
        write_volatile(&path, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn replaces_content_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.json");
        write(&path, b"one", 0o600).unwrap();
        write(&path, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["rec.json"]);
    }

    #[test]
    fn writers_on_threads_do_not_share_a_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let path = &path;
                s.spawn(move || write(path, &[i; 4096], 0o644).unwrap());
            }
        });
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len(), 4096);
        assert!(data.iter().all(|b| *b == data[0]));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_stale_temp_file_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec");
        for n in 0..4 {
            let stale = format!(".rec.tmp-{}-{n}", std::process::id());
            std::fs::write(dir.path().join(stale), b"stale and longer").unwrap();
        }
        write(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn missing_dir_is_an_error_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope/rec.json");
        assert!(write(&path, b"x", 0o600).is_err());
        assert!(write(Path::new("/"), b"x", 0o600).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
