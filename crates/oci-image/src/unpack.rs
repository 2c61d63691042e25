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

use std::cell::{Cell, RefCell};
use std::ffi::{CString, OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{
    fchmod, fchmodat, fstatat, futimens, makedev, mkdirat, mknodat, utimensat, FchmodatFlags, Mode,
    SFlag, UtimensatFlags,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, fchownat, linkat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";
const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
/// Longest path or link target accepted (Linux `PATH_MAX`): longer ones
/// cannot be used inside the container anyway.
const MAX_PATH: usize = 4096;
/// Bytes of directory paths kept to set directory mtimes at the end; beyond
/// that (far more directories than any real layer) a directory's mtime is
/// set at once and may be moved by children written after it.
const MAX_DIR_TIMES_BYTES: usize = 64 << 20;
/// Chunk in which file data is copied (sparse holes are read as zeros).
const COPY_CHUNK: usize = 1 << 20;
/// Bytes of one file written between two starts of its writeback
/// ([`start_writeback`]); a file that ends with fewer waits for the syncfs.
pub(crate) const WRITEBACK_EVERY: u64 = 4 << 20;

/// Bounds on what one layer may expand to, with defaults no real image
/// reaches. Layers are unpacked before their digest is verified: these
/// bounds are what makes that safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UnpackLimits {
    /// Most bytes of one layer, counted three ways, each bounded by this:
    /// the compressed blob (the manifest's size), the uncompressed tar
    /// stream, and the sum of the entries' sizes, where a sparse file counts
    /// at its apparent size, holes included. Default 64 GiB.
    pub max_layer_bytes: u64,
    /// Most entries (files, directories, links, …) in one layer.
    /// Default 2 Mi (2,097,152).
    pub max_entries: u64,
    /// Most bytes of headers in front of one entry: its PAX records, GNU
    /// long name and link name, and GNU sparse map, which the tar reader
    /// holds in memory. Default 1 MiB.
    pub max_entry_header_bytes: u64,
    /// Space the store's file system keeps free (at most 5% of its size, for
    /// small file systems): unpacking and storing the blob fail once less is
    /// left, checked at the first write of a layer and every 16 MiB after.
    /// 5% of the inodes are kept free too (checked every 64 Ki entries).
    /// Whatever the other bounds allow, a pull never fills the disk.
    /// Default 1 GiB; 0 turns both checks off.
    pub min_free_bytes: u64,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_layer_bytes: 64 << 30,
            max_entries: 2 << 20,
            max_entry_header_bytes: 1 << 20,
            min_free_bytes: 1 << 30,
        }
    }
}

impl UnpackLimits {
    /// Refuses bounds that would refuse every layer.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.max_layer_bytes == 0 || self.max_entries == 0 {
            return Err("unpack limits max_layer_bytes and max_entries must be above 0".into());
        }
        if self.max_entry_header_bytes < 64 << 10 {
            return Err(format!(
                "unpack limit max_entry_header_bytes must be at least 65536 \
                 (a PAX header with a {MAX_PATH}-byte path and xattrs), not {}",
                self.max_entry_header_bytes
            ));
        }
        Ok(())
    }
}

/// Bytes written between two checks of the free space.
const FREE_CHECK_EVERY: u64 = 16 << 20;

/// Checks that the file system of `fd` keeps `limits.min_free_bytes` free,
/// at the first call and then every [`FREE_CHECK_EVERY`] bytes written
/// (`written` carries the count between calls, `u64::MAX` at first).
pub(crate) fn check_free_space(
    fd: BorrowedFd<'_>,
    limits: &UnpackLimits,
    written: &Cell<u64>,
    n: u64,
) -> io::Result<std::result::Result<(), String>> {
    if limits.min_free_bytes == 0 {
        return Ok(Ok(()));
    }
    let since = written.get().saturating_add(n);
    if since < FREE_CHECK_EVERY {
        written.set(since);
        return Ok(Ok(()));
    }
    written.set(0);
    let st = nix::sys::statvfs::fstatvfs(fd)?;
    let frsize = st.fragment_size() as u64;
    let free = (st.blocks_available() as u64).saturating_mul(frsize);
    let size = (st.blocks() as u64).saturating_mul(frsize);
    let reserve = limits.min_free_bytes.min(size / 20);
    if free < reserve {
        return Ok(Err(format!(
            "the store's file system has {} free, less than the {} it must keep \
             (unpack limit min_free_bytes, at most 5% of the file system)",
            show_bytes(free),
            show_bytes(reserve)
        )));
    }
    Ok(Ok(()))
}

/// Entries created between two checks of the free inodes.
const INODE_CHECK_EVERY: u64 = 64 << 10;

/// Checks that the file system of `fd` keeps 5% of its inodes free (file
/// systems that make inodes on demand report none and pass). Off, like the
/// space reserve, when `limits.min_free_bytes` is 0.
pub(crate) fn check_free_inodes(
    fd: BorrowedFd<'_>,
    limits: &UnpackLimits,
) -> io::Result<std::result::Result<(), String>> {
    if limits.min_free_bytes == 0 {
        return Ok(Ok(()));
    }
    let st = nix::sys::statvfs::fstatvfs(fd)?;
    let (files, free) = (st.files() as u64, st.files_available() as u64);
    if files > 0 && free < files / 20 {
        return Ok(Err(format!(
            "the store's file system has {free} of {files} inodes free, less than the 5% \
             it must keep (unpack limit min_free_bytes, 0 turns this off)"
        )));
    }
    Ok(Ok(()))
}

/// `n` bytes, with a binary unit when it is a round one (for errors).
pub(crate) fn show_bytes(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{n} bytes ({} {unit})", n >> shift);
        }
    }
    format!("{n} bytes")
}

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

