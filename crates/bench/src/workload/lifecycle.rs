//! The life-cycle job: one pod with one container, run through every step
//! kubelet takes, timed step by step; and where the time went inside the
//! runtime (its step histogram, where it publishes one).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use cri_api::v1;

use super::{order, remove_pod, stat_ms, Settings, Workload, STOP_TIMEOUT_SECS};
use crate::floor::FloorRounds;
use crate::report::{median_interval, series_by_label, Report};
use crate::target::Target;

/// The names of the timed life-cycle steps, in the order they run.
const LIFECYCLE_STEPS: [&str; 10] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "ListContainers",
    "ExecSync",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// Runs `$e`, stores how long it took in `$slot`, and gives its value.
macro_rules! timed {
    ($slot:expr, $e:expr) => {{
        let start = Instant::now();
        let value = $e;
        $slot = start.elapsed();
        value
    }};
}

impl Workload {
    /// One timed life cycle; the durations in [`LIFECYCLE_STEPS`] order.
    async fn lifecycle_once(&self, target: &Target, name: &str) -> Result<[Duration; 10]> {
        let pod_config = self.pod_config(target, name, "lifecycle")?;
        let config = self.container_config("sleeper", "lifecycle");
        let mut d = [Duration::ZERO; 10];
        let pod = timed!(d[0], target.run_pod(&pod_config).await?);
        let steps = async {
            let id = timed!(
                d[1],
                target.create_container(&pod, &config, &pod_config).await?
            );
            timed!(d[2], target.start_container(&id).await?);
            let state = timed!(d[3], target.container_state(&id).await?);
            if state != v1::ContainerState::ContainerRunning as i32 {
                return Err(anyhow!(
                    "container {id} is not running after start: state {state}"
                ));
            }
            timed!(d[4], target.list_containers(&[], None).await?);
            timed!(d[5], target.exec_sync(&id, &["true"]).await?);
            timed!(d[6], target.stop_container(&id, STOP_TIMEOUT_SECS).await?);
            timed!(d[7], target.remove_container(&id).await?);
            timed!(d[8], target.stop_pod(&pod).await?);
            timed!(d[9], target.remove_pod(&pod).await?);
            Ok(())
        }
        .await;
        if let Err(e) = steps {
            remove_pod(target, &pod).await;
            return Err(e);
        }
        Ok(d)
    }

    /// Life-cycle latency of every step, median and p99, and of the whole.
    /// With `floor`, a round of it is one more slot of each round's
    /// order (so the floor sees the machine as the runtimes do); it is
    /// given back with its rounds, or `None` once a round failed.
    pub async fn lifecycle(
        &self,
        targets: &[Target],
        s: &Settings,
        report: &mut Report,
        mut floor: Option<FloorRounds>,
    ) -> Option<FloorRounds> {
        let n = targets.len();
        let mut samples = vec![vec![Vec::new(); LIFECYCLE_STEPS.len()]; n];
        let mut totals = vec![Vec::new(); n];
        let mut failures = vec![0usize; n];
        // Each kept round's pod + container start, per target (None: failed).
        let mut starts_by_round = vec![Vec::new(); n];
        let before = self.scrape_all(targets).await;
        for i in 0..s.warmup + s.iterations {
            for ti in order(i, n + usize::from(floor.is_some())) {
                if ti == n {
                    floor = floor_round(floor.take(), i, i >= s.warmup, report).await;
                    continue;
                }
                let t = &targets[ti];
                let once = self.lifecycle_once(t, &format!("lc-{i}")).await;
                if i >= s.warmup {
                    let start = once.as_ref().ok().map(|d| d[..3].iter().sum::<Duration>());
                    starts_by_round[ti].push(start);
                }
                match once {
                    Ok(d) if i >= s.warmup => {
                        for (k, v) in d.iter().enumerate() {
                            samples[ti][k].push(*v);
                        }
                        totals[ti].push(d.iter().sum());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        failures[ti] += 1;
                        if failures[ti] <= 3 {
                            report.error(t.name(), &format!("lifecycle #{i}"), &e);
                        }
                    }
                }
            }
            if (i + 1) % 10 == 0 {
                eprintln!("lifecycle: {}/{}", i + 1, s.warmup + s.iterations);
            }
        }
        let after = self.scrape_all(targets).await;
        for (k, step) in LIFECYCLE_STEPS.iter().enumerate() {
            for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                let values = (0..n).map(|ti| stat_ms(&samples[ti][k], p)).collect();
                report.add("lifecycle", &format!("{step} {stat}"), "ms", values);
            }
        }
        // What kubelet waits for before a pod's workload runs.
        for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
            let values = (0..n)
                .map(|ti| {
                    let starts: Vec<Duration> = (0..samples[ti][0].len())
                        .map(|j| (0..3).map(|k| samples[ti][k][j]).sum())
                        .collect();
                    stat_ms(&starts, p)
                })
                .collect();
            report.add(
                "lifecycle",
                &format!("pod + container start (run, create, start) {stat}"),
                "ms",
                values,
            );
        }
        paired_starts(&starts_by_round, report);
        steps_profile(&before, &after, s.warmup + s.iterations, report);
        for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
            let values = (0..n).map(|ti| stat_ms(&totals[ti], p)).collect();
            report.add(
                "lifecycle",
                &format!("whole pod+container life cycle {stat}"),
                "ms",
                values,
            );
        }
        for (ti, t) in targets.iter().enumerate() {
            if failures[ti] > 0 {
                report.errors.push(format!(
                    "{}: lifecycle: {} of {} iterations failed",
                    t.name(),
                    failures[ti],
                    s.warmup + s.iterations
                ));
            }
        }
        floor
    }
}

