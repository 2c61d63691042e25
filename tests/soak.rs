//! Soak: concurrent clients (several pods and containers in flight at
//! once, StopPodSandbox/RemovePodSandbox racing CreateContainer and
//! StartContainer, duplicate RunPodSandbox calls, clients that give up
//! early) while the daemon is SIGKILLed and restarted at random and the CNI
//! plugin fails at ADD or DEL for a while now and then. At the end
//! every object is whole or gone, and once everything is removed nothing is
//! leaked (mounts, netns, processes, IPs, dirs, records). Bounded in time,
//! seeded (`BERTH_SOAK_SEED`) so a failure reproduces; prints its counts.
//! Root only.

use crate::common;
use crate::common::faults;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cri::Cri;
use common::pods::pod_config;
use common::registry;
use cri_api::v1;
use faults::{Lcg, Rig};
use tonic::Code;

/// How long the workers run (`BERTH_SOAK_SECS` to change it).
const SOAK_SECS: u64 = 75;
/// Concurrent clients.
const WORKERS: u64 = 4;
/// Any single call longer than this is a hang (a bug).
const CALL_LIMIT: Duration = Duration::from_secs(40);

#[derive(Default)]
struct Counts {
    cycles: AtomicU64,
    pods: AtomicU64,
    containers_created: AtomicU64,
    containers_started: AtomicU64,
    races: AtomicU64,
    race_refusals: AtomicU64,
    duplicates: AtomicU64,
    abandoned: AtomicU64,
    kills: AtomicU64,
    errors: AtomicU64,
    hangs: AtomicU64,
    wedged: AtomicU64,
    /// CNI faults armed, and the calls that failed of them.
    faults: AtomicU64,
    injected_failures: AtomicU64,
    /// Failed calls by code.
    codes: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Counts {
    fn failed(&self, code: Code) {
        let mut codes = self.codes.lock().unwrap();
        *codes.entry(format!("{code:?}")).or_default() += 1;
    }
}

fn add(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A client, or None while the daemon is down.
async fn client(socket: &Path) -> Option<Cri> {
    match tokio::time::timeout(Duration::from_secs(2), Cri::connect(socket)).await {
        Ok(Ok(c)) => Some(c),
        _ => None,
    }
}

/// One call (on a connection of its own) with a hang limit: its result, or
/// the code of its failure (Unavailable while the daemon is down).
async fn call<T, F, Fut>(counts: &Counts, socket: &Path, f: F) -> Result<T, Code>
where
    F: FnOnce(Cri) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let Some(cri) = client(socket).await else {
        return Err(Code::Unavailable);
    };
    match tokio::time::timeout(CALL_LIMIT, f(cri)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(s)) => {
            // Unknown "transport error": the daemon was killed mid-call.
            if s.code() == Code::Internal && s.message().contains("injected CNI failure") {
                add(&counts.injected_failures);
                return Err(s.code());
            }
            counts.failed(s.code());
            if s.code() == Code::Internal {
                eprintln!("soak: {:?}: {}", s.code(), s.message());
            }
            Err(s.code())
        }
        Err(_) => {
            add(&counts.hangs);
            Err(Code::DeadlineExceeded)
        }
    }
}

async fn run_pod(
    counts: &Counts,
    socket: &Path,
    config: &v1::PodSandboxConfig,
    deadline: Duration,
) -> Result<String, Code> {
    call(counts, socket, |cri| async move {
        cri.with_deadline(deadline).run_pod(config).await
    })
    .await
}

async fn create_and_start(
    counts: &Counts,
    socket: &Path,
    pod: &str,
    pod_cfg: &v1::PodSandboxConfig,
    name: &str,
) -> Result<String, Code> {
    let config = common::cri::container(name, &["sleep", "1000"]);
    let id = call(counts, socket, |cri| async move {
        cri.create_container(pod, pod_cfg, config).await
    })
    .await?;
    add(&counts.containers_created);
    let started = &id;
    call(counts, socket, |cri| async move {
        cri.start_container(started).await
    })
    .await?;
    add(&counts.containers_started);
    Ok(id)
}

async fn stop_and_remove(counts: &Counts, socket: &Path, pod: &str) -> Result<(), Code> {
    call(counts, socket, |cri| async move { cri.stop_pod(pod).await }).await?;
    call(
        counts,
        socket,
        |cri| async move { cri.remove_pod(pod).await },
    )
    .await
}

/// The pods labelled `app=<name>`, as kubelet finds what its abandoned
/// calls made.
async fn pods_named(counts: &Counts, socket: &Path, name: &str) -> Result<Vec<String>, Code> {
    let filter = v1::PodSandboxFilter {
        label_selector: [("app".to_string(), name.to_string())].into(),
        ..Default::default()
    };
    let pods = call(counts, socket, |cri| async move {
        cri.list_pods(Some(filter)).await
    })
    .await?;
    Ok(pods.into_iter().map(|p| p.id).collect())
}

