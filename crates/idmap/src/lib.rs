//! Idmapped mounts, and the user namespaces they map through.
//!
//! A user namespace with a given mapping is made by a [`Holder`]: a child
//! process forked for that one job, which `unshare`s a new user namespace
//! (and, optionally, namespaces owned by it, such as a network namespace),
//! whose `uid_map` and `gid_map` this process then writes, and which waits
//! to be killed. Forking (rather than `unshare` on a thread) is required:
//! a multithreaded process cannot enter a new user namespace, and the
//! daemon's threads must keep the host's. The child only makes
//! async-signal-safe system calls between `fork` and its death.
//!
//! [`bind`] makes an idmapped bind mount: `open_tree(OPEN_TREE_CLONE)` of
//! the source, `mount_setattr(MOUNT_ATTR_IDMAP)` with the user namespace's
//! fd, `move_mount` onto the target. Through it, a file owned by id `n` on
//! disk appears owned by the host id that `n` maps to in the namespace, so
//! a process of the namespace sees it owned by `n`, as on disk; what that
//! process creates is written to disk with its id inside the namespace.
//! Nothing on disk is changed (no chown of shared layers).
//!
//! Everything here is blocking, and [`Holder::spawn`] forks: async callers
//! use `tokio::task::spawn_blocking`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What can go wrong; every variant names the path or the process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call on a path failed.
    #[error("{op} {}: {source}", path.display())]
    Os {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The namespace holder process could not be made or did not answer.
    #[error("the user namespace holder: {op}: {source}")]
    Holder {
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

fn os(path: &Path, op: &'static str, source: io::Error) -> Error {
    Error::Os {
        path: path.to_owned(),
        op,
        source,
    }
}

fn holder(op: &'static str, source: io::Error) -> Error {
    Error::Holder { op, source }
}

fn cstring(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        os(
            path,
            "path with a NUL byte",
            io::Error::from(io::ErrorKind::InvalidInput),
        )
    })
}

/// How long a holder may take to say it has unshared.
const HOLDER_TIMEOUT: Duration = Duration::from_secs(10);

/// A child process in a new user namespace (and the namespaces `flags`
/// added, owned by it), with its mappings written. Killed and reaped when
/// dropped; a namespace outlives it only if something holds it (a bind
/// mount of its `/proc/PID/ns/*` file, an open fd, a process in it).
#[derive(Debug)]
pub struct Holder {
    pid: libc::pid_t,
}

impl Holder {
    /// Forks a holder that unshares `CLONE_NEWUSER | flags`, then writes
    /// `uid_map` and `gid_map` (lines of `inside outside length`) for it.
    pub fn spawn(flags: libc::c_int, uid_map: &str, gid_map: &str) -> Result<Holder, Error> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two fds on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(holder("pipe2", io::Error::last_os_error()));
        }
        // SAFETY: both are fresh fds that nothing else owns.
        let (ready_r, ready_w) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let flags = libc::CLONE_NEWUSER | flags;
        // SAFETY: the child makes only async-signal-safe calls (prctl,
        // unshare, write, pause, _exit) and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(holder("fork", io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: async-signal-safe system calls only, on fds we own.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let r = libc::unshare(flags);
                let errno: i32 = if r == 0 { 0 } else { *libc::__errno_location() };
                let buf = errno.to_ne_bytes();
                libc::write(ready_w.as_raw_fd(), buf.as_ptr().cast(), buf.len());
                if r != 0 {
                    libc::_exit(1);
                }
                loop {
                    libc::pause();
                }
            }
        }
        drop(ready_w);
        let h = Holder { pid };
        let errno = read_errno(&ready_r)?;
        if errno != 0 {
            return Err(holder("unshare", io::Error::from_raw_os_error(errno)));
        }
        for (file, map) in [("uid_map", uid_map), ("gid_map", gid_map)] {
            let path = h.proc_path(file);
            std::fs::write(&path, map).map_err(|e| os(&path, "writing", e))?;
        }
        Ok(h)
    }

    /// The holder's pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    fn proc_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/{name}", self.pid))
    }

    /// `/proc/PID/ns/<name>` of the holder (`user`, `net`, ...).
    pub fn ns_path(&self, name: &str) -> PathBuf {
        self.proc_path(&format!("ns/{name}"))
    }

    /// An fd of the holder's user namespace, which keeps it alive.
    pub fn userns(&self) -> Result<OwnedFd, Error> {
        open_userns(&self.ns_path("user"))
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our own child; reaped right after.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Reads the child's errno from the pipe, within [`HOLDER_TIMEOUT`].
fn read_errno(fd: &OwnedFd) -> Result<i32, Error> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd we own.
    let n = unsafe { libc::poll(&mut pfd, 1, HOLDER_TIMEOUT.as_millis() as libc::c_int) };
    if n < 0 {
        return Err(holder("poll", io::Error::last_os_error()));
    }
    if n == 0 {
        return Err(holder("waiting", io::Error::from(io::ErrorKind::TimedOut)));
    }
    let mut buf = [0u8; 4];
    // SAFETY: reads into a buffer we own.
    let got = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if got != buf.len() as isize {
        return Err(holder(
            "reading its answer",
            io::Error::from(io::ErrorKind::UnexpectedEof),
        ));
    }
    Ok(i32::from_ne_bytes(buf))
}

