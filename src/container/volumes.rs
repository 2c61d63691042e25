//! The image's content under its VOLUMEs, copied into the container's new
//! anonymous volumes at CreateContainer (containerd's copy-up in
//! `WithVolumes`): an image that ships data or config under a declared
//! volume finds it there, owned as in the image (a non-root user that owns
//! its volume can write to it).
//!
//! The source is read through the container's rootfs with the rootfs as
//! `/` (`RESOLVE_IN_ROOT`): a symlink at the volume's path or in its
//! parents resolves inside the image, never to the host; below it nothing
//! is followed (symlinks are copied as links). Directories, regular files
//! (hard links kept), symlinks and FIFOs are copied with their owner, mode,
//! times and xattrs (best effort); device nodes and sockets are left out
//! (a device node in a writable volume is a device the pod was not given).
//! Copied only into a volume dir made by this call: one that exists is the
//! container's already and is never written over. Bounded by
//! [`CopyLimits`].

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use berth_spec::{AnonymousVolume, UserNamespace};
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{
    fchmod, fchmodat, fstat, fstatat, futimens, mkdirat, mknodat, utimensat, FchmodatFlags,
    FileStat, Mode, SFlag, UtimensatFlags,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, fchownat, linkat, symlinkat, Gid, Uid};

/// How much of an image's volumes is copied into one container's. An
/// image's layers may hold sparse files (counted at their data) that a
/// copy writes out whole, and trees deeper than a copy should descend:
/// beyond a bound the copy stops and CreateContainer fails, saying which.
#[derive(Debug, Clone)]
pub struct CopyLimits {
    /// Most bytes of regular files (their apparent sizes), all volumes of
    /// the container together. 8 GiB.
    pub max_bytes: u64,
    /// Most entries (files, directories, links), all volumes together.
    /// 1 Mi (1,048,576).
    pub max_entries: u64,
    /// Most levels of directories below a volume's path. 128.
    pub max_depth: usize,
}

impl Default for CopyLimits {
    fn default() -> Self {
        CopyLimits {
            max_bytes: 8 << 30,
            max_entries: 1 << 20,
            max_depth: 128,
        }
    }
}

/// Why a volume could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CopyUpError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The image has something other than a directory at the volume's path.
    #[error("the image's VOLUME {volume:?} is not a directory in the image ({why})")]
    NotADirectory { volume: String, why: String },
    /// A bound of [`CopyLimits`] was reached.
    #[error(
        "the image's VOLUMEs hold more than {limit} {what} (reached at {volume:?}): berth \
         copies at most that of an image's volumes into one container"
    )]
    TooLarge {
        volume: String,
        what: &'static str,
        limit: u64,
    },
}

/// Most bytes of the xattr names of one file, and of one value (the
/// kernel's XATTR_LIST_MAX and XATTR_SIZE_MAX).
const XATTR_MAX: usize = 64 << 10;
/// The owner an id outside the pod's user namespace gets (the kernel's
/// overflow id).
const OVERFLOW_ID: u32 = 65534;

/// Makes each volume's dir, filled with what the image at `rootfs` has at
/// its path; in a pod with user namespace `userns` (whose rootfs shows the
/// image's owners as the pod's host ids), owned on disk as in the image,
/// as the idmapped view of the volume expects. A dir that exists is left
/// as it is. Returns what was left out (device nodes, sockets, xattrs that
/// could not be set; at most [`MAX_LEFT_OUT`]), as paths in the container.
pub fn make_volumes(
    rootfs: &Path,
    volumes: &[AnonymousVolume],
    userns: Option<&UserNamespace>,
    limits: &CopyLimits,
) -> Result<Vec<String>, CopyUpError> {
    let root = nix::fcntl::open(
        rootfs,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err("opening", rootfs))?;
    let mut copier = Copier {
        limits,
        userns,
        volume: String::new(),
        volume_host: PathBuf::new(),
        volume_dir: None,
        bytes: 0,
        entries: 0,
        links: HashMap::new(),
        left_out: Vec::new(),
        xattr_names: vec![0; XATTR_MAX],
        xattr_value: vec![0; XATTR_MAX],
    };
    for v in volumes {
        copier.make_volume(root.as_fd(), rootfs, v)?;
    }
    Ok(copier.left_out)
}