/// The first runtime's pod + container start against each other's in the
/// same round (`starts[target][round]`): the median of the rounds'
/// differences and its 95 % interval, under each other runtime's column.
/// Paired, so what moves the machine between rounds moves both: the NRI
/// table's figure of what one plugin adds.
fn paired_starts(starts: &[Vec<Option<Duration>>], report: &mut Report) {
    let Some(first) = starts.first() else {
        return;
    };
    let intervals: Vec<Option<(f64, f64, f64)>> = std::iter::once(None)
        .chain(starts.iter().skip(1).map(|other| {
            let diffs: Vec<f64> = first
                .iter()
                .zip(other)
                .filter_map(|(a, b)| Some(a.as_ref()?.as_secs_f64() - b.as_ref()?.as_secs_f64()))
                .map(|d| d * 1e3)
                .collect();
            median_interval(&diffs)
        }))
        .collect();
    if starts.len() < 2 || intervals.iter().all(Option::is_none) {
        return;
    }
    let figure = "pod + container start, first runtime − this one in the same round";
    for (what, pick) in [
        ("median of the rounds", 0),
        ("95 % interval of that median, low", 1),
        ("95 % interval of that median, high", 2),
    ] {
        let values = intervals
            .iter()
            .map(|i| i.map(|(m, lo, hi)| [m, lo, hi][pick]))
            .collect();
        report.add_partial("lifecycle", &format!("{figure}, {what}"), "ms", values);
    }
}

/// Round `i` of the floor on a blocking thread (kept if `keep`); the floor
/// back, or `None` (the failure reported) if the round failed.
async fn floor_round(
    floor: Option<FloorRounds>,
    i: usize,
    keep: bool,
    report: &mut Report,
) -> Option<FloorRounds> {
    let mut floor = floor?;
    let done = tokio::task::spawn_blocking(move || floor.round(i, keep).map(|()| floor)).await;
    match done {
        Ok(Ok(floor)) => Some(floor),
        Ok(Err(e)) => {
            report.error("floor", &format!("round {i}"), &e);
            None
        }
        Err(e) => {
            report.error("floor", &format!("round {i}"), &e.into());
            None
        }
    }
}

/// Berth's steps histogram (`berth_step_duration_seconds`).
const STEP_HISTOGRAM: &str = "berth_step_duration_seconds";

/// Where the time of the life cycles went, per step, from the step
/// histograms scraped before and after them (`cycles` life cycles): each
/// step's mean and its share of one life cycle, for the targets that
/// publish it.
fn steps_profile(
    before: &[Option<String>],
    after: &[Option<String>],
    cycles: usize,
    report: &mut Report,
) {
    // Per target: step → (seconds, calls) during the life cycles, each page
    // parsed once.
    let deltas: Vec<BTreeMap<String, (f64, f64)>> = before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            let (Some(b), Some(a)) = (b, a) else {
                return BTreeMap::new();
            };
            let series = |page: &str, kind: &str| -> BTreeMap<String, f64> {
                let name = format!("{STEP_HISTOGRAM}_{kind}");
                series_by_label(page, &name, "step").into_iter().collect()
            };
            let (sum_b, count_b) = (series(b, "sum"), series(b, "count"));
            let sum_a = series(a, "sum");
            series(a, "count")
                .into_iter()
                .filter_map(|(step, count)| {
                    let calls = count - count_b.get(&step).copied().unwrap_or(0.0);
                    let secs =
                        sum_a.get(&step).copied()? - sum_b.get(&step).copied().unwrap_or(0.0);
                    (calls > 0.0).then_some((step, (secs, calls)))
                })
                .collect()
        })
        .collect();
    let steps: BTreeSet<&String> = deltas.iter().flat_map(|d| d.keys()).collect();
    for step in steps {
        let of = |d: &BTreeMap<String, (f64, f64)>| d.get(step).copied();
        let per_cycle = deltas
            .iter()
            .map(|d| of(d).map(|(secs, _)| secs * 1000.0 / cycles.max(1) as f64))
            .collect();
        let mean = deltas
            .iter()
            .map(|d| of(d).map(|(secs, calls)| secs * 1000.0 / calls))
            .collect();
        report.add_partial(
            "profile",
            &format!("step {step}, ms per life cycle"),
            "ms",
            per_cycle,
        );
        report.add_partial(
            "profile",
            &format!("step {step}, mean per call"),
            "ms",
            mean,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_starts_skip_rounds_either_failed() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        // The first is 2 ms slower in each round, whatever the round's level;
        // round 0 failed on the second, round 1 on the first.
        let first: Vec<_> = (0..40)
            .map(|r| if r == 1 { None } else { ms(50 + r * 3 + 2) })
            .collect();
        let second: Vec<_> = (0..40)
            .map(|r| if r == 0 { None } else { ms(50 + r * 3) })
            .collect();
        let mut report = Report::default();
        paired_starts(&[first, second], &mut report);
        assert_eq!(report.rows.len(), 3);
        for row in &report.rows {
            assert_eq!(row.values[0], None);
            let v = row.values[1].unwrap();
            assert!((v - 2.0).abs() < 1e-9, "{}: {v}", row.figure);
        }
        // One runtime alone: no rows.
        let mut report = Report::default();
        paired_starts(&[vec![ms(1); 40]], &mut report);
        assert!(report.rows.is_empty());
    }
}
