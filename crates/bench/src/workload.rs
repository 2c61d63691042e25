//! The workload, the same for every runtime and run on them in turn (the
//! order flips every round, so neither always goes first): pod and container
//! life-cycle latency, pods started at once, list latency with many
//! containers, memory with many running pods, and the pull of a large image.
//!
//! Every pod carries the label `berth-bench=<run id>` (and the phase it
//! belongs to), so that clean-up removes only what this program made.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cri_api::v1;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::memory::{self, Mem, PeakRss};
use crate::report::{millis, percentile, Report};
use crate::target::Target;

/// Label on every pod and container this program makes; its value is the run id.
pub const LABEL: &str = "berth-bench";
/// Label naming the phase a pod belongs to.
const PHASE: &str = "berth-bench/phase";
/// Pods started or removed at once while setting up or tearing down (not measured).
const SETUP_PARALLELISM: usize = 4;
/// Grace period of StopContainer; the container's shell exits on SIGTERM at once.
const STOP_TIMEOUT_SECS: i64 = 10;

/// How much of each measurement to do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    /// Timed life cycles per runtime.
    pub iterations: usize,
    /// Untimed life cycles per runtime before them.
    pub warmup: usize,
    /// Pods started at once, one measurement per size.
    pub concurrency: Vec<usize>,
    /// Running pods at which memory is measured (ascending).
    pub densities: Vec<usize>,
    /// Containers present when the list calls are timed (ascending).
    pub scales: Vec<usize>,
    /// Timed calls per list measurement.
    pub list_iterations: usize,
    /// Timed pulls of the large image per runtime (after one untimed).
    pub pull_runs: usize,
    /// Pause before memory is read, so that start-up work has settled.
    #[serde(with = "secs")]
    pub settle: Duration,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// What the pods run and where their logs go.
pub struct Workload {
    /// The container image (busybox with `sh`, `sleep`, `true`).
    pub image: String,
    /// The large image for the pull benchmark, and its description.
    pub big_image: Option<(String, String)>,
    /// Pods' cgroup parent; the runtime's name is appended.
    pub cgroup_parent: String,
    /// Pod log directories go below `log_dir/<runtime>/`.
    pub log_dir: PathBuf,
    /// Tells this run's pods from others'.
    pub run_id: String,
}

/// A pod's id and config.
type Pod = (String, v1::PodSandboxConfig);

/// The order in which `n` runtimes take round `round`: forwards, then backwards.
fn order(round: usize, n: usize) -> Vec<usize> {
    if round % 2 == 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// Runs `f` on every item, at most `limit` at a time; results in item order.
async fn run_limited<T, R, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Vec<Result<R>>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    let semaphore = Arc::new(Semaphore::new(limit.max(1)));
    let mut set = JoinSet::new();
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let fut = f(item);
        let permit = semaphore
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        set.spawn(async move {
            let r = fut.await;
            drop(permit);
            (i, r)
        });
    }
    let mut out: Vec<Option<Result<R>>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, r)) => out[i] = Some(r),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow!("task lost"))))
        .collect()
}

