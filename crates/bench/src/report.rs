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
    /// when that runtime failed the measurement.
    pub values: Vec<Option<f64>>,
}

impl Row {
    /// first / second, when both are there and the second is not zero.
    pub fn ratio(&self) -> Option<f64> {
        match self.values.as_slice() {
            [Some(a), Some(b), ..] if *b != 0.0 => Some(a / b),
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
        });
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
        let ratio_name = match self.targets.as_slice() {
            [a, b, ..] => format!("{a}/{b}"),
            _ => "ratio".into(),
        };
        out.push_str(&format!(
            "| group | figure | unit | {} | {ratio_name} |\n",
            self.targets.join(" | ")
        ));
        out.push_str(&format!(
            "|---|---|---|{}---|\n",
            "---:|".repeat(self.targets.len())
        ));
        for row in &self.rows {
            let cells: Vec<String> = row
                .values
                .iter()
                .map(|v| v.map(fmt_value).unwrap_or_else(|| "failed".into()))
                .collect();
            let ratio = row
                .ratio()
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "-".into());
            out.push_str(&format!(
                "| {} | {} | {} | {} | {ratio} |\n",
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

    /// The report as JSON: machine, settings, targets, rows (each with its
    /// values by runtime name and the ratio), errors.
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
                json!({
                    "group": r.group,
                    "figure": r.figure,
                    "unit": r.unit,
                    "values": values,
                    "ratio": r.ratio(),
                })
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
    }
}
