//! Network namespaces for pods.
//!
//! A namespace is made by a dedicated, throw-away `std::thread` that calls
//! `unshare(CLONE_NEWNET)`, brings `lo` up, and bind-mounts its own
//! `/proc/self/task/<tid>/ns/net` onto a file (e.g. `<state>/netns/<name>`), so
//! the namespace outlives the thread. Code runs inside a namespace on another
//! fresh thread that `setns` into it ([`run_in`]); the caller's thread — which may
//! be a tokio worker — never changes namespace. Removal is idempotent: detach
//! the mount, then unlink the file.
//!
//! The directory holding the namespace files is made a shared mount point (as
//! `ip netns` does: bind-mounted onto itself if it is not a mount point yet),
//! so that unmounting a namespace propagates to mount namespaces that copied
//! it, and a namespace is not pinned by a stale copy.
//!
//! Loopback: [`NetNs::create`] brings `lo` up itself (the kernel then gives it
//! 127.0.0.1/8 and ::1), which is all the CNI `loopback` plugin does, without
//! the cost of running a plugin process.
//!
//! A pod in its own user namespace needs its network namespace owned by
//! that user namespace (else the pod's root could not join it, and sysfs
//! could not be mounted in it): [`NetNs::create_owned`] has a
//! [`berth_idmap::Holder`] child unshare both at once, writes the mapping,
//! and bind-mounts both namespace files before the holder is killed. The
//! user namespace file pins the namespace until the pod's pause has joined
//! it; the network namespace holds its owner alive for as long as it lives.
//!
//! Pods without a pause process also get their UTS and IPC namespaces
//! pinned on files ([`pin`]).
//!
//! Everything here is blocking; async callers use `tokio::task::spawn_blocking`.

use berth_lock::MutexExt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::statfs::{statfs, NSFS_MAGIC};

pub mod pin;

/// What can go wrong with a namespace. Every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name cannot be used as a file name in the namespace directory.
    #[error("invalid network namespace name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    /// A file already exists where the namespace would be mounted.
    #[error("namespace {} already exists", path.display())]
    AlreadyExists { path: PathBuf },
    /// The path exists but is not a network namespace.
    #[error("{} is not a network namespace", path.display())]
    NotANamespace { path: PathBuf },
    /// A system call failed.
    #[error("namespace {}: {op}: {source}", path.display())]
    Os {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The thread that works inside the namespace panicked.
    #[error("namespace {}: the {what} thread panicked", path.display())]
    Panicked { path: PathBuf, what: &'static str },
    /// An operation failed, and undoing what it had done failed too.
    #[error("{error}; cleanup also failed: {cleanup}")]
    Cleanup {
        error: Box<Error>,
        cleanup: Box<Error>,
    },
}

fn os(path: &Path, op: &'static str, source: impl Into<io::Error>) -> Error {
    Error::Os {
        path: path.to_owned(),
        op,
        source: source.into(),
    }
}

/// A network namespace bind-mounted on a file. Dropping it leaves the namespace
/// in place (it is meant to outlive the process); [`NetNs::remove`] removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNs {
    path: PathBuf,
}

