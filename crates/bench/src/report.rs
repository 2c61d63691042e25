//! The results: rows of figures, one value per runtime and the ratio of the
//! first runtime to the second; printed as a Markdown table and written as
//! JSON. Also the summary statistics (median, p99) the rows are made of.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

/// `samples` in milliseconds.
pub fn millis(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect()
}

/// The `p`-th percentile of `values`: nearest rank, except that `p` = 50 is
/// the median (the mean of the middle two for an even count).
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let n = sorted.len();
    if p == 50.0 && n % 2 == 0 {
        return Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0);
    }
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// The median of `values` and a distribution-free 95 % interval for it:
/// the order statistics the binomial distribution of "below the median"
/// bounds (ranks n/2 ∓ 0.98·√n, the normal approximation, so for 20 values
/// and more). `None` for fewer than 20 values.
pub fn median_interval(values: &[f64]) -> Option<(f64, f64, f64)> {
    let n = values.len();
    if n < 20 {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let half = n as f64 / 2.0;
    let reach = 0.98 * (n as f64).sqrt();
    // 1-based ranks j and k of the interval's ends.
    let j = ((half - reach).floor() as usize).max(1);
    let k = ((half + 1.0 + reach).ceil() as usize).min(n);
    Some((percentile(&sorted, 50.0)?, sorted[j - 1], sorted[k - 1]))
}

/// Every series of `metric` (a histogram's `_count`, say) in `text` (the
/// text exposition format): the value of its label `label`, and its value.
pub fn series_by_label(text: &str, metric: &str, label: &str) -> Vec<(String, f64)> {
    let prefix = format!("{metric}{{");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (inside, value) = rest.split_once("} ")?;
            let key = inside.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k == label).then(|| v.trim_matches('"').to_string())
            })?;
            Some((key, value.trim().parse().ok()?))
        })
        .collect()
}

/// The `name="value"` pairs inside a series' braces.
pub fn label_pairs(inside: &str) -> Vec<(&str, &str)> {
    inside
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.trim_matches('"')))
        })
        .collect()
}

/// The cumulative buckets of one Prometheus histogram series in `text`
/// (the text exposition format): `(upper bound in the metric's unit,
/// count)` for the series `metric` whose labels include every `labels`
/// pair, ascending; `+Inf` included. Empty when the series is absent.
pub fn histogram_buckets(text: &str, metric: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let prefix = format!("{metric}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (inside, value) = rest.split_once("} ")?;
            let pairs = label_pairs(inside);
            if !labels.iter().all(|want| pairs.contains(want)) {
                return None;
            }
            let le = pairs.iter().find(|(k, _)| *k == "le")?.1;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The `q`-quantile (0.5: the median) of the observations made between two
/// scrapes of one histogram (`before`, `after`: [`histogram_buckets`]),
/// interpolated linearly inside its bucket as Prometheus'
/// `histogram_quantile` does (the first bucket from 0). `None` without
/// observations in between, or when it falls in `+Inf` (then the highest
/// finite bound is all one knows).
pub fn histogram_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|&(le, n)| {
            let then = before
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, n)| *n);
            (le, (n - then).max(0.0))
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, n) in &delta {
        if n >= rank && n > below {
            if le.is_infinite() {
                return None;
            }
            return Some(lower + (le - lower) * (rank - below) / (n - below));
        }
        (lower, below) = (le, n);
    }
    None
}

/// One figure for every runtime.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `lifecycle`, `concurrency`, `scale`, `density`, `image`.
    pub group: String,
    /// What was measured, e.g. `RunPodSandbox median`.
    pub figure: String,
    /// `ms`, `s`, `MiB`, `count`.
    pub unit: String,
    /// One value per runtime, in the order of [`Report::targets`]; `None`
    /// when that runtime failed the measurement (or does not have the
    /// figure: see `absent`).
    pub values: Vec<Option<f64>>,
    /// What the table shows for `None`: `failed`, or `n/a` for a figure
    /// only some runtimes have (berth's own metrics).
    #[serde(skip)]
    pub absent: &'static str,
}

impl Row {
    /// first / second, when both are there and the second is not zero.
    pub fn ratio(&self) -> Option<f64> {
        self.ratios().first().copied().flatten()
    }

    /// first / each of the others (the peers), in order: one per runtime
    /// after the first; `None` where either is missing or the peer's is 0.
    pub fn ratios(&self) -> Vec<Option<f64>> {
        let first = self.values.first().copied().flatten();
        self.values
            .iter()
            .skip(1)
            .map(|peer| match (first, peer) {
                (Some(a), Some(b)) if *b != 0.0 => Some(a / b),
                _ => None,
            })
            .collect()
    }

