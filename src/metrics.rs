//! berth's own Prometheus metrics, and the HTTP endpoint that serves them
//! at `/metrics` when `[metrics] address` is set (off by default):
//!
//! - `berth_grpc_requests_total{method,code}` and
//!   `berth_grpc_request_duration_seconds{method,code}`: every CRI call, as
//!   the instrument layer sees it;
//! - `berth_containers{state}`, `berth_pod_sandboxes{state}` and
//!   `berth_shims` (running containers plus pods with a live pause), read
//!   from the stores at scrape time;
//! - `berth_image_pulls_total{result}` and `berth_image_pulled_bytes_total`
//!   (content bytes of the pulled images: config and compressed layers);
//! - `berth_container_event_subscribers` and
//!   `berth_container_event_subscribers_dropped_total`;
//! - `berth_step_duration_seconds{step}`: the steps of the pod and
//!   container life cycle (a CNI ADD, a record write, the shim running the
//!   container...), where berth's time goes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::container::ContainerState;
use crate::sandbox::SandboxState;
use crate::server::Cri;

/// RPC latency buckets, in seconds: from a status lookup answered from
/// memory (tens of microseconds, so the low end is fine enough to tell a
/// 100 µs median) to a slow pull.
const RPC_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

struct Metrics {
    registry: Registry,
    rpcs: IntCounterVec,
    rpc_seconds: HistogramVec,
    image_pulls: IntCounterVec,
    image_pulled_bytes: IntCounter,
    containers: IntGaugeVec,
    sandboxes: IntGaugeVec,
    shims: IntGauge,
    subscribers: IntGauge,
    subscribers_dropped: IntCounter,
    steps: HistogramVec,
}

/// Step latency buckets, in seconds: from a record write to a slow plugin.
const STEP_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
    30.0,
];

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    /// The metric definitions are constants: failing to register one is a bug.
    fn new() -> Metrics {
        let registry = Registry::new();
        fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
            r.register(Box::new(m.clone()))
                .expect("berth's metric definitions are valid and unique");
            m
        }
        let opts = Opts::new;
        Metrics {
            rpcs: reg(
                &registry,
                IntCounterVec::new(
                    opts(
                        "berth_grpc_requests_total",
                        "CRI calls handled, by method and gRPC code.",
                    ),
                    &["method", "code"],
                )
                .expect("valid metric"),
            ),
            rpc_seconds: reg(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "berth_grpc_request_duration_seconds",
                        "Time CRI calls took, by method and gRPC code.",
                    )
                    .buckets(RPC_BUCKETS.to_vec()),
                    &["method", "code"],
                )
                .expect("valid metric"),
            ),
            image_pulls: reg(
                &registry,
                IntCounterVec::new(
                    opts(
                        "berth_image_pulls_total",
                        "Image pulls, by result (success or failure).",
                    ),
                    &["result"],
                )
                .expect("valid metric"),
            ),
            image_pulled_bytes: reg(
                &registry,
                IntCounter::with_opts(opts(
                    "berth_image_pulled_bytes_total",
                    "Content bytes (config and compressed layers) of successfully pulled images.",
                ))
                .expect("valid metric"),
            ),
            containers: reg(
                &registry,
                IntGaugeVec::new(
                    opts("berth_containers", "Containers, by state."),
                    &["state"],
                )
                .expect("valid metric"),
            ),
            sandboxes: reg(
                &registry,
                IntGaugeVec::new(
                    opts("berth_pod_sandboxes", "Pod sandboxes, by state."),
                    &["state"],
                )
                .expect("valid metric"),
            ),
            shims: reg(
                &registry,
                IntGauge::with_opts(opts(
                    "berth_shims",
                    "berth-shim processes: running containers plus pods with a live pause.",
                ))
                .expect("valid metric"),
            ),
            subscribers: reg(
                &registry,
                IntGauge::with_opts(opts(
                    "berth_container_event_subscribers",
                    "GetContainerEvents streams open now.",
                ))
                .expect("valid metric"),
            ),
            subscribers_dropped: reg(
                &registry,
                IntCounter::with_opts(opts(
                    "berth_container_event_subscribers_dropped_total",
                    "GetContainerEvents streams ended because the client fell behind.",
                ))
                .expect("valid metric"),
            ),
            steps: reg(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "berth_step_duration_seconds",
                        "Time the steps of the pod and container life cycle took, by step.",
                    )
                    .buckets(STEP_BUCKETS.to_vec()),
                    &["step"],
                )
                .expect("valid metric"),
            ),
            registry,
        }
    }
}

/// The gRPC name of a code, as grpc-go and its Prometheus middleware spell it.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Counts one finished CRI call.
pub fn rpc_done(method: &str, code: tonic::Code, elapsed: Duration) {
    let labels = [method, code_name(code)];
    METRICS.rpcs.with_label_values(&labels).inc();
    METRICS
        .rpc_seconds
        .with_label_values(&labels)
        .observe(elapsed.as_secs_f64());
}

