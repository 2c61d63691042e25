//! berth's own Prometheus metrics: the counters, histograms and gauges, and
//! their text page (served by the CRI layer's endpoint,
//! `server/metrics_endpoint.rs`, when `[metrics] address` is set). A leaf:
//! it imports nothing of the crate, so every layer can count.
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
//!   container, an NRI hook `nri.*`...), where berth's time goes;
//! - `berth_nri_plugins` (connected now) and, per NRI plugin that ever
//!   connected (`plugin="IDX-NAME"`, dropped ones kept),
//!   `berth_nri_plugin_requests_total`, `..._failures_total`,
//!   `..._timeouts_total` and `berth_nri_plugin_request_seconds_sum`, read
//!   from NRI at scrape time.

use berth_lock::RwLockExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, RwLock};
use std::time::{Duration, Instant};

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// RPC latency buckets, in seconds: from a status lookup answered from
/// memory (a few microseconds inside the daemon, so the low end is fine
/// enough to tell a 5 µs median) to a slow pull.
const RPC_BUCKETS: &[f64] = &[
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_007_5,
    0.000_01,
    0.000_015,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
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

/// Registers `metric` in `registry`. The metric definitions are
/// constants: failing to register one is a bug.
fn reg<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: T) -> T {
    registry
        .register(Box::new(metric.clone()))
        .expect("berth's metric definitions are valid and unique");
    metric
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    reg(
        r,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"),
    )
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    reg(
        r,
        IntCounter::with_opts(Opts::new(name, help)).expect("valid metric"),
    )
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    reg(
        r,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"),
    )
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    reg(
        r,
        IntGauge::with_opts(Opts::new(name, help)).expect("valid metric"),
    )
}

