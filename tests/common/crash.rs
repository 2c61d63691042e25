//! Crash tests: a daemon started with failpoints (it aborts at the named
//! step, as if SIGKILLed), and checks that nothing is left behind.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::{wait_exit, Daemon, Sandbox};

impl Daemon {
    /// Starts berth with `BERTH_FAILPOINTS=failpoints`; `restart` clears them.
    pub async fn start_with_failpoints(
        sandbox: Sandbox,
        config: &Path,
        failpoints: &str,
    ) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(sandbox.log_file())
            .expect("log file");
        let child = sandbox
            .command(config)
            .env("BERTH_FAILPOINTS", failpoints)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn berth");
        let mut daemon = Daemon {
            child,
            sandbox,
            config: config.to_path_buf(),
            args: Vec::new(),
            umask: None,
        };
        daemon.wait_ready().await;
        daemon
    }

    /// Waits for the daemon to die (a failpoint aborted it).
    pub async fn wait_crashed(&mut self) {
        let status = wait_exit(&mut self.child, Duration::from_secs(20)).await;
        assert!(
            !status.success(),
            "berth exited cleanly instead of aborting"
        );
    }

    /// Panics if any of berth's own dirs still holds an entry.
    pub fn assert_no_leftovers(&self) {
        for dir in [
            "state/runtime",
            "state/netns",
            "state/podns",
            "state/sandboxes",
            "state/containers",
            "state/s",
            "root/sandboxes",
            "root/containers",
            "root/records/sandboxes",
            "root/records/containers",
        ] {
            let path = self.sandbox.path(dir);
            let left = super::faults::entries(&path);
            assert!(left.is_empty(), "{} still holds {left:?}", path.display());
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root = self.sandbox.dir.path().display().to_string();
        let shared = self.sandbox.shared_mount_points();
        let mounts: Vec<&str> = mountinfo
            .lines()
            .filter(|l| l.contains(&root))
            .filter(|l| {
                !l.split(' ')
                    .nth(4)
                    .is_some_and(|p| shared.iter().any(|s| s == p))
            })
            .collect();
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    }
}
