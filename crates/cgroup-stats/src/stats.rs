//! What one cgroup has used, and how it is read on cgroup v1 and v2.
//!
//! Memory follows kubelet and cAdvisor: the working set is the usage minus
//! the inactive file cache (`total_inactive_file` on v1, `inactive_file` on
//! v2), never below zero; RSS is `total_rss` on v1 and `anon` on v2.

use std::path::Path;

use crate::parse::{parse_limit, parse_psi, read_limit, read_optional, read_u64, KeyValues};
use crate::Error;

/// Usage of one cgroup at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub cpu: Option<CpuStats>,
    pub memory: Option<MemoryStats>,
    pub pids: Option<PidsStats>,
    /// One entry per huge page size the kernel offers.
    pub hugetlb: Vec<HugetlbStats>,
    /// Pressure stall information (cgroup v2 only, where the kernel has PSI).
    pub pressure: Pressure,
}

impl Stats {
    /// The usage of several sibling cgroups together (a pod whose cgroups
    /// share a parent with other pods). Counters and usage add up; limits,
    /// peaks and pressure do not, and are left unset.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Stats>) -> Stats {
        let mut total = Stats::default();
        for s in all {
            if let Some(c) = &s.cpu {
                let t = total.cpu.get_or_insert_with(CpuStats::default);
                t.usage_ns += c.usage_ns;
                t.user_ns += c.user_ns;
                t.system_ns += c.system_ns;
                t.periods += c.periods;
                t.throttled_periods += c.throttled_periods;
                t.throttled_ns += c.throttled_ns;
            }
            if let Some(m) = &s.memory {
                let t = total.memory.get_or_insert_with(MemoryStats::default);
                t.usage += m.usage;
                t.working_set += m.working_set;
                t.rss += m.rss;
                t.cache += m.cache;
                t.page_faults += m.page_faults;
                t.major_page_faults += m.major_page_faults;
                if let Some(swap) = m.swap_usage {
                    *t.swap_usage.get_or_insert(0) += swap;
                }
                if let Some(kills) = m.oom_kills {
                    *t.oom_kills.get_or_insert(0) += kills;
                }
            }
            if let Some(p) = &s.pids {
                total.pids.get_or_insert_with(PidsStats::default).current += p.current;
            }
            for h in &s.hugetlb {
                match total
                    .hugetlb
                    .iter_mut()
                    .find(|t| t.page_size == h.page_size)
                {
                    Some(t) => t.usage += h.usage,
                    None => total.hugetlb.push(HugetlbStats {
                        page_size: h.page_size.clone(),
                        usage: h.usage,
                        max_usage: None,
                        limit: None,
                    }),
                }
            }
        }
        total
    }
}

/// CPU time, cumulative, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStats {
    pub usage_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    /// CFS quota enforcement periods that have elapsed.
    pub periods: u64,
    /// Periods in which the cgroup was throttled.
    pub throttled_periods: u64,
    /// Total time throttled.
    pub throttled_ns: u64,
}

/// Memory, in bytes, and page-fault counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Everything charged to the cgroup, page cache included.
    pub usage: u64,
    /// `usage` minus inactive file cache: what kubelet evicts on.
    pub working_set: u64,
    /// Anonymous memory.
    pub rss: u64,
    /// Page cache.
    pub cache: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// The memory limit; `None` when unlimited.
    pub limit: Option<u64>,
    /// Swap in use; `None` when the kernel does not account swap.
    pub swap_usage: Option<u64>,
    /// The swap limit; `None` when unlimited or not accounted.
    pub swap_limit: Option<u64>,
    /// Processes the OOM killer has killed in the cgroup, where counted.
    pub oom_kills: Option<u64>,
}

impl MemoryStats {
    /// Limit minus working set, when there is a limit.
    pub fn available(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.working_set))
    }
}

/// Tasks (processes and threads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PidsStats {
    pub current: u64,
    /// `None` when unlimited.
    pub limit: Option<u64>,
}

/// Huge pages of one size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HugetlbStats {
    /// As the kernel names it: `2MB`, `1GB`.
    pub page_size: String,
    pub usage: u64,
    /// The peak usage (v1 only).
    pub max_usage: Option<u64>,
    /// `None` when unlimited.
    pub limit: Option<u64>,
}

/// Pressure stall information per resource.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    pub cpu: Option<Psi>,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

/// One resource's pressure: some tasks stalled, all tasks stalled.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Psi {
    pub some: PsiData,
    /// Absent on kernels without `full` for this resource.
    pub full: Option<PsiData>,
}

/// Stall averages (percent) and the cumulative stall time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiData {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_ns: u64,
}

