//! Applies one layer (a tar stream) onto an empty directory, so that the
//! result can be stacked as an overlayfs lowerdir:
//!
//! - `.wh.NAME` becomes a whiteout (character device 0:0) named NAME;
//!   `.wh..wh..opq` sets `trusted.overlay.opaque=y` on its directory; other
//!   `.wh..wh.*` (aufs metadata) entries are skipped.
//! - Ownership, modes, mtimes, xattrs (PAX `SCHILY.xattr.*`), hard links
//!   (to entries of the same layer), symlinks, device nodes and FIFOs are kept.
//! - Hostile entries are refused: absolute paths or `..` components, a path
//!   through a symlink or a non-directory, a hard link whose target is outside
//!   the root or missing, a new entry replacing a directory, `trusted.overlay.*`
//!   xattrs (they would steer overlayfs).
//!
//! Nothing is ever created through a symlink: every directory on the way is
//! opened relative to the root with `O_NOFOLLOW | O_DIRECTORY`, and the final
//! component is created with `*at` calls that do not follow it. Symlinks
//! themselves may point anywhere: they are only resolved later, inside the
//! container's root.
//!
//! Layers are applied while they download, before their digest can be
//! checked, so a hostile registry controls every byte read here. What keeps a
//! tiny blob from filling the disk or memory is [`UnpackLimits`], enforced on
//! the uncompressed stream itself (see [`Meter`]):
//!
//! - the uncompressed tar stream, and the sum of the entries' sizes (sparse
//!   files at their *apparent* size, holes included), are bounded per layer;
//!   so is the number of entries;
//! - the headers in front of one entry (PAX records, GNU long names, GNU
//!   sparse maps), which the tar reader keeps in memory, are bounded per
//!   entry; paths and link targets longer than `PATH_MAX` are refused;
//! - GNU sparse files (type `S`) are written sparse: holes are not written
//!   (data goes to its offset with `pwrite`) and the length is set at the
//!   end, so they take the disk space of their data only. PAX sparse files (`GNU.sparse.*` records, formats 0.x
//!   and 1.0) are refused: the tar crate does not decode them, and writing
//!   them as plain files would give wrong contents;
//! - a cancellation check (the pull failed or timed out) runs before every
//!   read of the stream and between chunks of a sparse file's holes, so the
//!   thread stops within one chunk of work.

mod data;
mod entry;
mod fd;
mod limits;
mod meta;
#[cfg(test)]
pub(crate) mod tests;
mod whiteout;

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{futimens, utimensat, Mode, UtimensatFlags};
use nix::sys::time::TimeSpec;

pub(crate) use data::{start_writeback, WRITEBACK_EVERY};
use entry::Place;
pub use fd::get_xattr;
pub use limits::UnpackLimits;
pub(crate) use limits::{check_free_space, show_bytes};
use limits::{EntryCount, Meter, Metered};
use meta::Meta;

/// Longest path or link target accepted (Linux `PATH_MAX`): longer ones
/// cannot be used inside the container anyway.
const MAX_PATH: usize = 4096;

/// Why a layer could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The layer is malformed or hostile.
    #[error("entry {}: {reason}", entry.display())]
    Hostile { entry: PathBuf, reason: String },
    /// A local failure while writing `entry`.
    #[error("entry {}: {op}: {source}", entry.display())]
    Io {
        entry: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    /// The tar stream itself could not be read (truncated, corrupt, or the
    /// download behind it failed).
    #[error("reading the layer: {0}")]
    Read(io::Error),
    /// The layer expands beyond one of the [`UnpackLimits`].
    #[error("{0}")]
    Limit(String),
    /// The pull this layer belongs to failed or timed out.
    #[error("unpacking cancelled: the pull failed or timed out")]
    Cancelled,
    /// The store's file system reached its free-space reserve
    /// ([`UnpackLimits::min_free_bytes`]) while writing `entry`.
    #[error("entry {}: {reason}", entry.display())]
    NoSpace { entry: PathBuf, reason: String },
}

type Result<T> = std::result::Result<T, UnpackError>;

/// Applies tar entries under one root directory.
pub(crate) struct Applier {
    root: OwnedFd,
    /// chown entries to their owners (needs root); otherwise keep ours.
    same_owner: bool,
    /// Directories whose mtime is set at the end (writing children changes
    /// it), and the bytes of their paths (bounded by `MAX_DIR_TIMES_BYTES`).
    dir_times: Vec<(PathBuf, TimeSpec)>,
    dir_times_bytes: usize,
    /// Reused buffers: one to copy file data through, one of zeros to tell
    /// sparse holes by (a slice comparison is a `memcmp`, fast in any build).
    copy_buf: Vec<u8>,
    zeros: Vec<u8>,
    /// The last parent directory opened, to spare syscalls for its siblings.
    cached_parent: Option<(Vec<OsString>, OwnedFd)>,
}

fn hostile(entry: &Path, reason: impl Into<String>) -> UnpackError {
    UnpackError::Hostile {
        entry: entry.to_path_buf(),
        reason: reason.into(),
    }
}

fn io_err<'a>(entry: &'a Path, op: &'static str) -> impl FnOnce(Errno) -> UnpackError + 'a {
    move |e| UnpackError::Io {
        entry: entry.to_path_buf(),
        op,
        source: io::Error::from(e),
    }
}

