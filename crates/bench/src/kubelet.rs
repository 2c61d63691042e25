//! The kubelet group's tables (`berth-bench kubelet-report DIR`), from what
//! `hack/kube-bench.sh` saved: per runtime and per size, kubelet's
//! `/metrics` scraped at four points of the step and a few facts.
//!
//! DIR/RUNTIME/SIZE/ holds
//! - `before.prom`, `ready.prom`, `steady.prom`, `gone.prom`: kubelet's
//!   metrics before the Deployment is made, when all its pods are Ready,
//!   after a quiet spell with all of them running, and when all are gone
//!   (and the runtime holds no sandbox);
//! - `berth-before.prom`, `berth-gone.prom`: berth's own metrics (berth
//!   only), at the first and last of those points;
//! - `facts`: `KEY=VALUE` lines (`ready_s`, `gone_s`, `load_before`,
//!   `load_after`, `daemon_pss_kib`, `shims_pss_kib`, `daemon_rss_kib`,
//!   `shims_rss_kib`, `shims`), the memory taken in the quiet spell.
//!
//! Start-up histograms are read from `before` to `ready`, the relist ones
//! from `ready` to `steady` (N pods running), the runtime operations from
//! `before` to `gone` (the step's whole life cycle).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::report::{histogram_buckets, histogram_quantile, label_pairs, series_by_label, Report};

/// The two runtimes, in the table's order (berth first: the ratio is
/// berth/containerd).
pub const RUNTIMES: [&str; 2] = ["berth", "containerd"];

/// One step's saved files.
#[derive(Default)]
pub struct Step {
    pub before: String,
    pub ready: String,
    pub steady: String,
    pub gone: String,
    pub berth_before: String,
    pub berth_gone: String,
    pub facts: BTreeMap<String, String>,
}

impl Step {
    /// Reads DIR/RUNTIME/SIZE; `None` when that step was not run.
    pub fn load(dir: &Path) -> Result<Option<Step>> {
        if !dir.join("facts").exists() {
            return Ok(None);
        }
        let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
        let facts = read("facts")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Ok(Some(Step {
            before: read("before.prom"),
            ready: read("ready.prom"),
            steady: read("steady.prom"),
            gone: read("gone.prom"),
            berth_before: read("berth-before.prom"),
            berth_gone: read("berth-gone.prom"),
            facts,
        }))
    }

    fn fact(&self, key: &str) -> Option<f64> {
        self.facts.get(key)?.parse().ok()
    }
}

