//! The one layer around every RPC: refuses calls until start-up (recovery)
//! has finished, runs the handler of a call that changes state on its own
//! task so a client that cancels cannot cut the work short (a read-only
//! call runs inline: there is no work to cut short, and a task spawn is
//! most of a status call's cost), answers `DeadlineExceeded` when the client's
//! deadline passes first (the work still runs to its end), logs the call in
//! a span that names the RPC and the ids it touches, and maps the handler's
//! error to a gRPC status.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::FutureExt;
use tokio::time::Instant;
use tonic::{Response, Status};
use tracing::{field, Instrument};

use crate::error::Error;

/// Closed until the daemon has finished starting up; calls get `Unavailable` until then.
#[derive(Debug, Default)]
pub struct Gate(AtomicBool);

impl Gate {
    /// Lets calls through from now on.
    pub fn open(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether calls are let through.
    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The ids a request is about, recorded in the RPC's span.
#[derive(Debug, Default, Clone)]
pub struct Ids {
    pub pod: Option<String>,
    pub container: Option<String>,
    pub image: Option<String>,
}

/// Requests say which ids they touch.
pub trait RequestIds {
    fn ids(&self) -> Ids {
        Ids::default()
    }
}

/// The span of one RPC, naming it and the ids it touches.
fn rpc_span(rpc: &'static str, ids: &Ids) -> tracing::Span {
    let span = tracing::info_span!(
        "rpc",
        rpc,
        pod = field::Empty,
        container = field::Empty,
        image = field::Empty
    );
    if let Some(id) = &ids.pod {
        span.record("pod", id.as_str());
    }
    if let Some(id) = &ids.container {
        span.record("container", id.as_str());
    }
    if let Some(image) = &ids.image {
        span.record("image", image.as_str());
    }
    span
}

/// The RPCs that change nothing: dropping one half-way (its client
/// cancelled) leaves nothing half-done, so they run inline, not on a task
/// of their own. Streams and every call that changes state are not here.
const READ_ONLY: &[&str] = &[
    "Version",
    "Status",
    "RuntimeConfig",
    "PodSandboxStatus",
    "ListPodSandbox",
    "ContainerStatus",
    "ListContainers",
    "ContainerStats",
    "ListContainerStats",
    "PodSandboxStats",
    "ListPodSandboxStats",
    "ListMetricDescriptors",
    "ListPodSandboxMetrics",
    "ImageStatus",
    "ListImages",
    "ImageFsInfo",
];

/// Whether `rpc` runs inline (see [`READ_ONLY`]).
fn is_read_only(rpc: &str) -> bool {
    READ_ONLY.contains(&rpc)
}

/// The read-only RPCs kubelet calls all the time whose handlers log nothing
/// of their own: their span (most of what the layer costs them, as the
/// `fmt` subscriber formats its fields into a string at each call) is made
/// only when the layer's debug lines are on, or when the call is logged
/// (a failure, a passed deadline), so every line is as before.
const QUIET: &[&str] = &[
    "Version",
    "RuntimeConfig",
    "PodSandboxStatus",
    "ListPodSandbox",
    "ContainerStatus",
    "ListContainers",
    "ImageStatus",
    "ListImages",
];

/// Whether `rpc`'s span can wait until something is logged (see [`QUIET`]).
fn span_on_demand(rpc: &str) -> bool {
    QUIET.contains(&rpc) && !tracing::enabled!(tracing::Level::DEBUG)
}

/// Runs `log` in the call's span: the current one, or, for a call that
/// runs without one ([`QUIET`]), one made now.
fn logged(rpc: &'static str, ids: Option<&Ids>, log: impl FnOnce()) {
    match ids {
        Some(ids) => rpc_span(rpc, ids).in_scope(log),
        None => log(),
    }
}

/// Runs one RPC through the layer. With a `deadline` (the client's), the
/// call is answered `DeadlineExceeded` when the body has not finished by
/// then; the body runs on to its end all the same, seeing its client gone.
pub async fn call<T, F>(
    gate: &Gate,
    rpc: &'static str,
    ids: Ids,
    deadline: Option<Instant>,
    body: F,
) -> Result<Response<T>, Status>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Error>> + Send + 'static,
{
    // Without a span of its own, the call keeps its ids for the span of a
    // line it logs.
    let (span, ids) = if span_on_demand(rpc) {
        (tracing::Span::none(), Some(ids))
    } else {
        (rpc_span(rpc, &ids), None)
    };
    async move {
        if !gate.is_open() {
            tracing::debug!("refused: still starting up");
            return Err(Error::Starting.into());
        }
        let started = Instant::now();
        tracing::debug!("call");
        if is_read_only(rpc) {
            // A panic is still the call's Internal error, as on a task.
            let body = std::panic::AssertUnwindSafe(body).catch_unwind().map(|r| {
                r.unwrap_or_else(|_| Err(Error::Internal(format!("{rpc} handler panicked"))))
            });
            let result = match deadline {
                None => body.await,
                Some(deadline) => match tokio::time::timeout_at(deadline, body).await {
                    Ok(result) => result,
                    Err(_) => {
                        crate::counters::rpc_done(
                            rpc,
                            tonic::Code::DeadlineExceeded,
                            started.elapsed(),
                        );
                        logged(rpc, ids.as_ref(), || {
                            tracing::warn!("client's deadline passed: answered DeadlineExceeded")
                        });
                        return Err(Error::DeadlineExceeded(format!(
                            "deadline exceeded: {rpc} did not finish within the client's deadline"
                        ))
                        .into());
                    }
                },
            };
            return answer(rpc, started, result, ids.as_ref());
        }
        crate::counters::change_started();
        // Own task: dropping this future (client cancelled) does not drop
        // the body, which can see its client go (core::caller).
        let (caller, body) = crate::core::caller::track(body);
        let mut task = tokio::spawn(body.in_current_span());
        let joined = match deadline {
            None => (&mut task).await,
            Some(deadline) => match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(joined) => joined,
                Err(_) => {
                    // Dropped unanswered: the body sees its client gone.
                    drop(caller);
                    return Err(past_deadline(rpc, started, task));
                }
            },
        };
        caller.answered();
        let result =
            joined.unwrap_or_else(|e| Err(Error::Internal(format!("{rpc} handler failed: {e}"))));
        answer(rpc, started, result, None)
    }
    .instrument(span)
    .await
}

/// The answer of a call whose body has finished: logged, counted, and its
/// error mapped to a status.
/// `ids`: those of a call that runs without a span of its own ([`QUIET`]).
fn answer<T>(
    rpc: &'static str,
    started: Instant,
    result: Result<T, Error>,
    ids: Option<&Ids>,
) -> Result<Response<T>, Status> {
    let elapsed = started.elapsed();
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    let code = result.as_ref().err().map_or(tonic::Code::Ok, Error::code);
    crate::counters::rpc_done(rpc, code, elapsed);
    match result {
        Ok(value) => {
            tracing::debug!(elapsed_ms, "ok");
            Ok(Response::new(value))
        }
        Err(e) => {
            logged(rpc, ids, || {
                if code == tonic::Code::Unimplemented {
                    tracing::debug!(elapsed_ms, ?code, error = %e, "failed");
                } else {
                    tracing::warn!(elapsed_ms, ?code, error = %e, "failed");
                }
            });
            Err(e.into())
        }
    }
}

/// The answer of a call whose client's deadline passed before its body
/// finished: counted and logged as `DeadlineExceeded`; the body's own end
/// is logged when it comes.
fn past_deadline<T: Send + 'static>(
    rpc: &'static str,
    started: Instant,
    task: tokio::task::JoinHandle<Result<T, Error>>,
) -> Status {
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    crate::counters::rpc_done(rpc, tonic::Code::DeadlineExceeded, started.elapsed());
    tracing::warn!(
        elapsed_ms,
        "client's deadline passed: answered DeadlineExceeded, the work goes on"
    );
    tokio::spawn(
        async move {
            let elapsed_ms = || started.elapsed().as_secs_f64() * 1000.0;
            match task.await {
                Ok(Ok(_)) => tracing::info!(elapsed_ms = elapsed_ms(), "finished after its client's deadline"),
                Ok(Err(e)) => tracing::warn!(elapsed_ms = elapsed_ms(), code = ?e.code(), error = %e, "failed after its client's deadline"),
                Err(e) => tracing::warn!(error = %e, "handler failed after its client's deadline"),
            }
        }
        .in_current_span(),
    );
    Error::DeadlineExceeded(format!(
        "deadline exceeded: {rpc} did not finish within the client's deadline (its work goes on)"
    ))
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tonic::Code;

    #[tokio::test]
    async fn closed_gate_answers_unavailable() {
        let gate = Gate::default();
        let status = call(&gate, "Version", Ids::default(), None, async { Ok(1u32) })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        gate.open();
        let resp = call(&gate, "Version", Ids::default(), None, async { Ok(1u32) })
            .await
            .unwrap();
        assert_eq!(resp.into_inner(), 1);
    }

    #[tokio::test]
    async fn errors_map_to_status() {
        let gate = Gate::default();
        gate.open();
        let status = call::<(), _>(&gate, "X", Ids::default(), None, async {
            Err(Error::InvalidArgument("bad".into()))
        })
        .await
        .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "bad");
    }

    #[tokio::test]
    async fn panicking_handler_is_internal() {
        let gate = Gate::default();
        gate.open();
        let status = call::<(), _>(&gate, "X", Ids::default(), None, async { panic!("boom") })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal);
    }

    /// The body is under way when its caller is cancelled, and goes on to
    /// its end only after that: signals, not sleeps, order the steps.
    #[tokio::test]
    async fn cancelled_call_finishes_its_body() {
        let gate = Arc::new(Gate::default());
        gate.open();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (go_on, go_on_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let g = gate.clone();
        let caller = tokio::spawn(async move {
            call(&g, "X", Ids::default(), None, async move {
                let _ = started_tx.send(());
                let _ = go_on_rx.await;
                let _ = done_tx.send(());
                Ok(())
            })
            .await
        });
        started.await.expect("the body started");
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        // Fails only if the body is gone (then `done` says so below).
        let _ = go_on.send(());
        tokio::time::timeout(std::time::Duration::from_secs(5), done)
            .await
            .expect("body ran to its end")
            .expect("body ran to its end");
    }

    #[tokio::test]
    async fn past_deadline_answers_deadline_exceeded_and_the_body_goes_on() {
        let gate = Gate::default();
        gate.open();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let deadline = Instant::now() + std::time::Duration::from_millis(20);
        let status = call(&gate, "X", Ids::default(), Some(deadline), async move {
            // The body sees its client gone, and runs on.
            crate::core::caller::wait_gone().await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let _ = tx.send(crate::core::caller::gone());
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded);
        assert!(status.message().contains("work goes on"), "{status:?}");
        let saw_gone = tokio::time::timeout(std::time::Duration::from_secs(5), rx)
            .await
            .expect("body ran to its end")
            .unwrap();
        assert!(saw_gone);
    }

    #[tokio::test]
    async fn call_within_its_deadline_is_answered() {
        let gate = Gate::default();
        gate.open();
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let resp = call(&gate, "X", Ids::default(), Some(deadline), async {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            Ok(7u32)
        })
        .await
        .unwrap();
        assert_eq!(resp.into_inner(), 7);
        // An error within the deadline is the body's, not DeadlineExceeded.
        let status = call::<(), _>(&gate, "X", Ids::default(), Some(deadline), async {
            Err(Error::InvalidArgument("bad".into()))
        })
        .await
        .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn read_only_calls_run_inline_and_keep_the_layers_answers() {
        let gate = Gate::default();
        gate.open();
        assert!(is_read_only("ContainerStatus") && !is_read_only("StopContainer"));
        // Inline: the body sees no task of its own (no caller tracking).
        let resp = call(&gate, "ContainerStatus", Ids::default(), None, async {
            Ok(crate::core::caller::gone())
        })
        .await
        .unwrap();
        assert!(!resp.into_inner());
        let status = call::<(), _>(&gate, "ListContainers", Ids::default(), None, async {
            panic!("boom")
        })
        .await
        .unwrap_err();
        assert_eq!(status.code(), Code::Internal);
        let deadline = Instant::now() + std::time::Duration::from_millis(10);
        let status = call::<(), _>(
            &gate,
            "ImageStatus",
            Ids::default(),
            Some(deadline),
            async {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                Ok(())
            },
        )
        .await
        .unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded);
    }

    /// A quiet read-only call (no span made up front) logs its failure in
    /// the span it always had: the same `rpc` and ids as before.
    #[test]
    fn a_quiet_calls_failure_is_logged_in_its_span() {
        #[derive(Clone, Default)]
        struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(move || writer.clone())
            .json()
            .with_current_span(true)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        assert!(span_on_demand("ContainerStatus") && !span_on_demand("StopContainer"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let gate = Gate::default();
        gate.open();
        let calls = || {
            let ids = Ids {
                container: Some("c0ffee".into()),
                ..Ids::default()
            };
            let status = rt
                .block_on(call::<(), _>(&gate, "ContainerStatus", ids, None, async {
                    Err(Error::NotFound {
                        kind: "container",
                        id: "c0ffee".into(),
                    })
                }))
                .unwrap_err();
            assert_eq!(status.code(), Code::NotFound);
            rt.block_on(call(
                &gate,
                "ContainerStatus",
                Ids::default(),
                None,
                async { Ok(1u32) },
            ))
            .unwrap();
        };
        // tracing caches each callsite's interest globally, and a callsite
        // first hit while another test thread swaps its own subscriber in
        // can be left disabled for this one: the calls once to register
        // their callsites, the cache rebuilt with this subscriber in it,
        // then the calls whose lines are checked.
        calls();
        tracing::callsite::rebuild_interest_cache();
        lines.0.lock().unwrap().clear();
        calls();
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let logged: Vec<&str> = text.lines().collect();
        assert_eq!(logged.len(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(logged[0]).unwrap();
        assert_eq!(line["level"], "WARN", "{text}");
        assert_eq!(line["span"]["name"], "rpc", "{text}");
        assert_eq!(line["span"]["rpc"], "ContainerStatus", "{text}");
        assert_eq!(line["span"]["container"], "c0ffee", "{text}");
    }

    /// What the layer costs a read-only call, in-process, with the daemon's
    /// kind of subscriber (fmt, `info`, to a sink): run by hand, it prints
    /// figures and asserts nothing about them.
    /// `cargo test --release --bin berth instrument::tests::read_only_call_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn read_only_call_cost() {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(std::io::sink)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let gate = Gate::default();
        gate.open();
        const N: u32 = 200_000;
        let time = |what: &str, f: &mut dyn FnMut()| {
            for _ in 0..N / 10 {
                f();
            }
            let started = std::time::Instant::now();
            for _ in 0..N {
                f();
            }
            let ns = started.elapsed().as_nanos() as f64 / f64::from(N);
            println!("{what}: {ns:.0} ns per call");
        };
        time("Version through the layer", &mut || {
            rt.block_on(call(&gate, "Version", Ids::default(), None, async {
                Ok(1u32)
            }))
            .unwrap();
        });
        time("ContainerStatus (an id) through the layer", &mut || {
            let ids = Ids {
                container: Some("0123456789abcdef0123456789abcdef".into()),
                ..Ids::default()
            };
            rt.block_on(call(&gate, "ContainerStatus", ids, None, async {
                Ok(1u32)
            }))
            .unwrap();
        });
        let deadline = Instant::now() + std::time::Duration::from_secs(3600);
        time("Version with a deadline", &mut || {
            rt.block_on(call(
                &gate,
                "Version",
                Ids::default(),
                Some(deadline),
                async { Ok(1u32) },
            ))
            .unwrap();
        });
        time("the body alone", &mut || {
            rt.block_on(async { Ok::<u32, Error>(1) }).unwrap();
        });
        time("the span alone", &mut || {
            rt.block_on(async { 1u32 }.instrument(rpc_span("Version", &Ids::default())));
        });
        time("the metrics alone", &mut || {
            crate::counters::rpc_done(
                "Version",
                tonic::Code::Ok,
                std::time::Duration::from_micros(3),
            );
        });
    }
}