impl NetNs {
    /// Creates a new network namespace, with `lo` up, mounted at `dir/name`.
    ///
    /// `dir` is created if needed and made a shared mount point. Fails with
    /// [`Error::AlreadyExists`] if `dir/name` exists. On any failure nothing is
    /// left behind (no mount, no file).
    pub fn create(dir: &Path, name: &str) -> Result<NetNs, Error> {
        validate_name(name)?;
        std::fs::create_dir_all(dir).map_err(|e| os(dir, "create directory", e))?;
        make_shared_mount(dir)?;

        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Error::AlreadyExists { path: path.clone() },
                _ => os(&path, "create mount point file", e),
            })?;
        // From here on the file exists: undo with remove_path on every failure.
        match new_namespace_on(&path) {
            Ok(()) => Ok(NetNs { path }),
            Err(error) => match remove_path(&path) {
                Ok(()) => Err(error),
                Err(cleanup) => Err(Error::Cleanup {
                    error: Box::new(error),
                    cleanup: Box::new(cleanup),
                }),
            },
        }
    }

    /// Like [`NetNs::create`], but the new network namespace is owned by a
    /// new user namespace with `uid_map` and `gid_map` (lines of `inside
    /// outside length`), which is bind-mounted at `userns` (a file path;
    /// its directory is made and shared like `dir`). On any failure
    /// nothing is left behind.
    pub fn create_owned(
        dir: &Path,
        name: &str,
        userns: &Path,
        uid_map: &str,
        gid_map: &str,
    ) -> Result<NetNs, Error> {
        validate_name(name)?;
        let userns_dir = userns.parent().unwrap_or(Path::new("/"));
        for d in [dir, userns_dir] {
            std::fs::create_dir_all(d).map_err(|e| os(d, "create directory", e))?;
            make_shared_mount(d)?;
        }
        let path = dir.join(name);
        for p in [path.as_path(), userns] {
            if let Err(e) = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(p)
            {
                let error = match e.kind() {
                    io::ErrorKind::AlreadyExists => Error::AlreadyExists {
                        path: p.to_path_buf(),
                    },
                    _ => os(p, "create mount point file", e),
                };
                // Only what this call made goes.
                if p == userns {
                    let _ = remove_path(&path);
                }
                return Err(error);
            }
        }
        let made = (|| {
            let holder = berth_idmap::Holder::spawn(libc::CLONE_NEWNET, uid_map, gid_map)
                .map_err(|e| os(userns, "make the user namespace", io::Error::other(e)))?;
            for (ns, target) in [("user", userns), ("net", path.as_path())] {
                mount(
                    Some(&holder.ns_path(ns)),
                    target,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(|e| os(target, "bind-mount the new namespace", e))?;
            }
            drop(holder);
            run_in(&path, set_loopback_up)?.map_err(|e| os(&path, "bring lo up", e))
        })();
        match made {
            Ok(()) => Ok(NetNs { path }),
            Err(error) => match remove_path(&path).and_then(|()| remove_path(userns)) {
                Ok(()) => Err(error),
                Err(cleanup) => Err(Error::Cleanup {
                    error: Box::new(error),
                    cleanup: Box::new(cleanup),
                }),
            },
        }
    }

    /// Opens an existing network namespace (a bind mount or `/proc/<pid>/ns/net`).
    pub fn open(path: impl Into<PathBuf>) -> Result<NetNs, Error> {
        let path = path.into();
        if is_namespace(&path)? {
            Ok(NetNs { path })
        } else {
            Err(Error::NotANamespace { path })
        }
    }

    /// Where the namespace is mounted; what CNI plugins get as `CNI_NETNS`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` inside this namespace on a fresh thread and returns its result.
    /// The calling thread's namespace is never changed.
    pub fn run_in<F, R>(&self, f: F) -> Result<R, Error>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        run_in(&self.path, f)
    }

    /// Unmounts and deletes the namespace file; see [`remove_path`].
    pub fn remove(self) -> Result<(), Error> {
        remove_path(&self.path)
    }
}

/// A new user namespace with `uid_map` and `gid_map` (lines of `inside
/// outside length`), and no namespace it owns, bind-mounted at `userns` (a
/// file path; its directory is made and shared as for a network
/// namespace): the pinned user namespace of a pod on the host's network.
/// On any failure nothing is left behind; an existing file is
/// [`Error::AlreadyExists`].
pub fn create_userns(userns: &Path, uid_map: &str, gid_map: &str) -> Result<(), Error> {
    let dir = userns.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| os(dir, "create directory", e))?;
    make_shared_mount(dir)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(userns)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Error::AlreadyExists {
                path: userns.to_path_buf(),
            },
            _ => os(userns, "create mount point file", e),
        })?;
    let made = berth_idmap::Holder::spawn(0, uid_map, gid_map)
        .map_err(|e| os(userns, "make the user namespace", io::Error::other(e)))
        .and_then(|holder| {
            mount(
                Some(&holder.ns_path("user")),
                userns,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| os(userns, "bind-mount the new namespace", e))
        });
    match made {
        Ok(()) => Ok(()),
        Err(error) => match remove_path(userns) {
            Ok(()) => Err(error),
            Err(cleanup) => Err(Error::Cleanup {
                error: Box::new(error),
                cleanup: Box::new(cleanup),
            }),
        },
    }
}

/// Runs `f` inside the network namespace at `path` on a fresh thread (which
/// `setns` into it and then exits) and returns its result. Processes that `f`
/// spawns start in that namespace too.
pub fn run_in<F, R>(path: &Path, f: F) -> Result<R, Error>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let ns = File::open(path).map_err(|e| os(path, "open", e))?;
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("berth-netns-run".into())
            .spawn_scoped(scope, move || -> Result<R, Error> {
                setns(&ns, CloneFlags::CLONE_NEWNET)
                    .map_err(|e| os(path, "setns(CLONE_NEWNET)", e))?;
                Ok(f())
            })
            .map_err(|e| os(path, "spawn thread", e))?;
        handle.join().map_err(|_| Error::Panicked {
            path: path.to_owned(),
            what: "run_in",
        })?
    })
}

