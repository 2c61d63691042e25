//! The workload, the same for every runtime and run on them in turn (the
//! order flips every round, so neither always goes first): pod and container
//! life-cycle latency, pods started at once, list latency with many
//! containers, memory with many running pods, and the pull of a large image.
//!
//! Every pod carries the label `berth-bench=<run id>` (and the phase it
//! belongs to), so that clean-up removes only what this program made.
//!
//! One file per job: `lifecycle.rs`, `status.rs` (with its CRI clients),
//! `concurrency.rs`, `density.rs` and `scale.rs` (one phase: memory with
//! many pods, then list latency with many containers in them), `image.rs`;
//! `metrics.rs` reads a runtime's Prometheus page and `fields.rs` tells what
//! a list answer is made of. This file holds what they share: the settings,
//! the pods' configs and their clean-up.

mod concurrency;
mod density;
mod fields;
mod image;
mod lifecycle;
mod metrics;
mod scale;
mod status;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use cri_api::v1;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::report::{millis, percentile};
use crate::target::Target;

/// Label on every pod and container this program makes; its value is the run id.
pub const LABEL: &str = "berth-bench";
/// Label naming the phase a pod belongs to.
pub const PHASE: &str = "berth-bench/phase";
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

/// The order in which `n` runtimes take round `round`: a shuffle of its
/// own, the same in every run (Fisher-Yates, drawn from `round`). Over the
/// rounds each runtime takes each place, and follows each other one (the
/// last of a round is followed by the first of the next), about equally
/// often. A rotation did the first but not the second: with three or more
/// slots, one always followed the same one, and what a slot leaves behind
/// (the floor's netns teardown, finished by the kernel after it returns)
/// fell on its follower's time: about 2 ms per pod + container start in
/// an A/B run both ways round, the first column slower either way.
fn order(round: usize, n: usize) -> Vec<usize> {
    // splitmix64: a well-mixed sequence from the round number.
    let mut state = (round as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut slots: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        slots.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    slots
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
pub fn kubelet_namespaces() -> v1::NamespaceOption {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_a_fixed_shuffle_balanced_in_place_and_predecessor() {
        for n in 1..6 {
            for round in 0..50 {
                let mut o = order(round, n);
                assert_eq!(o, order(round, n), "the same in every run");
                o.sort_unstable();
                assert_eq!(o, (0..n).collect::<Vec<_>>(), "a permutation");
            }
        }
        let (n, rounds) = (4, 1200);
        let mut places = vec![vec![0usize; n]; n];
        let mut follows = vec![vec![0usize; n]; n];
        let mut last = None;
        for round in 0..rounds {
            for (place, slot) in order(round, n).into_iter().enumerate() {
                places[slot][place] += 1;
                if let Some(before) = last {
                    follows[slot][before] += 1;
                }
                last = Some(slot);
            }
        }
        // Each place: rounds / n = 300 times; each other runtime right
        // before: rounds * (1/n within a round + 1/n^2 across) = 375 times;
        // both within 25 %.
        for slot in 0..n {
            for k in 0..n {
                assert!((225..=375).contains(&places[slot][k]), "{places:?}");
                if k != slot {
                    assert!((281..=469).contains(&follows[slot][k]), "{follows:?}");
                }
            }
        }
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