/// Opens a user namespace file (`/proc/PID/ns/user` or a bind mount of one).
pub fn open_userns(path: &Path) -> Result<OwnedFd, Error> {
    let file = std::fs::File::open(path).map_err(|e| os(path, "opening", e))?;
    Ok(file.into())
}

/// A detached idmapped clone of the mount tree at `source` (its top mount
/// only, unless `recursive`), mapped through `userns`.
pub fn detached(source: &Path, userns: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, Error> {
    let c = cstring(source)?;
    let mut flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: open_tree(2) with a valid C string; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(os(
            source,
            "open_tree(OPEN_TREE_CLONE)",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: a fresh fd that nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let mut at = libc::AT_EMPTY_PATH;
    if recursive {
        at |= libc::AT_RECURSIVE;
    }
    let empty = c"";
    // SAFETY: mount_setattr(2) on our fd with an attr of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            at as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(os(
            source,
            "mount_setattr(MOUNT_ATTR_IDMAP)",
            io::Error::last_os_error(),
        ));
    }
    Ok(tree)
}

/// Attaches a detached mount (from [`detached`]) at `target`.
pub fn attach(tree: BorrowedFd<'_>, target: &Path) -> Result<(), Error> {
    let c = cstring(target)?;
    let empty = c"";
    // SAFETY: move_mount(2) of our fd onto a C string path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(os(target, "move_mount", io::Error::last_os_error()));
    }
    Ok(())
}

/// An idmapped bind mount of `source` on `target` (which must exist: a
/// directory for a directory, a file for a file), mapped through `userns`.
pub fn bind(
    source: &Path,
    target: &Path,
    userns: BorrowedFd<'_>,
    recursive: bool,
) -> Result<(), Error> {
    let tree = detached(source, userns, recursive)?;
    attach(tree.as_fd(), target)
}

/// Detaches whatever is mounted on `path` (stacked mounts too); not
/// mounted, or absent, is fine.
pub fn unmount(path: &Path) -> Result<(), Error> {
    let c = cstring(path)?;
    for _ in 0..8 {
        // SAFETY: umount2(2) on a C string path.
        let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
        if r == 0 {
            continue;
        }
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
            _ => Err(os(path, "umount2(MNT_DETACH)", e)),
        };
    }
    Ok(())
}

/// Whether this host can make idmapped mounts of directories in `dir`
/// (which must exist): a user namespace mapping 0 to `host_id`, an
/// idmapped bind of a scratch directory made in `dir`, and a file owned by
/// root in it shown as owned by `host_id`. Leaves nothing behind.
pub fn probe(dir: &Path, host_id: u32) -> Result<(), Error> {
    let scratch = tempdir_in(dir)?;
    let result = probe_in(&scratch, host_id);
    let _ = unmount(&scratch.join("mapped"));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn tempdir_in(dir: &Path) -> Result<PathBuf, Error> {
    for n in 0..100u32 {
        let path = dir.join(format!(".idmap-probe-{}-{n}", std::process::id()));
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(os(&path, "creating", e)),
        }
    }
    Err(os(
        dir,
        "creating a scratch dir",
        io::Error::from(io::ErrorKind::AlreadyExists),
    ))
}

