//! Directories berth makes on the host, and the daemon's umask.
//!
//! `mkdir`'s mode is less the process's umask, and berth is started by
//! whatever started it (a shell with `umask 000`, a unit with its own
//! `UMask=`): the daemon sets its own umask at start ([`UMASK`]), and the
//! directories it makes where others look (a CRI mount's missing host path,
//! the CNI config dir, the overlay upper dir that is a container's `/`) get
//! their mode set explicitly ([`make_dirs`]), not left to any umask.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::{fchmod, Mode};
use nix::unistd::{fchown, getegid, geteuid};

/// The daemon's umask, set at start and inherited by its shims, the OCI
/// runtime and the CNI plugins: files and directories made without an
/// explicit mode are not writable by others (as under systemd's default).
/// Not stricter: what containers read through bind mounts and overlays
/// (the pod's `/etc/hosts`, `/etc/resolv.conf`, a directory runc makes in a
/// rootfs) must stay readable by their non-root users. berth's own records,
/// specs and private dirs have explicit modes (0600, 0700) regardless.
pub const UMASK: u32 = 0o022;

/// Sets the daemon's umask to [`UMASK`]; answers the one it replaces.
pub fn set_umask() -> u32 {
    nix::sys::stat::umask(Mode::from_bits_truncate(UMASK)).bits()
}

/// Makes `dir` and its missing parents, each with exactly `mode` whatever
/// the umask, owned by berth's user and group (root). Directories that
/// exist are left as they are (a symlink to a directory counts as one, as
/// for kubelet's host paths). The mode and owner are set on the directory
/// just made, opened without following a symlink: one put in its place
/// meanwhile is refused, never chmodded.
pub fn make_dirs(dir: &Path, mode: u32) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        make_dirs(parent, mode)?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        // Made meanwhile by someone else: theirs.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    let fd = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    fchown(&fd, Some(geteuid()), Some(getegid()))?;
    fchmod(&fd, Mode::from_bits_truncate(mode))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn made_dirs_get_the_mode_and_existing_ones_keep_theirs() {
        let tmp = tempfile::tempdir().unwrap();
        let old = tmp.path().join("old");
        std::fs::create_dir(&old).unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o700)).unwrap();
        // setgid on the parent would pass to a new dir: the mode is exact.
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o2700)).unwrap();
        let new = old.join("a/b");
        make_dirs(&new, 0o755).unwrap();
        assert_eq!(mode(&old), 0o2700);
        assert_eq!(mode(&old.join("a")), 0o755);
        assert_eq!(mode(&new), 0o755);
        // Again: nothing to do, nothing changed.
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o750)).unwrap();
        make_dirs(&new, 0o755).unwrap();
        assert_eq!(mode(&new), 0o750);
        // A file in the way is an error.
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(make_dirs(&file.join("x"), 0o755).is_err());
    }
}
