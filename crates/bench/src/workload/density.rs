//! The density job, the first half of one phase with the scale job
//! (`scale.rs`): the daemon's and the shims' memory with growing numbers of
//! running pods. The pods it leaves running are where the scale job adds its
//! containers; the phase ends with their teardown.

use std::sync::Arc;

use anyhow::Result;

use super::{first_error, mib, order, run_limited, Pod, Settings, Workload, SETUP_PARALLELISM};
use crate::memory::{self, Mem};
use crate::report::Report;
use crate::target::Target;

/// What the density and scale phase has made on each target so far.
pub(super) struct Grown {
    /// The pods, one running container each.
    pub(super) pods: Vec<Vec<Pod>>,
    /// Containers in those pods, counted from the scale job on.
    pub(super) containers: Vec<usize>,
    /// Targets that failed a step and take no further part.
    pub(super) broken: Vec<bool>,
}

/// The memory measured at the density before (or of the idle daemon).
struct Last {
    /// Daemon and shims PSS (KiB), per target.
    pss: Vec<Option<u64>>,
    /// Running pods then.
    pods: usize,
}

/// The memory figures of one density, in the order they are reported, each
/// with its unit.
const DENSITY_FIGURES: [(&str, &str); 7] = [
    ("daemon RSS", "MiB"),
    ("daemon PSS", "MiB"),
    ("shim processes", "count"),
    ("shims PSS, all", "MiB"),
    ("daemon+shims PSS per pod", "MiB"),
    ("daemon+shims RSS per pod", "MiB"),
    ("daemon+shims PSS per added pod", "MiB"),
];

impl Workload {
    /// Memory with growing numbers of running pods, then list latency with
    /// growing numbers of containers in those pods.
    pub async fn density_and_scale(
        self: &Arc<Self>,
        targets: &[Target],
        s: &Settings,
        report: &mut Report,
    ) {
        let n = targets.len();
        let mut grown = Grown {
            pods: vec![Vec::new(); n],
            containers: Vec::new(),
            broken: vec![false; n],
        };

        // The idle daemon, before any pod of this phase; then, for each
        // density, what the pods added since the one before cost each.
        let mut last = idle_memory(targets, report);
        for (round, &want) in s.densities.iter().enumerate() {
            self.grow_all(targets, &mut grown, round, want, report)
                .await;
            tokio::time::sleep(s.settle).await;
            density_memory(targets, &grown.broken, want, &mut last, report);
            eprintln!("density: {want} pods done");
        }

        grown.containers = grown.pods.iter().map(Vec::len).collect();
        for (round, &want) in s.scales.iter().enumerate() {
            self.scale_round(targets, s, round, want, &mut grown, report)
                .await;
            eprintln!("scale: {want} containers done");
        }

        for t in targets {
            if let Err(e) = self.teardown(t, Some("density")).await {
                report.error(t.name(), "density teardown", &e);
            }
        }
    }

    /// Grows every target that is not broken to `want` pods, in the order
    /// of `round`; a target that fails is broken from then on.
    async fn grow_all(
        self: &Arc<Self>,
        targets: &[Target],
        grown: &mut Grown,
        round: usize,
        want: usize,
        report: &mut Report,
    ) {
        for ti in order(round, targets.len()) {
            if grown.broken[ti] {
                continue;
            }
            if let Err(e) = self.grow(&targets[ti], &mut grown.pods[ti], want).await {
                report.error(targets[ti].name(), &format!("density {want}"), &e);
                grown.broken[ti] = true;
            }
        }
    }

    /// Grows the pods of `t` (one running container each) to `n`.
    pub(super) async fn grow(
        self: &Arc<Self>,
        t: &Target,
        pods: &mut Vec<Pod>,
        n: usize,
    ) -> Result<()> {
        let configs = (pods.len()..n)
            .map(|j| self.pod_config(t, &format!("d-{j}"), "density"))
            .collect::<Result<Vec<_>>>()?;
        let results = run_limited(configs, SETUP_PARALLELISM, |config| {
            let (w, t) = (self.clone(), t.clone());
            async move { w.pod_with_container(&t, config, "density").await }
        })
        .await;
        let error = first_error(&results);
        pods.extend(results.into_iter().flatten());
        error.map_or(Ok(()), Err)
    }
}

