//! `berth-bench churn`: kubelet-like churn against one runtime, for the
//! endurance test (#28): pod and container life cycles one after another
//! and a few at a time, each as kubelet runs it (RunPodSandbox,
//! PodSandboxStatus, CreateContainer, StartContainer, ContainerStatus, an
//! ExecSync probe, ReopenContainerLog, now and then an exec session and a
//! port-forward session over the streaming server, StopContainer,
//! RemoveContainer, StopPodSandbox, RemovePodSandbox; every fourth pod's
//! containers share its PID namespace, so it runs a pause), while a relist
//! (ListPodSandbox + ListContainers) runs every second, the stats calls and
//! kubelet's health calls (Status, ImageFsInfo) every tenth, and a
//! GetContainerEvents subscriber (kubelet's evented PLEG) reads every event.
//!
//! The daemon's RSS, anonymous RSS, open fds and threads (and the shims
//! left) are sampled every few cycles into a CSV. The baseline is taken
//! after the warm-up and a quiet pause (the relist goes on, the tokio
//! blocking pool's idle threads have exited), the end after the same quiet
//! pause: the growth is end − baseline, and the slope is the least-squares
//! fit of every sample from the baseline on. Every call must be answered
//! (an error or a call over its time limit is a failure); the verdict is
//! in the JSON summary and the exit code.

use berth_lock::MutexExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use berth_streaming::client::{
    CommandOptions, RemoteCommand, SpdyPortForward, Transport, WsPortForward,
};
use cri_api::v1;
use serde::Serialize;

use crate::target::Target;
use crate::workload::{kubelet_namespaces, LABEL, PHASE};

mod measure;

use measure::{problems, settle, summarize, Csv, Marks, Sample, Sampler, Summary};

/// The port the containers' server listens on, for port-forward sessions.
const PORT: u16 = 8080;
/// What it answers on each connection, and what the exec session prints.
const HELLO: &str = "churn";
/// Bound of a streaming session (and of waiting for the server to listen).
const SESSION_LIMIT: Duration = Duration::from_secs(30);
/// Grace period of StopContainer; the container's shell exits on SIGTERM at once.
const STOP_TIMEOUT_SECS: i64 = 10;
/// Failure messages kept for the summary (all are counted).
const KEPT_FAILURES: usize = 20;

/// How much churn, and of what kind.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Measured life cycles (after the warm-up).
    pub cycles: usize,
    /// Life cycles before the baseline.
    pub warmup: usize,
    /// A sample every this many life cycles.
    pub sample_every: usize,
    /// Life cycles run at once in a concurrent round.
    pub batch: usize,
    /// Every this many rounds one is concurrent (0: never).
    pub concurrent_every: usize,
    /// An exec session every this many life cycles (0: never).
    pub exec_every: usize,
    /// A port-forward session every this many life cycles (0: never).
    pub port_forward_every: usize,
    /// Every this many life cycles the pod shares one PID namespace
    /// (`shareProcessNamespace`: a pod with a pause process); 0: never.
    pub pause_every: usize,
    /// Time between relists.
    #[serde(serialize_with = "secs")]
    pub relist_every: Duration,
    /// Quiet pause before the baseline and the end samples.
    #[serde(serialize_with = "secs")]
    pub quiet: Duration,
    /// How long, after the end sample, fds and threads may take to come
    /// back to the baseline.
    #[serde(serialize_with = "secs")]
    pub settle: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The pods' and containers' configs.
pub struct Job {
    pub image: String,
    pub cgroup_parent: String,
    /// Pod log directories go below it (each removed after its pod).
    pub log_dir: PathBuf,
    pub run_id: String,
}

/// Counts shared by the cycles and the relist.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    exec_sessions: AtomicU64,
    port_forwards: AtomicU64,
    relists: AtomicU64,
    events: AtomicU64,
    failures: AtomicU64,
    messages: Mutex<Vec<String>>,
}

impl Tally {
    fn call(&self, n: u64) {
        self.calls.fetch_add(n, Ordering::Relaxed);
    }

    fn fail(&self, what: &str, e: &anyhow::Error) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut m = self.messages.lock_unpoisoned();
        if m.len() < KEPT_FAILURES {
            m.push(format!("{what}: {e:#}"));
        }
        eprintln!("churn: {what}: {e:#}");
    }
}