    /// first − second, when both are there (what the first's extra costs,
    /// in the row's unit: see [`Report::difference`]).
    pub fn difference(&self) -> Option<f64> {
        match self.values.as_slice() {
            [Some(a), Some(b), ..] => Some(a - b),
            _ => None,
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Default)]
pub struct Report {
    /// Runtime names, in order.
    pub targets: Vec<String>,
    /// Facts about the machine and the runtimes (name → text).
    pub machine: Vec<(String, String)>,
    /// The settings of the run (iterations, sizes), as JSON.
    pub settings: Value,
    pub rows: Vec<Row>,
    /// What failed, with the runtime and phase it happened in.
    pub errors: Vec<String>,
    /// Show first − second beside the ratio (two set-ups of one runtime,
    /// e.g. with and without an NRI plugin: what the first one adds).
    pub difference: bool,
}

/// A number with three significant digits or so.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

impl Report {
    /// Adds a row for `group`/`figure` with one value per target.
    pub fn add(&mut self, group: &str, figure: &str, unit: &str, values: Vec<Option<f64>>) {
        self.rows.push(Row {
            group: group.into(),
            figure: figure.into(),
            unit: unit.into(),
            values,
            absent: "failed",
        });
    }

    /// [`Report::add`] for a figure that some runtimes do not offer (`None`
    /// is shown as `n/a`, not as a failure).
    pub fn add_partial(&mut self, group: &str, figure: &str, unit: &str, values: Vec<Option<f64>>) {
        self.add(group, figure, unit, values);
        if let Some(row) = self.rows.last_mut() {
            row.absent = "n/a";
        }
    }

    /// Records a failure.
    pub fn error(&mut self, target: &str, phase: &str, error: &anyhow::Error) {
        self.errors.push(format!("{target}: {phase}: {error:#}"));
    }

