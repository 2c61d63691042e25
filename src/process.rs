//! Bounded waits for the few programs the daemon runs itself (a runtime's
//! `--version` in `berth check`, `apparmor_parser` at start-up).

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
}
