//! The scale job, the second half of the density phase (`density.rs`):
//! created containers added to the pods it left running, then the list calls
//! (kubelet's relist among them) timed with that many containers, the parts
//! of their answers, and the daemon's RSS at that size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::density::Grown;
use super::fields::{container_field_bytes, sandbox_field_bytes};
use super::metrics::rpc_buckets;
use super::status::Clients;
use super::{
    first_error, mib, order, run_limited, stat_ms, Pod, Settings, Workload, SETUP_PARALLELISM,
};
use crate::memory;
use crate::report::{histogram_quantile, Report};
use crate::target::Target;

/// The list calls timed from the client at one size, per target.
struct ListTimes {
    /// ListContainers, unfiltered.
    containers: Vec<Vec<Duration>>,
    /// ListPodSandbox, unfiltered.
    pods: Vec<Vec<Duration>>,
    /// Both, back to back (kubelet's relist).
    relists: Vec<Vec<Duration>>,
    /// The relist's answers as bytes (transport), and their decode.
    split: Vec<Vec<(Duration, Duration)>>,
    /// Bytes of the largest answer of a relist.
    largest: Vec<Option<f64>>,
}

impl ListTimes {
    /// No times yet, for `n` targets.
    fn empty(n: usize) -> ListTimes {
        ListTimes {
            containers: vec![Vec::new(); n],
            pods: vec![Vec::new(); n],
            relists: vec![Vec::new(); n],
            split: vec![Vec::new(); n],
            largest: vec![None; n],
        }
    }
}

impl Workload {
    /// One size of the scale job: every target brought to `want`
    /// containers, its list calls timed, and all of it reported.
    pub(super) async fn scale_round(
        self: &Arc<Self>,
        targets: &[Target],
        s: &Settings,
        round: usize,
        want: usize,
        grown: &mut Grown,
        report: &mut Report,
    ) {
        self.grow_to_scale(targets, grown, round, want, report)
            .await;
        let broken = &grown.broken;
        let before = self.scrape_all(targets).await;
        let times = time_lists(targets, broken, s.list_iterations, report).await;
        let after = self.scrape_all(targets).await;
        let running = grown.pods.iter().map(Vec::len).max().unwrap_or(0);
        let at = format!("{want} containers in {running} pods");
        server_side_lists(&before, &after, &at, report);
        report_lists(&times, &at, report);
        if targets.len() > 1 {
            let settled =
                time_relists_settled(targets, broken, 3 * s.list_iterations, report).await;
            let after = format!(
                "{} ms after the previous runtime's call",
                LIST_SETTLE.as_millis()
            );
            report_relists_as(&settled, &at, &after, report);
            let alone =
                time_relists_alone(targets, broken, round, 3 * s.list_iterations, report).await;
            report_relists_as(&alone, &at, "the other runtimes stopped", report);
        }
        if round + 1 == s.scales.len() {
            self.answer_fields(targets, broken, want, running, report)
                .await;
        }
        // The daemon with all of them (kubelet's node at full size).
        let rss: Vec<Option<f64>> = targets
            .iter()
            .enumerate()
            .map(|(ti, t)| {
                (!broken[ti])
                    .then(|| memory::of_pid(t.pid).ok())
                    .flatten()
                    .map(|m| mib(m.rss_kib))
            })
            .collect();
        report.add("scale", &format!("daemon RSS, {at}"), "MiB", rss);
    }

