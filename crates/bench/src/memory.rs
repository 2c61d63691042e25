//! Memory of processes, as a node operator sees it: RSS and PSS from
//! `/proc/<pid>/smaps_rollup`, the processes of a runtime's shims found by
//! executable name and command line, and the peak RSS of a daemon over a
//! stretch of work (the kernel's high-water mark, reset through
//! `/proc/<pid>/clear_refs`, and a sampler as a second opinion).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

/// Resident and proportional set size of one or more processes, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mem {
    pub rss_kib: u64,
    pub pss_kib: u64,
    /// How many processes were summed.
    pub processes: usize,
}

impl std::ops::AddAssign for Mem {
    fn add_assign(&mut self, other: Mem) {
        self.rss_kib += other.rss_kib;
        self.pss_kib += other.pss_kib;
        self.processes += other.processes;
    }
}

/// The value (in kB) of the line `key:` of a `/proc` file such as
/// `smaps_rollup` or `status`.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// RSS and PSS of `pid`.
pub fn of_pid(pid: i32) -> Result<Mem> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(Mem {
        rss_kib: kib_field(&text, "Rss").with_context(|| format!("{path}: no Rss"))?,
        pss_kib: kib_field(&text, "Pss").with_context(|| format!("{path}: no Pss"))?,
        processes: 1,
    })
}

/// Where one process's resident memory is: anonymous (heap, stacks) or
/// file-backed (its executable's pages, mostly), and how many threads it has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub anon_kib: u64,
    pub file_kib: u64,
    pub threads: u64,
}

/// [`Breakdown`] of `pid`, from `/proc/<pid>/status`.
pub fn breakdown(pid: i32) -> Result<Breakdown> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |key: &str| kib_field(&text, key).with_context(|| format!("{path}: no {key}"));
    Ok(Breakdown {
        anon_kib: field("RssAnon")?,
        file_kib: field("RssFile")? + field("RssShmem")?,
        threads: field("Threads")?,
    })
}

/// The pids of processes whose executable is named `exe` and whose command
/// line contains `needle` (when given).
pub fn find_processes(exe: &str, needle: Option<&str>) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(link) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
                return false;
            };
            let name = link
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.trim_end_matches(" (deleted)") != exe {
                return false;
            }
            match needle {
                None => true,
                Some(needle) => std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| {
                        String::from_utf8_lossy(&c)
                            .replace('\0', " ")
                            .contains(needle)
                    })
                    .unwrap_or(false),
            }
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The summed memory of `pids` (processes that are gone meanwhile are skipped).
pub fn of_pids(pids: &[i32]) -> Mem {
    let mut total = Mem::default();
    for &pid in pids {
        if let Ok(m) = of_pid(pid) {
            total += m;
        }
    }
    total
}

/// Current RSS of `pid` in KiB (VmRSS).
fn current_rss(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kib_field(&text, "VmRSS")
}

/// Watches the peak RSS of one process from [`PeakRss::start`] to
/// [`PeakRss::finish`].
pub struct PeakRss {
    pid: i32,
    hwm_reset: bool,
    stop: Arc<AtomicBool>,
    max_kib: Arc<AtomicU64>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl PeakRss {
    /// Resets the process's high-water mark and starts sampling its RSS
    /// every `every`.
    pub fn start(pid: i32, every: Duration) -> PeakRss {
        // "5" resets VmHWM to the current RSS (proc(5), clear_refs).
        let hwm_reset = std::fs::write(Path::new(&format!("/proc/{pid}/clear_refs")), "5").is_ok();
        let stop = Arc::new(AtomicBool::new(false));
        let max_kib = Arc::new(AtomicU64::new(current_rss(pid).unwrap_or(0)));
        let sampler = {
            let (stop, max_kib) = (stop.clone(), max_kib.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kib) = current_rss(pid) {
                        max_kib.fetch_max(kib, Ordering::Relaxed);
                    }
                    std::thread::sleep(every);
                }
            })
        };
        PeakRss {
            pid,
            hwm_reset,
            stop,
            max_kib,
            sampler: Some(sampler),
        }
    }

    /// Stops sampling; returns the peak RSS in KiB: the high-water mark when
    /// it could be reset, else (or when higher) the highest sample.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sampler.take() {
            let _ = t.join();
        }
        let sampled = self.max_kib.load(Ordering::Relaxed);
        let hwm = if self.hwm_reset {
            std::fs::read_to_string(format!("/proc/{}/status", self.pid))
                .ok()
                .and_then(|t| kib_field(&t, "VmHWM"))
                .unwrap_or(0)
        } else {
            0
        };
        sampled.max(hwm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields() {
        let text = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:                5120 kB\nPss:                2048 kB\nPss_Anon:   1 kB\n";
        assert_eq!(kib_field(text, "Rss"), Some(5120));
        assert_eq!(kib_field(text, "Pss"), Some(2048));
        assert_eq!(kib_field(text, "Pss_Anon"), Some(1));
        assert_eq!(kib_field(text, "Swap"), None);
    }

    #[test]
    fn measures_this_process() {
        let me = std::process::id() as i32;
        let m = of_pid(me).unwrap();
        assert!(m.rss_kib > 0 && m.pss_kib > 0 && m.pss_kib <= m.rss_kib);
        let b = breakdown(me).unwrap();
        assert!(b.threads >= 1 && b.anon_kib > 0 && b.file_kib > 0, "{b:?}");
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap();
        assert!(find_processes(name, None).contains(&me));
        assert!(!find_processes(name, Some("no such text in any cmdline \u{1}")).contains(&me));
        let peak = PeakRss::start(me, Duration::from_millis(1));
        let v = vec![1u8; 32 << 20];
        std::hint::black_box(&v);
        assert!(peak.finish() >= 32 << 10);
    }
}
