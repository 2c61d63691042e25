//! Descriptor-relative file system calls: the walk from the layer's root to
//! an entry's directory that never follows a symlink (with the last parent
//! cached), the removal of an earlier entry of the same name, and the xattr
//! calls nix lacks.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::{hostile, io_err, Applier, Result, UnpackError};

impl Applier {
    /// The parent directory of an entry (created when missing), cached.
    pub(super) fn parent(&mut self, parents: &[OsString], path: &Path) -> Result<OwnedFd> {
        if let Some((cached, fd)) = &self.cached_parent {
            if cached.as_slice() == parents {
                return fd.try_clone().map_err(|e| UnpackError::Io {
                    entry: path.to_path_buf(),
                    op: "dup",
                    source: e,
                });
            }
        }
        let fd = self.open_dir(parents, true, path)?;
        let copy = fd.try_clone().map_err(|e| UnpackError::Io {
            entry: path.to_path_buf(),
            op: "dup",
            source: e,
        })?;
        self.cached_parent = Some((parents.to_vec(), copy));
        Ok(fd)
    }

    /// Opens the directory `comps` below the root, one component at a time,
    /// never following a symlink; missing ones are created (0755) if `create`.
    pub(super) fn open_dir(
        &self,
        comps: &[OsString],
        create: bool,
        path: &Path,
    ) -> Result<OwnedFd> {
        let mut dir = self.root.try_clone().map_err(|e| UnpackError::Io {
            entry: path.to_path_buf(),
            op: "dup",
            source: e,
        })?;
        for comp in comps {
            dir = match open_nofollow_dir(dir.as_fd(), comp) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if create => {
                    match mkdirat(
                        dir.as_fd(),
                        comp.as_os_str(),
                        Mode::from_bits_truncate(0o755),
                    ) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io_err(path, "mkdir parent")(e)),
                    }
                    open_nofollow_dir(dir.as_fd(), comp).map_err(io_err(path, "open parent"))?
                }
                Err(Errno::ENOENT) => {
                    return Err(hostile(
                        path,
                        format!("directory {comp:?} on the way does not exist"),
                    ))
                }
                Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                    return Err(hostile(
                        path,
                        format!("{comp:?} on the way is a symlink or not a directory"),
                    ))
                }
                Err(e) => return Err(io_err(path, "open parent")(e)),
            };
        }
        Ok(dir)
    }
}

pub(super) fn open_nofollow_dir(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Removes an earlier entry of the same name so a later one can replace it;
/// a directory is never replaced by something else.
pub(super) fn remove_non_dir(parent: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<()> {
    match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io_err(path, "stat")(e)),
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
            Err(hostile(path, "replaces a directory of the same layer"))
        }
        Ok(_) => unlinkat(parent, name, UnlinkatFlags::NoRemoveDir).map_err(io_err(path, "unlink")),
    }
}

/// `fsetxattr(2)` (nix has no xattr calls).
pub(super) fn set_xattr(fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> nix::Result<()> {
    let name = CString::new(name).map_err(|_| Errno::EINVAL)?;
    // SAFETY: valid fd, NUL-terminated name, value pointer and length from a slice.
    let rc = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    Errno::result(rc).map(drop)
}

/// Reads one xattr of `path` without following a symlink (for tests and checks).
pub fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let cpath = CString::new(path.as_os_str().as_bytes()).ok()?;
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 256];
    // SAFETY: NUL-terminated strings and a buffer of the given length.
    let n = unsafe {
        libc::lgetxattr(
            cpath.as_ptr(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}
