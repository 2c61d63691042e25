//! The churn's measurements: samples of the daemon (each written to the
//! CSV as it comes), the end sample once fds and threads settle, and the
//! summary with what breaks the endurance bounds.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use berth_lock::MutexExt;
use serde::Serialize;

use super::{Settings, Tally};
use crate::memory;
use crate::target::Target;

/// One reading of the daemon.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sample {
    /// Life cycles finished (warm-up included).
    pub cycle: usize,
    pub seconds: f64,
    pub rss_kib: u64,
    pub anon_kib: u64,
    pub fds: usize,
    pub threads: u64,
    /// Shims of the runtime alive (with the target's `shim=`).
    pub shims: usize,
}

impl Sample {
    pub const CSV_HEADER: &'static str = "cycle,seconds,rss_kib,anon_kib,fds,threads,shims";

    fn csv(&self) -> String {
        format!(
            "{},{:.1},{},{},{},{},{}",
            self.cycle,
            self.seconds,
            self.rss_kib,
            self.anon_kib,
            self.fds,
            self.threads,
            self.shims
        )
    }
}

/// What the run found.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub settings: Settings,
    pub runtime: String,
    pub pid: i32,
    /// Life cycles finished, warm-up included.
    pub cycles_done: usize,
    pub seconds: f64,
    pub cycles_per_second: f64,
    /// CRI calls made (relists included) and streaming sessions.
    pub calls: u64,
    pub exec_sessions: u64,
    pub port_forward_sessions: u64,
    pub relists: u64,
    /// Container events the subscriber read.
    pub events: u64,
    /// Calls not answered, or answered wrongly (all counted, the first kept).
    pub failures: u64,
    pub failure_messages: Vec<String>,
    pub start: Sample,
    pub baseline: Sample,
    pub end: Sample,
    /// The highest RSS sampled after the baseline.
    pub peak_rss_kib: u64,
    /// RSS of the end sample − RSS of the baseline.
    pub rss_growth_kib: i64,
    /// Least-squares slope of RSS over the life cycles from the baseline on.
    pub rss_slope_kib_per_cycle: f64,
    /// Whether fds and threads came back to the baseline (within `settle`).
    pub fds_back: bool,
    pub threads_back: bool,
    /// The limits checked, and what broke them.
    pub max_rss_growth_kib: Option<u64>,
    pub problems: Vec<String>,
}

/// Reads the daemon's memory, fds and threads, and counts its shims.
fn sample(target: &Target, cycle: usize, started: Instant) -> Result<Sample> {
    let pid = target.pid;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (has the daemon exited?)"))?;
    let field = |key: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .strip_prefix(':')?
                    .split_whitespace()
                    .next()
            })
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("/proc/{pid}/status: no {key}"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("listing /proc/{pid}/fd"))?
        .count();
    let shims = match &target.spec.shim_exe {
        Some(exe) => memory::find_processes(exe, target.spec.shim_match.as_deref()).len(),
        None => 0,
    };
    Ok(Sample {
        cycle,
        seconds: started.elapsed().as_secs_f64(),
        rss_kib: field("VmRSS")?,
        anon_kib: field("RssAnon")?,
        fds,
        threads: field("Threads")?,
        shims,
    })
}

/// Least-squares slope of `y` over `x`.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// Writes samples to the CSV as they come.
pub(super) struct Csv(Option<std::fs::File>);

impl Csv {
    pub(super) fn create(path: Option<&Path>) -> Result<Csv> {
        let Some(path) = path else {
            return Ok(Csv(None));
        };
        use std::io::Write;
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "{}", Sample::CSV_HEADER)?;
        Ok(Csv(Some(f)))
    }

    fn write(&mut self, s: &Sample) -> Result<()> {
        use std::io::Write;
        if let Some(f) = &mut self.0 {
            writeln!(f, "{}", s.csv())?;
        }
        Ok(())
    }
}

/// Samples the runtime's process, keeping every sample and writing it to
/// the CSV.
pub(super) struct Sampler<'a> {
    pub(super) t: &'a Target,
    pub(super) started: Instant,
    pub(super) csv: Csv,
    pub(super) samples: Vec<Sample>,
}

impl Sampler<'_> {
    pub(super) fn take(&mut self, cycle: usize) -> Result<Sample> {
        let x = sample(self.t, cycle, self.started)?;
        self.csv.write(&x)?;
        self.samples.push(x);
        Ok(x)
    }
}

/// The samples a summary compares: before the churn, after the warm-up,
/// and at the end.
pub(super) struct Marks {
    pub(super) start: Sample,
    pub(super) baseline: Sample,
    pub(super) end: Sample,
}

