//! Endurance, bounded for CI (#28): kubelet-like churn — pod and container
//! life cycles one after another and three at a time, ExecSync probes,
//! ReopenContainerLog, exec and port-forward sessions, a relist every
//! second — driven by `berth-bench churn` (the driver `hack/endurance.sh`
//! runs for 5,000 life cycles) against a daemon of the harness on a
//! network of the test's own, under a memory cgroup: 60 life cycles of
//! warm-up, then 320 measured. Asserts that every call was answered, that
//! the daemon's RSS grew at most 1536 KiB from the baseline (after the
//! warm-up) to the end, that its open fds and threads
//! came back to the baseline, and that nothing is left: no pod, container,
//! shim, mount, netns, record, IPAM lease, pod cgroup or temp file. Before
//! the fix of #28 (each creation's request kept for 10 minutes) RSS grew
//! ~7 KiB per life cycle. Root only.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::faults;
use common::pods::{net_config, TestNet};
use common::{registry, Daemon, Sandbox};

/// Life cycles before the baseline, and measured after it.
const WARMUP: &str = "60";
const CYCLES: &str = "320";
/// The RSS bound (KiB) from the baseline to the end: 4.8 KiB per life
/// cycle, where the leak of #28 was ~6 (996 KiB over 160 cycles, so about
/// 2 MiB over these 320). Without a leak the growth is a high-water mark,
/// not a slope: 50–900 KiB measured (the peak of concurrent threads under
/// the machine's load, and what the allocator keeps of it), whatever the
/// length; 160 cycles and 768 KiB left no margin between the two (872 KiB
/// on CI and 896 in a full run here, without a leak).
const MAX_GROWTH_KIB: u64 = 1536;
/// The pods' cgroup parent (its own, so that leftovers are this test's).
const CGROUP_PARENT: &str = "berth-test-endurance";
/// The whole churn, at most.
const LIMIT: Duration = Duration::from_secs(900);

/// berth-bench, built beside berth (`cargo build --workspace --bins`, or
/// `cargo test --workspace`, builds it).
fn berth_bench() -> PathBuf {
    let bin = Path::new(common::berth_bin())
        .parent()
        .expect("berth's dir")
        .join("berth-bench");
    assert!(
        bin.exists(),
        "{} is missing: build it (cargo build -p berth-bench, or cargo test --workspace)",
        bin.display()
    );
    bin
}

/// A memory cgroup (1 GiB) the daemon is moved into; removed on drop
/// (after the daemon, declared later, is gone).
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn new() -> MemoryCgroup {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
            && !Path::new("/sys/fs/cgroup/memory").exists();
        let name = format!("berth-test-endurance-{}", std::process::id());
        let (dir, limit) = if v2 {
            (Path::new("/sys/fs/cgroup").join(name), "memory.max")
        } else {
            (
                Path::new("/sys/fs/cgroup/memory").join(name),
                "memory.limit_in_bytes",
            )
        };
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(limit), "1G").unwrap();
        MemoryCgroup(dir)
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Processes take a moment to leave it after they were killed.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The pods' cgroups left in any hierarchy.
fn pod_cgroups() -> Vec<PathBuf> {
    let mut left = Vec::new();
    let mut roots = vec![Path::new("/sys/fs/cgroup").join(CGROUP_PARENT)];
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        roots.push(h.path().join(CGROUP_PARENT));
    }
    for root in roots {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    left.push(e.path());
                    stack.push(e.path());
                }
            }
        }
    }
    left
}

/// Files named like an unfinished atomic write (`.NAME.tmp-PID-N`) below `dir`.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().contains(".tmp-") {
                found.push(e.path());
            }
        }
    }
    found
}

/// Removes the pods' cgroup dirs (deepest first) when the test ends.
struct CgroupSweep;

impl Drop for CgroupSweep {
    fn drop(&mut self) {
        let mut dirs = pod_cgroups();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.as_os_str().len()));
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
        for h in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_dir(h.path().join(CGROUP_PARENT));
        }
        let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(CGROUP_PARENT));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn kubelet_like_churn_grows_no_memory_and_leaves_nothing() {
    require_root!();
    let bench = berth_bench();
    let _sweep = CgroupSweep;
    let cgroup = MemoryCgroup::new();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = net_config(&sandbox, &net, "");
    let daemon = Daemon::start_in(sandbox, &config).await;
    let pid = daemon.child.id();
    cgroup.add(pid);
    let image = registry().busybox();
    common::cri::pull(&daemon, &image).await;

    let dir = daemon.sandbox.dir.path().to_path_buf();
    let summary_file = dir.join("churn.json");
    let started = Instant::now();
    // The shims of containers and pauses: their state dirs are below
    // state/s/ (the daemon's standby shim names state/s itself, and is
    // there at the end as at the start).
    let run = tokio::process::Command::new(&bench)
        .arg("churn")
        .arg("--target")
        .arg(format!(
            "berth={},shim=berth-shim,match={}/state/s/,pid={pid}",
            daemon.sandbox.socket().display(),
            dir.display()
        ))
        .args(["--image", &image, "--warmup", WARMUP, "--cycles", CYCLES])
        .args(["--sample-every", "20", "--quiet-secs", "11"])
        .args(["--cgroup-parent", &format!("/{CGROUP_PARENT}")])
        .arg("--json")
        .arg(&summary_file)
        .arg("--csv")
        .arg(dir.join("churn.csv"))
        .args(["--max-rss-growth-kib", &MAX_GROWTH_KIB.to_string()])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("the churn did not end in {LIMIT:?}"))
        .expect("running berth-bench churn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The line with the figures.
    let figures = stderr
        .lines()
        .rfind(|l| l.contains("life cycles in"))
        .unwrap_or_default();
    eprintln!("endurance ({:.0?}): {figures}", started.elapsed());
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&summary_file)
            .unwrap_or_else(|e| panic!("no summary ({e}); berth-bench said: {stderr}")),
    )
    .unwrap();
    let csv = std::fs::read_to_string(dir.join("churn.csv")).unwrap_or_default();
    eprintln!("endurance: samples:\n{csv}");
    let trims = daemon.stderr().matches("trimmed the heap").count();
    eprintln!("endurance: the daemon trimmed its heap {trims} times");
    assert_eq!(
        summary["failures"], 0,
        "calls not answered: {}",
        summary["failure_messages"]
    );
    let growth = summary["rss_growth_kib"].as_i64().unwrap();
    assert!(
        growth <= MAX_GROWTH_KIB as i64,
        "RSS grew {growth} KiB after the warm-up ({} → {} KiB), more than {MAX_GROWTH_KIB} KiB",
        summary["baseline"]["rss_kib"],
        summary["end"]["rss_kib"]
    );
    assert_eq!(
        summary["fds_back"], true,
        "open fds: {} at the baseline, {} at the end",
        summary["baseline"]["fds"], summary["end"]["fds"]
    );
    assert_eq!(
        summary["threads_back"], true,
        "threads: {} at the baseline, {} at the end",
        summary["baseline"]["threads"], summary["end"]["threads"]
    );
    assert_eq!(summary["end"]["shims"], 0, "shims left");
    assert!(
        out.status.success(),
        "berth-bench churn failed: {}",
        summary["problems"]
    );

    // Nothing left, with the daemon still running.
    faults::assert_clean(&daemon, &net).await;
    let cgroups = pod_cgroups();
    assert!(cgroups.is_empty(), "pod cgroups left: {cgroups:?}");
    let temps = temp_files(&dir);
    assert!(temps.is_empty(), "temp files left: {temps:?}");
}
