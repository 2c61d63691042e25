//! The exit file: how a container ended (JSON [`ExitInfo`]), written
//! atomically by the shim before it tells anyone, so that a daemon that was
//! down at the time still learns it.

use std::io;
use std::path::Path;

use crate::error::Error;
use crate::protocol::ExitInfo;

/// Writes `info` to `path` atomically (temp file, fsync, rename, fsync dir).
pub fn write_exit_file(path: &Path, info: &ExitInfo) -> io::Result<()> {
    let json = serde_json::to_vec(info).map_err(io::Error::other)?;
    berth_atomic_file::write(path, &json, 0o644)
}

/// Reads the exit file at `path`: `None` when there is none (the container
/// has not exited, or never ran under a shim).
pub fn read_exit_file(path: &Path) -> Result<Option<ExitInfo>, Error> {
    let data = match std::fs::read(path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Io {
                id: String::new(),
                what: "reading exit file",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|source| Error::ExitFile {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exit.json");
        assert_eq!(read_exit_file(&path).unwrap(), None);
        let info = ExitInfo {
            pid: 12,
            exit_code: 137,
            exited_at_ns: 1_700_000_000_123_456_789,
            oom_killed: true,
        };
        write_exit_file(&path, &info).unwrap();
        assert_eq!(read_exit_file(&path).unwrap(), Some(info));
        std::fs::write(&path, b"{torn").unwrap();
        assert!(matches!(read_exit_file(&path), Err(Error::ExitFile { .. })));
    }
}