    /// Brings every target that is not broken to `want` containers, in the
    /// order of `round` (pods first if the density job left none); a target
    /// that fails is broken from then on.
    async fn grow_to_scale(
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
            let t = &targets[ti];
            if grown.pods[ti].is_empty() {
                if let Err(e) = self.grow(t, &mut grown.pods[ti], want.div_ceil(10)).await {
                    report.error(t.name(), &format!("scale {want}"), &e);
                    grown.broken[ti] = true;
                    continue;
                }
                grown.containers[ti] = grown.pods[ti].len();
            }
            if let Err(e) = self
                .add_containers(t, &grown.pods[ti], &mut grown.containers[ti], want)
                .await
            {
                report.error(t.name(), &format!("scale {want}"), &e);
                grown.broken[ti] = true;
            }
        }
    }

    /// Adds created (not started) containers to `pods`, round robin, until
    /// `t` holds `total` containers; `have` is how many it holds.
    async fn add_containers(
        self: &Arc<Self>,
        t: &Target,
        pods: &[Pod],
        have: &mut usize,
        total: usize,
    ) -> Result<()> {
        if pods.is_empty() {
            return Err(anyhow!("no pods to add containers to"));
        }
        let jobs: Vec<(Pod, usize)> = (*have..total)
            .map(|j| (pods[j % pods.len()].clone(), j))
            .collect();
        let results = run_limited(jobs, SETUP_PARALLELISM, |((pod, pod_config), j)| {
            let (w, t) = (self.clone(), t.clone());
            async move {
                let config = w.container_config(&format!("extra-{j}"), "density");
                t.create_container(&pod, &config, &pod_config).await
            }
        })
        .await;
        *have += results.iter().filter(|r| r.is_ok()).count();
        first_error(&results).map_or(Ok(()), Err)
    }

    /// What the relist answers are made of on each runtime, field by field
    /// (bytes of each field summed over the entries): one answer each.
    async fn answer_fields(
        &self,
        targets: &[Target],
        broken: &[bool],
        want: usize,
        running: usize,
        report: &mut Report,
    ) {
        let mut containers: Vec<Vec<(&'static str, usize)>> = Vec::new();
        let mut pods: Vec<Vec<(&'static str, usize)>> = Vec::new();
        for (ti, t) in targets.iter().enumerate() {
            let answer = async {
                if broken[ti] {
                    return Err(anyhow!("broken earlier"));
                }
                Clients::connect(&t.spec.socket).await?.relist().await
            }
            .await;
            match answer {
                Ok((p, c)) => {
                    pods.push(sandbox_field_bytes(&p));
                    containers.push(container_field_bytes(&c));
                }
                Err(e) => {
                    report.error(t.name(), "relist answer fields", &e);
                    pods.push(Vec::new());
                    containers.push(Vec::new());
                }
            }
        }
        for (what, per_target, empty) in [
            (
                "ListContainers",
                &containers,
                container_field_bytes(&Default::default()),
            ),
            (
                "ListPodSandbox",
                &pods,
                sandbox_field_bytes(&Default::default()),
            ),
        ] {
            for (k, (field, _)) in empty.iter().enumerate() {
                let values = per_target
                    .iter()
                    .map(|f| f.get(k).map(|(_, bytes)| *bytes as f64 / 1024.0))
                    .collect();
                report.add(
                    "scale",
                    &format!("{what} answer, {want} containers in {running} pods: {field}"),
                    "KiB",
                    values,
                );
            }
        }
    }
}

/// The targets that are not broken, with their indexes, in the order of
/// round `round`.
fn live<'a>(
    targets: &'a [Target],
    broken: &'a [bool],
    round: usize,
) -> impl Iterator<Item = (usize, &'a Target)> + 'a {
    order(round, targets.len())
        .into_iter()
        .filter(|&ti| !broken[ti])
        .map(|ti| (ti, &targets[ti]))
}

/// `iterations` rounds of the list calls on every target that is not broken.
async fn time_lists(
    targets: &[Target],
    broken: &[bool],
    iterations: usize,
    report: &mut Report,
) -> ListTimes {
    let mut times = ListTimes::empty(targets.len());
    for i in 0..iterations {
        for (ti, t) in live(targets, broken, i) {
            let start = Instant::now();
            match t.list_containers(&[], None).await {
                Ok(_) => times.containers[ti].push(start.elapsed()),
                Err(e) => report.error(t.name(), "ListContainers", &e),
            }
            let start = Instant::now();
            match t.list_pods(&[]).await {
                Ok(_) => times.pods[ti].push(start.elapsed()),
                Err(e) => report.error(t.name(), "ListPodSandbox", &e),
            }
            // kubelet's relist: both, back to back.
            let start = Instant::now();
            match t.relist().await {
                Ok((pods, containers)) => {
                    times.relists[ti].push(start.elapsed());
                    let big = pods.max(containers) as f64;
                    let largest = &mut times.largest[ti];
                    *largest = Some(largest.unwrap_or(0.0f64).max(big));
                }
                Err(e) => report.error(t.name(), "relist", &e),
            }
            match t.relist_split().await {
                Ok(split) => times.split[ti].push(split),
                Err(e) => report.error(t.name(), "relist (bytes)", &e),
            }
        }
    }
    times
}

/// How long a runtime's relist waits after the previous runtime's in
/// [`time_relists_settled`].
const LIST_SETTLE: Duration = Duration::from_millis(20);

/// kubelet's relist on every runtime, all of them running, as in
/// [`time_lists`] but each relist `LIST_SETTLE` after the previous
/// runtime's call: what a call leaves behind on the machine (a daemon's
/// garbage collection after a 200 KiB answer, its shims' wake-ups) has
/// settled before the next runtime's is timed, as on a node with one
/// runtime. `iterations` rounds, in the order of each.
async fn time_relists_settled(
    targets: &[Target],
    broken: &[bool],
    iterations: usize,
    report: &mut Report,
) -> ListTimes {
    let mut times = ListTimes::empty(targets.len());
    for i in 0..iterations {
        for (ti, t) in live(targets, broken, i) {
            tokio::time::sleep(LIST_SETTLE).await;
            let start = Instant::now();
            match t.relist().await {
                Ok(_) => times.relists[ti].push(start.elapsed()),
                Err(e) => report.error(t.name(), "relist (settled)", &e),
            }
        }
    }
    times
}

/// How long the other runtimes' processes are left stopped before a
/// runtime's relists are timed alone (the stops and the last wake-ups settle).
const ALONE_SETTLE: Duration = Duration::from_millis(500);

/// A runtime's processes: its daemon and its shims.
fn processes(t: &Target) -> Vec<i32> {
    let mut pids = vec![t.pid];
    if let Some(exe) = &t.spec.shim_exe {
        pids.extend(memory::find_processes(exe, t.spec.shim_match.as_deref()));
    }
    pids
}

/// Processes stopped with SIGSTOP, continued when this is dropped (also
/// when the timing fails or panics).
struct Stopped(Vec<i32>);

impl Stopped {
    fn all(pids: Vec<i32>) -> Stopped {
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
        Stopped(pids)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
}

/// kubelet's relist on each runtime as a node has it, alone: the other
/// runtimes' daemons and shims stopped while `iterations` relists (and as
/// many of the transport alone) are timed on it, in the order of `round`.
/// The other rows keep all runtimes running: their pods and shims share
/// the machine, which a node with one runtime does not.
async fn time_relists_alone(
    targets: &[Target],
    broken: &[bool],
    round: usize,
    iterations: usize,
    report: &mut Report,
) -> ListTimes {
    let mut times = ListTimes::empty(targets.len());
    for (ti, t) in live(targets, broken, round) {
        let others = targets
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != ti)
            .flat_map(|(_, o)| processes(o))
            .collect();
        let _stopped = Stopped::all(others);
        tokio::time::sleep(ALONE_SETTLE).await;
        for _ in 0..iterations {
            let start = Instant::now();
            match t.relist().await {
                Ok(_) => times.relists[ti].push(start.elapsed()),
                Err(e) => report.error(t.name(), "relist (alone)", &e),
            }
            match t.relist_split().await {
                Ok(split) => times.split[ti].push(split),
                Err(e) => report.error(t.name(), "relist (alone, bytes)", &e),
            }
        }
    }
    times
}

/// The rows of [`time_relists_settled`] and [`time_relists_alone`]: the
/// relist's median and p99 (and its transport's, where it was timed), `how`
/// naming the way they were timed.
fn report_relists_as(times: &ListTimes, at: &str, how: &str, report: &mut Report) {
    let transport = times.split.iter().any(|v| !v.is_empty());
    for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
        let values = times.relists.iter().map(|v| stat_ms(v, p)).collect();
        report.add(
            "scale",
            &format!("relist, {at}, {how}, {stat}"),
            "ms",
            values,
        );
        if !transport {
            continue;
        }
        let values = times
            .split
            .iter()
            .map(|v| stat_ms(&v.iter().map(|s| s.0).collect::<Vec<_>>(), p))
            .collect();
        report.add(
            "scale",
            &format!("relist's transport, {at}, {how}, {stat}"),
            "ms",
            values,
        );
    }
}

