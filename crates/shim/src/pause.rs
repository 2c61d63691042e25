//! The built-in pause program and the minimal rootfs it runs from, so that a
//! pod sandbox needs no pause image.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

static PAUSE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// Where [`write_pause_rootfs`] puts the program, inside the rootfs.
pub const PAUSE_PATH: &str = "/pause";

/// The pause program: a static executable (no libc needed) that sleeps until
/// SIGINT or SIGTERM (then exits 0) and reaps every child that exits.
pub fn pause_binary() -> &'static [u8] {
    PAUSE
}

/// Lays out a rootfs in `dir` for the pause program: `/pause` (mode 0755) and
/// the empty directories a runtime mounts onto (`proc`, `dev`, `sys`, `etc`,
/// `tmp`). Idempotent; `/pause` is replaced atomically.
pub fn write_pause_rootfs(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    for sub in ["proc", "dev", "sys", "etc", "tmp"] {
        let path = dir.join(sub);
        match std::fs::DirBuilder::new().mode(0o755).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    std::fs::set_permissions(dir.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
    let target = dir.join(PAUSE_PATH.trim_start_matches('/'));
    // Under the state dir (a reboot takes it): atomic, not fsynced.
    berth_atomic_file::write_volatile(&target, PAUSE, 0o755)?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn pause_is_a_static_elf() {
        let bin = pause_binary();
        assert_eq!(&bin[..4], b"\x7fELF");
        assert!(bin.len() < 64 * 1024, "pause is {} bytes", bin.len());
        // ELF64 little-endian, and no PT_INTERP program header: there is no
        // dynamic loader in the rootfs.
        assert_eq!((bin[4], bin[5]), (2, 1));
        let u16_at = |o: usize| u16::from_le_bytes([bin[o], bin[o + 1]]) as usize;
        let phoff = u64::from_le_bytes(bin[0x20..0x28].try_into().unwrap()) as usize;
        let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
        assert!(phnum > 0);
        for i in 0..phnum {
            let off = phoff + i * phentsize;
            let p_type = u32::from_le_bytes(bin[off..off + 4].try_into().unwrap());
            assert_ne!(p_type, 3, "pause has a PT_INTERP header");
        }
    }

    #[test]
    fn rootfs_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        write_pause_rootfs(&root).unwrap();
        write_pause_rootfs(&root).unwrap();
        let meta = std::fs::metadata(root.join("pause")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read(root.join("pause")).unwrap(), pause_binary());
        for sub in ["proc", "dev", "sys", "etc", "tmp"] {
            assert!(root.join(sub).is_dir(), "{sub}");
        }
    }

    #[test]
    fn pause_exits_on_sigterm() {
        use std::process::Command;
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        write_pause_rootfs(dir.path()).unwrap();
        // Another test thread that forks while the file is still open for
        // writing holds it until its exec: ETXTBSY is that race, not pause.
        let mut tries = 0;
        let mut child = loop {
            match Command::new(dir.path().join("pause")).spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        };
        // Signalled once it waits in rt_sigtimedwait (the only place it
        // sleeps): before it blocked SIGTERM, the signal would kill it.
        let wchan = format!("/proc/{}/wchan", child.id());
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(
                child.try_wait().unwrap().is_none(),
                "pause exited on its own"
            );
            let w = std::fs::read_to_string(&wchan).unwrap_or_default();
            if w.contains("sigtimedwait") {
                break;
            }
            if Instant::now() > until {
                let _ = child.kill();
                panic!("pause never waited for a signal: in {w:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: kill on the pid of our own live child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0));
                break;
            }
            assert!(Instant::now() < until, "pause ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