/// Metadata of one entry, from its header and PAX records.
struct Meta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: TimeSpec,
    xattrs: Vec<(String, Vec<u8>)>,
}

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
        let (mut count, mut apparent) = (0u64, 0u64);
        loop {
            // Everything the parser reads now is headers of the next entry.
            meter.headers_start();
            let next = entries.next();
            meter.headers_end();
            let Some(entry) = next else { break };
            let mut entry = entry.map_err(UnpackError::Read)?;
            count += 1;
            if count % INODE_CHECK_EVERY == 1 {
                let path = PathBuf::from(OsStr::from_bytes(&entry.path_bytes()));
                match check_free_inodes(self.root.as_fd(), &limits) {
                    Ok(Ok(())) => {}
                    Ok(Err(reason)) => {
                        return Err(UnpackError::NoSpace {
                            entry: path,
                            reason,
                        })
                    }
                    Err(e) => {
                        return Err(UnpackError::Io {
                            entry: path,
                            op: "statvfs",
                            source: e,
                        })
                    }
                }
            }
            if count > limits.max_entries {
                return Err(UnpackError::Limit(format!(
                    "the layer has more than {} entries (unpack limit max_entries)",
                    limits.max_entries
                )));
            }
            apparent = apparent.saturating_add(entry.size());
            if apparent > limits.max_layer_bytes {
                let path = entry.path_bytes();
                return Err(UnpackError::Limit(format!(
                    "entry {}: its size of {} brings the layer's files beyond the limit of {} \
                     (unpack limit max_layer_bytes; sparse files count at their apparent size)",
                    String::from_utf8_lossy(&path),
                    show_bytes(entry.size()),
                    show_bytes(limits.max_layer_bytes)
                )));
            }
            self.apply(&mut entry, meter)?;
            // Data of entries that do not use it (a symlink with a size),
            // read through the meter rather than skipped by the parser.
            io::copy(&mut entry, &mut io::sink()).map_err(UnpackError::Read)?;
        }
        Ok(())
    }

    /// Applies one entry.
    fn apply<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, meter: &Meter<'_>) -> Result<()> {
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
            // The root itself ("./"): only its metadata.
            if kind.is_dir() {
                let root = self.root.try_clone().map_err(|e| UnpackError::Io {
                    entry: path.clone(),
                    op: "dup",
                    source: e,
                })?;
                self.set_fd_meta(root.as_fd(), &meta, &path)?;
                self.dir_times.push((PathBuf::new(), meta.mtime));
            }
            return Ok(());
        };
        let name_str = name.to_string_lossy();
        if name_str == OPAQUE_MARKER {
            let dir = self.open_dir(parents, true, &path)?;
            set_xattr(dir.as_fd(), OPAQUE_XATTR, b"y")
                .map_err(io_err(&path, "set opaque xattr"))?;
            return Ok(());
        }
        if let Some(target) = name.as_bytes().strip_prefix(WHITEOUT_PREFIX.as_bytes()) {
            if target.starts_with(WHITEOUT_PREFIX.as_bytes()) {
                return Ok(()); // aufs metadata (.wh..wh.plnk, …): nothing for overlayfs
            }
            if target.is_empty() || target == b"." || target == b".." {
                return Err(hostile(&path, "whiteout without a name"));
            }
            let target = OsStr::from_bytes(target);
            let parent = self.parent(parents, &path)?;
            remove_non_dir(parent.as_fd(), target, &path)?;
            mknodat(
                parent.as_fd(),
                target,
                SFlag::S_IFCHR,
                Mode::empty(),
                makedev(0, 0),
            )
            .map_err(io_err(&path, "mknod whiteout"))?;
            self.chown_at(parent.as_fd(), target, &meta, &path)?;
            return Ok(());
        }
        let parent = self.parent(parents, &path)?;
        let parent = parent.as_fd();
        match kind {
            tar::EntryType::Directory => {
                match mkdirat(parent, name.as_os_str(), Mode::from_bits_truncate(0o700)) {
                    Ok(()) => {}
                    Err(Errno::EEXIST) => {
                        let st = fstatat(parent, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                            .map_err(io_err(&path, "stat"))?;
                        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                            remove_non_dir(parent, name, &path)?;
                            mkdirat(parent, name.as_os_str(), Mode::from_bits_truncate(0o700))
                                .map_err(io_err(&path, "mkdir"))?;
                        }
                    }
                    Err(e) => return Err(io_err(&path, "mkdir")(e)),
                }
                let fd = open_nofollow_dir(parent, name).map_err(io_err(&path, "open dir"))?;
                self.set_fd_meta(fd.as_fd(), &meta, &path)?;
                let cost = path.as_os_str().len() + std::mem::size_of::<(PathBuf, TimeSpec)>();
                if self.dir_times_bytes + cost <= MAX_DIR_TIMES_BYTES {
                    self.dir_times_bytes += cost;
                    self.dir_times.push((path.clone(), meta.mtime));
                } else {
                    futimens(fd.as_fd(), &meta.mtime, &meta.mtime)
                        .map_err(io_err(&path, "set times"))?;
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                remove_non_dir(parent, name, &path)?;
                let fd = openat(
                    parent,
                    name.as_os_str(),
                    OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_WRONLY
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .map_err(io_err(&path, "create file"))?;
                let file = std::fs::File::from(fd);
                if kind == tar::EntryType::GNUSparse {
                    self.copy_sparse(entry, &file, meter, &path)?;
                } else {
                    self.copy_data(entry, &file, meter, &path)?;
                }
                self.set_fd_meta(file.as_fd(), &meta, &path)?;
                futimens(file.as_fd(), &meta.mtime, &meta.mtime)
                    .map_err(io_err(&path, "set times"))?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| hostile(&path, format!("bad link name: {e}")))?
                    .ok_or_else(|| hostile(&path, "symlink without a target"))?
                    .into_owned();
                remove_non_dir(parent, name, &path)?;
                symlinkat(target.as_os_str(), parent, name.as_os_str())
                    .map_err(io_err(&path, "symlink"))?;
                self.chown_at(parent, name, &meta, &path)?;
                utimensat(
                    parent,
                    name.as_os_str(),
                    &meta.mtime,
                    &meta.mtime,
                    UtimensatFlags::NoFollowSymlink,
                )
                .map_err(io_err(&path, "set times"))?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| hostile(&path, format!("bad link name: {e}")))?
                    .ok_or_else(|| hostile(&path, "hard link without a target"))?
                    .into_owned();
                let target_comps = clean(&target).map_err(|_| {
                    hostile(
                        &path,
                        format!("hard link target {target:?} leaves the layer"),
                    )
                })?;
                let Some((target_name, target_parents)) = target_comps.split_last() else {
                    return Err(hostile(&path, "hard link to the root"));
                };
                let target_parent = self.open_dir(target_parents, false, &path)?;
                remove_non_dir(parent, name, &path)?;
                linkat(
                    target_parent.as_fd(),
                    target_name.as_os_str(),
                    parent,
                    name.as_os_str(),
                    AtFlags::empty(),
                )
                .map_err(|e| match e {
                    Errno::ENOENT => hostile(
                        &path,
                        format!("hard link target {target:?} is not in the layer"),
                    ),
                    e => io_err(&path, "link")(e),
                })?;
            }
            tar::EntryType::Char | tar::EntryType::Block if !self.same_owner => {
                return Err(hostile(
                    &path,
                    "device node in a layer unpacked without root (refused)",
                ));
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                let sflag = match kind {
                    tar::EntryType::Char => SFlag::S_IFCHR,
                    tar::EntryType::Block => SFlag::S_IFBLK,
                    _ => SFlag::S_IFIFO,
                };
                let major = entry.header().device_major().ok().flatten().unwrap_or(0);
                let minor = entry.header().device_minor().ok().flatten().unwrap_or(0);
                remove_non_dir(parent, name, &path)?;
                mknodat(
                    parent,
                    name.as_os_str(),
                    sflag,
                    Mode::empty(),
                    makedev(major.into(), minor.into()),
                )
                .map_err(io_err(&path, "mknod"))?;
                self.chown_at(parent, name, &meta, &path)?;
                // A fresh device node or FIFO, not a symlink: following is moot.
                fchmodat(
                    parent,
                    name.as_os_str(),
                    Mode::from_bits_truncate(meta.mode),
                    FchmodatFlags::FollowSymlink,
                )
                .map_err(io_err(&path, "chmod"))?;
                utimensat(
                    parent,
                    name.as_os_str(),
                    &meta.mtime,
                    &meta.mtime,
                    UtimensatFlags::NoFollowSymlink,
                )
                .map_err(io_err(&path, "set times"))?;
            }
            other => {
                return Err(hostile(&path, format!("unsupported entry type {other:?}")));
            }
        }
        Ok(())
    }

    /// Writes a regular file, keeping the free-space reserve.
    fn copy_data<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        mut file: &std::fs::File,
        meter: &Meter<'_>,
        path: &Path,
    ) -> Result<()> {
        self.copy_buf.resize(COPY_CHUNK, 0);
        let mut unflushed = 0u64;
        loop {
            let n = match entry.read(&mut self.copy_buf) {
                Ok(0) => {
                    if unflushed >= COPY_CHUNK as u64 {
                        start_writeback(file.as_fd());
                    }
                    return Ok(());
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(UnpackError::Read(e)),
            };
            meter.check_space(file.as_fd(), n as u64, path)?;
            io::Write::write_all(&mut file, &self.copy_buf[..n]).map_err(|e| UnpackError::Io {
                entry: path.to_path_buf(),
                op: "write",
                source: e,
            })?;
            unflushed += n as u64;
            if unflushed >= WRITEBACK_EVERY {
                start_writeback(file.as_fd());
                unflushed = 0;
            }
        }
    }

    /// Writes a GNU sparse file: chunks of zeros (the holes, which the tar
    /// reader hands out as zeros) are skipped, not written, and the length
    /// is set at the end. Cancellation is checked between chunks, since
    /// reading holes does not touch the stream.
    fn copy_sparse<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        file: &std::fs::File,
        meter: &Meter<'_>,
        path: &Path,
    ) -> Result<()> {
        self.copy_buf.resize(COPY_CHUNK, 0);
        self.zeros.resize(COPY_CHUNK, 0);
        let buf = &mut self.copy_buf[..];
        let mut pos = 0u64;
        loop {
            if (meter.cancelled)() {
                return Err(UnpackError::Cancelled);
            }
            let n = match entry.read(buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(UnpackError::Read(e)),
            };
            let chunk = &buf[..n];
            if chunk != &self.zeros[..n] {
                meter.check_space(file.as_fd(), n as u64, path)?;
                file.write_all_at(chunk, pos).map_err(|e| UnpackError::Io {
                    entry: path.to_path_buf(),
                    op: "write",
                    source: e,
                })?;
            }
            pos += n as u64;
        }
        file.set_len(pos).map_err(|e| UnpackError::Io {
            entry: path.to_path_buf(),
            op: "set length",
            source: e,
        })
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

    fn meta<R: Read>(&self, entry: &mut tar::Entry<'_, R>, path: &Path) -> Result<Meta> {
        let header = entry.header();
        let bad = |what: &str, e: io::Error| hostile(path, format!("bad {what}: {e}"));
        let mut meta = Meta {
            mode: header.mode().map_err(|e| bad("mode", e))? & 0o7777,
            uid: header.uid().map_err(|e| bad("uid", e))?,
            gid: header.gid().map_err(|e| bad("gid", e))?,
            mtime: TimeSpec::new(header.mtime().map_err(|e| bad("mtime", e))? as i64, 0),
            xattrs: Vec::new(),
        };
        if let Some(exts) = entry.pax_extensions().map_err(UnpackError::Read)? {
            for ext in exts {
                let ext = ext.map_err(|e| bad("PAX record", e))?;
                let Ok(key) = ext.key() else { continue };
                if key.starts_with("GNU.sparse.") {
                    return Err(hostile(
                        path,
                        format!(
                            "PAX sparse file ({key} record) is not supported; \
                             GNU sparse (type 'S') entries are"
                        ),
                    ));
                }
                if let Some(name) = key.strip_prefix("SCHILY.xattr.") {
                    if name.starts_with("trusted.overlay.") {
                        return Err(hostile(path, format!("xattr {name} would steer overlayfs")));
                    }
                    meta.xattrs
                        .push((name.to_string(), ext.value_bytes().to_vec()));
                    continue;
                }
                let value = ext.value().unwrap_or("");
                match key {
                    "uid" => meta.uid = value.parse().map_err(|_| hostile(path, "bad PAX uid"))?,
                    "gid" => meta.gid = value.parse().map_err(|_| hostile(path, "bad PAX gid"))?,
                    "mtime" => {
                        meta.mtime =
                            parse_pax_time(value).ok_or_else(|| hostile(path, "bad PAX mtime"))?
                    }
                    _ => {}
                }
            }
        }
        Ok(meta)
    }

    /// Owner, mode and xattrs of an open file or directory (mode after owner:
    /// chown clears set-id bits).
    fn set_fd_meta(&self, fd: BorrowedFd<'_>, meta: &Meta, path: &Path) -> Result<()> {
        if self.same_owner {
            fchown(fd, Some(uid(meta.uid, path)?), Some(gid(meta.gid, path)?))
                .map_err(io_err(path, "chown"))?;
        }
        fchmod(fd, Mode::from_bits_truncate(meta.mode)).map_err(io_err(path, "chmod"))?;
        for (name, value) in &meta.xattrs {
            match set_xattr(fd, name, value) {
                Ok(()) => {}
                Err(Errno::ENOTSUP) => {
                    tracing::warn!(entry = %path.display(), xattr = %name, "xattr not supported here; skipped");
                }
                Err(e) => return Err(io_err(path, "set xattr")(e)),
            }
        }
        Ok(())
    }

    fn chown_at(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        meta: &Meta,
        path: &Path,
    ) -> Result<()> {
        if !self.same_owner {
            return Ok(());
        }
        fchownat(
            parent,
            name,
            Some(uid(meta.uid, path)?),
            Some(gid(meta.gid, path)?),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io_err(path, "chown"))
    }

    /// The parent directory of an entry (created when missing), cached.
    fn parent(&mut self, parents: &[OsString], path: &Path) -> Result<OwnedFd> {
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
    fn open_dir(&self, comps: &[OsString], create: bool, path: &Path) -> Result<OwnedFd> {
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

/// Counts the uncompressed tar stream as the tar parser reads it, and fails
/// the read that crosses a limit (or comes after cancellation), so that the
/// parser stops before it allocates or writes beyond the bounds. The error
/// the parser then returns is replaced by the one recorded here.
pub(crate) struct Meter<'a> {
    limits: UnpackLimits,
    cancelled: &'a dyn Fn() -> bool,
    /// Bytes of the stream read so far.
    read: Cell<u64>,
    /// Where the parser started reading the next entry's headers; `None`
    /// while an entry's data is read.
    headers_from: Cell<Option<u64>>,
    /// Why a read failed on purpose.
    tripped: RefCell<Option<UnpackError>>,
    /// Bytes written since the free space was last checked.
    written: Cell<u64>,
}

impl<'a> Meter<'a> {
    fn new(limits: &UnpackLimits, cancelled: &'a dyn Fn() -> bool) -> Meter<'a> {
        Meter {
            limits: *limits,
            cancelled,
            read: Cell::new(0),
            headers_from: Cell::new(None),
            tripped: RefCell::new(None),
            written: Cell::new(u64::MAX),
        }
    }

    /// Before `n` more bytes are written to `fd`: the free-space reserve.
    fn check_space(&self, fd: BorrowedFd<'_>, n: u64, path: &Path) -> Result<()> {
        match check_free_space(fd, &self.limits, &self.written, n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(UnpackError::NoSpace {
                entry: path.to_path_buf(),
                reason: why,
            }),
            Err(e) => Err(UnpackError::Io {
                entry: path.to_path_buf(),
                op: "statvfs",
                source: e,
            }),
        }
    }

    fn headers_start(&self) {
        self.headers_from.set(Some(self.read.get()));
    }

    fn headers_end(&self) {
        self.headers_from.set(None);
    }

    fn trip(&self, why: UnpackError) -> io::Error {
        let msg = why.to_string();
        self.tripped.borrow_mut().get_or_insert(why);
        io::Error::other(msg)
    }

    /// The recorded reason, if a read was failed on purpose, else `e`.
    fn explain(&self, e: UnpackError) -> UnpackError {
        // Once a read failed on purpose, whatever the parser made of it
        // follows from that.
        self.tripped.borrow_mut().take().unwrap_or(e)
    }
}

/// The stream under the tar parser, read through a [`Meter`].
struct Metered<'m, 'a, R> {
    inner: R,
    meter: &'m Meter<'a>,
}

impl<R: Read> Read for Metered<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let m = self.meter;
        if (m.cancelled)() {
            return Err(m.trip(UnpackError::Cancelled));
        }
        let n = self.inner.read(buf)?;
        let read = m.read.get() + n as u64;
        m.read.set(read);
        if read > m.limits.max_layer_bytes {
            return Err(m.trip(UnpackError::Limit(format!(
                "the uncompressed layer is larger than the limit of {} (unpack limit max_layer_bytes)",
                show_bytes(m.limits.max_layer_bytes)
            ))));
        }
        if let Some(from) = m.headers_from.get() {
            if read - from > m.limits.max_entry_header_bytes {
                return Err(m.trip(UnpackError::Limit(format!(
                    "the headers of the entry at offset {from} of the tar stream (PAX records, \
                     long names, sparse map) are larger than the limit of {} \
                     (unpack limit max_entry_header_bytes)",
                    show_bytes(m.limits.max_entry_header_bytes)
                ))));
            }
        }
        Ok(n)
    }
}

fn uid(id: u64, path: &Path) -> Result<Uid> {
    u32::try_from(id)
        .map(Uid::from_raw)
        .map_err(|_| hostile(path, format!("uid {id} out of range")))
}

fn gid(id: u64, path: &Path) -> Result<Gid> {
    u32::try_from(id)
        .map(Gid::from_raw)
        .map_err(|_| hostile(path, format!("gid {id} out of range")))
}

fn parse_pax_time(value: &str) -> Option<TimeSpec> {
    let (secs, frac) = value.split_once('.').unwrap_or((value, ""));
    let secs: i64 = secs.parse().ok()?;
    let mut nanos: i64 = 0;
    if !frac.is_empty() {
        let digits: String = frac.chars().take(9).collect();
        if !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        nanos = format!("{digits:0<9}").parse().ok()?;
    }
    Some(TimeSpec::new(secs, nanos))
}

fn open_nofollow_dir(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Removes an earlier entry of the same name so a later one can replace it;
/// a directory is never replaced by something else.
fn remove_non_dir(parent: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<()> {
    match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io_err(path, "stat")(e)),
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
            Err(hostile(path, "replaces a directory of the same layer"))
        }
        Ok(_) => unlinkat(parent, name, UnlinkatFlags::NoRemoveDir).map_err(io_err(path, "unlink")),
    }
}