/// The idle daemons' RSS and PSS, reported; what the first density is
/// measured against.
fn idle_memory(targets: &[Target], report: &mut Report) -> Last {
    let idle: Vec<Option<(Mem, Mem)>> = targets.iter().map(|t| measure(t).ok()).collect();
    report.add(
        "density",
        "0 pods: daemon RSS",
        "MiB",
        idle.iter()
            .map(|m| m.map(|(d, _)| mib(d.rss_kib)))
            .collect(),
    );
    report.add(
        "density",
        "0 pods: daemon PSS",
        "MiB",
        idle.iter()
            .map(|m| m.map(|(d, _)| mib(d.pss_kib)))
            .collect(),
    );
    Last {
        pss: idle
            .iter()
            .map(|m| m.map(|(d, sh)| d.pss_kib + sh.pss_kib))
            .collect(),
        pods: 0,
    }
}

/// The memory of every target at `want` running pods, reported: the
/// daemon's breakdown first, then the [`DENSITY_FIGURES`]. `last` becomes
/// this density.
fn density_memory(
    targets: &[Target],
    broken: &[bool],
    want: usize,
    last: &mut Last,
    report: &mut Report,
) {
    let rows = density_rows(targets, broken, want, last, report);
    // Where the daemon's own memory is (anonymous: heap and stacks).
    let parts: Vec<Option<memory::Breakdown>> = targets
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            (!broken[ti])
                .then(|| memory::breakdown(t.pid).ok())
                .flatten()
        })
        .collect();
    report.add(
        "density",
        &format!("{want} pods: daemon RSS anonymous"),
        "MiB",
        parts.iter().map(|b| b.map(|b| mib(b.anon_kib))).collect(),
    );
    report.add(
        "density",
        &format!("{want} pods: daemon threads"),
        "count",
        parts.iter().map(|b| b.map(|b| b.threads as f64)).collect(),
    );
    for ((name, unit), values) in DENSITY_FIGURES.iter().zip(rows) {
        let figure = if name.ends_with("added pod") {
            format!("{}→{want} pods: {name}", last.pods)
        } else {
            format!("{want} pods: {name}")
        };
        report.add("density", &figure, unit, values);
    }
    last.pods = want;
}

/// The values of the [`DENSITY_FIGURES`] at `want` pods, per target; moves
/// `last.pss` on to what was measured now.
fn density_rows(
    targets: &[Target],
    broken: &[bool],
    want: usize,
    last: &mut Last,
    report: &mut Report,
) -> [Vec<Option<f64>>; 7] {
    let mut rows: [Vec<Option<f64>>; 7] = Default::default();
    for (ti, t) in targets.iter().enumerate() {
        let m = (!broken[ti]).then(|| measure(t)).transpose();
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                report.error(t.name(), &format!("density {want} memory"), &e);
                None
            }
        };
        let per_pod = |kib: u64| mib(kib) / want.max(1) as f64;
        rows[0].push(m.map(|(d, _)| mib(d.rss_kib)));
        rows[1].push(m.map(|(d, _)| mib(d.pss_kib)));
        rows[2].push(m.map(|(_, sh)| sh.processes as f64));
        rows[3].push(m.map(|(_, sh)| mib(sh.pss_kib)));
        rows[4].push(m.map(|(d, sh)| per_pod(d.pss_kib + sh.pss_kib)));
        rows[5].push(m.map(|(d, sh)| per_pod(d.rss_kib + sh.rss_kib)));
        let total = m.map(|(d, sh)| d.pss_kib + sh.pss_kib);
        rows[6].push(match (total, last.pss[ti]) {
            (Some(now), Some(then)) if want > last.pods => {
                Some((mib(now) - mib(then)) / (want - last.pods) as f64)
            }
            _ => None,
        });
        last.pss[ti] = total;
    }
    rows
}

/// The daemon's memory and its shims' (summed).
fn measure(t: &Target) -> Result<(Mem, Mem)> {
    let daemon = memory::of_pid(t.pid)?;
    let shims = match &t.spec.shim_exe {
        Some(exe) => memory::of_pids(&memory::find_processes(exe, t.spec.shim_match.as_deref())),
        None => Mem::default(),
    };
    Ok((daemon, shims))
}
