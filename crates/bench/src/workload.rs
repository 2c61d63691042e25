//! The workload, the same for every runtime and run on them in turn (the
//! order flips every round, so neither always goes first): pod and container
//! life-cycle latency, pods started at once, list latency with many
//! containers, memory with many running pods, and the pull of a large image.
//!
//! Every pod carries the label `berth-bench=<run id>` (and the phase it
//! belongs to), so that clean-up removes only what this program made.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cri_api::v1;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::memory::{self, Mem, PeakRss};
use crate::report::{
    histogram_buckets, histogram_quantile, millis, percentile, series_by_label, Report,
};
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
    /// `host:port` of a runtime's Prometheus endpoint, by target name
    /// (berth's `[metrics] address`): where the server-side times come from.
    pub metrics: HashMap<String, String>,
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
        let before = self.scrape_all(targets).await;
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
        let after = self.scrape_all(targets).await;
        for (k, step) in LIFECYCLE_STEPS.iter().enumerate() {
            for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                let values = (0..n).map(|ti| stat_ms(&samples[ti][k], p)).collect();
                report.add("lifecycle", &format!("{step} {stat}"), "ms", values);
            }
        }
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
    }

    /// The six calls kubelet makes most, answered from memory (and Version,
    /// the floor of any call): each timed
    /// from the client, and (where the runtime exposes berth's histogram)
    /// its server-side median, from the histogram scraped before and after
    /// the timed calls. One pod with a running container on each runtime.
    pub async fn status(self: &Arc<Self>, targets: &[Target], s: &Settings, report: &mut Report) {
        let n = targets.len();
        let mut setups = Vec::new();
        for t in targets {
            let setup = async {
                let clients = Clients::connect(&t.spec.socket).await?;
                let config = self.pod_config(t, "status", "status")?;
                let (pod, _) = self.pod_with_container(t, config, "status").await?;
                let container = clients.container_of(&pod).await?;
                anyhow::Ok((clients, pod, container))
            }
            .await;
            setups.push(match setup {
                Ok(s) => Some(s),
                Err(e) => {
                    report.error(t.name(), "status setup", &e);
                    None
                }
            });
        }
        let calls = STATUS_CALLS.len();
        let mut client = vec![vec![Vec::new(); n]; calls];
        let mut server: Vec<Vec<Option<f64>>> = vec![vec![None; n]; calls];
        for (k, call) in STATUS_CALLS.iter().enumerate() {
            for ti in order(k, n) {
                let (t, Some((clients, pod, container))) = (&targets[ti], &setups[ti]) else {
                    continue;
                };
                let metrics = self.metrics.get(t.name());
                let measured = async {
                    for _ in 0..STATUS_WARMUP {
                        clients.call(call, pod, container, &self.image).await?;
                    }
                    let before = match metrics {
                        Some(addr) => Some(rpc_buckets(&scrape(addr).await?, call)),
                        None => None,
                    };
                    let mut samples = Vec::with_capacity(s.list_iterations);
                    for _ in 0..s.list_iterations {
                        let start = Instant::now();
                        clients.call(call, pod, container, &self.image).await?;
                        samples.push(start.elapsed());
                    }
                    let server = match (metrics, before) {
                        (Some(addr), Some(before)) => {
                            let after = rpc_buckets(&scrape(addr).await?, call);
                            histogram_quantile(&before, &after, 0.5)
                        }
                        _ => None,
                    };
                    anyhow::Ok((samples, server))
                }
                .await;
                match measured {
                    Ok((samples, median)) => {
                        client[k][ti] = samples;
                        server[k][ti] = median;
                    }
                    Err(e) => report.error(t.name(), call, &e),
                }
            }
        }
        for (k, call) in STATUS_CALLS.iter().enumerate() {
            for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                let values = client[k].iter().map(|v| stat_ms(v, p)).collect();
                report.add("status", &format!("{call} {stat}"), "ms", values);
            }
            report.add_partial(
                "status",
                &format!("{call} server-side median (metrics histogram)"),
                "µs",
                server[k].iter().map(|v| v.map(|secs| secs * 1e6)).collect(),
            );
        }
        for t in targets {
            if let Err(e) = self.teardown(t, Some("status")).await {
                report.error(t.name(), "status teardown", &e);
            }
        }
        eprintln!("status: done");
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
            let before = self.scrape_all(targets).await;
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
            let after = self.scrape_all(targets).await;
            let running = pods.iter().map(Vec::len).max().unwrap_or(0);
            for what in ["ListContainers", "ListPodSandbox"] {
                let values = before
                    .iter()
                    .zip(&after)
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
                    &format!("{what}, {want} containers in {running} pods, server-side median (metrics histogram)"),
                    "µs",
                    values,
                );
            }
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
            if round + 1 == s.scales.len() {
                self.answer_fields(targets, &broken, want, running, report)
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
            report.add(
                "scale",
                &format!("daemon RSS, {want} containers in {running} pods"),
                "MiB",
                rss,
            );
            eprintln!("scale: {want} containers done");
        }

        for t in targets {
            if let Err(e) = self.teardown(t, Some("density")).await {
                report.error(t.name(), "density teardown", &e);
            }
        }
    }

    /// The metrics page of every target that has an endpoint (`None`:
    /// none, or it did not answer).
    async fn scrape_all(&self, targets: &[Target]) -> Vec<Option<String>> {
        let mut pages = Vec::new();
        for t in targets {
            pages.push(match self.metrics.get(t.name()) {
                Some(addr) => scrape(addr).await.ok(),
                None => None,
            });
        }
        pages
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

/// The status calls the `status` group times, by their gRPC method names;
/// Version, answered from constants, is the floor of a CRI call (the two
/// gRPC stacks and the socket).
const STATUS_CALLS: [&str; 7] = [
    "Version",
    "ContainerStatus",
    "PodSandboxStatus",
    "ListContainers",
    "ListPodSandbox",
    "ImageStatus",
    "ListImages",
];
/// Untimed calls of each kind before the timed ones.
const STATUS_WARMUP: usize = 5;
/// Time limit of one status call, and of one metrics scrape.
const STATUS_TIMEOUT: Duration = Duration::from_secs(30);
/// A metrics page larger than this is refused.
const SCRAPE_LIMIT: u64 = 8 << 20;
/// berth's RPC latency histogram.
const RPC_HISTOGRAM: &str = "berth_grpc_request_duration_seconds";

/// CRI clients of one runtime of its own (the status group calls more
/// kinds of RPC than [`Target`] offers).
struct Clients {
    runtime: v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    images: v1::image_service_client::ImageServiceClient<tonic::transport::Channel>,
}

impl Clients {
    async fn connect(socket: &std::path::Path) -> Result<Clients> {
        let path = socket.to_path_buf();
        let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")?
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .with_context(|| format!("connecting to {}", socket.display()))?;
        Ok(Clients {
            runtime: v1::runtime_service_client::RuntimeServiceClient::new(channel.clone()),
            images: v1::image_service_client::ImageServiceClient::new(channel),
        })
    }

    /// The id of the (one) container of pod `pod`.
    async fn container_of(&self, pod: &str) -> Result<String> {
        let filter = v1::ContainerFilter {
            pod_sandbox_id: pod.to_string(),
            ..Default::default()
        };
        let req = v1::ListContainersRequest {
            filter: Some(filter),
        };
        let r = bounded(self.runtime.clone().list_containers(req)).await?;
        r.containers
            .into_iter()
            .next()
            .map(|c| c.id)
            .ok_or_else(|| anyhow!("pod {pod} has no container"))
    }

    /// One `call` (of [`STATUS_CALLS`]) about `pod`, `container`, `image`,
    /// unfiltered for the lists, not verbose; checks that it found its object.
    async fn call(&self, call: &str, pod: &str, container: &str, image: &str) -> Result<()> {
        let found = match call {
            "Version" => {
                let req = v1::VersionRequest {
                    version: "v1".into(),
                };
                let r = bounded(self.runtime.clone().version(req)).await?;
                !r.runtime_name.is_empty()
            }
            "ContainerStatus" => {
                let req = v1::ContainerStatusRequest {
                    container_id: container.to_string(),
                    verbose: false,
                };
                let r = bounded(self.runtime.clone().container_status(req)).await?;
                r.status.is_some()
            }
            "PodSandboxStatus" => {
                let req = v1::PodSandboxStatusRequest {
                    pod_sandbox_id: pod.to_string(),
                    verbose: false,
                };
                let r = bounded(self.runtime.clone().pod_sandbox_status(req)).await?;
                r.status.is_some()
            }
            "ListContainers" => {
                let req = v1::ListContainersRequest { filter: None };
                let r = bounded(self.runtime.clone().list_containers(req)).await?;
                !r.containers.is_empty()
            }
            "ListPodSandbox" => {
                let req = v1::ListPodSandboxRequest { filter: None };
                let r = bounded(self.runtime.clone().list_pod_sandbox(req)).await?;
                !r.items.is_empty()
            }
            "ImageStatus" => {
                let req = v1::ImageStatusRequest {
                    image: Some(v1::ImageSpec {
                        image: image.to_string(),
                        ..Default::default()
                    }),
                    verbose: false,
                };
                let r = bounded(self.images.clone().image_status(req)).await?;
                r.image.is_some()
            }
            "ListImages" => {
                let req = v1::ListImagesRequest { filter: None };
                let r = bounded(self.images.clone().list_images(req)).await?;
                !r.images.is_empty()
            }
            other => return Err(anyhow!("no status call {other}")),
        };
        if !found {
            return Err(anyhow!("{call}: empty answer"));
        }
        Ok(())
    }

    /// One unfiltered ListPodSandbox and ListContainers answer.
    async fn relist(&self) -> Result<(v1::ListPodSandboxResponse, v1::ListContainersResponse)> {
        let pods = bounded(
            self.runtime
                .clone()
                .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None }),
        )
        .await?;
        let containers = bounded(
            self.runtime
                .clone()
                .list_containers(v1::ListContainersRequest { filter: None }),
        )
        .await?;
        Ok((pods, containers))
    }
}

