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

use std::ffi::{CString, OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
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

/// Why a layer could not be applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnpackError {
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
    /// Directories whose mtime is set at the end (writing children changes it).
    dir_times: Vec<(Vec<OsString>, TimeSpec)>,
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
            cached_parent: None,
        })
    }

    /// Applies every entry of `archive`, then the directory mtimes.
    pub(crate) fn apply_all<R: Read>(&mut self, archive: &mut tar::Archive<R>) -> Result<()> {
        let entries = archive.entries().map_err(UnpackError::Read)?;
        for entry in entries {
            let mut entry = entry.map_err(UnpackError::Read)?;
            self.apply(&mut entry)?;
        }
        self.finish()
    }

    /// Applies one entry.
    pub(crate) fn apply<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<()> {
        let path = entry
            .path()
            .map_err(|e| hostile(Path::new("?"), format!("bad path: {e}")))?
            .into_owned();
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
                self.dir_times.push((Vec::new(), meta.mtime));
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
                self.dir_times.push((comps.clone(), meta.mtime));
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
                let mut file = std::fs::File::from(fd);
                io::copy(entry, &mut file).map_err(UnpackError::Read)?;
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

    /// Sets the recorded directory mtimes (children are all written now).
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.cached_parent = None;
        let times = std::mem::take(&mut self.dir_times);
        for (comps, mtime) in times.iter().rev() {
            let path: PathBuf = comps.iter().collect();
            match comps.split_last() {
                None => {
                    futimens(self.root.as_fd(), mtime, mtime).map_err(io_err(&path, "set times"))?
                }
                Some((name, parents)) => {
                    let parent = self.open_dir(parents, false, &path)?;
                    utimensat(
                        parent.as_fd(),
                        name.as_os_str(),
                        mtime,
                        mtime,
                        UtimensatFlags::NoFollowSymlink,
                    )
                    .map_err(io_err(&path, "set times"))?;
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
mod tests {
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
            let mut applier = Applier::new(&self.root(), is_root()).unwrap();
            applier.apply_all(&mut tar::Archive::new(tar_bytes))
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
    fn whiteouts_become_overlay_whiteouts() {
        if !is_root() {
            eprintln!("skipped: whiteouts need root (mknod, trusted xattrs)");
            return;
        }
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
    fn ownership_devices_and_xattrs_are_kept() {
        if !is_root() {
            eprintln!("skipped: ownership and device nodes need root");
            return;
        }
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
}
