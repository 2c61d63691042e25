//! The image job: the pull and unpack of the large image from scratch,
//! timed, with the daemon's peak RSS during it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{mib, order, stat_ms, Settings, Workload};
use crate::memory::{self, PeakRss};
use crate::report::{percentile, Report};
use crate::target::Target;

impl Workload {
    /// Pull and unpack of the large image, timed, with the daemon's peak RSS.
    pub async fn image(&self, targets: &[Target], s: &Settings, report: &mut Report) {
        let Some((image, desc)) = &self.big_image else {
            return;
        };
        let n = targets.len();
        let mut walls = vec![Vec::new(); n];
        let mut peaks: Vec<Option<u64>> = vec![None; n];
        let mut before = vec![Vec::new(); n];
        let mut broken = vec![false; n];
        // One untimed pull each first: the registry's files into the page cache.
        for run in 0..=s.pull_runs {
            for ti in order(run, n) {
                if broken[ti] {
                    continue;
                }
                let t = &targets[ti];
                match pull_once(t, image).await {
                    Ok((wall, base, peak)) if run > 0 => {
                        walls[ti].push(wall);
                        before[ti].push(mib(base));
                        peaks[ti] = Some(peaks[ti].unwrap_or(0).max(peak));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        report.error(t.name(), "image pull", &e);
                        broken[ti] = true;
                    }
                }
            }
            eprintln!("image: pull {run}/{} done", s.pull_runs);
        }
        for t in targets {
            if let Err(e) = t.remove_image(image).await {
                report.error(t.name(), "image removal", &e);
            }
        }
        let figure = format!("pull+unpack {desc}");
        report.add(
            "image",
            &format!("{figure}, wall time median"),
            "s",
            walls
                .iter()
                .map(|w| stat_ms(w, 50.0).map(|ms| ms / 1000.0))
                .collect(),
        );
        report.add(
            "image",
            &format!("{figure}, wall time best"),
            "s",
            walls
                .iter()
                .map(|w| stat_ms(w, 0.0).map(|ms| ms / 1000.0))
                .collect(),
        );
        report.add(
            "image",
            &format!("{figure}, daemon peak RSS"),
            "MiB",
            peaks.iter().map(|p| p.map(mib)).collect(),
        );
        report.add(
            "image",
            &format!("{figure}, daemon RSS before (median)"),
            "MiB",
            before.iter().map(|b| percentile(b, 50.0)).collect(),
        );
    }
}

/// One pull of `image` on `t` from scratch (the image removed first, the
/// disk synced): wall time, RSS before (KiB) and peak RSS during (KiB).
async fn pull_once(t: &Target, image: &str) -> Result<(Duration, u64, u64)> {
    t.remove_image(image).await?;
    // Let the runtime finish removing the last copy (containerd's snapshot
    // clean-up runs after RemoveImage answers) and the disk settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(nix::unistd::sync)
        .await
        .context("sync")?;
    let base = memory::of_pid(t.pid)?.rss_kib;
    let peak = PeakRss::start(t.pid, Duration::from_millis(5));
    let start = Instant::now();
    let pulled = t.pull(image).await;
    let wall = start.elapsed();
    let peak = peak.finish();
    pulled?;
    Ok((wall, base, peak))
}
