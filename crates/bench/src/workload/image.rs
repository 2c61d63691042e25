//! The image job: the pull and unpack of the large image from scratch,
//! timed, with the daemon's peak RSS during it. Each timed round pulls an
//! image of the same shape with layers of its own (pushed for the round,
//! when the image is one of `push.rs`'s), the disk synced and the page cache
//! dropped before each pull: no runtime finds a layer anywhere, and the
//! registry reads its files from the disk for each.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{mib, order, stat_ms, Settings, Workload};
use crate::memory::{self, PeakRss};
use crate::push;
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
        // One untimed pull each first, of the image as pushed.
        for run in 0..=s.pull_runs {
            let pulled = match fresh_image(image, run).await {
                Ok(pulled) => pulled,
                Err(e) => {
                    report.error("registry", "pushing a fresh image", &e);
                    break;
                }
            };
            let mut line = Vec::new();
            for ti in order(run, n) {
                if broken[ti] {
                    continue;
                }
                let t = &targets[ti];
                match pull_once(t, &pulled).await {
                    Ok((wall, base, peak)) if run > 0 => {
                        walls[ti].push(wall);
                        before[ti].push(mib(base));
                        peaks[ti] = Some(peaks[ti].unwrap_or(0).max(peak));
                        line.push(format!("{} {:.3} s", t.name(), wall.as_secs_f64()));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        report.error(t.name(), "image pull", &e);
                        broken[ti] = true;
                    }
                }
                if let Err(e) = t.remove_image(&pulled).await {
                    report.error(t.name(), "image removal", &e);
                }
            }
            eprintln!(
                "image: pull {run}/{} done: {}",
                s.pull_runs,
                line.join(", ")
            );
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
            &format!("{figure}, wall time worst"),
            "s",
            walls
                .iter()
                .map(|w| stat_ms(w, 100.0).map(|ms| ms / 1000.0))
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

/// The image round `run` pulls: `image` itself in round 0, else a variant
/// of it with layers of its own ([`push::push_fresh`]), or `image` again when
/// it is not one the benchmark pushed.
async fn fresh_image(image: &str, run: usize) -> Result<String> {
    if run == 0 {
        return Ok(image.to_string());
    }
    match push::push_fresh(image, run as u64).await {
        Some(pushed) => pushed,
        None => Ok(image.to_string()),
    }
}

/// One pull of `image` on `t` from scratch (the image removed first, the
/// disk synced, the page cache dropped): wall time, RSS before (KiB) and
/// peak RSS during (KiB).
async fn pull_once(t: &Target, image: &str) -> Result<(Duration, u64, u64)> {
    t.remove_image(image).await?;
    // Let the runtime finish removing the last copy (containerd's snapshot
    // clean-up runs after RemoveImage answers) and the disk settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(|| {
        nix::unistd::sync();
        std::fs::write("/proc/sys/vm/drop_caches", "3")
    })
    .await
    .context("sync")?
    .context("dropping the page cache")?;
    let base = memory::of_pid(t.pid)?.rss_kib;
    let peak = PeakRss::start(t.pid, Duration::from_millis(5));
    let start = Instant::now();
    let pulled = t.pull(image).await;
    let wall = start.elapsed();
    let peak = peak.finish();
    pulled?;
    Ok((wall, base, peak))
}
