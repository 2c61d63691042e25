//! Crash-safe file replacement, for records, exit files, caches and
//! configuration: the new content goes to a temp file in the target's
//! directory (`.NAME.tmp-PID-N`, a name loaders skip), is fsynced, renamed
//! over the target, and the directory is fsynced. A crash at any point
//! leaves the old content or the new one, never a torn file. No
//! dependencies, so the static shim uses it too.
//!
//! [`write_volatile`] is the same without the fsyncs, for files in a
//! directory that does not outlive the machine's power (the daemon's state
//! dir, a tmpfs on a node: bundles' `config.json`): still never torn for a
//! reader or after a crashed process, as runc and containerd write them.

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

fn replace(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
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
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if durable {
            File::open(dir)?.sync_all()?;
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