/// The first error of `results`, with how many failed.
fn first_error<R>(results: &[Result<R>]) -> Option<anyhow::Error> {
    let failed = results.iter().filter(|r| r.is_err()).count();
    let first = results.iter().find_map(|r| r.as_ref().err())?;
    Some(anyhow!(
        "{failed} of {} failed; first: {first:#}",
        results.len()
    ))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

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
    fn labels(&self, phase: &str) -> HashMap<String, String> {
        [
            (LABEL.to_string(), self.run_id.clone()),
            (PHASE.to_string(), phase.to_string()),
        ]
        .into()
    }

    /// A pod config for `name` on `target`; makes its log directory, as
    /// kubelet does before it asks for the pod.
    fn pod_config(&self, target: &Target, name: &str, phase: &str) -> Result<v1::PodSandboxConfig> {
        let logs = self.log_dir.join(target.name()).join(name);
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("making log dir {}", logs.display()))?;
        Ok(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.to_string(),
                namespace: "berth-bench".into(),
                uid: format!("{}-{name}", self.run_id),
                attempt: 0,
            }),
            hostname: name.to_string(),
            log_directory: logs.display().to_string(),
            labels: self.labels(phase),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}-{}", self.cgroup_parent, target.name()),
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(kubelet_namespaces()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A container that sleeps and exits at once on SIGTERM.
    fn container_config(&self, name: &str, phase: &str) -> v1::ContainerConfig {
        v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: name.to_string(),
                attempt: 0,
            }),
            image: Some(v1::ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
                .map(String::from)
                .to_vec(),
            log_path: format!("{name}.log"),
            labels: self.labels(phase),
            linux: Some(v1::LinuxContainerConfig {
                security_context: Some(v1::LinuxContainerSecurityContext {
                    namespace_options: Some(kubelet_namespaces()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs a pod with one started container; returns the pod's id and
    /// config. A failure removes the pod again.
    async fn pod_with_container(
        &self,
        target: &Target,
        pod_config: v1::PodSandboxConfig,
        phase: &str,
    ) -> Result<Pod> {
        let pod = target.run_pod(&pod_config).await?;
        let result = async {
            let config = self.container_config("sleeper", phase);
            let id = target.create_container(&pod, &config, &pod_config).await?;
            target.start_container(&id).await
        }
        .await;
        match result {
            Ok(()) => Ok((pod, pod_config)),
            Err(e) => {
                remove_pod(target, &pod).await;
                Err(e)
            }
        }
    }

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
    pub async fn lifecycle(&self, targets: &[Target], s: &Settings, report: &mut Report) {
        let n = targets.len();
        let mut samples = vec![vec![Vec::new(); LIFECYCLE_STEPS.len()]; n];
        let mut totals = vec![Vec::new(); n];
        let mut failures = vec![0usize; n];
        for i in 0..s.warmup + s.iterations {
            for ti in order(i, n) {
                let t = &targets[ti];
                match self.lifecycle_once(t, &format!("lc-{i}")).await {
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
        for (k, step) in LIFECYCLE_STEPS.iter().enumerate() {
            for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                let values = (0..n).map(|ti| stat_ms(&samples[ti][k], p)).collect();
                report.add("lifecycle", &format!("{step} {stat}"), "ms", values);
            }
        }
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
    }

    /// Starts `k` pods with a container each at once, for each `k`: the time
    /// until every one runs.
    pub async fn concurrency(
        self: &Arc<Self>,
        targets: &[Target],
        s: &Settings,
        report: &mut Report,
    ) {
        for (round, &k) in s.concurrency.iter().enumerate() {
            let mut values = vec![None; targets.len()];
            for ti in order(round, targets.len()) {
                let t = &targets[ti];
                let phase = format!("concurrency-{k}");
                match self.start_at_once(t, k, &phase).await {
                    Ok(elapsed) => values[ti] = Some(elapsed.as_secs_f64()),
                    Err(e) => report.error(t.name(), &phase, &e),
                }
                if let Err(e) = self.teardown(t, Some(&phase)).await {
                    report.error(t.name(), &format!("{phase} teardown"), &e);
                }
            }
            report.add(
                "concurrency",
                &format!("{k} pods started at once, until all run"),
                "s",
                values,
            );
            eprintln!("concurrency: {k} pods done");
        }
    }

    async fn start_at_once(
        self: &Arc<Self>,
        t: &Target,
        k: usize,
        phase: &str,
    ) -> Result<Duration> {
        let configs = (0..k)
            .map(|j| self.pod_config(t, &format!("c{k}-{j}"), phase))
            .collect::<Result<Vec<_>>>()?;
        let start = Instant::now();
        let results = run_limited(configs, k, |config| {
            let (w, t, phase) = (self.clone(), t.clone(), phase.to_string());
            async move { w.pod_with_container(&t, config, &phase).await }
        })
        .await;
        let elapsed = start.elapsed();
        if let Some(e) = first_error(&results) {
            return Err(e);
        }
        let running = t
            .list_containers(
                &[(PHASE, phase)],
                Some(v1::ContainerState::ContainerRunning),
            )
            .await?;
        if running != k {
            return Err(anyhow!("{running} of {k} containers run"));
        }
        Ok(elapsed)
    }

    /// Grows the pods of `t` (one running container each) to `n`.
    async fn grow(self: &Arc<Self>, t: &Target, pods: &mut Vec<Pod>, n: usize) -> Result<()> {
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

    /// Memory with growing numbers of running pods, then list latency with
    /// growing numbers of containers in those pods.
    pub async fn density_and_scale(
        self: &Arc<Self>,
        targets: &[Target],
        s: &Settings,
        report: &mut Report,
    ) {
        let n = targets.len();
        let mut pods: Vec<Vec<Pod>> = vec![Vec::new(); n];
        let mut broken = vec![false; n];

        // The idle daemon, before any pod of this phase; then, for each
        // density, what the pods added since the one before cost each.
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
        let mut before: Vec<Option<u64>> = idle
            .iter()
            .map(|m| m.map(|(d, sh)| d.pss_kib + sh.pss_kib))
            .collect();
        let mut pods_before = 0;

        for (round, &want) in s.densities.iter().enumerate() {
            for ti in order(round, n) {
                if broken[ti] {
                    continue;
                }
                if let Err(e) = self.grow(&targets[ti], &mut pods[ti], want).await {
                    report.error(targets[ti].name(), &format!("density {want}"), &e);
                    broken[ti] = true;
                }
            }
            tokio::time::sleep(s.settle).await;
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
                rows[6].push(match (total, before[ti]) {
                    (Some(now), Some(then)) if want > pods_before => {
                        Some((mib(now) - mib(then)) / (want - pods_before) as f64)
                    }
                    _ => None,
                });
                before[ti] = total;
            }
            let names = [
                ("daemon RSS", "MiB"),
                ("daemon PSS", "MiB"),
                ("shim processes", "count"),
                ("shims PSS, all", "MiB"),
                ("daemon+shims PSS per pod", "MiB"),
                ("daemon+shims RSS per pod", "MiB"),
                ("daemon+shims PSS per added pod", "MiB"),
            ];
            for ((name, unit), values) in names.iter().zip(rows) {
                let figure = if name.ends_with("added pod") {
                    format!("{pods_before}→{want} pods: {name}")
                } else {
                    format!("{want} pods: {name}")
                };
                report.add("density", &figure, unit, values);
            }
            pods_before = want;
            eprintln!("density: {want} pods done");
        }

        let mut containers: Vec<usize> = pods.iter().map(Vec::len).collect();
        for (round, &want) in s.scales.iter().enumerate() {
            for ti in order(round, n) {
                if broken[ti] {
                    continue;
                }
                let t = &targets[ti];
                if pods[ti].is_empty() {
                    if let Err(e) = self.grow(t, &mut pods[ti], want.div_ceil(10)).await {
                        report.error(t.name(), &format!("scale {want}"), &e);
                        broken[ti] = true;
                        continue;
                    }
                    containers[ti] = pods[ti].len();
                }
                if let Err(e) = self
                    .add_containers(t, &pods[ti], &mut containers[ti], want)
                    .await
                {
                    report.error(t.name(), &format!("scale {want}"), &e);
                    broken[ti] = true;
                }
            }
            let mut lists = vec![Vec::new(); n];
            let mut pod_lists = vec![Vec::new(); n];
            let mut relists = vec![Vec::new(); n];
            let mut largest = vec![None; n];
            for i in 0..s.list_iterations {
                for ti in order(i, n) {
                    if broken[ti] {
                        continue;
                    }
                    let t = &targets[ti];
                    let start = Instant::now();
                    match t.list_containers(&[], None).await {
                        Ok(_) => lists[ti].push(start.elapsed()),
                        Err(e) => report.error(t.name(), "ListContainers", &e),
                    }
                    let start = Instant::now();
                    match t.list_pods(&[]).await {
                        Ok(_) => pod_lists[ti].push(start.elapsed()),
                        Err(e) => report.error(t.name(), "ListPodSandbox", &e),
                    }
                    // kubelet's relist: both, back to back.
                    let start = Instant::now();
                    match t.relist().await {
                        Ok((pods, containers)) => {
                            relists[ti].push(start.elapsed());
                            let big = pods.max(containers) as f64;
                            largest[ti] = Some(largest[ti].unwrap_or(0.0f64).max(big));
                        }
                        Err(e) => report.error(t.name(), "relist", &e),
                    }
                }
            }
            let running = pods.iter().map(Vec::len).max().unwrap_or(0);
            for (what, samples) in [("ListContainers", &lists), ("ListPodSandbox", &pod_lists)] {
                for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                    let values = samples.iter().map(|v| stat_ms(v, p)).collect();
                    report.add(
                        "scale",
                        &format!("{what}, {want} containers in {running} pods, {stat}"),
                        "ms",
                        values,
                    );
                }
            }
            for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                let values = relists.iter().map(|v| stat_ms(v, p)).collect();
                report.add(
                    "scale",
                    &format!("relist (ListPodSandbox + ListContainers), {want} containers in {running} pods, {stat}"),
                    "ms",
                    values,
                );
            }
            report.add(
                "scale",
                &format!("largest list answer, {want} containers in {running} pods"),
                "KiB",
                largest.iter().map(|b| b.map(|b| b / 1024.0)).collect(),
            );
            eprintln!("scale: {want} containers done");
        }

        for t in targets {
            if let Err(e) = self.teardown(t, Some("density")).await {
                report.error(t.name(), "density teardown", &e);
            }
        }
    }

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
            "daemon RSS before the pull (median)",
            "MiB",
            before.iter().map(|b| percentile(b, 50.0)).collect(),
        );
    }

    /// Stops and removes this run's pods on `t` (of one phase, or all).
    pub async fn teardown(&self, t: &Target, phase: Option<&str>) -> Result<()> {
        let mut labels = vec![(LABEL, self.run_id.as_str())];
        if let Some(phase) = phase {
            labels.push((PHASE, phase));
        }
        let ids: Vec<String> = t
            .list_pods(&labels)
            .await?
            .into_iter()
            .map(|p| p.id)
            .collect();
        remove_pods(t, ids).await
    }
}

/// The namespaces kubelet asks for by default: the pod's network and IPC,
/// a PID namespace of the container's own.
fn kubelet_namespaces() -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: v1::NamespaceMode::Pod as i32,
        pid: v1::NamespaceMode::Container as i32,
        ipc: v1::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// Stops and removes every pod on `t` that carries [`LABEL`], whatever its run.
pub async fn remove_all_bench_pods(t: &Target) -> Result<usize> {
    let ids: Vec<String> = t
        .list_pods(&[])
        .await?
        .into_iter()
        .filter(|p| p.labels.contains_key(LABEL))
        .map(|p| p.id)
        .collect();
    let n = ids.len();
    remove_pods(t, ids).await?;
    Ok(n)
}

async fn remove_pods(t: &Target, ids: Vec<String>) -> Result<()> {
    let results = run_limited(ids, SETUP_PARALLELISM, |id| {
        let t = t.clone();
        async move {
            t.stop_pod(&id).await?;
            t.remove_pod(&id).await
        }
    })
    .await;
    first_error(&results).map_or(Ok(()), Err)
}

/// Best-effort removal of one pod after a failure.
async fn remove_pod(t: &Target, id: &str) {
    let _ = t.stop_pod(id).await;
    let _ = t.remove_pod(id).await;
}

/// The `p`-th percentile in ms (`p` = 50: the median).
fn stat_ms(samples: &[Duration], p: f64) -> Option<f64> {
    percentile(&millis(samples), p)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_alternates() {
        assert_eq!(order(0, 2), vec![0, 1]);
        assert_eq!(order(1, 2), vec![1, 0]);
        assert_eq!(order(2, 3), vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn run_limited_keeps_order_and_limit() {
        let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let results = run_limited((0..20).collect(), 3, |i: usize| {
            let (active, most) = (active.clone(), most.clone());
            async move {
                let now = active.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                active.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                if i == 7 {
                    Err(anyhow!("seven"))
                } else {
                    Ok(i * 2)
                }
            }
        })
        .await;
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 3);
        assert_eq!(results[3].as_ref().unwrap(), &6);
        let e = first_error(&results).unwrap().to_string();
        assert!(e.contains("1 of 20 failed") && e.contains("seven"), "{e}");
    }
}