/// Most paths [`make_volumes`] lists as left out.
pub const MAX_LEFT_OUT: usize = 16;

struct Copier<'a> {
    limits: &'a CopyLimits,
    userns: Option<&'a UserNamespace>,
    /// The volume being copied (its path in the container), and its dir.
    volume: String,
    volume_host: PathBuf,
    volume_dir: Option<OwnedFd>,
    bytes: u64,
    entries: u64,
    /// The volume's files with more than one link, by (device, inode):
    /// where the first was copied, relative to the volume dir.
    links: HashMap<(u64, u64), PathBuf>,
    left_out: Vec<String>,
    /// Buffers for xattr names and values, [`XATTR_MAX`] each.
    xattr_names: Vec<u8>,
    xattr_value: Vec<u8>,
}

impl Copier<'_> {
    fn make_volume(
        &mut self,
        root: BorrowedFd<'_>,
        rootfs: &Path,
        v: &AnonymousVolume,
    ) -> Result<(), CopyUpError> {
        let dir = &v.host_path;
        if let Some(parent) = dir.parent() {
            crate::host_dirs::make_dirs(parent, 0o755).map_err(io_err("creating", parent))?;
        }
        match nix::unistd::mkdir(dir, Mode::from_bits_truncate(0o700)) {
            Ok(()) => {}
            // The container's already: never copied over.
            Err(Errno::EEXIST) => return Ok(()),
            Err(e) => return Err(io_err("creating", dir)(e)),
        }
        let dst = open_dir(None, dir.as_os_str()).map_err(io_err("opening", dir))?;
        let rel = v.container_path.trim_start_matches('/');
        let src_path = rootfs.join(rel);
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(
                ResolveFlag::RESOLVE_IN_ROOT
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS
                    | ResolveFlag::RESOLVE_NO_XDEV,
            );
        let src = match openat2(root, rel, how) {
            Ok(fd) => fd,
            // Nothing in the image there: an empty dir, root's.
            Err(Errno::ENOENT) => {
                return fchmod(&dst, Mode::from_bits_truncate(0o755)).map_err(io_err("chmod", dir));
            }
            Err(e @ (Errno::ENOTDIR | Errno::ELOOP)) => {
                return Err(CopyUpError::NotADirectory {
                    volume: v.container_path.clone(),
                    why: e.desc().to_string(),
                })
            }
            Err(e) => return Err(io_err("opening", &src_path)(e)),
        };
        self.volume = v.container_path.clone();
        self.volume_host = dir.clone();
        self.volume_dir = Some(dst.try_clone().map_err(io_err("opening", dir))?);
        self.links.clear();
        let st = fstat(&src).map_err(io_err("inspecting", &src_path))?;
        let mut src = Dir::from_fd(src).map_err(io_err("reading", &src_path))?;
        self.copy_dir(&mut src, &src_path, &dst, Path::new(""), 0)?;
        self.finish(src.as_fd(), &dst, &st, Path::new(""), dir)
    }

    /// Copies the entries of `src` (at `src_path`) into `dst`, the dir
    /// `rel` of the volume, `depth` levels below it.
    fn copy_dir(
        &mut self,
        src: &mut Dir,
        src_path: &Path,
        dst: &OwnedFd,
        rel: &Path,
        depth: usize,
    ) -> Result<(), CopyUpError> {
        let mut names: Vec<OsString> = Vec::new();
        for entry in src.iter() {
            let entry = entry.map_err(io_err("reading", src_path))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name != "." && name != ".." {
                self.count_entry()?;
                names.push(name.to_owned());
            }
        }
        for name in names {
            let name = name.as_os_str();
            let path = src_path.join(name);
            let rel = rel.join(name);
            let out = &self.volume_host.join(&rel);
            let st = fstatat(&*src, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(io_err("inspecting", &path))?;
            match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFDIR => {
                    if depth >= self.limits.max_depth {
                        return Err(
                            self.too_large("levels of directories", self.limits.max_depth as u64)
                        );
                    }
                    mkdirat(dst, name, Mode::from_bits_truncate(0o700))
                        .map_err(io_err("creating", out))?;
                    let mut child = open_dir(Some(src.as_fd()), name)
                        .and_then(Dir::from_fd)
                        .map_err(io_err("opening", &path))?;
                    let target =
                        open_dir(Some(dst.as_fd()), name).map_err(io_err("opening", out))?;
                    self.copy_dir(&mut child, &path, &target, &rel, depth + 1)?;
                    self.finish(child.as_fd(), &target, &st, &rel, out)?;
                }
                SFlag::S_IFREG => self.copy_file(src, name, &path, dst, &rel, &st)?,
                SFlag::S_IFLNK => {
                    let link =
                        nix::fcntl::readlinkat(&*src, name).map_err(io_err("reading", &path))?;
                    symlinkat(link.as_os_str(), dst, name).map_err(io_err("creating", out))?;
                    let (uid, gid) = self.owner(&st);
                    fchownat(
                        dst,
                        name,
                        Some(uid),
                        Some(gid),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(io_err("chown", out))?;
                    set_times_at(dst, name, &st, out)?;
                }
                SFlag::S_IFIFO => {
                    mknodat(
                        dst,
                        name,
                        SFlag::S_IFIFO,
                        Mode::from_bits_truncate(0o600),
                        0,
                    )
                    .map_err(io_err("creating", out))?;
                    let (uid, gid) = self.owner(&st);
                    fchownat(
                        dst,
                        name,
                        Some(uid),
                        Some(gid),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(io_err("chown", out))?;
                    // A FIFO just made in a dir of ours: no symlink to follow.
                    fchmodat(
                        dst,
                        name,
                        Mode::from_bits_truncate(st.st_mode & 0o7777),
                        FchmodatFlags::FollowSymlink,
                    )
                    .map_err(io_err("chmod", out))?;
                    set_times_at(dst, name, &st, out)?;
                }
                // Device nodes and sockets.
                _ => self.leave_out(&rel),
            }
        }
        Ok(())
    }

    /// Copies regular file `name` of `src` into `dst` (or links it to its
    /// first copy).
    fn copy_file(
        &mut self,
        src: &Dir,
        name: &OsStr,
        path: &Path,
        dst: &OwnedFd,
        rel: &Path,
        st: &FileStat,
    ) -> Result<(), CopyUpError> {
        let out = &self.volume_host.join(rel);
        let key = (st.st_dev, st.st_ino);
        if st.st_nlink > 1 {
            if let (Some(first), Some(root)) = (self.links.get(&key), &self.volume_dir) {
                return linkat(root, first.as_path(), dst, name, AtFlags::empty())
                    .map_err(io_err("linking", out));
            }
        }
        let size = st.st_size.max(0) as u64;
        if self.bytes.saturating_add(size) > self.limits.max_bytes {
            return Err(self.too_large("bytes", self.limits.max_bytes));
        }
        self.bytes += size;
        let from = openat(
            src,
            name,
            OFlag::O_RDONLY
                | OFlag::O_NOFOLLOW
                | OFlag::O_NOCTTY
                | OFlag::O_NONBLOCK
                | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err("opening", path))?;
        // Still the regular file looked at (the image's layers do not change).
        let now = fstat(&from).map_err(io_err("inspecting", path))?;
        if (now.st_dev, now.st_ino) != key {
            return Err(io_err("opening", path)(Errno::ESTALE));
        }
        let to = openat(
            dst,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io_err("creating", out))?;
        let (mut from, mut to) = (File::from(from), File::from(to));
        io::copy(&mut (&mut from).take(size), &mut to).map_err(io_err("copying", path))?;
        self.finish(from.as_fd(), &to, st, rel, out)?;
        if st.st_nlink > 1 {
            self.links.insert(key, rel.to_path_buf());
        }
        Ok(())
    }

    /// Gives the copy `dst` (of `src`, the volume's `rel`, on the host
    /// `out`) the owner, mode, xattrs and times of `st`.
    fn finish(
        &mut self,
        src: BorrowedFd<'_>,
        dst: &impl AsFd,
        st: &FileStat,
        rel: &Path,
        out: &Path,
    ) -> Result<(), CopyUpError> {
        let (uid, gid) = self.owner(st);
        fchown(dst.as_fd(), Some(uid), Some(gid)).map_err(io_err("chown", out))?;
        // After the chown, which clears set-id bits.
        fchmod(dst.as_fd(), Mode::from_bits_truncate(st.st_mode & 0o7777))
            .map_err(io_err("chmod", out))?;
        if !self.copy_xattrs(src, dst.as_fd()) {
            self.leave_out(rel);
        }
        futimens(dst.as_fd(), &atime(st), &mtime(st)).map_err(io_err("setting the times of", out))
    }

    /// Copies the xattrs of `src` to `dst` but `security.selinux` (and,
    /// in a user namespace, all but `user.*`: the others hold host ids);
    /// false if one could not be.
    fn copy_xattrs(&mut self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> bool {
        let names = &mut self.xattr_names;
        // SAFETY: the buffer is as long as said.
        let n =
            unsafe { libc::flistxattr(src.as_raw_fd(), names.as_mut_ptr().cast(), names.len()) };
        if n <= 0 {
            return n == 0 || Errno::last() == Errno::EOPNOTSUPP;
        }
        let value = &mut self.xattr_value;
        let mut all = true;
        for name in names[..n as usize]
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
        {
            if name == b"security.selinux" || (self.userns.is_some() && !name.starts_with(b"user."))
            {
                continue;
            }
            let Ok(cname) = std::ffi::CString::new(name) else {
                continue;
            };
            // SAFETY: a NUL-terminated name, a buffer as long as said.
            let len = unsafe {
                libc::fgetxattr(
                    src.as_raw_fd(),
                    cname.as_ptr(),
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            };
            // SAFETY: as above, `len` bytes of `value` were written.
            let set = len >= 0
                && unsafe {
                    libc::fsetxattr(
                        dst.as_raw_fd(),
                        cname.as_ptr(),
                        value.as_ptr().cast(),
                        len as usize,
                        0,
                    )
                } == 0;
            all &= set;
        }
        all
    }

    /// The owner of the copy of a file of `st`: the image's.
    fn owner(&self, st: &FileStat) -> (Uid, Gid) {
        let (uid, gid) = match self.userns {
            None => (st.st_uid, st.st_gid),
            Some(ns) => (
                ns.uids.container_of(st.st_uid).unwrap_or(OVERFLOW_ID),
                ns.gids.container_of(st.st_gid).unwrap_or(OVERFLOW_ID),
            ),
        };
        (Uid::from_raw(uid), Gid::from_raw(gid))
    }

    fn count_entry(&mut self) -> Result<(), CopyUpError> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(self.too_large("entries", self.limits.max_entries));
        }
        Ok(())
    }

    fn too_large(&self, what: &'static str, limit: u64) -> CopyUpError {
        CopyUpError::TooLarge {
            volume: self.volume.clone(),
            what,
            limit,
        }
    }

    /// The volume's `rel` as a path in the container.
    fn shown(&self, rel: &Path) -> String {
        Path::new(&self.volume).join(rel).display().to_string()
    }

    fn leave_out(&mut self, rel: &Path) {
        if self.left_out.len() < MAX_LEFT_OUT {
            self.left_out.push(self.shown(rel));
        }
    }
}

/// Opens directory `name` (of `dir`, else as a path), not through a symlink.
fn open_dir(dir: Option<BorrowedFd<'_>>, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match dir {
        Some(dir) => openat(dir, name, flags, Mode::empty()),
        None => nix::fcntl::open(name, flags, Mode::empty()),
    }
}