/// Records how long lifecycle step `step` took.
pub fn step_done(step: &str, elapsed: Duration) {
    METRICS
        .steps
        .with_label_values(&[step])
        .observe(elapsed.as_secs_f64());
}

/// Counts a container event subscriber dropped for falling behind.
pub fn subscriber_dropped() {
    METRICS.subscribers_dropped.inc();
}

/// The metrics in Prometheus text format, the gauges read from `cri` now.
pub fn render(cri: &Cri) -> String {
    let m = &*METRICS;
    let containers = cri.core.containers.list();
    for (state, label) in [
        (ContainerState::Created, "created"),
        (ContainerState::Running, "running"),
        (ContainerState::Exited, "exited"),
        (ContainerState::Unknown, "unknown"),
    ] {
        let n = containers
            .iter()
            .filter(|c| c.status().state == state)
            .count();
        m.containers.with_label_values(&[label]).set(n as i64);
    }
    let sandboxes = cri.core.sandboxes.list();
    for (state, label) in [
        (SandboxState::Ready, "ready"),
        (SandboxState::NotReady, "notready"),
        (SandboxState::Unknown, "unknown"),
    ] {
        let n = sandboxes
            .iter()
            .filter(|s| s.status().state == state)
            .count();
        m.sandboxes.with_label_values(&[label]).set(n as i64);
    }
    let running = containers
        .iter()
        .filter(|c| c.status().state == ContainerState::Running)
        .count();
    let pauses = sandboxes
        .iter()
        .filter(|s| s.status().pid.is_some())
        .count();
    m.shims.set((running + pauses) as i64);
    m.subscribers.set(cri.events.subscribers() as i64);

    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&m.registry.gather(), &mut out) {
        tracing::error!(error = %e, "encoding metrics");
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Counts one finished image pull: `Some(bytes)` of the pulled image's
/// content when it succeeded, `None` when it failed.
pub fn image_pulled(bytes: Option<u64>) {
    match bytes {
        Some(bytes) => {
            METRICS.image_pulls.with_label_values(&["success"]).inc();
            METRICS.image_pulled_bytes.inc_by(bytes);
        }
        None => METRICS.image_pulls.with_label_values(&["failure"]).inc(),
    }
}

/// Binds the metrics endpoint when `address` is set.
pub async fn bind(address: &str) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if address.is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = address
        .parse()
        .with_context(|| format!("metrics.address {address:?} is not host:port"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics endpoint on {addr}"))?;
    Ok(Some(listener))
}

/// Serves `GET /metrics` on `listener` for as long as the daemon runs.
pub async fn serve(listener: tokio::net::TcpListener, cri: Arc<Cri>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a metrics connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let cri = cri.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = respond(&cri, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "metrics connection");
            }
        });
    }
}

fn respond<B>(cri: &Cri, req: &Request<B>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => reply(StatusCode::OK, prometheus::TEXT_FORMAT, render(cri)),
        (_, "/metrics") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "berth serves /metrics only\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_calls_are_counted_per_method_and_code() {
        rpc_done("UnitTestCall", tonic::Code::Ok, Duration::from_millis(3));
        rpc_done(
            "UnitTestCall",
            tonic::Code::NotFound,
            Duration::from_secs(1),
        );
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&METRICS.registry.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(r#"berth_grpc_requests_total{code="OK",method="UnitTestCall"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"berth_grpc_requests_total{code="NotFound",method="UnitTestCall"} 1"#)
        );
        assert!(text.contains(
            r#"berth_grpc_request_duration_seconds_bucket{code="OK",method="UnitTestCall",le="0.005"} 1"#
        ));
        assert!(text.contains("# TYPE berth_grpc_request_duration_seconds histogram"));
    }

    #[test]
    fn microsecond_calls_land_in_their_own_buckets() {
        rpc_done(
            "UnitTestFastCall",
            tonic::Code::Ok,
            Duration::from_micros(40),
        );
        rpc_done(
            "UnitTestFastCall",
            tonic::Code::Ok,
            Duration::from_micros(180),
        );
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&METRICS.registry.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let bucket = |le: &str| {
            let line = format!(
                r#"berth_grpc_request_duration_seconds_bucket{{code="OK",method="UnitTestFastCall",le="{le}"}} "#
            );
            let rest = text
                .lines()
                .find_map(|l| l.strip_prefix(line.as_str()))
                .unwrap_or_else(|| panic!("no bucket {le} in {text}"));
            rest.parse::<u64>().unwrap()
        };
        assert_eq!(bucket("0.000025"), 0);
        assert_eq!(bucket("0.00005"), 1);
        assert_eq!(bucket("0.0001"), 1);
        assert_eq!(bucket("0.00025"), 2);
        assert_eq!(bucket("0.001"), 2);
    }

    #[test]
    fn code_names() {
        assert_eq!(code_name(tonic::Code::Ok), "OK");
        assert_eq!(code_name(tonic::Code::Cancelled), "Canceled");
        assert_eq!(code_name(tonic::Code::Unavailable), "Unavailable");
    }
}
