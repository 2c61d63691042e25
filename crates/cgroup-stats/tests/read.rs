//! Reading whole cgroups: v2 and v1 copies of real cgroup files under
//! `tests/fixtures/`, and this test process's own cgroup on the host.

use std::path::{Path, PathBuf};

use berth_cgroup_stats::{Cgroup, CpuStats, HugetlbStats, MemoryStats, Mounts, PidsStats, PsiData};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

#[test]
fn v2_cgroup() {
    let cg = Cgroup::from_dirs(&[], Some(&fixture("v2")));
    assert!(cg.is_v2());
    let stats = cg.stats().unwrap();
    assert_eq!(
        stats.cpu,
        Some(CpuStats {
            usage_ns: 2_500_000_000,
            user_ns: 2_000_000_000,
            system_ns: 500_000_000,
            periods: 40,
            throttled_periods: 7,
            throttled_ns: 350_000_000,
        })
    );
    let memory = stats.memory.unwrap();
    assert_eq!(
        memory,
        MemoryStats {
            usage: 64 << 20,
            // memory.current minus inactive_file.
            working_set: (64 << 20) - (16 << 20),
            rss: 40 << 20,
            cache: 24 << 20,
            page_faults: 12345,
            major_page_faults: 67,
            limit: Some(128 << 20),
            swap_usage: Some(1 << 20),
            swap_limit: None,
            oom_kills: Some(1),
        }
    );
    assert_eq!(memory.available(), Some((128 << 20) - (48 << 20)));
    assert_eq!(
        stats.pids,
        Some(PidsStats {
            current: 3,
            limit: Some(1024)
        })
    );
    assert_eq!(
        stats.hugetlb,
        vec![
            HugetlbStats {
                page_size: "1GB".into(),
                usage: 0,
                max_usage: None,
                limit: Some(0),
            },
            HugetlbStats {
                page_size: "2MB".into(),
                usage: 4 << 20,
                max_usage: None,
                limit: None,
            },
        ]
    );
    let cpu = stats.pressure.cpu.unwrap();
    assert_eq!(
        cpu.some,
        PsiData {
            avg10: 12.5,
            avg60: 3.1,
            avg300: 0.75,
            total_ns: 4_200_000_000,
        }
    );
    assert_eq!(cpu.full.unwrap().total_ns, 100_000_000);
    assert_eq!(stats.pressure.memory.unwrap().some.total_ns, 2_500_000);
    assert_eq!(stats.pressure.io.unwrap().full.unwrap().avg10, 0.2);
    assert_eq!(cg.cpu_usage_ns().unwrap(), 2_500_000_000);
}

#[test]
fn v2_cgroup_without_memory_controller() {
    // A v2 cgroup whose parent did not enable memory: only cpu.stat is there.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("v2/cpu.stat"), dir.path().join("cpu.stat")).unwrap();
    let stats = Cgroup::from_dirs(&[], Some(dir.path())).stats().unwrap();
    assert_eq!(stats.cpu.unwrap().usage_ns, 2_500_000_000);
    assert!(stats.memory.is_none());
    assert!(stats.pids.is_none());
    assert!(stats.hugetlb.is_empty());
    assert!(stats.pressure.cpu.is_none());
}

#[test]
fn v1_cgroup() {
    let dirs: Vec<(&str, PathBuf)> = ["cpuacct", "cpu", "memory", "pids"]
        .into_iter()
        .map(|c| (c, fixture(&format!("v1/{c}"))))
        .collect();
    let refs: Vec<(&str, &Path)> = dirs.iter().map(|(c, p)| (*c, p.as_path())).collect();
    let cg = Cgroup::from_dirs(&refs, None);
    assert!(!cg.is_v2());
    let stats = cg.stats().unwrap();
    let cpu = stats.cpu.unwrap();
    assert_eq!(cpu.usage_ns, 3_000_000_000);
    // Ticks: USER_HZ is 100 on Linux.
    assert_eq!(cpu.user_ns, 2_500_000_000);
    assert_eq!(cpu.system_ns, 500_000_000);
    assert_eq!(cpu.throttled_periods, 2);
    assert_eq!(cpu.throttled_ns, 123_456_789);
    assert_eq!(
        stats.memory.unwrap(),
        MemoryStats {
            usage: 48 << 20,
            working_set: (48 << 20) - (8 << 20),
            rss: 36 << 20,
            cache: 12 << 20,
            page_faults: 1998,
            major_page_faults: 18,
            limit: Some(16 << 20),
            swap_usage: Some(2 << 20),
            swap_limit: Some(16 << 20),
            oom_kills: Some(2),
        }
    );
    assert_eq!(
        stats.pids,
        Some(PidsStats {
            current: 5,
            limit: None
        })
    );
    assert!(stats.hugetlb.is_empty());
    assert!(stats.pressure.cpu.is_none(), "no PSI on v1");
}

#[test]
fn own_cgroup_on_this_host() {
    let mounts = Mounts::read().unwrap();
    // Every Linux host berth runs on has one: without, the test fails, saying so.
    let mode = mounts.mode().expect("needs a mounted cgroup hierarchy");
    let cg = Cgroup::for_pid(&mounts, std::process::id()).unwrap();
    eprintln!("mode {mode:?}, cgroup {}", cg.path());
    let stats = cg.stats().unwrap();
    // Burn a little CPU so the counter cannot be 0.
    let mut x = 0u64;
    for i in 0..5_000_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
    }
    assert!(x != 1);
    let cpu = stats.cpu.expect("a CPU controller");
    assert!(cpu.usage_ns > 0);
    assert!(cg.cpu_usage_ns().unwrap() >= cpu.usage_ns);
    let memory = stats.memory.expect("a memory controller");
    assert!(memory.usage > 0 && memory.working_set <= memory.usage);
}