/// The sum of every series of `metric` whose labels include all `labels`
/// (a histogram's `_sum` or `_count` over the labels not asked for).
pub fn series_sum(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let (inside, value) = if let Some(rest) = rest.strip_prefix('{') {
            match rest.split_once("} ") {
                Some(x) => x,
                None => continue,
            }
        } else if let Some(value) = rest.strip_prefix(' ') {
            ("", value)
        } else {
            continue;
        };
        let pairs = label_pairs(inside);
        if !labels.iter().all(|want| pairs.contains(want)) {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// What one histogram series did between two scrapes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delta {
    pub count: f64,
    /// Seconds (the metric's unit).
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// The histogram `metric` (its series with `labels`) between `before` and
/// `after`: observations, mean, p50 and p99 (bucket-interpolated).
pub fn delta(before: &str, after: &str, metric: &str, labels: &[(&str, &str)]) -> Delta {
    let b = histogram_buckets(before, metric, labels);
    let a = histogram_buckets(after, metric, labels);
    let at = |text: &str, suffix: &str| series_sum(text, &format!("{metric}{suffix}"), labels);
    let count = at(after, "_count").unwrap_or(0.0) - at(before, "_count").unwrap_or(0.0);
    let sum = at(after, "_sum").unwrap_or(0.0) - at(before, "_sum").unwrap_or(0.0);
    Delta {
        count,
        mean: (count > 0.0).then(|| sum / count),
        p50: histogram_quantile(&b, &a, 0.5),
        p99: histogram_quantile(&b, &a, 0.99),
    }
}

/// kubelet's `operation_type` as the CRI method berth's metrics name it.
pub fn cri_method(operation: &str) -> String {
    match operation {
        "run_podsandbox" => "RunPodSandbox".into(),
        "stop_podsandbox" => "StopPodSandbox".into(),
        "remove_podsandbox" => "RemovePodSandbox".into(),
        "podsandbox_status" => "PodSandboxStatus".into(),
        "list_podsandbox" => "ListPodSandbox".into(),
        "list_podsandbox_stats" => "ListPodSandboxStats".into(),
        "podsandbox_stats" => "PodSandboxStats".into(),
        "list_podsandbox_metrics" => "ListPodSandboxMetrics".into(),
        other => other
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect(),
    }
}

const SLI: &str = "kubelet_pod_start_sli_duration_seconds";
const START: &str = "kubelet_pod_start_duration_seconds";
const OPS: &str = "kubelet_runtime_operations_duration_seconds";
const RELIST: &str = "kubelet_pleg_relist_duration_seconds";
const INTERVAL: &str = "kubelet_pleg_relist_interval_seconds";
const PULL: &str = "kubelet_image_pull_duration_seconds";
const BERTH_RPC: &str = "berth_grpc_request_duration_seconds";
const BERTH_STEP: &str = "berth_step_duration_seconds";

/// The steps found for one size: one per runtime (`None`: not run).
pub type Pair = [Option<Step>; 2];

/// Reads every DIR/RUNTIME/SIZE there is: sizes ascending.
pub fn load(dir: &Path) -> Result<Vec<(usize, Pair)>> {
    let mut sizes = std::collections::BTreeSet::new();
    for rt in RUNTIMES {
        let Ok(entries) = fs::read_dir(dir.join(rt)) else {
            continue;
        };
        for e in entries {
            if let Some(n) = e?
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<usize>().ok())
            {
                sizes.insert(n);
            }
        }
    }
    let mut out = Vec::new();
    for n in sizes {
        let pair = [
            Step::load(&dir.join(RUNTIMES[0]).join(n.to_string()))
                .with_context(|| format!("{}/{n}", RUNTIMES[0]))?,
            Step::load(&dir.join(RUNTIMES[1]).join(n.to_string()))
                .with_context(|| format!("{}/{n}", RUNTIMES[1]))?,
        ];
        out.push((n, pair));
    }
    Ok(out)
}

fn ms(v: Option<f64>) -> Option<f64> {
    v.map(|s| s * 1000.0)
}

/// Applies `f` to each runtime's step.
fn each(pair: &Pair, f: impl Fn(&Step) -> Option<f64>) -> Vec<Option<f64>> {
    pair.iter().map(|s| s.as_ref().and_then(&f)).collect()
}

/// Every `operation_type` kubelet timed in a step, on either runtime.
fn operations(pair: &Pair) -> Vec<String> {
    let mut ops: Vec<String> = pair
        .iter()
        .flatten()
        .flat_map(|s| series_by_label(&s.gone, &format!("{OPS}_count"), "operation_type"))
        .map(|(op, _)| op)
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

/// One figure of a histogram's delta.
type Figure = fn(Delta) -> Option<f64>;

/// The quantiles a table shows of a histogram's delta.
const QUANTILES: [(&str, Figure); 3] = [
    ("p50", |d: Delta| d.p50),
    ("p99", |d: Delta| d.p99),
    ("mean", |d: Delta| d.mean),
];

/// The table of one size: both runtimes side by side, berth/containerd.
pub fn size_table(n: usize, pair: &Pair) -> Report {
    let mut r = Report {
        targets: RUNTIMES.iter().map(|s| s.to_string()).collect(),
        ..Report::default()
    };
    let g = format!("{n} pods");
    pod_times(&mut r, &g, n, pair);
    kubelet_operations(&mut r, &g, pair);
    footprint(&mut r, &g, pair);
    r
}

/// The rows of the pods' own times: all Ready, all gone, kubelet's
/// start-up histograms, and its relists while they run.
fn pod_times(r: &mut Report, g: &str, n: usize, pair: &Pair) {
    r.add_partial(
        g,
        "all Ready, from the Deployment's creation",
        "s",
        each(pair, |s| s.fact("ready_s")),
    );
    r.add_partial(
        g,
        "all gone, from its deletion",
        "s",
        each(pair, |s| s.fact("gone_s")),
    );
    for (metric, name) in [(SLI, "pod start-up SLI"), (START, "pod start-up")] {
        for (q, pick) in QUANTILES {
            r.add_partial(
                g,
                &format!("{name} {q}"),
                "s",
                each(pair, |s| pick(delta(&s.before, &s.ready, metric, &[]))),
            );
        }
    }
    for (metric, name) in [(RELIST, "PLEG relist"), (INTERVAL, "PLEG relist interval")] {
        for (q, pick) in QUANTILES {
            r.add_partial(
                g,
                &format!("{name} {q}, {n} pods running"),
                "ms",
                each(pair, |s| ms(pick(delta(&s.ready, &s.steady, metric, &[])))),
            );
        }
    }
}

/// The rows of what kubelet asked of the runtime over the step: its image
/// pulls (when it made any), and each operation it timed.
fn kubelet_operations(r: &mut Report, g: &str, pair: &Pair) {
    let pulls = each(pair, |s| Some(delta(&s.before, &s.gone, PULL, &[]).count));
    if pulls.iter().flatten().any(|c| *c > 0.0) {
        r.add_partial(g, "image pulls by kubelet", "count", pulls);
        r.add_partial(
            g,
            "image pull mean",
            "s",
            each(pair, |s| delta(&s.before, &s.gone, PULL, &[]).mean),
        );
    }
    for op in operations(pair) {
        let labels = [("operation_type", op.as_str())];
        let d = |s: &Step| delta(&s.before, &s.gone, OPS, &labels);
        r.add_partial(g, &format!("{op} p50"), "ms", each(pair, |s| ms(d(s).p50)));
        r.add_partial(g, &format!("{op} p99"), "ms", each(pair, |s| ms(d(s).p99)));
        r.add_partial(
            g,
            &format!("{op} mean"),
            "ms",
            each(pair, |s| ms(d(s).mean)),
        );
        r.add_partial(
            g,
            &format!("{op} calls"),
            "count",
            each(pair, |s| Some(d(s).count)),
        );
    }
}

/// The rows of the runtime's footprint with all pods running (memory and
/// shims), and the machine's load around the step.
fn footprint(r: &mut Report, g: &str, pair: &Pair) {
    let mib = |key: &'static str| move |s: &Step| s.fact(key).map(|k| k / 1024.0);
    r.add_partial(
        g,
        "daemon PSS, all running",
        "MiB",
        each(pair, mib("daemon_pss_kib")),
    );
    r.add_partial(
        g,
        "shims PSS, all running",
        "MiB",
        each(pair, mib("shims_pss_kib")),
    );
    r.add_partial(
        g,
        "daemon + shims PSS, all running",
        "MiB",
        each(pair, |s| {
            Some((s.fact("daemon_pss_kib")? + s.fact("shims_pss_kib")?) / 1024.0)
        }),
    );
    r.add_partial(
        g,
        "daemon + shims RSS, all running",
        "MiB",
        each(pair, |s| {
            Some((s.fact("daemon_rss_kib")? + s.fact("shims_rss_kib")?) / 1024.0)
        }),
    );
    r.add_partial(g, "shims", "count", each(pair, |s| s.fact("shims")));
    r.add_partial(
        g,
        "load average before the step",
        "1 min",
        each(pair, |s| s.fact("load_before")),
    );
    r.add_partial(
        g,
        "load average after the step",
        "1 min",
        each(pair, |s| s.fact("load_after")),
    );
}

/// Where berth's time goes in one step: per operation, kubelet's mean
/// (kubelet's client, gRPC and berth) beside berth's server-side mean
/// (from its RPC histogram over the same window) and the difference
/// (kubelet's side and the transport); then berth's steps.
pub fn berth_split(n: usize, step: &Step) -> String {
    let mut out = format!(
        "| {n} pods: operation | calls | kubelet's mean (ms) | berth's server-side mean (ms) | kubelet + transport (ms) |\n|---|---:|---:|---:|---:|\n"
    );
    let mut ops: Vec<String> =
        series_by_label(&step.gone, &format!("{OPS}_count"), "operation_type")
            .into_iter()
            .map(|(op, _)| op)
            .collect();
    ops.sort();
    for op in ops {
        let k = delta(&step.before, &step.gone, OPS, &[("operation_type", &op)]);
        let method = cri_method(&op);
        let b = delta(
            &step.berth_before,
            &step.berth_gone,
            BERTH_RPC,
            &[("method", &method)],
        );
        let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2}", v * 1000.0));
        let diff = match (k.mean, b.mean) {
            (Some(k), Some(b)) => Some(k - b),
            _ => None,
        };
        out.push_str(&format!(
            "| {op} | {} | {} | {} | {} |\n",
            k.count,
            cell(k.mean),
            cell(b.mean),
            cell(diff)
        ));
    }
    let mut steps: Vec<(String, Delta)> =
        series_by_label(&step.berth_gone, &format!("{BERTH_STEP}_count"), "step")
            .into_iter()
            .map(|(name, _)| {
                let d = delta(
                    &step.berth_before,
                    &step.berth_gone,
                    BERTH_STEP,
                    &[("step", &name)],
                );
                (name, d)
            })
            .filter(|(_, d)| d.count > 0.0)
            .collect();
    steps.sort_by(|a, b| {
        let total = |d: &Delta| d.mean.unwrap_or(0.0) * d.count;
        total(&b.1).total_cmp(&total(&a.1))
    });
    out.push_str("\n| berth's step | count | mean (ms) | per pod (ms) |\n|---|---:|---:|---:|\n");
    for (name, d) in steps {
        let mean = d.mean.unwrap_or(0.0) * 1000.0;
        out.push_str(&format!(
            "| {name} | {} | {mean:.2} | {:.2} |\n",
            d.count,
            mean * d.count / n as f64
        ));
    }
    out
}

/// The issue's goals against containerd, each with its ratio and verdict.
pub fn goals(sizes: &[(usize, Pair)]) -> String {
    let mut out = String::from("| goal | size | berth/containerd | met |\n|---|---:|---:|---|\n");
    let mut line = |goal: &str, n: usize, ratio: Option<f64>, limit: f64| {
        let (r, met) = match ratio {
            Some(r) => (format!("{r:.2}"), if r <= limit { "yes" } else { "no" }),
            None => ("-".into(), "not measured"),
        };
        out.push_str(&format!("| {goal} ≤ {limit} | {n} | {r} | {met} |\n"));
    };
    let ratio = |pair: &Pair, f: &dyn Fn(&Step) -> Option<f64>| -> Option<f64> {
        match (pair[0].as_ref().and_then(f), pair[1].as_ref().and_then(f)) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    };
    for (n, pair) in sizes {
        let n = *n;
        line(
            "pod start-up SLI p50",
            n,
            ratio(pair, &|s| delta(&s.before, &s.ready, SLI, &[]).p50),
            0.7,
        );
        line(
            "pod start-up SLI p99",
            n,
            ratio(pair, &|s| delta(&s.before, &s.ready, SLI, &[]).p99),
            0.7,
        );
        for op in operations(pair) {
            let labels = [("operation_type", op.as_str())];
            line(
                &format!("{op} mean"),
                n,
                ratio(pair, &|s| delta(&s.before, &s.gone, OPS, &labels).mean),
                0.5,
            );
        }
        if n >= 110 {
            line(
                "PLEG relist p99",
                n,
                ratio(pair, &|s| delta(&s.ready, &s.steady, RELIST, &[]).p99),
                0.5,
            );
        }
        if n == 110 {
            line("all Ready", n, ratio(pair, &|s| s.fact("ready_s")), 0.7);
        }
        if n >= 250 {
            line(
                "daemon + shims PSS",
                n,
                ratio(pair, &|s| {
                    Some(s.fact("daemon_pss_kib")? + s.fact("shims_pss_kib")?)
                }),
                0.2,
            );
        }
    }
    out
}

/// The whole report: per size, the table and berth's split; then the goals.
pub fn markdown(dir: &Path) -> Result<String> {
    let sizes = load(dir)?;
    let mut out = String::new();
    for (n, pair) in &sizes {
        out.push_str(&format!("#### {n} pods\n\n"));
        for (rt, step) in RUNTIMES.iter().zip(pair) {
            if step.is_none() {
                out.push_str(&format!(
                    "{rt}: not run at this size (its column is n/a).\n\n"
                ));
            }
        }
        out.push_str(size_table(*n, pair).markdown().trim_start());
        out.push('\n');
        if let Some(step) = &pair[0] {
            out.push_str(&berth_split(*n, step));
            out.push('\n');
        }
    }
    out.push_str("#### The goals\n\n");
    out.push_str(&goals(&sizes));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two scrapes of a kubelet: a histogram with labels, one without.
    const BEFORE: &str = r#"# HELP kubelet_runtime_operations_duration_seconds [ALPHA] Duration
# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.005"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.0125"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.03125"} 2
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.078125"} 2
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="+Inf"} 2
kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} 0.04
kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} 2
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="0.005"} 5
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="+Inf"} 5
kubelet_runtime_operations_duration_seconds_sum{operation_type="version"} 0.001
kubelet_runtime_operations_duration_seconds_count{operation_type="version"} 5
kubelet_pod_start_sli_duration_seconds_bucket{le="0.5"} 0
kubelet_pod_start_sli_duration_seconds_bucket{le="1"} 0
kubelet_pod_start_sli_duration_seconds_bucket{le="2"} 0
kubelet_pod_start_sli_duration_seconds_bucket{le="+Inf"} 0
kubelet_pod_start_sli_duration_seconds_sum 0
kubelet_pod_start_sli_duration_seconds_count 0
"#;

    /// 100 more run_podsandbox: 40 in (0.0125, 0.03125], 60 in (0.03125,
    /// 0.078125]; 10 pod starts: 4 in (0.5, 1], 6 in (1, 2].
    const AFTER: &str = r#"kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.005"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.0125"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.03125"} 42
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.078125"} 102
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="+Inf"} 102
kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} 4.04
kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} 102
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="0.005"} 6
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="+Inf"} 6
kubelet_runtime_operations_duration_seconds_sum{operation_type="version"} 0.0012
kubelet_runtime_operations_duration_seconds_count{operation_type="version"} 6
kubelet_pod_start_sli_duration_seconds_bucket{le="0.5"} 0
kubelet_pod_start_sli_duration_seconds_bucket{le="1"} 4
kubelet_pod_start_sli_duration_seconds_bucket{le="2"} 10
kubelet_pod_start_sli_duration_seconds_bucket{le="+Inf"} 10
kubelet_pod_start_sli_duration_seconds_sum 13
kubelet_pod_start_sli_duration_seconds_count 10
"#;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn quantiles_and_mean_come_from_the_bucket_deltas() {
        let labels = [("operation_type", "run_podsandbox")];
        let d = delta(BEFORE, AFTER, OPS, &labels);
        assert_eq!(d.count, 100.0);
        assert!(close(d.mean, 0.04), "{d:?}");
        // Rank 50 is the 10th of the 60 in (0.03125, 0.078125].
        assert!(
            close(d.p50, 0.03125 + (0.078125 - 0.03125) * 10.0 / 60.0),
            "{d:?}"
        );
        // Rank 99: the 59th of those 60.
        assert!(
            close(d.p99, 0.03125 + (0.078125 - 0.03125) * 59.0 / 60.0),
            "{d:?}"
        );
        // The other series is not mixed in.
        let v = delta(BEFORE, AFTER, OPS, &[("operation_type", "version")]);
        assert_eq!(v.count, 1.0);
        assert!(close(v.mean, 0.0002), "{v:?}");
    }

    #[test]
    fn an_unlabelled_histogram_reads_too() {
        let d = delta(BEFORE, AFTER, SLI, &[]);
        assert_eq!(d.count, 10.0);
        assert!(close(d.mean, 1.3), "{d:?}");
        // Rank 5: the 1st of the 6 in (1, 2].
        assert!(close(d.p50, 1.0 + 1.0 / 6.0), "{d:?}");
        assert!(close(d.p99, 1.0 + 5.9 / 6.0), "{d:?}");
        // Nothing observed: no quantile, no mean.
        let none = delta(BEFORE, BEFORE, SLI, &[]);
        assert_eq!((none.count, none.mean, none.p50), (0.0, None, None));
    }

    #[test]
    fn sums_take_the_series_with_the_labels_asked_for() {
        let text = "m_sum{method=\"A\",code=\"OK\"} 1.5\nm_sum{method=\"A\",code=\"NotFound\"} 0.5\nm_sum{method=\"B\",code=\"OK\"} 9\nm_summary 4\n";
        assert_eq!(series_sum(text, "m_sum", &[("method", "A")]), Some(2.0));
        assert_eq!(series_sum(text, "m_sum", &[]), Some(11.0));
        assert_eq!(series_sum(text, "m_sum", &[("method", "C")]), None);
        assert_eq!(series_sum("x 3\n", "x", &[]), Some(3.0));
    }

    #[test]
    fn operation_types_name_cri_methods() {
        assert_eq!(cri_method("run_podsandbox"), "RunPodSandbox");
        assert_eq!(cri_method("remove_podsandbox"), "RemovePodSandbox");
        assert_eq!(cri_method("create_container"), "CreateContainer");
        assert_eq!(cri_method("list_containers"), "ListContainers");
        assert_eq!(cri_method("version"), "Version");
    }

    #[test]
    fn a_report_from_saved_steps() {
        let dir = tempfile::tempdir().unwrap();
        for (rt, sum) in [("berth", "2.02"), ("containerd", "4.04")] {
            let step = dir.path().join(rt).join("30");
            fs::create_dir_all(&step).unwrap();
            let after = AFTER.replace(
                "seconds_sum{operation_type=\"run_podsandbox\"} 4.04",
                &format!("seconds_sum{{operation_type=\"run_podsandbox\"}} {sum}"),
            );
            fs::write(step.join("before.prom"), BEFORE).unwrap();
            fs::write(step.join("ready.prom"), AFTER).unwrap();
            fs::write(step.join("steady.prom"), AFTER).unwrap();
            fs::write(step.join("gone.prom"), &after).unwrap();
            fs::write(step.join("facts"), "ready_s=10\ngone_s=5\n").unwrap();
        }
        let text = markdown(dir.path()).unwrap();
        assert!(text.contains("#### 30 pods"), "{text}");
        // berth's mean run_podsandbox is (2.02 - 0.04) / 100 s, containerd's 40 ms.
        assert!(
            text.contains("| 30 pods | run_podsandbox mean | ms | 19.8 | 40.0 | 0.49 |"),
            "{text}"
        );
        assert!(
            text.contains("| run_podsandbox mean ≤ 0.5 | 30 | 0.49 | yes |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| 30 pods | all Ready, from the Deployment's creation | s | 10.0 | 10.0 | 1.00 |"
            ),
            "{text}"
        );
    }
}
