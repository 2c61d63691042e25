//! Bounded waits for the few programs berth runs itself (a runtime's
//! `--version` and `features`, `apparmor_parser` at start-up), and where a
//! program is.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Waits for `child` at most `timeout`; past it, kills and reaps it and
/// answers `None`.
pub fn wait_or_kill(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An absolute path, or a name looked up in `PATH`, that is an executable file.
pub fn find_executable(binary: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if binary.contains('/') {
        let p = PathBuf::from(binary);
        return is_exec(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|p| is_exec(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_the_exit_or_kills_at_the_limit() {
        let mut quick = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let status = wait_or_kill(&mut quick, Duration::from_secs(10))
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(3));
        let mut slow = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let start = Instant::now();
        assert!(wait_or_kill(&mut slow, Duration::from_millis(100))
            .unwrap()
            .is_none());
        assert!(start.elapsed() < Duration::from_secs(5));
        // Reaped: nothing left to wait for.
        assert!(slow.try_wait().unwrap().is_some());
    }

    #[test]
    fn executable_lookup() {
        assert!(find_executable("sh").is_some());
        assert!(find_executable("/bin/sh").is_some());
        assert!(find_executable("/nonexistent/runc").is_none());
        assert!(find_executable("no-such-binary-berth").is_none());
    }
}