/// Bounds a status call by [`STATUS_TIMEOUT`].
async fn bounded<T>(
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(STATUS_TIMEOUT, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(anyhow!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err(anyhow!("no answer in {STATUS_TIMEOUT:?}")),
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

/// The buckets of berth's RPC histogram for the successful calls of `method`.
fn rpc_buckets(page: &str, method: &str) -> Vec<(f64, f64)> {
    histogram_buckets(page, RPC_HISTOGRAM, &[("method", method), ("code", "OK")])
}

/// `GET /metrics` from `addr` (`host:port`), plain HTTP/1.1, bounded in
/// time and size; the body.
async fn scrape(addr: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(SCRAPE_LIMIT + 1)
            .read_to_end(&mut raw)
            .await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(STATUS_TIMEOUT, fetch)
        .await
        .map_err(|_| anyhow!("metrics {addr}: no answer in {STATUS_TIMEOUT:?}"))?
        .with_context(|| format!("metrics {addr}"))?;
    if raw.len() as u64 > SCRAPE_LIMIT {
        return Err(anyhow!("metrics {addr}: page over {SCRAPE_LIMIT} bytes"));
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("metrics {addr}: no HTTP header end"))?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(anyhow!("metrics {addr}: {status}"));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(anyhow!("metrics {addr}: chunked answers are not read"));
    }
    Ok(body.to_string())
}

/// A field's name and a copy of an entry with only that field.
type Field<T> = (&'static str, fn(&T) -> T);

/// Encoded bytes of each field of the entries of a ListContainers answer,
/// summed over the entries (each field with its tag and length prefix):
/// which fields make one runtime's answer larger than another's.
pub fn container_field_bytes(list: &v1::ListContainersResponse) -> Vec<(&'static str, usize)> {
    use prost::Message;
    type C = v1::Container;
    let fields: [Field<C>; 10] = [
        ("id", |c| C {
            id: c.id.clone(),
            ..C::default()
        }),
        ("pod_sandbox_id", |c| C {
            pod_sandbox_id: c.pod_sandbox_id.clone(),
            ..C::default()
        }),
        ("metadata", |c| C {
            metadata: c.metadata.clone(),
            ..C::default()
        }),
        ("image", |c| C {
            image: c.image.clone(),
            ..C::default()
        }),
        ("image_ref", |c| C {
            image_ref: c.image_ref.clone(),
            ..C::default()
        }),
        ("image_id", |c| C {
            image_id: c.image_id.clone(),
            ..C::default()
        }),
        ("state", |c| C {
            state: c.state,
            ..C::default()
        }),
        ("created_at", |c| C {
            created_at: c.created_at,
            ..C::default()
        }),
        ("labels", |c| C {
            labels: c.labels.clone(),
            ..C::default()
        }),
        ("annotations", |c| C {
            annotations: c.annotations.clone(),
            ..C::default()
        }),
    ];
    field_bytes(&fields, &list.containers, list.encoded_len())
}

/// [`container_field_bytes`] for a ListPodSandbox answer.
pub fn sandbox_field_bytes(list: &v1::ListPodSandboxResponse) -> Vec<(&'static str, usize)> {
    use prost::Message;
    type P = v1::PodSandbox;
    let fields: [Field<P>; 7] = [
        ("id", |p| P {
            id: p.id.clone(),
            ..P::default()
        }),
        ("metadata", |p| P {
            metadata: p.metadata.clone(),
            ..P::default()
        }),
        ("state", |p| P {
            state: p.state,
            ..P::default()
        }),
        ("created_at", |p| P {
            created_at: p.created_at,
            ..P::default()
        }),
        ("labels", |p| P {
            labels: p.labels.clone(),
            ..P::default()
        }),
        ("annotations", |p| P {
            annotations: p.annotations.clone(),
            ..P::default()
        }),
        ("runtime_handler", |p| P {
            runtime_handler: p.runtime_handler.clone(),
            ..P::default()
        }),
    ];
    field_bytes(&fields, &list.items, list.encoded_len())
}

/// Each field's encoded bytes summed over `entries`, then the `whole`
/// answer's.
fn field_bytes<T: prost::Message>(
    fields: &[Field<T>],
    entries: &[T],
    whole: usize,
) -> Vec<(&'static str, usize)> {
    let mut out: Vec<(&'static str, usize)> = fields
        .iter()
        .map(|(name, only)| (*name, entries.iter().map(|e| only(e).encoded_len()).sum()))
        .collect();
    out.push(("whole answer", whole));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_fields_add_up_to_the_answer() {
        let c = v1::Container {
            id: "a".repeat(64),
            image_id: "sha256:".to_string() + &"b".repeat(64),
            labels: [("k".to_string(), "v".to_string())].into(),
            state: 1,
            ..Default::default()
        };
        let list = v1::ListContainersResponse {
            containers: vec![c.clone(), c],
        };
        let fields: HashMap<_, _> = container_field_bytes(&list).into_iter().collect();
        // A tag byte, a length byte, the 71 bytes: twice.
        assert_eq!(fields["image_id"], 2 * 73);
        assert_eq!(fields["id"], 2 * 66);
        assert_eq!(fields["state"], 2 * 2);
        assert_eq!(fields["annotations"], 0);
        let parts: usize = fields
            .iter()
            .filter(|(k, _)| **k != "whole answer")
            .map(|(_, v)| v)
            .sum();
        // Each entry adds its own tag and length prefix (1 + 2 bytes: an
        // entry is over 127 bytes).
        assert_eq!(parts + 2 * 3, fields["whole answer"]);
    }

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