/// Starts writing back the dirty pages of `fd` without waiting for them
/// (`sync_file_range(2)`, `SYNC_FILE_RANGE_WRITE`), as dpkg does while it
/// unpacks: the disk works while the layer is still being decompressed, and
/// the layer's closing syncfs (which makes it durable) waits for less.
/// Best effort: a failure leaves it all to that syncfs.
pub(crate) fn start_writeback(fd: BorrowedFd<'_>) {
    // SAFETY: a valid fd; the call touches no memory of ours.
    unsafe {
        libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// `fsetxattr(2)` (nix has no xattr calls).
fn set_xattr(fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> nix::Result<()> {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// A tar entry header with fixed metadata.
    fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_000_000);
        h
    }

    /// Raw path bytes written straight into the header (the tar crate's
    /// builder refuses `..` and absolute paths, which hostile layers have).
    fn set_raw_path(h: &mut tar::Header, path: &str) {
        let name = &mut h.as_old_mut().name;
        name.fill(0);
        name[..path.len()].copy_from_slice(path.as_bytes());
    }

    fn set_raw_link(h: &mut tar::Header, target: &str) {
        let link = &mut h.as_old_mut().linkname;
        link.fill(0);
        link[..target.len()].copy_from_slice(target.as_bytes());
    }

    enum E<'a> {
        Dir(&'a str),
        File(&'a str, &'a [u8]),
        Symlink(&'a str, &'a str),
        Hardlink(&'a str, &'a str),
    }

    fn build(entries: &[E<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for e in entries {
            let (mut h, path, data): (tar::Header, &str, &[u8]) = match e {
                E::Dir(p) => (header(tar::EntryType::Directory, 0, 0o755), p, b""),
                E::File(p, d) => (header(tar::EntryType::Regular, d.len() as u64, 0o644), p, d),
                E::Symlink(p, t) => {
                    let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                    set_raw_link(&mut h, t);
                    (h, p, b"")
                }
                E::Hardlink(p, t) => {
                    let mut h = header(tar::EntryType::Link, 0, 0o644);
                    set_raw_link(&mut h, t);
                    (h, p, b"")
                }
            };
            set_raw_path(&mut h, path);
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// A sandbox: `outside/` next to the snapshot root `root/`, so escapes
    /// would be visible.
    struct Sandbox {
        dir: tempfile::TempDir,
    }

    impl Sandbox {
        fn new() -> Sandbox {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("root")).unwrap();
            std::fs::create_dir(dir.path().join("outside")).unwrap();
            std::fs::write(dir.path().join("outside/victim"), b"original").unwrap();
            Sandbox { dir }
        }
        fn root(&self) -> PathBuf {
            self.dir.path().join("root")
        }
        fn apply(&self, tar_bytes: &[u8]) -> Result<()> {
            self.apply_with(tar_bytes, &UnpackLimits::default(), &|| false)
        }
        fn apply_with(
            &self,
            mut tar_bytes: &[u8],
            limits: &UnpackLimits,
            cancelled: &dyn Fn() -> bool,
        ) -> Result<()> {
            let mut applier = Applier::new(&self.root(), is_root()).unwrap();
            applier.apply_stream(&mut tar_bytes, limits, cancelled)
        }
        /// Everything outside `root/` is as the sandbox made it.
        fn assert_outside_untouched(&self) {
            let names: Vec<_> = std::fs::read_dir(self.dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            let mut names = names;
            names.sort();
            assert_eq!(names, ["outside", "root"]);
            let outside: Vec<_> = std::fs::read_dir(self.dir.path().join("outside"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(outside, ["victim"]);
            assert_eq!(
                std::fs::read(self.dir.path().join("outside/victim")).unwrap(),
                b"original"
            );
        }
    }

    fn assert_hostile(r: Result<()>) {
        match r {
            Err(UnpackError::Hostile { .. }) => {}
            other => panic!("expected a hostile-entry error, got {other:?}"),
        }
    }

    #[test]
    fn regular_layer_keeps_files_links_and_times() {
        let sb = Sandbox::new();
        let tar = build(&[
            E::Dir("etc/"),
            E::File("etc/hosts", b"127.0.0.1 localhost\n"),
            E::Hardlink("etc/hosts2", "etc/hosts"),
            E::Symlink("etc/abs", "/outside/victim"),
            E::Symlink("etc/rel", "../../../outside/victim"),
            E::File("deep/er/file", b"x"),
        ]);
        sb.apply(&tar).unwrap();
        let root = sb.root();
        assert_eq!(
            std::fs::read(root.join("etc/hosts")).unwrap(),
            b"127.0.0.1 localhost\n"
        );
        let a = std::fs::metadata(root.join("etc/hosts")).unwrap();
        let b = std::fs::metadata(root.join("etc/hosts2")).unwrap();
        assert_eq!(a.ino(), b.ino());
        assert_eq!(a.mode() & 0o7777, 0o644);
        assert_eq!(a.mtime(), 1_000_000);
        assert_eq!(
            std::fs::metadata(root.join("etc")).unwrap().mtime(),
            1_000_000
        );
        assert_eq!(
            std::fs::read_link(root.join("etc/abs")).unwrap(),
            Path::new("/outside/victim")
        );
        assert_eq!(
            std::fs::symlink_metadata(root.join("etc/rel"))
                .unwrap()
                .mtime(),
            1_000_000
        );
        assert_eq!(
            std::fs::metadata(root.join("deep/er"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o755
        );
        sb.assert_outside_untouched();
    }

    #[test]
    fn dotdot_and_absolute_paths_are_refused() {
        for path in [
            "../outside/evil",
            "a/../../outside/evil",
            "/outside/evil",
            "./../evil",
        ] {
            let sb = Sandbox::new();
            assert_hostile(sb.apply(&build(&[E::File(path, b"evil")])));
            sb.assert_outside_untouched();
        }
    }

    #[test]
    fn writing_through_a_symlink_is_refused() {
        let sb = Sandbox::new();
        let outside = sb.dir.path().join("outside");
        let tar = build(&[
            E::Symlink("escape", outside.to_str().unwrap()),
            E::File("escape/victim", b"evil"),
        ]);
        assert_hostile(sb.apply(&tar));
        sb.assert_outside_untouched();

        let sb = Sandbox::new();
        let tar = build(&[E::Symlink("up", "../outside"), E::File("up/new", b"evil")]);
        assert_hostile(sb.apply(&tar));
        sb.assert_outside_untouched();
    }

    #[test]
    fn a_file_replacing_a_symlink_does_not_follow_it() {
        let sb = Sandbox::new();
        let victim = sb.dir.path().join("outside/victim");
        let tar = build(&[
            E::Symlink("x", victim.to_str().unwrap()),
            E::File("x", b"evil"),
        ]);
        sb.apply(&tar).unwrap();
        assert_eq!(std::fs::read(sb.root().join("x")).unwrap(), b"evil");
        assert!(!std::fs::symlink_metadata(sb.root().join("x"))
            .unwrap()
            .file_type()
            .is_symlink());
        sb.assert_outside_untouched();
    }

    #[test]
    fn hard_links_out_of_the_layer_are_refused() {
        for target in ["../outside/victim", "/etc/passwd", "missing/file"] {
            let sb = Sandbox::new();
            assert_hostile(sb.apply(&build(&[E::Hardlink("link", target)])));
            sb.assert_outside_untouched();
        }
        // Through a symlinked directory of the layer.
        let sb = Sandbox::new();
        let outside = sb.dir.path().join("outside");
        let tar = build(&[
            E::Symlink("d", outside.to_str().unwrap()),
            E::Hardlink("link", "d/victim"),
        ]);
        assert_hostile(sb.apply(&tar));
        sb.assert_outside_untouched();
        // A hard link to an escaping symlink links the symlink, not its target.
        let sb = Sandbox::new();
        let victim = sb.dir.path().join("outside/victim");
        let tar = build(&[
            E::Symlink("s", victim.to_str().unwrap()),
            E::Hardlink("link", "s"),
            E::File("link", b"evil"),
        ]);
        sb.apply(&tar).unwrap();
        sb.assert_outside_untouched();
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let sb = Sandbox::new();
        let tar = build(&[E::File("big", &[7u8; 4096])]);
        let cut = &tar[..1024];
        match sb.apply(cut) {
            Err(UnpackError::Read(_)) => {}
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    #[test]
    fn overlay_xattrs_from_the_layer_are_refused() {
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([("SCHILY.xattr.trusted.overlay.redirect", b"/x".as_slice())])
            .unwrap();
        let mut h = header(tar::EntryType::Directory, 0, 0o755);
        h.set_path("d").unwrap();
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let sb = Sandbox::new();
        assert_hostile(sb.apply(&b.into_inner().unwrap()));
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn whiteouts_become_overlay_whiteouts() {
        assert!(
            is_root(),
            "needs root: whiteouts are device nodes and trusted xattrs"
        );
        let sb = Sandbox::new();
        let tar = build(&[
            E::Dir("data/"),
            E::File("data/.wh.gone", b""),
            E::Dir("data/opq/"),
            E::File("data/opq/.wh..wh..opq", b""),
            E::File("data/opq/new", b"n"),
            E::File("data/.wh..wh.plnk", b""),
            E::File(".wh.top", b""),
        ]);
        sb.apply(&tar).unwrap();
        let root = sb.root();
        for wh in ["data/gone", "top"] {
            let md = std::fs::symlink_metadata(root.join(wh)).unwrap();
            assert!(md.file_type().is_char_device(), "{wh}");
            assert_eq!(md.rdev(), 0, "{wh}");
        }
        assert_eq!(
            get_xattr(&root.join("data/opq"), OPAQUE_XATTR).as_deref(),
            Some(&b"y"[..])
        );
        assert_eq!(get_xattr(&root.join("data"), OPAQUE_XATTR), None);
        assert!(!root.join("data/opq/.wh..wh..opq").exists());
        assert!(std::fs::symlink_metadata(root.join("data/.wh..wh.plnk")).is_err());
        assert!(std::fs::symlink_metadata(root.join(".wh.top")).is_err());
        assert_eq!(std::fs::read(root.join("data/opq/new")).unwrap(), b"n");
        // The whiteout escapes nothing either.
        let sb = Sandbox::new();
        assert_hostile(sb.apply(&build(&[E::File("../outside/.wh.victim", b"")])));
        sb.assert_outside_untouched();
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn ownership_devices_and_xattrs_are_kept() {
        assert!(is_root(), "needs root: ownership and device nodes");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = header(tar::EntryType::Regular, 1, 0o4755);
        h.set_uid(1000);
        h.set_gid(1001);
        h.set_path("suid").unwrap();
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let mut h = header(tar::EntryType::Char, 0, 0o666);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        h.set_path("null").unwrap();
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let mut h = header(tar::EntryType::Fifo, 0, 0o600);
        h.set_path("fifo").unwrap();
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        b.append_pax_extensions([("SCHILY.xattr.user.berth", b"yes".as_slice())])
            .unwrap();
        let mut h = header(tar::EntryType::Regular, 0, 0o600);
        h.set_path("tagged").unwrap();
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let sb = Sandbox::new();
        sb.apply(&b.into_inner().unwrap()).unwrap();
        let root = sb.root();
        let md = std::fs::metadata(root.join("suid")).unwrap();
        assert_eq!(
            (md.uid(), md.gid(), md.mode() & 0o7777),
            (1000, 1001, 0o4755)
        );
        let md = std::fs::symlink_metadata(root.join("null")).unwrap();
        assert!(md.file_type().is_char_device());
        assert_eq!(md.rdev(), makedev(1, 3));
        assert_eq!(md.mode() & 0o777, 0o666);
        assert!(std::fs::symlink_metadata(root.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo());
        // user.* xattrs need a file system that has them (tmpfs, ext4, xfs …).
        if let Some(v) = get_xattr(&root.join("tagged"), "user.berth") {
            assert_eq!(v, b"yes");
        }
    }

    /// A GNU sparse (type 'S') entry `name` of apparent size `real_size`
    /// with data `blocks` (offset, bytes; every block but the last a multiple
    /// of 512 bytes, at most 3 of them), as a whole tar.
    pub(crate) fn sparse_tar(name: &str, real_size: u64, blocks: &[(u64, &[u8])]) -> Vec<u8> {
        assert!(blocks.len() <= 3);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_000_000);
        h.set_path(name).unwrap();
        let mut data = Vec::new();
        {
            let gnu = h.as_gnu_mut().unwrap();
            for (i, (off, bytes)) in blocks.iter().enumerate() {
                gnu.sparse[i].set_offset(*off);
                gnu.sparse[i].set_length(bytes.len() as u64);
                data.extend_from_slice(bytes);
            }
            // GNU tar ends the map with an empty block at the apparent size.
            gnu.sparse[blocks.len()].set_offset(real_size);
            gnu.sparse[blocks.len()].set_length(0);
            gnu.set_real_size(real_size);
        }
        h.set_size(data.len() as u64);
        h.set_cksum();
        let mut b = tar::Builder::new(Vec::new());
        b.append(&h, &data[..]).unwrap();
        b.into_inner().unwrap()
    }

    /// Disk space used under `dir` (like `du -s`, in bytes).
    pub(crate) fn du(dir: &Path) -> u64 {
        let mut total = 0;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let md = std::fs::symlink_metadata(&d).unwrap();
            total += md.blocks() * 512;
            if md.is_dir() {
                for e in std::fs::read_dir(&d).unwrap() {
                    stack.push(e.unwrap().path());
                }
            }
        }
        total
    }

    fn assert_limit(r: Result<()>, needle: &str) -> String {
        match r {
            Err(UnpackError::Limit(msg)) | Err(UnpackError::NoSpace { reason: msg, .. }) => {
                assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
                msg
            }
            other => panic!("expected a limit error with {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn gnu_sparse_files_are_written_sparse() {
        let sb = Sandbox::new();
        let a = [b'a'; 512];
        let b = [b'b'; 100];
        let size = 256 << 20;
        let tar = sparse_tar("holes", size, &[(0, &a), (128 << 20, &b)]);
        sb.apply(&tar).unwrap();
        let path = sb.root().join("holes");
        let md = std::fs::metadata(&path).unwrap();
        assert_eq!(md.len(), size);
        assert!(
            md.blocks() * 512 <= 1 << 20,
            "{} bytes allocated for 612 bytes of data",
            md.blocks() * 512
        );
        let f = std::fs::File::open(&path).unwrap();
        let at = |off: u64, len: usize| {
            let mut v = vec![0u8; len];
            f.read_exact_at(&mut v, off).unwrap();
            v
        };
        assert_eq!(at(0, 512), a);
        assert_eq!(at(512, 4096), vec![0u8; 4096]);
        assert_eq!(at(128 << 20, 100), b);
        assert_eq!(at((128 << 20) + 100, 4096), vec![0u8; 4096]);
        assert_eq!(at(size - 4096, 4096), vec![0u8; 4096]);
        assert!(du(&sb.root()) <= 1 << 20);
    }

    #[test]
    fn a_sparse_file_of_1_tib_is_refused_at_once() {
        let sb = Sandbox::new();
        let tar = sparse_tar("bomb", 1 << 40, &[]);
        let started = std::time::Instant::now();
        let msg = assert_limit(sb.apply(&tar), "max_layer_bytes");
        assert!(msg.contains("1 TiB") && msg.contains("64 GiB"), "{msg}");
        assert!(msg.contains("bomb"), "{msg}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(du(sb.dir.path()) < 1 << 20, "{}", du(sb.dir.path()));
    }

    #[test]
    fn cancellation_stops_a_sparse_file_mid_hole() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let sb = Sandbox::new();
        // Within raised limits, 1 TiB of holes is minutes of reading zeros.
        let limits = UnpackLimits {
            max_layer_bytes: 2 << 40,
            ..UnpackLimits::default()
        };
        let tar = sparse_tar("bomb", 1 << 40, &[]);
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                flag.store(true, Ordering::Relaxed);
            })
        };
        let started = std::time::Instant::now();
        let r = sb.apply_with(&tar, &limits, &|| flag.load(Ordering::Relaxed));
        setter.join().unwrap();
        assert!(matches!(r, Err(UnpackError::Cancelled)), "{r:?}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(du(sb.dir.path()) < 1 << 20, "{}", du(sb.dir.path()));
    }

    #[test]
    fn pax_sparse_files_are_refused() {
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([
            ("GNU.sparse.major", b"1".as_slice()),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.name", b"bomb"),
            ("GNU.sparse.realsize", b"1099511627776"),
        ])
        .unwrap();
        let map = b"1\n1099511627775\n1\n";
        let mut data = map.to_vec();
        data.resize(512, 0);
        data.push(b'x');
        let mut h = header(tar::EntryType::Regular, data.len() as u64, 0o644);
        h.set_path("GNUSparseFile.0/bomb").unwrap();
        h.set_cksum();
        b.append(&h, &data[..]).unwrap();
        let sb = Sandbox::new();
        match sb.apply(&b.into_inner().unwrap()) {
            Err(UnpackError::Hostile { reason, .. }) => {
                assert!(reason.contains("PAX sparse"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn entry_headers_are_bounded() {
        // A 2 MiB PAX record (the tar reader would hold it in memory).
        let big = vec![b'v'; 2 << 20];
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([("SCHILY.xattr.user.big", big.as_slice())])
            .unwrap();
        let mut h = header(tar::EntryType::Regular, 0, 0o644);
        h.set_path("f").unwrap();
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let sb = Sandbox::new();
        assert_limit(sb.apply(&b.into_inner().unwrap()), "max_entry_header_bytes");

        // A 2 MiB GNU long name.
        let name = "d/".repeat(1 << 20);
        let mut h = header(tar::EntryType::GNULongName, name.len() as u64 + 1, 0o644);
        set_raw_path(&mut h, "././@LongLink");
        h.set_cksum();
        let mut b = tar::Builder::new(Vec::new());
        let mut data = name.into_bytes();
        data.push(0);
        b.append(&h, &data[..]).unwrap();
        let mut h = header(tar::EntryType::Regular, 0, 0o644);
        set_raw_path(&mut h, "short");
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let sb = Sandbox::new();
        assert_limit(sb.apply(&b.into_inner().unwrap()), "max_entry_header_bytes");
    }

    #[test]
    fn paths_longer_than_path_max_are_refused() {
        let deep = format!("{}f", "d/".repeat(3000));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = header(tar::EntryType::Regular, 1, 0o644);
        b.append_data(&mut h, &deep, &b"x"[..]).unwrap();
        let sb = Sandbox::new();
        match sb.apply(&b.into_inner().unwrap()) {
            Err(UnpackError::Hostile { reason, .. }) => {
                assert!(reason.contains("longer than 4096"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(!sb.root().join("d").exists());
    }

    #[test]
    fn entries_sizes_and_the_stream_are_bounded() {
        let small = UnpackLimits {
            max_layer_bytes: 1 << 20,
            max_entries: 10,
            ..UnpackLimits::default()
        };
        let names: Vec<String> = (0..11).map(|i| format!("f{i}")).collect();
        let files: Vec<E<'_>> = names.iter().map(|n| E::File(n, b"x")).collect();
        let sb = Sandbox::new();
        assert_limit(
            sb.apply_with(&build(&files), &small, &|| false),
            "max_entries",
        );
        // Ten are fine.
        let sb = Sandbox::new();
        sb.apply_with(&build(&files[..10]), &small, &|| false)
            .unwrap();

        // One file bigger than the layer may be.
        let big = vec![1u8; (1 << 20) + 1];
        let sb = Sandbox::new();
        let msg = assert_limit(
            sb.apply_with(&build(&[E::File("big", &big)]), &small, &|| false),
            "max_layer_bytes",
        );
        assert!(msg.contains("1 MiB"), "{msg}");
        assert!(du(&sb.root()) < 64 << 10);

        // An absurd size in a header that carries no data: refused before
        // anything is read.
        let mut h = header(tar::EntryType::Symlink, 1 << 50, 0o777);
        set_raw_path(&mut h, "link");
        set_raw_link(&mut h, "target");
        h.set_cksum();
        let mut tar = h.as_bytes().to_vec();
        tar.extend_from_slice(&[0u8; 1024]);
        let sb = Sandbox::new();
        assert_limit(sb.apply(&tar), "max_layer_bytes");

        // Zeros after the end of the archive count too.
        let mut tar = build(&[E::File("a", b"a")]);
        tar.resize(tar.len() + (2 << 20), 0);
        let sb = Sandbox::new();
        assert_limit(
            sb.apply_with(&tar, &small, &|| false),
            "uncompressed layer is larger",
        );
    }

    /// A tmpfs of 8 MiB filled up to 256 KiB free (less than 5% of it);
    /// unmounted on drop. Fails the test when not root.
    pub(crate) struct FullFs {
        pub(crate) dir: tempfile::TempDir,
    }

    impl FullFs {
        pub(crate) fn new() -> FullFs {
            assert!(is_root(), "needs root: mounting a tmpfs");
            let dir = tempfile::tempdir().unwrap();
            nix::mount::mount(
                Some("tmpfs"),
                dir.path(),
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                Some("size=8m"),
            )
            .unwrap();
            let fs = FullFs { dir };
            std::fs::write(
                fs.dir.path().join("filler"),
                vec![1u8; (8 << 20) - (256 << 10)],
            )
            .unwrap();
            fs
        }
    }

    impl Drop for FullFs {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
        }
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn the_free_space_reserve_is_kept() {
        let fs = FullFs::new();
        let root = fs.dir.path().join("root");
        let apply = |tar: &[u8], limits: &UnpackLimits| {
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir(&root).unwrap();
            let mut applier = Applier::new(&root, is_root()).unwrap();
            applier.apply_stream(&mut &tar[..], limits, &|| false)
        };
        let tar = build(&[E::File("a", b"a")]);
        let limits = UnpackLimits::default();
        assert_limit(apply(&tar, &limits), "min_free_bytes");
        // Sparse data too.
        let sparse = sparse_tar("s", 1 << 20, &[(4096, b"x")]);
        assert_limit(apply(&sparse, &limits), "min_free_bytes");
        // 0 turns it off.
        let off = UnpackLimits {
            min_free_bytes: 0,
            ..limits
        };
        apply(&tar, &off).unwrap();
        // With room, the default is fine.
        std::fs::remove_file(fs.dir.path().join("filler")).unwrap();
        apply(&tar, &limits).unwrap();
        apply(&sparse, &limits).unwrap();
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn the_inode_reserve_is_kept() {
        assert!(is_root(), "needs root: mounting a tmpfs");
        let dir = tempfile::tempdir().unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=8m,nr_inodes=1000"),
        )
        .unwrap();
        struct Umount<'a>(&'a Path);
        impl Drop for Umount<'_> {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _umount = Umount(dir.path());
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let filler = dir.path().join("filler");
        std::fs::create_dir(&filler).unwrap();
        for i in 0..970 {
            std::fs::write(filler.join(i.to_string()), b"").unwrap();
        }
        let tar = build(&[E::File("a", b"a")]);
        let mut applier = Applier::new(&root, is_root()).unwrap();
        let r = applier.apply_stream(&mut &tar[..], &UnpackLimits::default(), &|| false);
        assert_limit(r, "inodes");
        std::fs::remove_dir_all(&filler).unwrap();
        let mut applier = Applier::new(&root, is_root()).unwrap();
        applier
            .apply_stream(&mut &tar[..], &UnpackLimits::default(), &|| false)
            .unwrap();
    }

    #[test]
    fn limits_are_validated() {
        assert!(UnpackLimits::default().validate().is_ok());
        for bad in [
            UnpackLimits {
                max_entries: 0,
                ..UnpackLimits::default()
            },
            UnpackLimits {
                max_layer_bytes: 0,
                ..UnpackLimits::default()
            },
            UnpackLimits {
                max_entry_header_bytes: 512,
                ..UnpackLimits::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn device_nodes_are_refused_without_root() {
        let mut h = header(tar::EntryType::Block, 0, 0o600);
        h.set_device_major(8).unwrap();
        h.set_device_minor(0).unwrap();
        set_raw_path(&mut h, "sda");
        h.set_cksum();
        let mut tar = h.as_bytes().to_vec();
        tar.extend_from_slice(&[0u8; 1024]);
        let sb = Sandbox::new();
        let mut applier = Applier::new(&sb.root(), false).unwrap();
        let r = applier.apply_stream(&mut &tar[..], &UnpackLimits::default(), &|| false);
        assert_hostile(r);
        assert!(std::fs::symlink_metadata(sb.root().join("sda")).is_err());
    }
}
