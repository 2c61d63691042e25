//! The UTS and IPC namespaces of a pod without a pause process, pinned on
//! files as CRI-O's `pinns` does for `drop_infra_ctr`: a throw-away thread
//! unshares them, sets the pod's hostname in the new UTS namespace, and
//! bind-mounts its `/proc/self/task/<tid>/ns/{uts,ipc}` onto `dir/uts` and
//! `dir/ipc`. The containers of the pod join them by path, as they join the
//! network namespace. The parent of `dir` is made a shared mount point (as
//! the network namespace directory is), so that unpinning propagates.
//!
//! The pod's sysctls are not written here: every container of the pod sets
//! them when it joins (they are in its spec), before any process of the pod
//! runs.
//!
//! A privileged pod also gets a read-write sysfs of its network namespace
//! held on `dir/sys`: the kernel keeps one sysfs superblock per network
//! namespace, and its first mount decides whether it is read-only. Without
//! the hold, a container that mounts `/sys` read-only before a privileged
//! one would leave the privileged one's read-only too (in a pod with a
//! pause, the pause's mount is the first).

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};

use crate::{make_shared_mount, namespace_type, os, remove_path, Error};

/// What to pin for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinRequest {
    /// Pin a new UTS namespace with this hostname (`None`: the pod uses the
    /// host's UTS namespace; `Some("")` keeps the host's name in the new one).
    pub uts_hostname: Option<String>,
    /// Pin a new IPC namespace.
    pub ipc: bool,
    /// Hold a read-write sysfs of this network namespace (a privileged pod
    /// on its own network).
    pub sysfs_of: Option<PathBuf>,
}

/// Pinned namespace files of one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pinned {
    pub uts: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    /// The held sysfs (a directory).
    pub sysfs: Option<PathBuf>,
}

impl PinRequest {
    /// The files in `dir` that the pins asked for are (to be) mounted on.
    pub fn files(&self, dir: &Path) -> Pinned {
        Pinned {
            uts: self.uts_hostname.as_ref().map(|_| uts_path(dir)),
            ipc: self.ipc.then(|| ipc_path(dir)),
            sysfs: self.sysfs_of.as_ref().map(|_| sysfs_path(dir)),
        }
    }
}

/// The file of the pinned UTS namespace in `dir`.
pub fn uts_path(dir: &Path) -> PathBuf {
    dir.join("uts")
}

/// The file of the pinned IPC namespace in `dir`.
pub fn ipc_path(dir: &Path) -> PathBuf {
    dir.join("ipc")
}

/// The held sysfs in `dir`.
pub fn sysfs_path(dir: &Path) -> PathBuf {
    dir.join("sys")
}

/// Longest hostname the kernel takes (`HOST_NAME_MAX`).
pub const MAX_HOSTNAME: usize = 64;

/// Pins new namespaces as `req` asks into `dir` (made 0700; it must not
/// hold pins already). On any failure nothing is left behind.
pub fn pin(dir: &Path, req: &PinRequest) -> Result<Pinned, Error> {
    if let Some(h) = &req.uts_hostname {
        if h.len() > MAX_HOSTNAME || h.contains('\0') {
            return Err(os(
                dir,
                "set the hostname",
                io::Error::new(io::ErrorKind::InvalidInput, "hostname too long or with NUL"),
            ));
        }
    }
    let pinned = req.files(dir);
    let mut flags = CloneFlags::empty();
    if pinned.uts.is_some() {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    if pinned.ipc.is_some() {
        flags |= CloneFlags::CLONE_NEWIPC;
    }
    if flags.is_empty() && req.sysfs_of.is_none() {
        return Ok(pinned);
    }
    let parent = dir.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| os(parent, "create directory", e))?;
    make_shared_mount(parent)?;
    let made_dir = match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(os(dir, "create directory", e)),
    };
    // Only what this call made is undone: a pin already there stays.
    let mut made: Vec<&Path> = Vec::new();
    let mut made_sysfs = false;
    let result = (|| {
        for f in pinned.uts.iter().chain(pinned.ipc.iter()) {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(f)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::AlreadyExists => Error::AlreadyExists {
                        path: f.to_path_buf(),
                    },
                    _ => os(f, "create mount point file", e),
                })?;
            made.push(f);
        }
        if let Some(sys) = &pinned.sysfs {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(sys)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::AlreadyExists => Error::AlreadyExists { path: sys.clone() },
                    _ => os(sys, "create directory", e),
                })?;
            made_sysfs = true;
        }
        pin_on_thread(dir, flags, req, &pinned)
    })();
    let Err(error) = result else {
        return Ok(pinned);
    };
    let sysfs = pinned.sysfs.as_deref().filter(|_| made_sysfs);
    let cleanup = made.iter().try_for_each(|f| remove_path(f));
    let cleanup = cleanup.and_then(|()| sysfs.map_or(Ok(()), remove_mount_dir));
    let cleanup = cleanup.and_then(|()| {
        if made_dir {
            std::fs::remove_dir(dir).map_err(|e| os(dir, "remove directory", e))
        } else {
            Ok(())
        }
    });
    match cleanup {
        Ok(()) => Err(error),
        Err(cleanup) => Err(Error::Cleanup {
            error: Box::new(error),
            cleanup: Box::new(cleanup),
        }),
    }
}

