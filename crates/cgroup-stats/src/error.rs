//! What reading resource usage can fail with; every error names the file,
//! process or cgroup path it is about.

use std::io;
use std::path::PathBuf;

/// A failure to find a cgroup or to read its usage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read (a cgroup or process that is gone reads as `NotFound`).
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A file did not hold what the kernel documents.
    #[error("{path}: cannot parse {what} from {text:?}")]
    Parse {
        path: PathBuf,
        what: &'static str,
        text: String,
    },
    /// The process is in no cgroup under the hierarchies mounted here.
    #[error("process {pid}: no cgroup of it is under a mounted cgroup hierarchy")]
    NoCgroup { pid: u32 },
    /// A cgroups path that is not absolute (a systemd `slice:prefix:name` one, say).
    #[error("cgroups path {path:?} is not an absolute cgroupfs path")]
    NotAbsolute { path: String },
}

impl Error {
    /// Whether the file, process or cgroup does not exist (any more).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Read { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
                    // A read of /proc/<pid>/… of a process that just went.
                    || source.raw_os_error() == Some(libc::ESRCH)
            }
            Error::NoCgroup { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn read(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Read { path, source }
    }
}