/// Removes every pod of `name` (and `known`), retrying through restarts;
/// false if that did not converge (a wedged pod).
async fn teardown(counts: &Counts, socket: &Path, name: &str, known: Option<&str>) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut ids = match pods_named(counts, socket, name).await {
            Ok(ids) => ids,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        if let Some(k) = known {
            if !ids.iter().any(|i| i == k) {
                ids.push(k.to_string());
            }
        }
        let mut ok = true;
        for id in &ids {
            if stop_and_remove(counts, socket, id).await.is_err() {
                ok = false;
            }
        }
        if ok && pods_named(counts, socket, name).await == Ok(Vec::new()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    false
}

/// One client's life: pods made, raced, torn down, until `stop`.
async fn worker(
    w: u64,
    seed: u64,
    socket: PathBuf,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let mut rng = Lcg(seed ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut n = 0;
    // The last cycle's pod is left for the final whole-or-gone check.
    let mut kept = Vec::new();
    loop {
        // Once told to stop: one more cycle, whose pod is kept.
        let last = stop.load(Ordering::SeqCst);
        n += 1;
        add(&counts.cycles);
        let name = format!("soak-w{w}-{n}");
        let pod_cfg = pod_config(&name);
        // A client that gives up early (1 in 6), then retries as kubelet does.
        let pod = if rng.below(6) == 0 {
            add(&counts.abandoned);
            let deadline = Duration::from_millis(20 + rng.below(200));
            match run_pod(&counts, &socket, &pod_cfg, deadline).await {
                Ok(id) => Ok(id),
                Err(_) => run_pod(&counts, &socket, &pod_cfg, Duration::from_secs(30)).await,
            }
        } else if rng.below(5) == 0 {
            // Two equal calls at once: one id, or AlreadyExists for one.
            add(&counts.duplicates);
            let (a, b) = tokio::join!(
                run_pod(&counts, &socket, &pod_cfg, Duration::from_secs(30)),
                run_pod(&counts, &socket, &pod_cfg, Duration::from_secs(30))
            );
            if let (Ok(a), Ok(b)) = (&a, &b) {
                assert_eq!(a, b, "{name}: two pods for one name");
            }
            for r in [&a, &b] {
                if let Err(code) = r {
                    assert!(
                        matches!(
                            code,
                            // Internal: an injected CNI failure (others
                            // are counted and fail the soak at the end).
                            Code::AlreadyExists
                                | Code::Unavailable
                                | Code::Unknown
                                | Code::Internal
                        ),
                        "{name}: duplicate RunPodSandbox: {code:?}"
                    );
                }
            }
            a.or(b)
        } else {
            run_pod(&counts, &socket, &pod_cfg, Duration::from_secs(30)).await
        };
        let pod = match pod {
            Ok(id) => {
                add(&counts.pods);
                Some(id)
            }
            Err(_) => {
                add(&counts.errors);
                None
            }
        };
        if let Some(pod) = &pod {
            let race = rng.below(3) == 0;
            let delay = Duration::from_millis(rng.below(150));
            let containers = async {
                let a = create_and_start(&counts, &socket, pod, &pod_cfg, "a").await;
                let b = create_and_start(&counts, &socket, pod, &pod_cfg, "b").await;
                [a, b]
            };
            let racer = async {
                if race {
                    add(&counts.races);
                    tokio::time::sleep(delay).await;
                    let _ = stop_and_remove(&counts, &socket, pod).await;
                }
            };
            let (results, ()) = tokio::join!(containers, racer);
            for r in results {
                match r {
                    Ok(_) => {}
                    Err(Code::NotFound | Code::FailedPrecondition) if race => {
                        add(&counts.race_refusals)
                    }
                    Err(_) => add(&counts.errors),
                }
            }
        }
        if last {
            kept.push(name);
            break;
        }
        if !teardown(&counts, &socket, &name, pod.as_deref()).await {
            add(&counts.wedged);
            eprintln!("soak: {name} did not tear down");
        }
    }
    kept
}

/// Every listed object is whole: a ready pod has its netns and its IP
/// lease, every container belongs to a listed pod, a running one answers
/// exec, a created one has its rootfs mounted.
async fn assert_whole(daemon: &common::Daemon, rig: &faults::Rigged) -> (usize, usize) {
    let cri = daemon.cri().await;
    let pods = cri.list_pods(None).await.unwrap();
    let leases = rig.leases();
    let mut pod_ids = HashMap::new();
    for p in &pods {
        pod_ids.insert(p.id.clone(), p.state);
        let st = common::cri::pod_status(daemon, &p.id).await;
        if st.state == v1::PodSandboxState::SandboxReady as i32 {
            let netns = daemon.sandbox.path("state/netns").join(&p.id);
            assert!(netns.exists(), "ready pod {} has no netns", p.id);
            let ip = st.network.map(|n| n.ip).unwrap_or_default();
            assert!(
                leases.contains(&ip),
                "ready pod {} has IP {ip:?}, leases {leases:?}",
                p.id
            );
        }
    }
    let containers = cri.list_containers(None).await.unwrap();
    for c in &containers {
        assert!(
            pod_ids.contains_key(&c.pod_sandbox_id),
            "container {} of a pod that is not there ({})",
            c.id,
            c.pod_sandbox_id
        );
        if c.state == v1::ContainerState::ContainerRunning as i32 {
            let out = cri.exec_sync(&c.id, &["true"], 10).await;
            assert!(
                out.as_ref().is_ok_and(|o| o.exit_code == 0),
                "running container {} does not answer: {out:?}",
                c.id
            );
        } else if c.state == v1::ContainerState::ContainerCreated as i32 {
            let paths = common::cri::ContainerPaths::new(daemon, &c.id);
            assert!(
                paths.rootfs_mounted(),
                "created container {} has no rootfs",
                c.id
            );
        }
    }
    (pods.len(), containers.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn soak_concurrent_clients_with_random_kills() {
    require_root!();
    let seed: u64 = std::env::var("BERTH_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261201);
    eprintln!("soak: seed {seed} (BERTH_SOAK_SEED to repeat)");
    let soak = Duration::from_secs(
        std::env::var("BERTH_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(SOAK_SECS),
    );
    let rig = Rig::new();
    let (mut daemon, rig) = rig.start("").await;
    common::cri::pull(&daemon, &registry().busybox()).await;
    let socket = daemon.sandbox.socket();
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            tokio::spawn(worker(
                w,
                seed,
                socket.clone(),
                counts.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let mut rng = Lcg(seed);
    while started.elapsed() < soak {
        let pause = Duration::from_millis(1500 + rng.below(3500));
        tokio::time::sleep(pause).await;
        if started.elapsed() >= soak {
            break;
        }
        // Half the time a CNI fault instead: ADD or DEL fails for a while
        // (the pods it hits must still end whole or gone, never wedged).
        if rng.below(2) == 0 {
            let fault = if rng.below(2) == 0 {
                "fail-ADD"
            } else {
                "fail-DEL"
            };
            rig.arm(fault, "");
            tokio::time::sleep(Duration::from_millis(300 + rng.below(1200))).await;
            rig.heal(fault);
            add(&counts.faults);
            continue;
        }
        // restart() SIGKILLs the daemon, then starts it and waits for it.
        daemon.restart().await;
        add(&counts.kills);
    }
    stop.store(true, Ordering::SeqCst);
    let mut kept = Vec::new();
    for w in workers {
        kept.extend(w.await.unwrap());
    }
    // One last kill, with the kept pods in whatever state they are in.
    daemon.restart().await;
    add(&counts.kills);
    let (pods_left, containers_left) = assert_whole(&daemon, &rig).await;
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "soak: {:?}, seed {seed}: {} cycles, {} pods run, {} containers created, {} started, \
         {} Stop/Remove races ({} creates refused by them), {} duplicate RunPodSandbox, \
         {} abandoned calls, {} daemon SIGKILLs, {} CNI faults ({} calls failed of them), {} other errors, {} hangs, {} wedged; \
         at the end {pods_left} pods and {containers_left} containers, all whole; \
         failed calls by code: {:?}",
        started.elapsed(),
        c(&counts.cycles),
        c(&counts.pods),
        c(&counts.containers_created),
        c(&counts.containers_started),
        c(&counts.races),
        c(&counts.race_refusals),
        c(&counts.duplicates),
        c(&counts.abandoned),
        c(&counts.kills),
        c(&counts.faults),
        c(&counts.injected_failures),
        c(&counts.errors),
        c(&counts.hangs),
        c(&counts.wedged),
        counts.codes.lock().unwrap(),
    );
    assert_eq!(c(&counts.hangs), 0, "calls hung");
    // Races and kills get clear codes (FailedPrecondition, NotFound,
    // AlreadyExists, Unavailable), never Internal: a StartContainer racing
    // StopPodSandbox ran runc against a dead pause before it took the pod's lock.
    let internal = counts.codes.lock().unwrap().get("Internal").copied();
    assert_eq!(internal, None, "calls failed with Internal (see above)");
    assert_eq!(c(&counts.wedged), 0, "pods wedged");
    assert!(c(&counts.pods) > 0 && c(&counts.containers_started) > 0);
    // Remove everything that is left; then nothing may remain.
    let pods = daemon.cri().await.list_pods(None).await.unwrap();
    for p in pods {
        common::cri::remove_pod(&daemon, &p.id).await;
    }
    eprintln!("soak: kept for the final check: {kept:?}");
    faults::assert_clean(&daemon, &rig.net).await;
}
