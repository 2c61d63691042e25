//! The runtime's first cgroup move, started early (`runtime.cgroup_warmup`).
//!
//! On hosts with cgroup v1 hierarchies the first `cgroup.procs` write after
//! a quiet spell waits out an RCU grace period (the kernel's
//! `cgroup_threadgroup_rwsem`). When a call that will run the runtime
//! arrives, berth writes its own process into the cgroup it is already in,
//! on a blocking thread, one write at a time, so the wait runs beside
//! berth's own work instead of inside runc. Off on v2-only hosts, where a
//! runtime's `CLONE_INTO_CGROUP` would wait behind it. Why, and what it
//! saves: docs/architecture.md, *The cgroup lock warm-up*.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use berth_cgroup_stats::{Cgroup, Mode, Mounts};

/// Where the warm-up writes, and whether one is under way.
#[derive(Debug, Clone)]
pub struct CgroupWarmup {
    /// `cgroup.procs` of berth's own cgroup in a v1 hierarchy.
    procs: PathBuf,
    busy: Arc<AtomicBool>,
}

/// The v1 controllers whose hierarchy the write may go to, in order.
const HIERARCHIES: [&str; 4] = ["pids", "cpu", "memory", "cpuacct"];

impl CgroupWarmup {
    /// The warm-up for this process on this host, or why there is none.
    pub fn probe() -> Result<CgroupWarmup, String> {
        let mounts = Mounts::read().map_err(|e| e.to_string())?;
        let cgroup = Cgroup::for_pid(&mounts, std::process::id()).map_err(|e| e.to_string())?;
        Self::for_cgroup(mounts.mode(), &cgroup)
    }

    /// The warm-up for a process in `cgroup` on a host in `mode`.
    pub fn for_cgroup(mode: Option<Mode>, cgroup: &Cgroup) -> Result<CgroupWarmup, String> {
        match mode {
            Some(Mode::V1 | Mode::Hybrid) => {}
            Some(Mode::V2) => {
                return Err("a cgroup v2 host (runtimes may clone into the cgroup there)".into())
            }
            None => return Err("no cgroup hierarchy is mounted".into()),
        }
        let dir = HIERARCHIES
            .iter()
            .find_map(|c| cgroup.dir(c))
            .ok_or_else(|| format!("berth is in none of the v1 hierarchies {HIERARCHIES:?}"))?;
        Ok(CgroupWarmup {
            procs: dir.join("cgroup.procs"),
            busy: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The file the warm-up writes.
    pub fn procs(&self) -> &std::path::Path {
        &self.procs
    }

    /// Starts one write on the blocking pool, unless one is under way; never
    /// fails the caller (a failed write is logged, and the runtime's own
    /// write waits as it would have). The write, if one was started: the
    /// caller need not wait for it.
    pub fn start(&self, id: &str) -> Option<tokio::task::JoinHandle<()>> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (procs, busy, id) = (self.procs.clone(), self.busy.clone(), id.to_string());
        Some(tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let result = write_self(&procs);
            busy.store(false, Ordering::Release);
            match result {
                Ok(()) => tracing::trace!(%id, took = ?started.elapsed(), "cgroup lock warmed"),
                Err(e) => {
                    tracing::debug!(%id, path = %procs.display(), error = %e, "warming the cgroup lock")
                }
            }
        }))
    }
}

/// Writes this process into the cgroup whose `cgroup.procs` is `procs`
/// (`0`: the writer's own process).
fn write_self(procs: &std::path::Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(procs)?
        .write_all(b"0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_to_a_v1_hierarchy_only_where_there_is_one() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let cgroup = Cgroup::from_dirs(&[("pids", &pids)], None);
        for mode in [Mode::V1, Mode::Hybrid] {
            let w = CgroupWarmup::for_cgroup(Some(mode), &cgroup).unwrap();
            assert_eq!(w.procs(), pids.join("cgroup.procs"));
        }
        let v2 = Cgroup::from_dirs(&[], Some(&dir.path().join("unified")));
        let why = CgroupWarmup::for_cgroup(Some(Mode::V2), &v2).unwrap_err();
        assert!(why.contains("v2"), "{why}");
        assert!(CgroupWarmup::for_cgroup(None, &cgroup).is_err());
        let other = Cgroup::from_dirs(&[("hugetlb", &dir.path().join("h"))], None);
        assert!(CgroupWarmup::for_cgroup(Some(Mode::V1), &other).is_err());
    }

    /// The warm-up of this host: `None` where it is off (no v1 hierarchy).
    fn on_this_host() -> Option<CgroupWarmup> {
        let mode = Mounts::read().ok().and_then(|m| m.mode());
        let probed = CgroupWarmup::probe();
        if !matches!(mode, Some(Mode::V1 | Mode::Hybrid)) {
            assert!(probed.is_err(), "{mode:?}: {probed:?}");
            return None;
        }
        let w = probed.unwrap();
        assert!(w.procs().is_file(), "{}", w.procs().display());
        Some(w)
    }

    #[test]
    fn on_this_host_it_is_on_with_v1_hierarchies() {
        on_this_host();
    }

    /// This process into the cgroup it is in, which moves nothing.
    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn on_this_host_the_kernel_takes_the_write() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
        );
        // Without a v1 hierarchy there is no write: on_this_host checks it is off.
        if let Some(w) = on_this_host() {
            let before = std::fs::read_to_string("/proc/self/cgroup").unwrap();
            write_self(w.procs()).unwrap();
            assert_eq!(
                std::fs::read_to_string("/proc/self/cgroup").unwrap(),
                before
            );
        }
    }

    #[tokio::test]
    async fn one_write_at_a_time_and_a_failed_one_frees_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        std::fs::create_dir(&pids).unwrap();
        let cgroup = Cgroup::from_dirs(&[("pids", &pids)], None);
        let w = CgroupWarmup::for_cgroup(Some(Mode::V1), &cgroup).unwrap();
        // A plain file stands in for cgroup.procs.
        std::fs::write(w.procs(), b"").unwrap();
        // Busy: no write is started (so none can come later).
        w.busy.store(true, Ordering::Release);
        assert!(w.start("c1").is_none());
        // Free: one write.
        w.busy.store(false, Ordering::Release);
        w.start("c2").expect("a write").await.unwrap();
        assert_eq!(std::fs::read(w.procs()).unwrap(), b"0");
        assert!(!w.busy.load(Ordering::Acquire));
        // A write that fails (no such file) leaves it free again.
        std::fs::remove_dir_all(&pids).unwrap();
        w.start("c3").expect("a write").await.unwrap();
        assert!(!w.busy.load(Ordering::Acquire));
    }
}