/// Kernel clock ticks per second (`cpuacct.stat` counts in them).
fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// v1 CPU: `cpuacct.usage` and `cpuacct.stat` (ticks), and throttling from
/// the `cpu` controller's `cpu.stat` when that is at hand.
pub(crate) fn cpu_v1(cpuacct: &Path, cpu: Option<&Path>) -> Result<CpuStats, Error> {
    let usage_ns = read_u64(&cpuacct.join("cpuacct.usage"))?;
    let ticks = KeyValues::read(&cpuacct.join("cpuacct.stat"))?;
    let ns_per_tick = 1_000_000_000 / clock_ticks();
    let mut stats = CpuStats {
        usage_ns,
        user_ns: ticks.get("user").saturating_mul(ns_per_tick),
        system_ns: ticks.get("system").saturating_mul(ns_per_tick),
        ..CpuStats::default()
    };
    if let Some(dir) = cpu {
        if let Some(text) = read_optional(&dir.join("cpu.stat"))? {
            let kv = KeyValues::parse(&text);
            stats.periods = kv.get("nr_periods");
            stats.throttled_periods = kv.get("nr_throttled");
            stats.throttled_ns = kv.get("throttled_time");
        }
    }
    Ok(stats)
}

/// v1 cumulative CPU time only (the sampler's fast path).
pub(crate) fn cpu_usage_v1(cpuacct: &Path) -> Result<u64, Error> {
    read_u64(&cpuacct.join("cpuacct.usage"))
}

/// v2 CPU: `cpu.stat` (microseconds).
pub(crate) fn cpu_v2(dir: &Path) -> Result<CpuStats, Error> {
    let kv = KeyValues::read(&dir.join("cpu.stat"))?;
    let us = |k: &str| kv.get(k).saturating_mul(1000);
    Ok(CpuStats {
        usage_ns: us("usage_usec"),
        user_ns: us("user_usec"),
        system_ns: us("system_usec"),
        periods: kv.get("nr_periods"),
        throttled_periods: kv.get("nr_throttled"),
        throttled_ns: us("throttled_usec"),
    })
}

/// v2 cumulative CPU time only.
pub(crate) fn cpu_usage_v2(dir: &Path) -> Result<u64, Error> {
    Ok(KeyValues::read(&dir.join("cpu.stat"))?
        .get("usage_usec")
        .saturating_mul(1000))
}

/// v1 memory: `memory.usage_in_bytes`, the hierarchical `total_*` counters
/// of `memory.stat`, `memory.limit_in_bytes`, swap from `memory.memsw.*`
/// (when swap is accounted) and `oom_kill` from `memory.oom_control`.
pub(crate) fn memory_v1(dir: &Path) -> Result<MemoryStats, Error> {
    let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
    let stat = KeyValues::read(&dir.join("memory.stat"))?;
    let limit = read_limit(&dir.join("memory.limit_in_bytes"))?;
    let (swap_usage, swap_limit) = match read_optional(&dir.join("memory.memsw.usage_in_bytes"))? {
        Some(text) => {
            let path = dir.join("memory.memsw.usage_in_bytes");
            let memsw = parse_limit(&path, &text)?.unwrap_or(0);
            let memsw_limit = read_limit(&dir.join("memory.memsw.limit_in_bytes"))?;
            let swap_limit = match (memsw_limit, limit) {
                (Some(both), Some(mem)) => Some(both.saturating_sub(mem)),
                _ => None,
            };
            (Some(memsw.saturating_sub(usage)), swap_limit)
        }
        None => (None, None),
    };
    let oom_kills = read_optional(&dir.join("memory.oom_control"))?
        .and_then(|text| KeyValues::parse(&text).find("oom_kill"));
    Ok(MemoryStats {
        usage,
        working_set: usage.saturating_sub(stat.get("total_inactive_file")),
        rss: stat.get("total_rss"),
        cache: stat.get("total_cache"),
        page_faults: stat.get("total_pgfault"),
        major_page_faults: stat.get("total_pgmajfault"),
        limit,
        swap_usage,
        swap_limit,
        oom_kills,
    })
}