fn probe_in(scratch: &Path, host_id: u32) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let (source, mapped) = (scratch.join("source"), scratch.join("mapped"));
    for d in [&source, &mapped] {
        std::fs::create_dir(d).map_err(|e| os(d, "creating", e))?;
    }
    let file = source.join("f");
    std::fs::write(&file, b"").map_err(|e| os(&file, "writing", e))?;
    std::os::unix::fs::chown(&file, Some(0), Some(0)).map_err(|e| os(&file, "chown", e))?;
    let map = format!("0 {host_id} 1\n");
    let h = Holder::spawn(0, &map, &map)?;
    let userns = h.userns()?;
    drop(h);
    bind(&source, &mapped, userns.as_fd(), false)?;
    let seen = mapped.join("f");
    let meta = std::fs::metadata(&seen).map_err(|e| os(&seen, "stat", e))?;
    if (meta.uid(), meta.gid()) != (host_id, host_id) {
        return Err(os(
            &seen,
            "idmapped mount shows the wrong owner",
            io::Error::other(format!("{}:{}", meta.uid(), meta.gid())),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn root() -> bool {
        // SAFETY: geteuid never fails.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn a_holder_has_the_mapping_and_is_reaped() {
        assert!(root(), "needs root");
        let h = Holder::spawn(libc::CLONE_NEWNET, "0 100000 65536\n", "0 100000 65536\n").unwrap();
        let pid = h.pid();
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        assert_eq!(
            map.split_whitespace().collect::<Vec<_>>(),
            ["0", "100000", "65536"]
        );
        assert_ne!(
            std::fs::read_link(h.ns_path("net")).unwrap(),
            std::fs::read_link("/proc/self/ns/net").unwrap()
        );
        let fd = h.userns().unwrap();
        drop(h);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "holder not reaped"
        );
        // The fd keeps the namespace: still usable for a mount.
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("s"), dir.path().join("d"));
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(&dst).unwrap();
        std::fs::write(src.join("f"), b"x").unwrap();
        bind(&src, &dst, fd.as_fd(), false).unwrap();
        let m = std::fs::metadata(dst.join("f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (100000, 100000));
        // Written through the mount by host 100000: on disk as 0.
        std::os::unix::fs::chown(dst.join("f"), Some(100001), None).unwrap();
        assert_eq!(std::fs::metadata(src.join("f")).unwrap().uid(), 1);
        unmount(&dst).unwrap();
        unmount(&dst).unwrap();
        assert_eq!(
            std::fs::metadata(dst.join("f"))
                .map(|_| ())
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn a_bad_mapping_is_an_error_and_leaves_no_process() {
        assert!(root(), "needs root");
        // The holder is forked from this thread, so it is among this
        // thread's children (a zombie too) until it is reaped; the tests
        // running beside this one fork from their own threads.
        let children = || std::fs::read_to_string("/proc/thread-self/children").unwrap();
        let before = children();
        let e = Holder::spawn(0, "0 100000 0\n", "0 100000 1\n").unwrap_err();
        assert!(e.to_string().contains("uid_map"), "{e}");
        assert_eq!(children(), before, "the holder is left");
    }

    #[test]
    fn errors_name_the_path() {
        let fd = std::fs::File::open("/proc/self/ns/user").unwrap();
        let e = bind(
            Path::new("/nonexistent/x"),
            Path::new("/nonexistent/y"),
            fd.as_fd(),
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
        let e = open_userns(Path::new("/nonexistent/ns")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ns"), "{e}");
        unmount(Path::new("/nonexistent/z")).unwrap();
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn the_probe_works_here_and_cleans_up() {
        assert!(root(), "needs root");
        let dir = tempfile::tempdir().unwrap();
        probe(dir.path(), 100000).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
