//! Creating one entry in its parent directory, by type: directories,
//! regular and GNU sparse files, symlinks, hard links (to entries of the
//! same layer), device nodes and FIFOs. The final component is only ever
//! created or changed with `*at` calls that do not follow it, and an earlier
//! entry of the same name is replaced (unless it is a directory).

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{
    fchmodat, fstatat, futimens, makedev, mkdirat, mknodat, utimensat, FchmodatFlags, Mode, SFlag,
    UtimensatFlags,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{linkat, symlinkat};

use super::fd::{open_nofollow_dir, remove_non_dir};
use super::limits::Meter;
use super::meta::Meta;
use super::{clean, hostile, io_err, Applier, Result};

/// Bytes of directory paths kept to set directory mtimes at the end; beyond
/// that (far more directories than any real layer) a directory's mtime is
/// set at once and may be moved by children written after it.
const MAX_DIR_TIMES_BYTES: usize = 64 << 20;

/// Where an entry goes: its name in its (open) parent directory, and its
/// path in the layer, for errors.
#[derive(Clone, Copy)]
pub(super) struct Place<'a> {
    pub(super) parent: BorrowedFd<'a>,
    pub(super) name: &'a OsStr,
    pub(super) path: &'a Path,
}

impl Applier {
    /// Creates the entry `kind` at `at`, with its data and metadata.
    pub(super) fn create<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        kind: tar::EntryType,
        at: Place<'_>,
        meta: &Meta,
        meter: &Meter<'_>,
    ) -> Result<()> {
        match kind {
            tar::EntryType::Directory => self.make_dir(at, meta),
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                self.make_file(entry, kind, at, meta, meter)
            }
            tar::EntryType::Symlink => self.make_symlink(entry, at, meta),
            tar::EntryType::Link => self.make_hard_link(entry, at),
            tar::EntryType::Char | tar::EntryType::Block if !self.same_owner => Err(hostile(
                at.path,
                "device node in a layer unpacked without root (refused)",
            )),
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                self.make_node(entry, kind, at, meta)
            }
            other => Err(hostile(
                at.path,
                format!("unsupported entry type {other:?}"),
            )),
        }
    }

    /// A directory: made (or an existing one kept), its metadata set, and
    /// its mtime recorded for [`Applier::finish`].
    fn make_dir(&mut self, at: Place<'_>, meta: &Meta) -> Result<()> {
        let Place { parent, name, path } = at;
        match mkdirat(parent, name, Mode::from_bits_truncate(0o700)) {
            Ok(()) => {}
            Err(Errno::EEXIST) => {
                let st = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map_err(io_err(path, "stat"))?;
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    remove_non_dir(parent, name, path)?;
                    mkdirat(parent, name, Mode::from_bits_truncate(0o700))
                        .map_err(io_err(path, "mkdir"))?;
                }
            }
            Err(e) => return Err(io_err(path, "mkdir")(e)),
        }
        let fd = open_nofollow_dir(parent, name).map_err(io_err(path, "open dir"))?;
        self.set_fd_meta(fd.as_fd(), meta, path)?;
        let cost = path.as_os_str().len() + std::mem::size_of::<(PathBuf, TimeSpec)>();
        if self.dir_times_bytes + cost <= MAX_DIR_TIMES_BYTES {
            self.dir_times_bytes += cost;
            self.dir_times.push((path.to_path_buf(), meta.mtime));
        } else {
            futimens(fd.as_fd(), &meta.mtime, &meta.mtime).map_err(io_err(path, "set times"))?;
        }
        Ok(())
    }

    /// A regular file (a GNU sparse one written sparse), with its data.
    fn make_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        kind: tar::EntryType,
        at: Place<'_>,
        meta: &Meta,
        meter: &Meter<'_>,
    ) -> Result<()> {
        let Place { parent, name, path } = at;
        remove_non_dir(parent, name, path)?;
        let fd = openat(
            parent,
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io_err(path, "create file"))?;
        let file = std::fs::File::from(fd);
        if kind == tar::EntryType::GNUSparse {
            self.copy_sparse(entry, &file, meter, path)?;
        } else {
            self.copy_data(entry, &file, meter, path)?;
        }
        self.set_fd_meta(file.as_fd(), meta, path)?;
        futimens(file.as_fd(), &meta.mtime, &meta.mtime).map_err(io_err(path, "set times"))
    }

    /// A symlink, whose target may point anywhere (it is only resolved
    /// later, inside the container's root).
    fn make_symlink<R: Read>(
        &self,
        entry: &tar::Entry<'_, R>,
        at: Place<'_>,
        meta: &Meta,
    ) -> Result<()> {
        let Place { parent, name, path } = at;
        let target = link_target(entry, path, "symlink without a target")?;
        remove_non_dir(parent, name, path)?;
        symlinkat(target.as_os_str(), parent, name).map_err(io_err(path, "symlink"))?;
        self.chown_at(parent, name, meta, path)?;
        set_times_at(at, meta)
    }

    /// A hard link to an earlier entry of the same layer.
    fn make_hard_link<R: Read>(&self, entry: &tar::Entry<'_, R>, at: Place<'_>) -> Result<()> {
        let Place { parent, name, path } = at;
        let target = link_target(entry, path, "hard link without a target")?;
        let target_comps = clean(&target).map_err(|_| {
            hostile(
                path,
                format!("hard link target {target:?} leaves the layer"),
            )
        })?;
        let Some((target_name, target_parents)) = target_comps.split_last() else {
            return Err(hostile(path, "hard link to the root"));
        };
        let target_parent = self.open_dir(target_parents, false, path)?;
        remove_non_dir(parent, name, path)?;
        linkat(
            target_parent.as_fd(),
            target_name.as_os_str(),
            parent,
            name,
            AtFlags::empty(),
        )
        .map_err(|e| match e {
            Errno::ENOENT => hostile(
                path,
                format!("hard link target {target:?} is not in the layer"),
            ),
            e => io_err(path, "link")(e),
        })
    }

    /// A device node or a FIFO (device nodes only when unpacking as root).
    fn make_node<R: Read>(
        &self,
        entry: &tar::Entry<'_, R>,
        kind: tar::EntryType,
        at: Place<'_>,
        meta: &Meta,
    ) -> Result<()> {
        let Place { parent, name, path } = at;
        let sflag = match kind {
            tar::EntryType::Char => SFlag::S_IFCHR,
            tar::EntryType::Block => SFlag::S_IFBLK,
            _ => SFlag::S_IFIFO,
        };
        let major = entry.header().device_major().ok().flatten().unwrap_or(0);
        let minor = entry.header().device_minor().ok().flatten().unwrap_or(0);
        remove_non_dir(parent, name, path)?;
        mknodat(
            parent,
            name,
            sflag,
            Mode::empty(),
            makedev(major.into(), minor.into()),
        )
        .map_err(io_err(path, "mknod"))?;
        self.chown_at(parent, name, meta, path)?;
        // A fresh device node or FIFO, not a symlink: following is moot.
        fchmodat(
            parent,
            name,
            Mode::from_bits_truncate(meta.mode),
            FchmodatFlags::FollowSymlink,
        )
        .map_err(io_err(path, "chmod"))?;
        set_times_at(at, meta)
    }
}

/// The target of a symlink or hard link entry; `missing` is the error
/// when it has none.
fn link_target<R: Read>(
    entry: &tar::Entry<'_, R>,
    path: &Path,
    missing: &'static str,
) -> Result<PathBuf> {
    Ok(entry
        .link_name()
        .map_err(|e| hostile(path, format!("bad link name: {e}")))?
        .ok_or_else(|| hostile(path, missing))?
        .into_owned())
}

/// Sets the mtime (and atime) of the entry at `at`, not following it.
fn set_times_at(at: Place<'_>, meta: &Meta) -> Result<()> {
    utimensat(
        at.parent,
        at.name,
        &meta.mtime,
        &meta.mtime,
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(io_err(at.path, "set times"))
}