/// Unmounts and removes the pins in `dir`, then `dir`. Idempotent.
pub fn unpin(dir: &Path) -> Result<(), Error> {
    remove_mount_dir(&sysfs_path(dir))?;
    remove_path(&uts_path(dir))?;
    remove_path(&ipc_path(dir))?;
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(os(dir, "remove directory", e)),
    }
}

/// Whether every pin in `pinned` is still a namespace of its kind.
pub fn is_pinned(pinned: &Pinned) -> Result<bool, Error> {
    for (path, kind) in [
        (&pinned.uts, libc::CLONE_NEWUTS),
        (&pinned.ipc, libc::CLONE_NEWIPC),
    ] {
        if let Some(path) = path {
            match namespace_type(path)? {
                Some(k) if k == kind || k == 0 => {}
                _ => return Ok(false),
            }
        }
    }
    Ok(true)
}

/// Unmounts what is mounted on the directory `path` and removes it.
/// Idempotent.
fn remove_mount_dir(path: &Path) -> Result<(), Error> {
    if !crate::unmount_stacked(path)? {
        return Ok(());
    }
    match std::fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(os(path, "remove directory", e)),
    }
}

/// On a dedicated thread: unshare `flags`, set the hostname, bind-mount the
/// thread's new namespaces onto the files, then enter the pod's network
/// namespace and mount its sysfs where asked. The thread then exits.
fn pin_on_thread(
    dir: &Path,
    flags: CloneFlags,
    req: &PinRequest,
    pinned: &Pinned,
) -> Result<(), Error> {
    let hostname = req.uts_hostname.as_deref();
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("berth-pinns".into())
            .spawn_scoped(scope, || -> Result<(), Error> {
                unshare(flags).map_err(|e| os(dir, "unshare(UTS|IPC)", e))?;
                if let Some(h) = hostname.filter(|h| !h.is_empty()) {
                    nix::unistd::sethostname(h).map_err(|e| os(dir, "sethostname", e))?;
                }
                let tid = nix::unistd::gettid();
                for (name, target) in [("uts", &pinned.uts), ("ipc", &pinned.ipc)] {
                    let Some(target) = target else { continue };
                    let source = format!("/proc/self/task/{tid}/ns/{name}");
                    mount(
                        Some(source.as_str()),
                        target.as_path(),
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    )
                    .map_err(|e| os(target, "bind-mount the new namespace", e))?;
                }
                let (Some(netns), Some(target)) = (&req.sysfs_of, &pinned.sysfs) else {
                    return Ok(());
                };
                let ns = std::fs::File::open(netns).map_err(|e| os(netns, "open", e))?;
                setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| os(netns, "setns(NET)", e))?;
                let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
                mount(
                    Some("sysfs"),
                    target.as_path(),
                    Some("sysfs"),
                    flags,
                    None::<&str>,
                )
                .map_err(|e| os(target, "mount the pod's sysfs", e))
            })
            .map_err(|e| os(dir, "spawn thread", e))?;
        handle.join().map_err(|_| Error::Panicked {
            path: dir.to_owned(),
            what: "pin",
        })?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_asked_pins_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ns").join("pod");
        let req = PinRequest {
            uts_hostname: None,
            ipc: false,
            sysfs_of: None,
        };
        assert_eq!(pin(&sub, &req).unwrap(), Pinned::default());
        assert!(!sub.exists());
    }

    #[test]
    fn a_hostname_too_long_is_refused_first() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ns").join("pod");
        let req = PinRequest {
            uts_hostname: Some("x".repeat(65)),
            ipc: true,
            sysfs_of: None,
        };
        // The hostname's own refusal, not any later failure (an unshare
        // without root fails too), and before anything is made.
        match pin(&sub, &req) {
            Err(Error::Os { op, source, .. }) => {
                assert_eq!(op, "set the hostname");
                assert_eq!(source.kind(), io::ErrorKind::InvalidInput);
            }
            other => panic!("not the hostname's refusal: {other:?}"),
        }
        assert!(!dir.path().join("ns").exists());
    }

    #[test]
    fn unpin_of_nothing_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        unpin(&dir.path().join("gone")).unwrap();
    }
}