/// v2 memory: `memory.current`, `memory.stat`, `memory.max`,
/// `memory.swap.current` / `memory.swap.max` and `memory.events`.
pub(crate) fn memory_v2(dir: &Path) -> Result<MemoryStats, Error> {
    let usage = read_u64(&dir.join("memory.current"))?;
    let stat = KeyValues::read(&dir.join("memory.stat"))?;
    let swap_usage = match read_optional(&dir.join("memory.swap.current"))? {
        Some(text) => Some(parse_limit(&dir.join("memory.swap.current"), &text)?.unwrap_or(0)),
        None => None,
    };
    let swap_limit = match swap_usage {
        Some(_) => read_limit(&dir.join("memory.swap.max"))?,
        None => None,
    };
    let oom_kills = read_optional(&dir.join("memory.events"))?
        .and_then(|text| KeyValues::parse(&text).find("oom_kill"));
    Ok(MemoryStats {
        usage,
        working_set: usage.saturating_sub(stat.get("inactive_file")),
        rss: stat.get("anon"),
        cache: stat.get("file"),
        page_faults: stat.get("pgfault"),
        major_page_faults: stat.get("pgmajfault"),
        limit: read_limit(&dir.join("memory.max"))?,
        swap_usage,
        swap_limit,
        oom_kills,
    })
}

/// `pids.current` and `pids.max` (the same files on v1 and v2).
pub(crate) fn pids(dir: &Path) -> Result<PidsStats, Error> {
    Ok(PidsStats {
        current: read_u64(&dir.join("pids.current"))?,
        limit: read_limit(&dir.join("pids.max"))?,
    })
}

/// Huge page usage per size: `hugetlb.<size>.usage_in_bytes` (v1) or
/// `hugetlb.<size>.current` (v2).
pub(crate) fn hugetlb(dir: &Path, v2: bool) -> Result<Vec<HugetlbStats>, Error> {
    let (usage_suffix, limit_suffix) = if v2 {
        (".current", ".max")
    } else {
        (".usage_in_bytes", ".limit_in_bytes")
    };
    let mut sizes: Vec<String> = std::fs::read_dir(dir)
        .map_err(Error::read(dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let size = name.strip_prefix("hugetlb.")?.strip_suffix(usage_suffix)?;
            // `hugetlb.2MB.rsvd.current`: reservations, not usage.
            (!size.contains('.')).then(|| size.to_string())
        })
        .collect();
    sizes.sort();
    sizes
        .into_iter()
        .map(|size| {
            let file = |suffix: &str| dir.join(format!("hugetlb.{size}{suffix}"));
            Ok(HugetlbStats {
                usage: read_u64(&file(usage_suffix))?,
                max_usage: if v2 {
                    None
                } else {
                    read_optional(&file(".max_usage_in_bytes"))?.and_then(|t| t.trim().parse().ok())
                },
                limit: read_limit(&file(limit_suffix))?,
                page_size: size,
            })
        })
        .collect()
}

/// `cpu.pressure`, `memory.pressure` and `io.pressure` of a v2 cgroup;
/// files the kernel does not offer are `None`.
pub(crate) fn pressure(dir: &Path) -> Result<Pressure, Error> {
    let psi = |name: &str| -> Result<Option<Psi>, Error> {
        // Reading a pressure file fails with EOPNOTSUPP when PSI is off at boot.
        match std::fs::read_to_string(dir.join(name)) {
            Ok(text) => Ok(parse_psi(&text)),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
            {
                Ok(None)
            }
            Err(e) => Err(Error::read(dir.join(name))(e)),
        }
    };
    Ok(Pressure {
        cpu: psi("cpu.pressure")?,
        memory: psi("memory.pressure")?,
        io: psi("io.pressure")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_adds_usage_and_drops_limits() {
        let a = Stats {
            cpu: Some(CpuStats {
                usage_ns: 10,
                ..Default::default()
            }),
            memory: Some(MemoryStats {
                usage: 100,
                working_set: 80,
                limit: Some(1000),
                oom_kills: Some(1),
                ..Default::default()
            }),
            pids: Some(PidsStats {
                current: 2,
                limit: Some(10),
            }),
            hugetlb: vec![HugetlbStats {
                page_size: "2MB".into(),
                usage: 4,
                max_usage: Some(8),
                limit: None,
            }],
            ..Default::default()
        };
        let b = Stats {
            cpu: Some(CpuStats {
                usage_ns: 5,
                ..Default::default()
            }),
            memory: Some(MemoryStats {
                usage: 50,
                working_set: 20,
                ..Default::default()
            }),
            ..Default::default()
        };
        let total = Stats::sum([&a, &b]);
        assert_eq!(total.cpu.unwrap().usage_ns, 15);
        let m = total.memory.unwrap();
        assert_eq!(
            (m.usage, m.working_set, m.limit, m.oom_kills),
            (150, 100, None, Some(1))
        );
        assert_eq!(
            total.pids,
            Some(PidsStats {
                current: 2,
                limit: None
            })
        );
        assert_eq!(total.hugetlb[0].usage, 4);
        assert_eq!(total.hugetlb[0].max_usage, None);
        assert_eq!(Stats::sum([]), Stats::default());
    }
}