/// Detaches every mount stacked on `path`; `false` when `path` is gone.
pub(crate) fn unmount_stacked(path: &Path) -> Result<bool, Error> {
    // A path can carry stacked mounts; a few rounds clear any sane history.
    const MAX_STACKED: usize = 8;
    for _ in 0..MAX_STACKED {
        match umount2(path, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => continue,
            // Not a mount point (any more); or no privilege to unmount, and
            // then the removal fails with EBUSY if it was mounted.
            Err(Errno::EINVAL) | Err(Errno::EPERM) => break,
            Err(Errno::ENOENT) => return Ok(false),
            Err(e) => return Err(os(path, "umount2(MNT_DETACH)", e)),
        }
    }
    Ok(true)
}

/// Removes the namespace mounted at `path`: detaches the mount (and any mount
/// stacked on it), then deletes the file. Idempotent: a missing file or a file
/// that is no longer mounted is fine.
pub fn remove_path(path: &Path) -> Result<(), Error> {
    if !unmount_stacked(path)? {
        return Ok(());
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(os(path, "unlink", e)),
    }
}

/// Whether `path` is a network namespace (an nsfs file of type net). A path
/// that does not exist is not one.
pub fn is_namespace(path: &Path) -> Result<bool, Error> {
    // 0: a kernel before 4.11, which cannot tell the type; an nsfs file is
    // the best we know.
    Ok(matches!(
        namespace_type(path)?,
        Some(libc::CLONE_NEWNET) | Some(0)
    ))
}

/// The `CLONE_NEW*` type of the namespace at `path`; `None` when it is not
/// an nsfs file (or does not exist); `Some(0)` when the kernel cannot tell.
pub(crate) fn namespace_type(path: &Path) -> Result<Option<i32>, Error> {
    match statfs(path) {
        Ok(fs) if fs.filesystem_type() == NSFS_MAGIC => {}
        Ok(_) | Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => return Ok(None),
        Err(e) => return Err(os(path, "statfs", e)),
    }
    let ns = File::open(path).map_err(|e| os(path, "open", e))?;
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
    let kind = unsafe { libc::ioctl(ns.as_raw_fd(), libc::NS_GET_NSTYPE) };
    if kind >= 0 {
        return Ok(Some(kind));
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::ENOTTY) => Ok(Some(0)),
        e => Err(os(path, "ioctl(NS_GET_NSTYPE)", e)),
    }
}

/// Names become file names: no separators, no `.`/`..`, not empty.
fn validate_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "empty"
    } else if name == "." || name == ".." {
        "reserved"
    } else if name.contains('/') || name.contains('\0') {
        "contains '/' or NUL"
    } else if name.len() > 255 {
        "longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.to_owned(),
        reason,
    })
}

/// Serializes the check-and-bind of namespace directories within this process,
/// so two creations never stack two bind mounts on the same directory.
static SHARED_DIR: Mutex<()> = Mutex::new(());

/// Makes `dir` a shared mount point, bind-mounting it onto itself first if it
/// is not a mount point (what `ip netns add` does for /run/netns).
fn make_shared_mount(dir: &Path) -> Result<(), Error> {
    let _guard = SHARED_DIR.lock_unpoisoned();
    let mut bound = false;
    loop {
        match mount(
            None::<&str>,
            dir,
            None::<&str>,
            MsFlags::MS_SHARED,
            None::<&str>,
        ) {
            Ok(()) => return Ok(()),
            Err(Errno::EINVAL) if !bound => {
                mount(
                    Some(dir),
                    dir,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(|e| os(dir, "bind-mount directory onto itself", e))?;
                bound = true;
            }
            Err(e) => return Err(os(dir, "make directory a shared mount", e)),
        }
    }
}

/// On a dedicated thread: unshare the network namespace, bring `lo` up, and
/// bind-mount the thread's namespace onto `path`. The thread then exits.
fn new_namespace_on(path: &Path) -> Result<(), Error> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("berth-netns-new".into())
            .spawn_scoped(scope, || -> Result<(), Error> {
                unshare(CloneFlags::CLONE_NEWNET)
                    .map_err(|e| os(path, "unshare(CLONE_NEWNET)", e))?;
                set_loopback_up().map_err(|e| os(path, "bring lo up", e))?;
                let source = format!("/proc/self/task/{}/ns/net", nix::unistd::gettid());
                mount(
                    Some(source.as_str()),
                    path,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(|e| os(path, "bind-mount the new namespace", e))
            })
            .map_err(|e| os(path, "spawn thread", e))?;
        handle.join().map_err(|_| Error::Panicked {
            path: path.to_owned(),
            what: "create",
        })?
    })
}