fn histogram_vec(
    r: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    reg(r, HistogramVec::new(opts, labels).expect("valid metric"))
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        Metrics {
            rpcs: counter_vec(
                &r,
                "berth_grpc_requests_total",
                "CRI calls handled, by method and gRPC code.",
                &["method", "code"],
            ),
            rpc_seconds: histogram_vec(
                &r,
                "berth_grpc_request_duration_seconds",
                "Time CRI calls took, by method and gRPC code.",
                RPC_BUCKETS,
                &["method", "code"],
            ),
            image_pulls: counter_vec(
                &r,
                "berth_image_pulls_total",
                "Image pulls, by result (success or failure).",
                &["result"],
            ),
            image_pulled_bytes: counter(
                &r,
                "berth_image_pulled_bytes_total",
                "Content bytes (config and compressed layers) of successfully pulled images.",
            ),
            containers: gauge_vec(&r, "berth_containers", "Containers, by state.", &["state"]),
            sandboxes: gauge_vec(
                &r,
                "berth_pod_sandboxes",
                "Pod sandboxes, by state.",
                &["state"],
            ),
            shims: gauge(
                &r,
                "berth_shims",
                "berth-shim processes: running containers plus pods with a live pause.",
            ),
            subscribers: gauge(
                &r,
                "berth_container_event_subscribers",
                "GetContainerEvents streams open now.",
            ),
            subscribers_dropped: counter(
                &r,
                "berth_container_event_subscribers_dropped_total",
                "GetContainerEvents streams ended because the client fell behind.",
            ),
            steps: histogram_vec(
                &r,
                "berth_step_duration_seconds",
                "Time the steps of the pod and container life cycle took, by step.",
                STEP_BUCKETS,
                &["step"],
            ),
            registry: r,
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

/// The `OK` series of each RPC, resolved at its first call: a status call
/// then neither hashes its labels nor clones the series (twice) each time.
static OK_SERIES: LazyLock<RwLock<HashMap<&'static str, (IntCounter, Histogram)>>> =
    LazyLock::new(RwLock::default);

/// CRI calls that may change state (every one but the read-only calls
/// kubelet polls with) started since the start.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// Counts a call that may change state, as it starts.
pub fn change_started() {
    CHANGES.fetch_add(1, Ordering::Relaxed);
}

/// How many calls that may change state have started (the daemon's idle
/// trimmer tells by it that a burst of them has stopped).
pub fn changes() -> u64 {
    CHANGES.load(Ordering::Relaxed)
}

/// Counts one finished CRI call.
pub fn rpc_done(method: &'static str, code: tonic::Code, elapsed: Duration) {
    if code == tonic::Code::Ok {
        let seconds = elapsed.as_secs_f64();
        if let Some((calls, times)) = OK_SERIES.read_unpoisoned().get(method) {
            calls.inc();
            times.observe(seconds);
            return;
        }
        let labels = [method, "OK"];
        let series = (
            METRICS.rpcs.with_label_values(&labels),
            METRICS.rpc_seconds.with_label_values(&labels),
        );
        series.0.inc();
        series.1.observe(seconds);
        OK_SERIES.write_unpoisoned().insert(method, series);
        return;
    }
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

/// The gauges read from the stores at scrape time.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Gauges {
    /// Containers per state label (`created`, `running`, `exited`, `unknown`).
    pub containers: Vec<(&'static str, usize)>,
    /// Sandboxes per state label (`ready`, `notready`, `unknown`).
    pub sandboxes: Vec<(&'static str, usize)>,
    /// Running containers plus pods with a live pause.
    pub shims: usize,
    /// GetContainerEvents streams open now.
    pub subscribers: usize,
    /// The NRI plugins' request counters (dropped plugins' included).
    pub nri_plugins: Vec<NriPluginStats>,
}

/// One NRI plugin's request counters.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NriPluginStats {
    /// `IDX-NAME`.
    pub plugin: String,
    /// Connected now (the others are dropped, their counters kept).
    pub connected: bool,
    pub requests: u64,
    pub failures: u64,
    pub timeouts: u64,
    pub seconds: f64,
}

/// A per-plugin series: its name, help, and value of one plugin.
type Series = (&'static str, &'static str, fn(&NriPluginStats) -> String);

/// The NRI plugins' counters in Prometheus text format.
fn render_nri(plugins: &[NriPluginStats], out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP berth_nri_plugins NRI plugins connected now.");
    let _ = writeln!(out, "# TYPE berth_nri_plugins gauge");
    let connected = plugins.iter().filter(|p| p.connected).count();
    let _ = writeln!(out, "berth_nri_plugins {connected}");
    let series: [Series; 4] = [
        ("requests_total", "Requests sent to each NRI plugin.", |p| {
            p.requests.to_string()
        }),
        (
            "failures_total",
            "Requests to each NRI plugin that failed, timed out or broke.",
            |p| p.failures.to_string(),
        ),
        (
            "timeouts_total",
            "Requests to each NRI plugin that timed out.",
            |p| p.timeouts.to_string(),
        ),
        (
            "request_seconds_sum",
            "Time spent in requests to each NRI plugin.",
            |p| p.seconds.to_string(),
        ),
    ];
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP berth_nri_plugin_{name} {help}");
        let _ = writeln!(out, "# TYPE berth_nri_plugin_{name} counter");
        for p in plugins {
            let plugin = p.plugin.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(
                out,
                "berth_nri_plugin_{name}{{plugin=\"{plugin}\"}} {}",
                value(p)
            );
        }
    }
}

/// The metrics in Prometheus text format, with `gauges` as they are now.
pub fn render(gauges: &Gauges) -> String {
    let m = &*METRICS;
    for (label, n) in &gauges.containers {
        m.containers.with_label_values(&[label]).set(*n as i64);
    }
    for (label, n) in &gauges.sandboxes {
        m.sandboxes.with_label_values(&[label]).set(*n as i64);
    }
    m.shims.set(gauges.shims as i64);
    m.subscribers.set(gauges.subscribers as i64);
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&m.registry.gather(), &mut out) {
        tracing::error!(error = %e, "encoding metrics");
    }
    let mut text = String::from_utf8_lossy(&out).into_owned();
    render_nri(&gauges.nri_plugins, &mut text);
    text
}

/// Awaits `work`, one step of the life cycle, and records how long it took
/// (`berth_step_duration_seconds{step}`): where berth's time goes.
pub async fn timed<T>(step: &'static str, work: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let out = work.await;
    step_done(step, started.elapsed());
    out
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
        // A few microseconds: the low buckets tell 3 µs from 8 µs.
        for micros in [3, 8] {
            rpc_done(
                "UnitTestFastCall",
                tonic::Code::Ok,
                Duration::from_micros(micros),
            );
        }
        let text = {
            let mut out = Vec::new();
            TextEncoder::new()
                .encode(&METRICS.registry.gather(), &mut out)
                .unwrap();
            String::from_utf8(out).unwrap()
        };
        let bucket = |le: &str| {
            let line = format!(
                r#"berth_grpc_request_duration_seconds_bucket{{code="OK",method="UnitTestFastCall",le="{le}"}} "#
            );
            text.lines()
                .find_map(|l| l.strip_prefix(line.as_str()))
                .unwrap_or_else(|| panic!("no bucket {le} in {text}"))
                .parse::<u64>()
                .unwrap()
        };
        assert_eq!(bucket("0.0000025"), 0);
        assert_eq!(bucket("0.000005"), 1);
        assert_eq!(bucket("0.0000075"), 1);
        assert_eq!(bucket("0.00001"), 2);
        assert_eq!(bucket("0.00005"), 3);
    }

    #[test]
    fn gauges_are_rendered_as_given() {
        let text = render(&Gauges {
            containers: vec![("running", 3)],
            sandboxes: vec![("ready", 2)],
            shims: 4,
            subscribers: 1,
            nri_plugins: vec![
                NriPluginStats {
                    plugin: "10-x".into(),
                    connected: true,
                    requests: 7,
                    failures: 1,
                    timeouts: 1,
                    seconds: 0.5,
                },
                NriPluginStats {
                    plugin: "20-gone".into(),
                    requests: 3,
                    ..Default::default()
                },
            ],
        });
        assert!(text.contains("berth_nri_plugins 1"), "{text}");
        assert!(text.contains(r#"berth_nri_plugin_requests_total{plugin="20-gone"} 3"#));
        assert!(text.contains(r#"berth_nri_plugin_requests_total{plugin="10-x"} 7"#));
        assert!(text.contains(r#"berth_nri_plugin_timeouts_total{plugin="10-x"} 1"#));
        assert!(text.contains(r#"berth_nri_plugin_request_seconds_sum{plugin="10-x"} 0.5"#));
        assert!(
            text.contains(r#"berth_containers{state="running"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"berth_pod_sandboxes{state="ready"} 2"#));
        assert!(text.contains("berth_shims 4"));
        assert!(text.contains("berth_container_event_subscribers 1"));
    }

    #[test]
    fn code_names() {
        assert_eq!(code_name(tonic::Code::Ok), "OK");
        assert_eq!(code_name(tonic::Code::Cancelled), "Canceled");
        assert_eq!(code_name(tonic::Code::Unavailable), "Unavailable");
    }
}