/// The end sample: after a quiet pause, and once fds and threads are back
/// to the baseline (they may take a moment more) or the settle time is up.
pub(super) async fn settle(
    sampler: &mut Sampler<'_>,
    s: &Settings,
    done: usize,
    baseline: &Sample,
) -> Result<Sample> {
    tokio::time::sleep(s.quiet).await;
    let mut end = sampler.take(done)?;
    let settle_until = Instant::now() + s.settle;
    while (end.fds > baseline.fds || end.threads > baseline.threads)
        && Instant::now() < settle_until
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        end = sample(sampler.t, done, sampler.started)?;
    }
    if sampler
        .samples
        .last()
        .is_some_and(|l| l.seconds != end.seconds)
    {
        sampler.csv.write(&end)?;
        sampler.samples.push(end);
    }
    Ok(end)
}

/// The summary of a churn (its `problems` still to be judged).
pub(super) fn summarize(
    sampler: &Sampler<'_>,
    s: &Settings,
    tally: &Tally,
    done: usize,
    marks: Marks,
    max_rss_growth_kib: Option<u64>,
) -> Summary {
    let Marks {
        start,
        baseline,
        end,
    } = marks;
    let t = sampler.t;
    let samples = &sampler.samples;
    let seconds = sampler.started.elapsed().as_secs_f64();
    let after: Vec<(f64, f64)> = samples
        .iter()
        .filter(|x| x.cycle >= baseline.cycle && x.seconds >= baseline.seconds)
        .map(|x| (x.cycle as f64, x.rss_kib as f64))
        .collect();
    let peak = samples
        .iter()
        .filter(|x| x.seconds >= baseline.seconds)
        .map(|x| x.rss_kib)
        .max()
        .unwrap_or(end.rss_kib);
    let failure_messages = tally.messages.lock_unpoisoned().clone();
    Summary {
        settings: s.clone(),
        runtime: t.version.clone(),
        pid: t.pid,
        cycles_done: done,
        seconds,
        cycles_per_second: done as f64 / seconds,
        calls: tally.calls.load(Ordering::Relaxed),
        exec_sessions: tally.exec_sessions.load(Ordering::Relaxed),
        port_forward_sessions: tally.port_forwards.load(Ordering::Relaxed),
        relists: tally.relists.load(Ordering::Relaxed),
        events: tally.events.load(Ordering::Relaxed),
        failures: tally.failures.load(Ordering::Relaxed),
        failure_messages,
        start,
        baseline,
        end,
        peak_rss_kib: peak,
        rss_growth_kib: end.rss_kib as i64 - baseline.rss_kib as i64,
        rss_slope_kib_per_cycle: slope(&after),
        fds_back: end.fds <= baseline.fds,
        threads_back: end.threads <= baseline.threads,
        max_rss_growth_kib,
        problems: Vec::new(),
    }
}

/// What breaks the endurance bounds.
pub(super) fn problems(s: &Summary) -> Vec<String> {
    let mut p = Vec::new();
    if s.failures > 0 {
        p.push(format!("{} calls failed or were not answered", s.failures));
    }
    if let Some(max) = s.max_rss_growth_kib {
        if s.rss_growth_kib > max as i64 {
            p.push(format!(
                "RSS grew {} KiB after the warm-up ({} → {} KiB), more than {max} KiB",
                s.rss_growth_kib, s.baseline.rss_kib, s.end.rss_kib
            ));
        }
    }
    if !s.fds_back {
        p.push(format!(
            "open fds did not come back: {} at the baseline, {} at the end",
            s.baseline.fds, s.end.fds
        ));
    }
    if !s.threads_back {
        p.push(format!(
            "threads did not come back: {} at the baseline, {} at the end",
            s.baseline.threads, s.end.threads
        ));
    }
    if s.end.shims > 0 {
        p.push(format!("{} shims left at the end", s.end.shims));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_noise() {
        let line: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 * x as f64 + 7.0)).collect();
        assert!((slope(&line) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
        let flat = [(0.0, 1.0), (1.0, -1.0), (2.0, 1.0), (3.0, -1.0), (4.0, 0.0)];
        assert!(slope(&flat).abs() < 0.5);
    }

    #[test]
    fn a_sample_as_csv() {
        let s = Sample {
            cycle: 10,
            seconds: 1.5,
            rss_kib: 20000,
            anon_kib: 9000,
            fds: 30,
            threads: 8,
            shims: 0,
        };
        assert_eq!(s.csv(), "10,1.5,20000,9000,30,8,0");
        assert_eq!(
            Sample::CSV_HEADER.split(',').count(),
            s.csv().split(',').count()
        );
    }
}