/// Sets IFF_UP on `lo` in the calling thread's network namespace.
fn set_loopback_up() -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the result is checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write an ifreq we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidName { .. })),
                "{bad:?} accepted"
            );
        }
        validate_name("pod-1234_abc.def").unwrap();
        assert!(validate_name(&"x".repeat(256)).is_err());
    }

    #[test]
    fn invalid_name_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("netns");
        assert!(NetNs::create(&sub, "a/b").is_err());
        assert!(!sub.exists(), "directory created for an invalid name");
    }

    #[test]
    fn plain_files_are_not_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(!is_namespace(&file).unwrap());
        assert!(!is_namespace(&dir.path().join("missing")).unwrap());
        assert!(!is_namespace(&file.join("below-a-file")).unwrap());
        assert!(matches!(
            NetNs::open(&file),
            Err(Error::NotANamespace { .. })
        ));
        // Other kinds of namespace are not network namespaces.
        assert!(!is_namespace(Path::new("/proc/self/ns/uts")).unwrap());
        assert!(is_namespace(Path::new("/proc/self/ns/net")).unwrap());
    }

    /// IFF_UP of `lo` in the calling thread's network namespace.
    fn loopback_is_up() -> bool {
        // SAFETY: as in set_loopback_up: a fresh socket, an ifreq we own.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let sock = OwnedFd::from_raw_fd(fd);
            let mut req: libc::ifreq = std::mem::zeroed();
            for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
                *dst = *src as libc::c_char;
            }
            assert!(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) >= 0);
            req.ifr_ifru.ifru_flags & libc::IFF_UP as libc::c_short != 0
        }
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn an_owned_namespace_belongs_to_its_user_namespace() {
        // SAFETY: geteuid never fails.
        assert!(unsafe { libc::geteuid() } == 0, "needs root");
        let dir = tempfile::tempdir().unwrap();
        let (netns_dir, userns) = (dir.path().join("netns"), dir.path().join("userns/p"));
        let map = "0 100000 65536\n";
        let ns = NetNs::create_owned(&netns_dir, "p", &userns, map, map).unwrap();
        assert!(is_namespace(ns.path()).unwrap());
        // NS_GET_USERNS of the netns is the pinned user namespace.
        let net = File::open(ns.path()).unwrap();
        // SAFETY: NS_GET_USERNS returns a new fd or -1.
        let owner = unsafe { libc::ioctl(net.as_raw_fd(), libc::NS_GET_USERNS) };
        assert!(owner >= 0);
        // SAFETY: a fresh fd.
        let owner = unsafe { OwnedFd::from_raw_fd(owner) };
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        assert_eq!(
            ino(Path::new(&format!("/proc/self/fd/{}", owner.as_raw_fd()))),
            ino(&userns)
        );
        // lo is up inside.
        assert!(ns.run_in(loopback_is_up).unwrap());
        // A second one with the same names fails and leaves the first.
        assert!(matches!(
            NetNs::create_owned(&netns_dir, "p", &userns, map, map),
            Err(Error::AlreadyExists { .. })
        ));
        assert!(is_namespace(ns.path()).unwrap());
        // A bad mapping leaves nothing.
        let bad = NetNs::create_owned(
            &netns_dir,
            "q",
            &dir.path().join("userns/q"),
            "0 0 0\n",
            map,
        );
        assert!(bad.is_err());
        assert!(!netns_dir.join("q").exists() && !dir.path().join("userns/q").exists());
        remove_path(&userns).unwrap();
        ns.remove().unwrap();
        for d in [&netns_dir, &dir.path().join("userns")] {
            let _ = umount2(d.as_path(), MntFlags::MNT_DETACH);
        }
    }

    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn a_user_namespace_alone_is_pinned_with_its_mapping() {
        // SAFETY: geteuid never fails.
        assert!(unsafe { libc::geteuid() } == 0, "needs root");
        let dir = tempfile::tempdir().unwrap();
        let userns = dir.path().join("userns/p");
        let map = "0 100000 65536\n";
        create_userns(&userns, map, map).unwrap();
        // A user namespace (NS_GET_NSTYPE), not this process's one.
        let f = File::open(&userns).unwrap();
        // SAFETY: NS_GET_NSTYPE takes no argument.
        let kind = unsafe { libc::ioctl(f.as_raw_fd(), libc::NS_GET_NSTYPE) };
        assert_eq!(kind, libc::CLONE_NEWUSER);
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        assert_ne!(ino(&userns), ino(Path::new("/proc/self/ns/user")));
        drop(f);
        // Twice is refused and leaves the first; a bad mapping leaves nothing.
        assert!(matches!(
            create_userns(&userns, map, map),
            Err(Error::AlreadyExists { .. })
        ));
        let bad = dir.path().join("userns/q");
        assert!(create_userns(&bad, "0 0 0\n", map).is_err());
        assert!(!bad.exists());
        remove_path(&userns).unwrap();
        assert!(!userns.exists());
        let _ = umount2(dir.path().join("userns").as_path(), MntFlags::MNT_DETACH);
    }

    #[test]
    fn remove_path_is_idempotent_on_plain_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        remove_path(&file).unwrap();
        assert!(!file.exists());
        remove_path(&file).unwrap();
    }
}
