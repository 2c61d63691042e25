//! The runtime's first cgroup move, started early.
//!
//! A runtime that starts a container (or, on cgroup v1, an exec) moves its
//! process into the container's cgroups by writing `cgroup.procs`. The
//! kernel takes its global `cgroup_threadgroup_rwsem` for that write, and
//! the first writer after a quiet spell waits out a whole RCU grace period
//! while the lock's readers move to their slow path (`percpu_down_write`,
//! `rcu_sync_enter`, `synchronize_rcu`): 8 to 12 ms here (HZ=250), with
//! both CPUs idle, and most of the gap between runc under a shim and runc
//! run directly. A writer that comes while that wait is under way shares
//! it; one that comes within a grace period after the last writer left
//! does not wait at all.
//!
//! So when a call that will run the runtime arrives, berth writes its own
//! process into the cgroup it is already in (which moves nothing) on a
//! blocking thread: the grace period runs beside berth's own work (the
//! record, the rootfs, the spec, the shim and runc's own start-up) instead
//! of inside runc. One write at a time; a call that finds one under way
//! adds none.
//!
//! Only on hosts with v1 hierarchies (v1 or hybrid): on a v2-only host a
//! runtime may clone its process straight into the cgroup
//! (`CLONE_INTO_CGROUP`: runc's exec since runc 1.4, opencontainers/runc
//! #4812; crun's exec, containers/crun #801), which takes the cgroup mutex
//! the write holds through its wait; there it would delay what it means to
//! hurry. A kernel whose hierarchies are mounted
//! with `favordynmods` has no wait to start early: the write is then a
//! few microseconds of nothing. Neither containerd nor CRI-O does this.

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
    /// write waits as it would have).
    pub fn start(&self, id: &str) {
        if self.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let (procs, busy, id) = (self.procs.clone(), self.busy.clone(), id.to_string());
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let result = write_self(&procs);
            busy.store(false, Ordering::Release);
            match result {
                Ok(()) => tracing::trace!(%id, took = ?started.elapsed(), "cgroup lock warmed"),
                Err(e) => {
                    tracing::debug!(%id, path = %procs.display(), error = %e, "warming the cgroup lock")
                }
            }
        });
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

    #[test]
    fn on_this_host_it_is_on_with_v1_hierarchies_and_the_kernel_takes_the_write() {
        let mode = Mounts::read().ok().and_then(|m| m.mode());
        let probed = CgroupWarmup::probe();
        if !matches!(mode, Some(Mode::V1 | Mode::Hybrid)) {
            assert!(probed.is_err(), "{mode:?}: {probed:?}");
            return;
        }
        let w = probed.unwrap();
        assert!(w.procs().is_file(), "{}", w.procs().display());
        // As root: this process into the cgroup it is in, which moves nothing.
        if nix::unistd::geteuid().is_root() {
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
        // Busy: nothing is written.
        w.busy.store(true, Ordering::Release);
        w.start("c1");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!w.procs().exists());
        // Free: one write (a plain file stands in for cgroup.procs).
        w.busy.store(false, Ordering::Release);
        std::fs::write(w.procs(), b"").unwrap();
        w.start("c2");
        for _ in 0..100 {
            if !w.busy.load(Ordering::Acquire) && std::fs::read(w.procs()).unwrap() == b"0" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(std::fs::read(w.procs()).unwrap(), b"0");
        // A write that fails (no such file) leaves it free again.
        std::fs::remove_dir_all(&pids).unwrap();
        w.start("c3");
        for _ in 0..100 {
            if !w.busy.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!w.busy.load(Ordering::Acquire));
    }
}