/// Splits an entry path into plain components; refuses absolute paths and `..`.
fn clean(entry: &Path) -> Result<Vec<OsString>> {
    let mut out = Vec::new();
    for c in entry.components() {
        match c {
            Component::Normal(name) => out.push(name.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => return Err(hostile(entry, "path has a '..' component")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(hostile(entry, "absolute path"))
            }
        }
    }
    Ok(out)
}

impl Applier {
    /// Opens `root` (an existing, empty directory).
    pub(crate) fn new(root: &Path, same_owner: bool) -> io::Result<Applier> {
        let root = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Applier {
            root,
            same_owner,
            dir_times: Vec::new(),
            dir_times_bytes: 0,
            copy_buf: Vec::new(),
            zeros: Vec::new(),
            cached_parent: None,
        })
    }

    /// Applies every entry of the tar stream `src`, then the directory
    /// mtimes; reads `src` to its end (the end blocks and any padding), all
    /// within `limits`. `cancelled` is asked before every read of `src` and
    /// between chunks of sparse holes: once it says yes, this stops with
    /// [`UnpackError::Cancelled`].
    pub(crate) fn apply_stream<R: Read>(
        &mut self,
        src: &mut R,
        limits: &UnpackLimits,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<()> {
        let meter = Meter::new(limits, cancelled);
        let mut metered = Metered {
            inner: src,
            meter: &meter,
        };
        let applied = self.apply_entries(&mut metered, &meter);
        let applied = applied.and_then(|()| {
            // The tar end blocks and anything after them are read too (they
            // count for the diff id), through the same bounds.
            io::copy(&mut metered, &mut io::sink())
                .map(drop)
                .map_err(UnpackError::Read)
        });
        applied.map_err(|e| meter.explain(e))?;
        self.finish()
    }

    fn apply_entries<R: Read>(&mut self, src: &mut R, meter: &Meter<'_>) -> Result<()> {
        let limits = meter.limits;
        let mut archive = tar::Archive::new(src);
        let mut entries = archive.entries().map_err(UnpackError::Read)?;
        let mut counted = EntryCount::default();
        loop {
            // Everything the parser reads now is headers of the next entry.
            meter.headers_start();
            let next = entries.next();
            meter.headers_end();
            let Some(entry) = next else { break };
            let mut entry = entry.map_err(UnpackError::Read)?;
            counted.admit(&entry, self.root.as_fd(), &limits)?;
            self.apply(&mut entry, meter)?;
            // Data of entries that do not use it (a symlink with a size),
            // read through the meter rather than skipped by the parser.
            io::copy(&mut entry, &mut io::sink()).map_err(UnpackError::Read)?;
        }
        Ok(())
    }

    /// Applies one entry.
    fn apply<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, meter: &Meter<'_>) -> Result<()> {
        let path = checked_path(entry)?;
        let comps = clean(&path)?;
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            return Ok(());
        }
        let meta = self.meta(entry, &path)?;
        let Some((name, parents)) = comps.split_last() else {
            return self.apply_root(kind, &meta, &path);
        };
        if self.apply_whiteout(name, parents, &meta, &path)? {
            return Ok(());
        }
        let parent = self.parent(parents, &path)?;
        let at = Place {
            parent: parent.as_fd(),
            name,
            path: &path,
        };
        self.create(entry, kind, at, &meta, meter)
    }

    /// The root itself ("./"): only its metadata.
    fn apply_root(&mut self, kind: tar::EntryType, meta: &Meta, path: &Path) -> Result<()> {
        if kind.is_dir() {
            let root = self.root.try_clone().map_err(|e| UnpackError::Io {
                entry: path.to_path_buf(),
                op: "dup",
                source: e,
            })?;
            self.set_fd_meta(root.as_fd(), meta, path)?;
            self.dir_times.push((PathBuf::new(), meta.mtime));
        }
        Ok(())
    }

    /// Sets the recorded directory mtimes (children are all written now).
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.cached_parent = None;
        let times = std::mem::take(&mut self.dir_times);
        self.dir_times_bytes = 0;
        for (path, mtime) in times.iter().rev() {
            let comps = clean(path)?;
            match comps.split_last() {
                None => {
                    futimens(self.root.as_fd(), mtime, mtime).map_err(io_err(path, "set times"))?
                }
                Some((name, parents)) => {
                    let parent = self.open_dir(parents, false, path)?;
                    utimensat(
                        parent.as_fd(),
                        name.as_os_str(),
                        mtime,
                        mtime,
                        UtimensatFlags::NoFollowSymlink,
                    )
                    .map_err(io_err(path, "set times"))?;
                }
            }
        }
        Ok(())
    }
}

/// The path of an entry, refused when it or its link target is longer than
/// [`MAX_PATH`].
fn checked_path<R: Read>(entry: &tar::Entry<'_, R>) -> Result<PathBuf> {
    let path = entry
        .path()
        .map_err(|e| hostile(Path::new("?"), format!("bad path: {e}")))?
        .into_owned();
    if path.as_os_str().len() > MAX_PATH {
        let shown: String = path.to_string_lossy().chars().take(64).collect();
        return Err(hostile(
            Path::new(&format!("{shown}…")),
            format!(
                "path of {} bytes, longer than {MAX_PATH}",
                path.as_os_str().len()
            ),
        ));
    }
    if let Some(link) = entry.link_name_bytes() {
        if link.len() > MAX_PATH {
            return Err(hostile(
                &path,
                format!(
                    "link target of {} bytes, longer than {MAX_PATH}",
                    link.len()
                ),
            ));
        }
    }
    Ok(path)
}