/// The times of `st` on `name` of `dir`, not followed.
fn set_times_at(dir: &OwnedFd, name: &OsStr, st: &FileStat, out: &Path) -> Result<(), CopyUpError> {
    utimensat(
        dir,
        name,
        &atime(st),
        &mtime(st),
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(io_err("setting the times of", out))
}

fn atime(st: &FileStat) -> TimeSpec {
    TimeSpec::new(st.st_atime, st.st_atime_nsec)
}

fn mtime(st: &FileStat) -> TimeSpec {
    TimeSpec::new(st.st_mtime, st.st_mtime_nsec)
}

fn io_err<E: Into<io::Error>>(op: &'static str, path: &Path) -> impl FnOnce(E) -> CopyUpError {
    let path = path.to_path_buf();
    move |e| CopyUpError::Io {
        op,
        path,
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};

    fn vol(path: &str, dir: &Path) -> AnonymousVolume {
        AnonymousVolume {
            container_path: path.into(),
            host_path: dir.join(path.trim_start_matches('/').replace('/', "-")),
        }
    }

    fn set_xattr(path: &Path, name: &str, value: &[u8]) {
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: NUL-terminated strings, a value as long as said.
        let r = unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        assert_eq!(
            r,
            0,
            "setxattr {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
    }

    fn get_xattr(path: &Path, name: &str) -> Vec<u8> {
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        let mut buf = vec![0u8; 256];
        // SAFETY: NUL-terminated strings, a buffer as long as said.
        let r =
            unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(
            r >= 0,
            "getxattr {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
        buf.truncate(r as usize);
        buf
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    /// A rootfs: `/data` with a file, a nested dir, symlinks, hard links, a
    /// FIFO, a socket; `/:colon/x`; `/etc/only-in-image`; `/esc -> /etc`,
    /// `/up -> ../../..`; `/file` (a file).
    fn rootfs(tmp: &Path) -> (PathBuf, std::os::unix::net::UnixListener) {
        let r = tmp.join("rootfs");
        let data = r.join("data");
        std::fs::create_dir_all(data.join("sub/nested")).unwrap();
        std::fs::write(data.join("file"), "hello\n").unwrap();
        std::fs::set_permissions(data.join("file"), PermissionsExt::from_mode(0o640)).unwrap();
        std::fs::write(data.join("sub/nested/deep.txt"), "deep\n").unwrap();
        std::fs::set_permissions(data.join("sub"), PermissionsExt::from_mode(0o750)).unwrap();
        symlink("file", data.join("link")).unwrap();
        symlink("/etc/passwd", data.join("abs")).unwrap();
        std::fs::write(data.join("hard1"), "same\n").unwrap();
        std::fs::hard_link(data.join("hard1"), data.join("sub/hard2")).unwrap();
        nix::unistd::mkfifo(&data.join("fifo"), Mode::from_bits_truncate(0o640)).unwrap();
        let sock = std::os::unix::net::UnixListener::bind(data.join("sock")).unwrap();
        set_xattr(&data.join("file"), "user.origin", b"image");
        std::fs::set_permissions(&data, PermissionsExt::from_mode(0o1770)).unwrap();
        std::fs::create_dir_all(r.join(":colon")).unwrap();
        std::fs::write(r.join(":colon/x"), "colon\n").unwrap();
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/only-in-image"), "img\n").unwrap();
        symlink("/etc", r.join("esc")).unwrap();
        symlink("../../..", r.join("up")).unwrap();
        std::fs::write(r.join("file"), "not a dir\n").unwrap();
        (r, sock)
    }

    #[test]
    fn the_images_content_is_copied_with_its_modes_links_and_xattrs() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, _sock) = rootfs(tmp.path());
        let vols = tmp.path().join("vols");
        let v = [
            vol("/data", &vols),
            vol("/:colon", &vols),
            vol("/missing", &vols),
        ];
        let left = make_volumes(&root, &v, None, &CopyLimits::default()).unwrap();
        assert_eq!(left, vec!["/data/sock".to_string()]);
        let d = &v[0].host_path;
        assert_eq!(mode(d), 0o1770);
        assert_eq!(std::fs::read_to_string(d.join("file")).unwrap(), "hello\n");
        assert_eq!(mode(&d.join("file")), 0o640);
        assert_eq!(get_xattr(&d.join("file"), "user.origin"), b"image");
        assert_eq!(
            std::fs::read_to_string(d.join("sub/nested/deep.txt")).unwrap(),
            "deep\n"
        );
        assert_eq!(mode(&d.join("sub")), 0o750);
        assert_eq!(
            std::fs::read_link(d.join("link")).unwrap(),
            Path::new("file")
        );
        // Copied as a link, never followed.
        assert_eq!(
            std::fs::read_link(d.join("abs")).unwrap(),
            Path::new("/etc/passwd")
        );
        let (h1, h2) = (
            std::fs::metadata(d.join("hard1")).unwrap(),
            std::fs::metadata(d.join("sub/hard2")).unwrap(),
        );
        assert_eq!(h1.ino(), h2.ino(), "hard links stay links");
        assert!(std::fs::symlink_metadata(d.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(mode(&d.join("fifo")), 0o640);
        assert!(!d.join("sock").exists());
        let src_mtime = std::fs::metadata(root.join("data/file")).unwrap().mtime();
        assert_eq!(
            std::fs::metadata(d.join("file")).unwrap().mtime(),
            src_mtime
        );
        let me = std::fs::metadata(root.join("data/file")).unwrap();
        assert_eq!((h1.uid(), h1.gid()), (me.uid(), me.gid()));
        assert_eq!(
            std::fs::read_to_string(v[1].host_path.join("x")).unwrap(),
            "colon\n"
        );
        // Nothing in the image: an empty dir, 0755.
        assert_eq!(std::fs::read_dir(&v[2].host_path).unwrap().count(), 0);
        assert_eq!(mode(&v[2].host_path), 0o755);
    }

    #[test]
    fn a_symlink_at_the_volume_path_resolves_inside_the_image() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, _sock) = rootfs(tmp.path());
        let vols = tmp.path().join("vols");
        let v = [vol("/esc", &vols), vol("/up/esc", &vols), vol("/up", &vols)];
        make_volumes(&root, &v, None, &CopyLimits::default()).unwrap();
        for v in &v[..2] {
            let names = names(&v.host_path);
            assert_eq!(names, vec!["only-in-image".to_string()], "{v:?}");
        }
        // `../../..` stops at the image's `/`.
        let names = names(&v[2].host_path);
        assert!(names.contains(&"data".to_string()), "{names:?}");
        assert!(!names.contains(&"usr".to_string()), "{names:?}");
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_volume_dir_that_exists_is_never_copied_over() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, _sock) = rootfs(tmp.path());
        let v = [vol("/data", &tmp.path().join("vols"))];
        std::fs::create_dir_all(&v[0].host_path).unwrap();
        std::fs::write(v[0].host_path.join("mine"), "user data\n").unwrap();
        make_volumes(&root, &v, None, &CopyLimits::default()).unwrap();
        assert_eq!(names(&v[0].host_path), vec!["mine".to_string()]);
    }

    #[test]
    fn a_file_at_the_volume_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, _sock) = rootfs(tmp.path());
        let v = [vol("/file", &tmp.path().join("vols"))];
        let e = make_volumes(&root, &v, None, &CopyLimits::default()).unwrap_err();
        assert!(matches!(e, CopyUpError::NotADirectory { .. }), "{e}");
        assert!(e.to_string().contains("\"/file\""), "{e}");
    }

    #[test]
    fn each_bound_stops_the_copy_and_says_which() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, _sock) = rootfs(tmp.path());
        let cases = [
            (
                CopyLimits {
                    max_bytes: 8,
                    ..Default::default()
                },
                "bytes",
            ),
            (
                CopyLimits {
                    max_entries: 3,
                    ..Default::default()
                },
                "entries",
            ),
            (
                CopyLimits {
                    max_depth: 1,
                    ..Default::default()
                },
                "levels of directories",
            ),
        ];
        for (n, (limits, what)) in cases.into_iter().enumerate() {
            let v = [vol("/data", &tmp.path().join(format!("vols{n}")))];
            let e = make_volumes(&root, &v, None, &limits).unwrap_err();
            match &e {
                CopyUpError::TooLarge {
                    what: w, volume, ..
                } => {
                    assert_eq!((*w, volume.as_str()), (what, "/data"), "{e}");
                }
                e => panic!("{what}: {e}"),
            }
        }
    }

    #[test]
    fn in_a_user_namespace_owners_are_the_images_on_disk() {
        use berth_spec::IdRange;
        let range = IdRange {
            container_id: 0,
            host_id: 100_000,
            length: 65536,
        };
        let ns = UserNamespace {
            uids: range,
            gids: range,
        };
        let limits = CopyLimits::default();
        let copier = Copier {
            limits: &limits,
            userns: Some(&ns),
            volume: String::new(),
            volume_host: PathBuf::new(),
            volume_dir: None,
            bytes: 0,
            entries: 0,
            links: HashMap::new(),
            left_out: Vec::new(),
            xattr_names: Vec::new(),
            xattr_value: Vec::new(),
        };
        // The rootfs shows the image's 65534 as the pod's 165534.
        let mut st = nix::sys::stat::stat("/").unwrap();
        (st.st_uid, st.st_gid) = (165_534, 100_000);
        assert_eq!(copier.owner(&st), (Uid::from_raw(65534), Gid::from_raw(0)));
        // Not the pod's: the overflow id.
        (st.st_uid, st.st_gid) = (99_999, 200_000);
        assert_eq!(
            copier.owner(&st),
            (Uid::from_raw(OVERFLOW_ID), Gid::from_raw(OVERFLOW_ID))
        );
    }
}