    /// The report as a Markdown table (with the machine above it and the
    /// errors below).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.machine {
            out.push_str(&format!("- {k}: {v}\n"));
        }
        out.push('\n');
        let ratio_names = self.ratio_names();
        let diff_name = match (self.difference, self.targets.as_slice()) {
            (true, [a, b, ..]) => format!(" {a} − {b} |"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "| group | figure | unit | {} | {} |{diff_name}\n",
            self.targets.join(" | "),
            ratio_names.join(" | ")
        ));
        out.push_str(&format!(
            "|---|---|---|{}{}{}\n",
            "---:|".repeat(self.targets.len()),
            "---|".repeat(ratio_names.len()),
            if diff_name.is_empty() { "" } else { "---:|" }
        ));
        for row in &self.rows {
            let cells: Vec<String> = row
                .values
                .iter()
                .map(|v| v.map(fmt_value).unwrap_or_else(|| row.absent.into()))
                .collect();
            let mut ratios: Vec<String> = row
                .ratios()
                .iter()
                .map(|r| r.map_or_else(|| "-".into(), |r| format!("{r:.2}")))
                .collect();
            ratios.resize(ratio_names.len(), "-".into());
            let ratio = ratios.join(" | ");
            let diff = match (self.difference, row.difference()) {
                (false, _) => String::new(),
                (true, Some(d)) => format!(" {} |", fmt_value(d)),
                (true, None) => " - |".into(),
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {ratio} |{diff}\n",
                row.group,
                row.figure,
                row.unit,
                cells.join(" | ")
            ));
        }
        if !self.errors.is_empty() {
            out.push_str("\nErrors:\n");
            for e in &self.errors {
                out.push_str(&format!("- {e}\n"));
            }
        }
        out
    }

    /// The ratio columns: first/peer for every runtime after the first
    /// (`ratio` alone, all `-`, with one runtime).
    fn ratio_names(&self) -> Vec<String> {
        match self.targets.split_first() {
            Some((first, peers)) if !peers.is_empty() => {
                peers.iter().map(|p| format!("{first}/{p}")).collect()
            }
            _ => vec!["ratio".into()],
        }
    }

    /// The report as JSON: machine, settings, targets, rows (each with its
    /// values by runtime name, the ratio first/second and `ratios`, first
    /// over each peer by column name), errors.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let values: serde_json::Map<String, Value> = self
                    .targets
                    .iter()
                    .zip(&r.values)
                    .map(|(t, v)| (t.clone(), json!(v)))
                    .collect();
                let ratios: serde_json::Map<String, Value> = self
                    .ratio_names()
                    .into_iter()
                    .zip(r.ratios())
                    .map(|(name, v)| (name, json!(v)))
                    .collect();
                let mut row = json!({
                    "group": r.group,
                    "figure": r.figure,
                    "unit": r.unit,
                    "values": values,
                    "ratio": r.ratio(),
                    "ratios": ratios,
                });
                if self.difference {
                    row["difference"] = json!(r.difference());
                }
                row
            })
            .collect();
        let machine: serde_json::Map<String, Value> = self
            .machine
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "machine": machine,
            "settings": self.settings,
            "targets": self.targets,
            "rows": rows,
            "errors": self.errors,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_medians_interval_is_the_binomial_ranks() {
        assert_eq!(super::median_interval(&[1.0; 19]), None);
        // 1..=100 shuffled: ranks 40 and 61 (the tables' 95 % ranks).
        let values: Vec<f64> = (0..100).map(|i| ((i * 37) % 100 + 1) as f64).collect();
        assert_eq!(super::median_interval(&values), Some((50.5, 40.0, 61.0)));
        // 300 values: ranks 133 and 168.
        let values: Vec<f64> = (1..=300).rev().map(f64::from).collect();
        assert_eq!(super::median_interval(&values), Some((150.5, 133.0, 168.0)));
    }

    #[test]
    fn series_are_found_by_label() {
        let page = "# TYPE berth_step_duration_seconds histogram\n\
            berth_step_duration_seconds_bucket{step=\"cni.add\",le=\"0.1\"} 3\n\
            berth_step_duration_seconds_sum{step=\"cni.add\"} 0.06\n\
            berth_step_duration_seconds_count{step=\"cni.add\"} 3\n\
            berth_step_duration_seconds_count{step=\"ns.pin\"} 2\n";
        let counts = super::series_by_label(page, "berth_step_duration_seconds_count", "step");
        assert_eq!(
            counts,
            [("cni.add".to_string(), 3.0), ("ns.pin".to_string(), 2.0)]
        );
        let sums = super::series_by_label(page, "berth_step_duration_seconds_sum", "step");
        assert_eq!(sums, [("cni.add".to_string(), 0.06)]);
    }

    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[4.0, 1.0, 2.0, 3.0], 50.0), Some(2.5));
        assert_eq!(percentile(&[], 50.0), None);
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 99.0), Some(99.0));
        assert_eq!(percentile(&hundred, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(millis(&[Duration::from_micros(1500)]), vec![1.5]);
    }

    const SCRAPE: &str = r#"# TYPE berth_grpc_request_duration_seconds histogram
berth_grpc_request_duration_seconds_bucket{code="OK",method="ListImages",le="0.000025"} 0
berth_grpc_request_duration_seconds_bucket{code="OK",method="ListImages",le="0.00005"} 10
berth_grpc_request_duration_seconds_bucket{code="OK",method="ListImages",le="0.0001"} 30
berth_grpc_request_duration_seconds_bucket{code="OK",method="ListImages",le="+Inf"} 40
berth_grpc_request_duration_seconds_bucket{code="NotFound",method="ListImages",le="0.0001"} 99
berth_grpc_request_duration_seconds_bucket{code="OK",method="Version",le="0.0001"} 5
berth_grpc_request_duration_seconds_sum{code="OK",method="ListImages"} 0.003
"#;

    #[test]
    fn histogram_series_are_picked_by_label() {
        let b = histogram_buckets(
            SCRAPE,
            "berth_grpc_request_duration_seconds",
            &[("method", "ListImages"), ("code", "OK")],
        );
        assert_eq!(
            b,
            vec![
                (0.000025, 0.0),
                (0.00005, 10.0),
                (0.0001, 30.0),
                (f64::INFINITY, 40.0)
            ]
        );
        let none = histogram_buckets(
            SCRAPE,
            "berth_grpc_request_duration_seconds",
            &[("method", "X")],
        );
        assert!(none.is_empty());
    }

    #[test]
    fn quantiles_are_interpolated_between_two_scrapes() {
        let after = histogram_buckets(
            SCRAPE,
            "berth_grpc_request_duration_seconds",
            &[("method", "ListImages"), ("code", "OK")],
        );
        // From nothing: 40 calls, the 20th in (50, 100] µs, half way in.
        let median = histogram_quantile(&[], &after, 0.5).unwrap();
        assert!((median - 0.000075).abs() < 1e-12, "{median}");
        // Only what happened in between counts: 10 calls before, all in
        // the first 50 µs, leave 30, the 15th again in (50, 100] µs.
        let before = vec![
            (0.000025, 0.0),
            (0.00005, 10.0),
            (0.0001, 10.0),
            (f64::INFINITY, 10.0),
        ];
        let median = histogram_quantile(&before, &after, 0.5).unwrap();
        assert!(
            (median - 0.00005 - 0.00005 * 15.0 / 20.0).abs() < 1e-12,
            "{median}"
        );
        // Nothing in between; and a quantile in +Inf.
        assert_eq!(histogram_quantile(&after, &after, 0.5), None);
        assert_eq!(histogram_quantile(&[], &after, 0.99), None);
        // The first bucket is interpolated from 0.
        let first = vec![(0.000025, 4.0), (f64::INFINITY, 4.0)];
        let q = histogram_quantile(&[], &first, 0.5).unwrap();
        assert!((q - 0.0000125).abs() < 1e-12, "{q}");
    }

    #[test]
    fn table_and_json_carry_ratios_and_failures() {
        let mut r = Report {
            targets: vec!["berth".into(), "containerd".into()],
            ..Default::default()
        };
        r.add(
            "lifecycle",
            "RunPodSandbox median",
            "ms",
            vec![Some(5.0), Some(20.0)],
        );
        r.add("image", "pull", "s", vec![None, Some(3.0)]);
        let md = r.markdown();
        assert!(md.contains("| berth | containerd | berth/containerd |"));
        assert!(md.contains("| lifecycle | RunPodSandbox median | ms | 5.00 | 20.0 | 0.25 |"));
        assert!(md.contains("| image | pull | s | failed | 3.00 | - |"));
        let j = r.to_json();
        assert_eq!(j["rows"][0]["ratio"], json!(0.25));
        assert_eq!(j["rows"][0]["values"]["containerd"], json!(20.0));
        assert_eq!(j["rows"][1]["values"]["berth"], Value::Null);
        assert!(j["rows"][0].get("difference").is_none());
    }

    #[test]
    fn every_peer_gets_its_column_and_its_ratio() {
        let mut r = Report {
            targets: vec![
                "berth".into(),
                "containerd-1.6".into(),
                "containerd-2.3".into(),
            ],
            ..Default::default()
        };
        r.add(
            "lifecycle",
            "RemoveContainer median",
            "ms",
            vec![Some(3.0), Some(6.0), Some(4.0)],
        );
        r.add("image", "pull", "s", vec![Some(1.0), None, Some(2.0)]);
        r.add("image", "rss", "MiB", vec![None, Some(5.0), Some(2.0)]);
        let md = r.markdown();
        assert!(
            md.contains("| group | figure | unit | berth | containerd-1.6 | containerd-2.3 | berth/containerd-1.6 | berth/containerd-2.3 |\n|---|---|---|---:|---:|---:|---|---|\n"),
            "{md}"
        );
        assert!(
            md.contains(
                "| lifecycle | RemoveContainer median | ms | 3.00 | 6.00 | 4.00 | 0.50 | 0.75 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| image | pull | s | 1.00 | failed | 2.00 | - | 0.50 |"),
            "{md}"
        );
        assert!(
            md.contains("| image | rss | MiB | failed | 5.00 | 2.00 | - | - |"),
            "{md}"
        );
        let j = r.to_json();
        assert_eq!(j["rows"][0]["ratio"], json!(0.5));
        assert_eq!(j["rows"][0]["ratios"]["berth/containerd-2.3"], json!(0.75));
        assert_eq!(j["rows"][1]["ratios"]["berth/containerd-1.6"], Value::Null);
        assert_eq!(j["rows"][1]["values"]["containerd-2.3"], json!(2.0));
    }

    #[test]
    fn one_runtime_alone_has_an_empty_ratio_column() {
        let mut r = Report {
            targets: vec!["berth".into()],
            ..Default::default()
        };
        r.add("lifecycle", "x median", "ms", vec![Some(3.0)]);
        let md = r.markdown();
        assert!(
            md.contains("| berth | ratio |\n|---|---|---|---:|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| lifecycle | x median | ms | 3.00 | - |"),
            "{md}"
        );
    }

    #[test]
    fn the_difference_column_says_what_the_first_adds() {
        let mut r = Report {
            targets: vec!["berth+nri".into(), "berth".into()],
            difference: true,
            ..Default::default()
        };
        r.add(
            "lifecycle",
            "start median",
            "ms",
            vec![Some(21.5), Some(20.0)],
        );
        r.add("lifecycle", "stop median", "ms", vec![None, Some(3.0)]);
        let md = r.markdown();
        assert!(md.contains("| berth+nri | berth | berth+nri/berth | berth+nri − berth |"));
        assert!(md.contains("|---|---|---|---:|---:|---|---:|"), "{md}");
        assert!(
            md.contains("| start median | ms | 21.5 | 20.0 | 1.07 | 1.50 |"),
            "{md}"
        );
        assert!(
            md.contains("| stop median | ms | failed | 3.00 | - | - |"),
            "{md}"
        );
        let j = r.to_json();
        assert_eq!(j["rows"][0]["difference"], json!(1.5));
        assert_eq!(j["rows"][1]["difference"], Value::Null);
    }
}