/// The server-side medians of the two list calls, from berth's RPC
/// histogram scraped `before` and `after` them (`at`: how many containers in
/// how many pods).
fn server_side_lists(
    before: &[Option<String>],
    after: &[Option<String>],
    at: &str,
    report: &mut Report,
) {
    for what in ["ListContainers", "ListPodSandbox"] {
        let values = before
            .iter()
            .zip(after)
            .map(|(b, a)| match (b, a) {
                (Some(b), Some(a)) => {
                    histogram_quantile(&rpc_buckets(b, what), &rpc_buckets(a, what), 0.5)
                        .map(|secs| secs * 1e6)
                }
                _ => None,
            })
            .collect();
        report.add_partial(
            "scale",
            &format!("{what}, {at}, server-side median (metrics histogram)"),
            "µs",
            values,
        );
    }
}

/// The client-side medians and p99s of the list calls, and the largest
/// answer (`at`: how many containers in how many pods).
fn report_lists(times: &ListTimes, at: &str, report: &mut Report) {
    for (what, samples) in [
        ("ListContainers", &times.containers),
        ("ListPodSandbox", &times.pods),
    ] {
        for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
            let values = samples.iter().map(|v| stat_ms(v, p)).collect();
            report.add("scale", &format!("{what}, {at}, {stat}"), "ms", values);
        }
    }
    for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
        let values = times.relists.iter().map(|v| stat_ms(v, p)).collect();
        report.add(
            "scale",
            &format!("relist (ListPodSandbox + ListContainers), {at}, {stat}"),
            "ms",
            values,
        );
    }
    for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
        let values = times
            .split
            .iter()
            .map(|v| stat_ms(&v.iter().map(|s| s.0).collect::<Vec<_>>(), p))
            .collect();
        report.add(
            "scale",
            &format!("relist, answers not decoded (their transport), {at}, {stat}"),
            "ms",
            values,
        );
    }
    let values = times
        .split
        .iter()
        .map(|v| stat_ms(&v.iter().map(|s| s.1).collect::<Vec<_>>(), 50.0))
        .collect();
    report.add(
        "scale",
        &format!("relist, the client's decode of its answers, {at}, median"),
        "ms",
        values,
    );
    report.add(
        "scale",
        &format!("largest list answer, {at}"),
        "KiB",
        times
            .largest
            .iter()
            .map(|b| b.map(|b| b / 1024.0))
            .collect(),
    );
}