impl Job {
    fn labels(&self) -> std::collections::HashMap<String, String> {
        [
            (LABEL.to_string(), self.run_id.clone()),
            (PHASE.to_string(), "churn".to_string()),
        ]
        .into()
    }

    fn pod_dir(&self, name: &str) -> PathBuf {
        self.log_dir.join(name)
    }

    /// A pod as kubelet asks for one (its log directory made first); one
    /// whose containers share a PID namespace with `shared_pid`.
    fn pod_config(&self, name: &str, shared_pid: bool) -> Result<v1::PodSandboxConfig> {
        let namespaces = v1::NamespaceOption {
            pid: if shared_pid {
                v1::NamespaceMode::Pod as i32
            } else {
                v1::NamespaceMode::Container as i32
            },
            ..kubelet_namespaces()
        };
        let logs = self.pod_dir(name);
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("making log dir {}", logs.display()))?;
        Ok(v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: name.to_string(),
                namespace: "berth-churn".into(),
                uid: format!("{}-{name}", self.run_id),
                attempt: 0,
            }),
            hostname: name.to_string(),
            log_directory: logs.display().to_string(),
            labels: self.labels(),
            annotations: [
                ("kubernetes.io/config.source".to_string(), "api".to_string()),
                ("kubernetes.io/config.seen".to_string(), self.run_id.clone()),
            ]
            .into(),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A container that serves [`PORT`] (one answer per connection) and
    /// exits at once on SIGTERM; in its pod's PID namespace with `shared_pid`.
    fn container_config(&self, shared_pid: bool) -> v1::ContainerConfig {
        let namespaces = v1::NamespaceOption {
            pid: if shared_pid {
                v1::NamespaceMode::Pod as i32
            } else {
                v1::NamespaceMode::Container as i32
            },
            ..kubelet_namespaces()
        };
        let script =
            format!("trap 'exit 0' TERM; nc -ll -p {PORT} -e echo {HELLO} & sleep 3600 & wait");
        v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            image: Some(v1::ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: vec!["sh".into(), "-c".into(), script],
            log_path: "app/0.log".into(),
            labels: self.labels(),
            linux: Some(v1::LinuxContainerConfig {
                security_context: Some(v1::LinuxContainerSecurityContext {
                    namespace_options: Some(namespaces),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// One life cycle, kubelet's way; the pod is removed again on failure.
async fn cycle(t: &Target, job: &Job, s: &Settings, tally: &Tally, i: usize) -> Result<()> {
    let name = format!("churn-{i}");
    let shared_pid = s.pause_every > 0 && i % s.pause_every == s.pause_every - 1;
    let pod_config = job.pod_config(&name, shared_pid)?;
    tally.call(1);
    let pod = t.run_pod(&pod_config).await?;
    let result = async {
        tally.call(1);
        let state = t.pod_state(&pod).await?;
        if state != v1::PodSandboxState::SandboxReady as i32 {
            bail!("pod {pod} is not ready after RunPodSandbox: state {state}");
        }
        tally.call(2);
        let config = job.container_config(shared_pid);
        let id = t.create_container(&pod, &config, &pod_config).await?;
        t.start_container(&id).await?;
        tally.call(1);
        let state = t.container_state(&id).await?;
        if state != v1::ContainerState::ContainerRunning as i32 {
            bail!("container {id} is not running after start: state {state}");
        }
        // A liveness probe, and kubelet's log rotation.
        tally.call(2);
        t.exec_sync(&id, &["true"]).await?;
        t.reopen_container_log(&id).await?;
        if s.exec_every > 0 && i % s.exec_every == 0 {
            exec_session(t, tally, &id, i).await?;
        }
        if s.port_forward_every > 0 && i % s.port_forward_every == s.port_forward_every / 2 {
            port_forward_session(t, tally, &pod, i).await?;
        }
        tally.call(5);
        t.container_state(&id).await?;
        t.stop_container(&id, STOP_TIMEOUT_SECS).await?;
        t.remove_container(&id).await?;
        t.stop_pod(&pod).await?;
        t.remove_pod(&pod).await
    }
    .await;
    if result.is_err() {
        let _ = t.stop_pod(&pod).await;
        let _ = t.remove_pod(&pod).await;
    }
    let _ = std::fs::remove_dir_all(job.pod_dir(&name));
    result.with_context(|| format!("life cycle {i} (pod {pod})"))
}

/// An exec of `echo` over SPDY or WebSocket (alternately), as `kubectl exec` makes.
async fn exec_session(t: &Target, tally: &Tally, id: &str, i: usize) -> Result<()> {
    tally.call(1);
    let url = t.exec_url(id, &["echo", HELLO]).await?;
    let (transport, protocol) = if (i / 2) % 2 == 0 {
        (Transport::Spdy, "v4.channel.k8s.io")
    } else {
        (Transport::WebSocket, "v5.channel.k8s.io")
    };
    let opts = CommandOptions {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let rc = RemoteCommand::connect(&url, transport, opts, &[protocol])
        .await
        .map_err(|e| anyhow!("exec session ({protocol}): connecting: {e}"))?;
    let done = rc
        .finish(SESSION_LIMIT)
        .await
        .map_err(|e| anyhow!("exec session ({protocol}): {e}"))?;
    tally.exec_sessions.fetch_add(1, Ordering::Relaxed);
    let out = String::from_utf8_lossy(&done.stdout);
    if out != format!("{HELLO}\n") || done.exit_code() != Some(0) {
        bail!(
            "exec session ({protocol}): stdout {out:?}, status {}",
            String::from_utf8_lossy(&done.status)
        );
    }
    Ok(())
}

/// A port-forward to [`PORT`] in the pod over SPDY or WebSocket
/// (alternately); asked again until the container's server listens.
async fn port_forward_session(t: &Target, tally: &Tally, pod: &str, i: usize) -> Result<()> {
    let deadline = Instant::now() + SESSION_LIMIT;
    loop {
        tally.call(1);
        let got = if (i / 2) % 2 == 0 {
            let url = t.port_forward_url(pod, &[]).await?;
            let mut pf = SpdyPortForward::connect(&url)
                .await
                .map_err(|e| anyhow!("port-forward (SPDY): connecting: {e}"))?;
            let conn = pf
                .open(PORT)
                .await
                .map_err(|e| anyhow!("port-forward (SPDY): opening: {e}"))?;
            conn.finish(SESSION_LIMIT)
                .await
                .map_err(|e| anyhow!("port-forward (SPDY): {e}"))?
        } else {
            let url = t.port_forward_url(pod, &[i32::from(PORT)]).await?;
            let pf = WsPortForward::connect(&url, &["portforward.k8s.io"], &[PORT])
                .await
                .map_err(|e| anyhow!("port-forward (WebSocket): connecting: {e}"))?;
            let mut got = pf
                .finish(SESSION_LIMIT)
                .await
                .map_err(|e| anyhow!("port-forward (WebSocket): {e}"))?;
            got.pop()
                .ok_or_else(|| anyhow!("port-forward (WebSocket): no connection"))?
        };
        tally.port_forwards.fetch_add(1, Ordering::Relaxed);
        if got.error.is_empty() {
            let data = String::from_utf8_lossy(&got.data);
            if data != format!("{HELLO}\n") {
                bail!("port-forward: got {data:?}");
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("port-forward: the server never answered: {}", got.error);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Relists every `every` (and asks the stats every tenth time) until `stop`.
async fn relister(
    t: Target,
    tally: Arc<Tally>,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        n += 1;
        tally.call(2);
        if let Err(e) = t.relist().await {
            tally.fail("relist", &e);
        }
        tally.relists.fetch_add(1, Ordering::Relaxed);
        if n % 10 == 0 {
            tally.call(4);
            if let Err(e) = t.list_stats().await {
                tally.fail("stats", &e);
            }
            if let Err(e) = t.health().await {
                tally.fail("Status/ImageFsInfo", &e);
            }
        }
    }
}

/// Reads the container events until `stop` (an error ends the stream: a
/// failure, and a new subscription, as kubelet makes).
async fn subscriber(t: Target, tally: Arc<Tally>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        tally.call(1);
        let mut stream = match t.container_events().await {
            Ok(s) => s,
            Err(e) => {
                tally.fail("GetContainerEvents", &e);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        loop {
            let item = tokio::select! {
                item = stream.message() => item,
                _ = stop.changed() => return,
            };
            match item {
                Ok(Some(_)) => {
                    tally.events.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None) => {
                    tally.fail("GetContainerEvents", &anyhow!("the stream ended"));
                    break;
                }
                Err(s) => {
                    let e = anyhow!("{:?}: {}", s.code(), s.message());
                    tally.fail("GetContainerEvents", &e);
                    break;
                }
            }
        }
    }
}

/// Runs the churn; the summary says whether it passed (`problems`).
pub async fn run(
    t: &Target,
    job: &Job,
    s: &Settings,
    csv: Option<&Path>,
    max_rss_growth_kib: Option<u64>,
) -> Result<Summary> {
    let tally = Arc::new(Tally::default());
    let mut sampler = Sampler {
        t,
        started: Instant::now(),
        csv: Csv::create(csv)?,
        samples: Vec::new(),
    };
    let start = sampler.take(0)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let relist = tokio::spawn(relister(
        t.clone(),
        tally.clone(),
        s.relist_every,
        stop_rx.clone(),
    ));
    let events = tokio::spawn(subscriber(t.clone(), tally.clone(), stop_rx));

    let (done, baseline) = churn(job, s, &tally, &mut sampler).await?;
    let baseline = match baseline {
        Some(b) => b,
        None => {
            tokio::time::sleep(s.quiet).await;
            sampler.take(done)?
        }
    };
    let end = settle(&mut sampler, s, done, &baseline).await?;
    let _ = stop_tx.send(true);
    let _ = relist.await;
    let _ = events.await;

    let marks = Marks {
        start,
        baseline,
        end,
    };
    let mut summary = summarize(&sampler, s, &tally, done, marks, max_rss_growth_kib);
    summary.problems = problems(&summary);
    Ok(summary)
}

/// Runs the life cycles, in batches now and then, sampling as it goes:
/// how many ran, and the baseline taken after the warm-up (none when there
/// were no cycles after it).
async fn churn(
    job: &Job,
    s: &Settings,
    tally: &Tally,
    sampler: &mut Sampler<'_>,
) -> Result<(usize, Option<Sample>)> {
    let t = sampler.t;
    let total = s.warmup + s.cycles;
    let mut done = 0usize;
    let mut round = 0usize;
    let mut next_sample = s.sample_every.max(1);
    let mut baseline = None;
    let mut last_report = Instant::now();
    while done < total {
        // The baseline: after the warm-up and a quiet pause.
        if baseline.is_none() && done >= s.warmup {
            tokio::time::sleep(s.quiet).await;
            baseline = Some(sampler.take(done)?);
            next_sample = done + s.sample_every.max(1);
        }
        let concurrent = s.concurrent_every > 0
            && s.batch > 1
            && round % s.concurrent_every == s.concurrent_every - 1;
        let n = if concurrent { s.batch } else { 1 }.min(total - done);
        let results = futures_join(
            (done..done + n)
                .map(|i| async move { (i, cycle(t, job, s, tally, i).await) })
                .collect(),
        )
        .await;
        for (i, r) in results {
            if let Err(e) = r {
                tally.fail(&format!("cycle {i}"), &e);
            }
        }
        done += n;
        round += 1;
        if done >= next_sample && done < total {
            sampler.take(done)?;
            next_sample += s.sample_every.max(1);
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            report_progress(sampler, tally, done, total);
        }
    }
    Ok((done, baseline))
}

/// A line on stderr: how far the churn is and how the runtime looks.
fn report_progress(sampler: &Sampler<'_>, tally: &Tally, done: usize, total: usize) {
    let x = sampler.samples.last().copied().unwrap_or_default();
    eprintln!(
        "churn: {done}/{total} life cycles, {:.0} s, RSS {} KiB, fds {}, threads {}, failures {}",
        sampler.started.elapsed().as_secs_f64(),
        x.rss_kib,
        x.fds,
        x.threads,
        tally.failures.load(Ordering::Relaxed)
    );
}

/// Runs every future at once; their outputs in order.
async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn futures_join_keeps_order() {
        let futs: Vec<_> = (0..4u64)
            .map(|i| async move {
                tokio::time::sleep(Duration::from_millis(20 - 5 * i)).await;
                i
            })
            .collect();
        assert_eq!(futures_join(futs).await, vec![0, 1, 2, 3]);
    }
}
