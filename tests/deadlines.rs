//! Client deadlines (`grpc-timeout`) against the real daemon, and the
//! cAdvisor-style metrics of a running container (cri-tools' conformance
//! specs of issue #26).
//!
//! The deadline tests call through a plain HTTP/2 connection, not a tonic
//! `Channel`: a `Channel` enforces the deadline itself and answers its own
//! `Cancelled` when it passes, so it would never show what berth answers.
//! grpc-go (kubelet, crictl, critest) keeps a deadline on both sides too,
//! and reports `DeadlineExceeded` for it.

use crate::common;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::cri::{container, exec, pull, remove_pod, run_container, PodCgroup};
use common::pods::{daemon, TestNet};
use common::{registry, Daemon};
use cri_api::v1;
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use hyper::client::conn::http2::SendRequest;
use hyper::http;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::body::Body;
use tonic::Code;

/// One HTTP/2 connection to the CRI socket, with no deadline of its own;
/// `header`, when set, is added to every request (a raw `grpc-timeout`).
#[derive(Clone)]
struct Raw {
    send: SendRequest<Body>,
    header: Option<(&'static str, &'static str)>,
}

impl tower::Service<http::Request<Body>> for Raw {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        if let Some((name, value)) = self.header {
            req.headers_mut()
                .insert(name, http::HeaderValue::from_static(value));
        }
        Box::pin(self.send.send_request(req))
    }
}

async fn raw(socket: &Path, header: Option<(&'static str, &'static str)>) -> Raw {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connect");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("HTTP/2 handshake");
    tokio::spawn(conn);
    Raw { send, header }
}

fn origin() -> http::Uri {
    "http://localhost".parse().unwrap()
}

async fn raw_images(daemon: &Daemon) -> ImageServiceClient<Raw> {
    ImageServiceClient::with_origin(raw(&daemon.sandbox.socket(), None).await, origin())
}

async fn raw_runtime(
    daemon: &Daemon,
    header: Option<(&'static str, &'static str)>,
) -> RuntimeServiceClient<Raw> {
    RuntimeServiceClient::with_origin(raw(&daemon.sandbox.socket(), header).await, origin())
}

fn pull_request(image: &str, timeout: Duration) -> tonic::Request<v1::PullImageRequest> {
    let mut req = tonic::Request::new(v1::PullImageRequest {
        image: Some(v1::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    req.set_timeout(timeout);
    req
}

async fn image_present(daemon: &Daemon, image: &str) -> bool {
    daemon
        .cri()
        .await
        .images()
        .image_status(v1::ImageStatusRequest {
            image: Some(v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect("ImageStatus")
        .into_inner()
        .image
        .is_some()
}

/// A TCP proxy on 127.0.0.1 in front of `upstream` (the test registry)
/// that holds every connection back for `delay` before it passes anything:
/// a slow registry.
async fn slow_proxy(upstream: &str, delay: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let upstream = upstream.to_string();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    addr
}

/// cri-tools' "public image should timeout if requested": a pull with a
/// 1 ms deadline answers DeadlineExceeded (tonic's server said Cancelled).
/// A deadline that short may pass before the request is even read; then
/// nothing starts, as with grpc-go, whose handler finds its context done.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_pull_with_a_1ms_deadline_answers_deadline_exceeded() {
    require_root!();
    let daemon = Daemon::start("").await;
    let image = registry().busybox();
    let started = Instant::now();
    let status = raw_images(&daemon)
        .await
        .pull_image(pull_request(&image, Duration::from_millis(1)))
        .await
        .expect_err("a 1 ms pull");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at the deadline"
    );

    // A generous deadline: answered, through both kinds of client.
    let answer = raw_images(&daemon)
        .await
        .pull_image(pull_request(&image, Duration::from_secs(120)))
        .await
        .expect("a pull within its deadline");
    assert!(!answer.into_inner().image_ref.is_empty());
    let mut req = tonic::Request::new(v1::VersionRequest::default());
    req.set_timeout(Duration::from_secs(30));
    daemon
        .cri()
        .await
        .runtime()
        .version(req)
        .await
        .expect("Version with a deadline");
    let mut req = tonic::Request::new(v1::VersionRequest::default());
    req.set_timeout(Duration::from_secs(30));
    raw_runtime(&daemon, None)
        .await
        .version(req)
        .await
        .expect("Version with a deadline");
}

/// A pull still running at its deadline is answered DeadlineExceeded then,
/// and goes on to its end: the image is there afterwards.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_pull_past_its_deadline_goes_on() {
    require_root!();
    let daemon = Daemon::start("").await;
    let proxy = slow_proxy(&registry().addr, Duration::from_millis(1500)).await;
    let image = format!("{proxy}/berth-test/busybox:latest");
    let started = Instant::now();
    let status = raw_images(&daemon)
        .await
        .pull_image(pull_request(&image, Duration::from_millis(500)))
        .await
        .expect_err("a pull slower than its deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("its work goes on"), "{status:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(450),
        "answered early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1400),
        "not answered at the deadline: {elapsed:?}"
    );
    assert!(
        !image_present(&daemon, &image).await,
        "the registry is slower than that"
    );

    let deadline = Instant::now() + Duration::from_secs(60);
    while !image_present(&daemon, &image).await {
        assert!(
            Instant::now() < deadline,
            "the pull did not go on after its deadline"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn malformed_and_zero_timeouts_are_refused_as_grpc_go_does() {
    require_root!();
    let daemon = Daemon::start("").await;
    for (value, code) in [
        ("1x", Code::Internal),
        ("123456789m", Code::Internal),
        ("+5S", Code::Internal),
        ("0n", Code::DeadlineExceeded),
    ] {
        let status = raw_runtime(&daemon, Some(("grpc-timeout", value)))
            .await
            .version(v1::VersionRequest::default())
            .await
            .expect_err(value);
        assert_eq!(status.code(), code, "{value}: {status:?}");
    }
    // The largest timeout the protocol can say is no deadline to speak of.
    raw_runtime(&daemon, Some(("grpc-timeout", "99999999H")))
        .await
        .version(v1::VersionRequest::default())
        .await
        .expect("Version");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_event_stream_ends_at_its_deadline() {
    require_root!();
    let daemon = Daemon::start("").await;
    let mut req = tonic::Request::new(v1::GetEventsRequest {});
    req.set_timeout(Duration::from_millis(1500));
    let started = Instant::now();
    let mut events = raw_runtime(&daemon, None)
        .await
        .get_container_events(req)
        .await
        .expect("the stream opens within its deadline")
        .into_inner();
    // Without a deadline, a stream stays open.
    let mut open = daemon
        .cri()
        .await
        .runtime()
        .get_container_events(v1::GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();

    let end = tokio::time::timeout(Duration::from_secs(20), events.message())
        .await
        .expect("the stream ended");
    let status = end.expect_err("no event, then the deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1400),
        "ended early: {elapsed:?}"
    );

    let still = tokio::time::timeout(Duration::from_millis(500), open.message()).await;
    assert!(
        still.is_err(),
        "a stream without a deadline ended: {still:?}"
    );
}

/// Metric names the conformance spec lets a runtime leave out
/// (`unimplementedMetricDescriptors`), and those it lets have no value
/// (`optionalValuesForMetricDescriptors`: block I/O, which virtual disks
/// may not count).
const UNIMPLEMENTED: &[&str] = &[
    "container_hugetlb_max_usage_bytes",
    "container_hugetlb_usage_bytes",
    "container_pressure_cpu_stalled_seconds_total",
    "container_pressure_cpu_waiting_seconds_total",
    "container_pressure_io_stalled_seconds_total",
    "container_pressure_io_waiting_seconds_total",
    "container_pressure_memory_stalled_seconds_total",
    "container_pressure_memory_waiting_seconds_total",
    "container_spec_cpu_quota",
    "container_spec_memory_reservation_limit_bytes",
    "container_ulimits_soft",
];
const OPTIONAL_VALUES: &[&str] = &[
    "container_blkio_device_usage_total",
    "container_fs_reads_bytes_total",
    "container_fs_reads_total",
    "container_fs_writes_bytes_total",
    "container_fs_writes_total",
];

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_running_container_has_cadvisor_metrics() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cgroup = PodCgroup::new("metrics");
    let config = cgroup.pod_config("metrics");
    let pod = daemon.cri().await.run_pod(&config.clone()).await.unwrap();
    pull(&daemon, &registry().busybox()).await;
    let mut ctr = container("metered", &["sleep", "1000"]);
    ctr.linux = Some(v1::LinuxContainerConfig {
        resources: Some(v1::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 20_000,
            cpu_shares: 1024,
            memory_limit_in_bytes: 64 << 20,
            memory_swap_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = run_container(&daemon, &pod, &config, ctr).await;
    exec(
        &daemon,
        &id,
        &[
            "sh",
            "-c",
            "mkdir -p /var/lib/t && for i in 1 2 3; do echo hi > /var/lib/t/f$i; done; sync",
        ],
    )
    .await;

    let mut rt = daemon.cri().await.runtime();
    let descriptors = rt
        .list_metric_descriptors(v1::ListMetricDescriptorsRequest {})
        .await
        .expect("ListMetricDescriptors")
        .into_inner()
        .descriptors;
    let pods = rt
        .list_pod_sandbox_metrics(v1::ListPodSandboxMetricsRequest {})
        .await
        .expect("ListPodSandboxMetrics")
        .into_inner()
        .pod_metrics;
    let ours = pods
        .iter()
        .find(|p| p.pod_sandbox_id == pod)
        .expect("our pod");
    let theirs = ours
        .container_metrics
        .iter()
        .find(|c| c.container_id == id)
        .expect("our container");
    let value = |name: &str| {
        theirs
            .metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name}: {:?}", theirs.metrics))
            .value
            .unwrap()
            .value
    };
    assert!(value("container_threads") >= 1);
    assert!(value("container_processes") >= 1);
    assert!(value("container_file_descriptors") > 0);
    assert_eq!(value("container_spec_cpu_quota"), 20_000);
    assert_eq!(value("container_spec_memory_limit_bytes"), 64 << 20);
    assert!(value("container_fs_inodes_total") >= value("container_fs_inodes_free"));
    let labels = theirs.metrics[0].label_values.clone();
    let n = labels.len();
    assert_eq!(
        labels[n - 3..],
        ["default", "metrics", "metered"],
        "{labels:?}"
    );

    check_as_cri_tools_does(&descriptors, ours);
    remove_pod(&daemon, &pod).await;
}

/// What the conformance spec checks of a pod's metrics: help and labels on
/// every descriptor, every metric it names offered and reported (but for
/// those it lets go), with as many label values as its descriptor has keys.
fn check_as_cri_tools_does(descriptors: &[v1::MetricDescriptor], ours: &v1::PodSandboxMetrics) {
    let all: Vec<&v1::Metric> = ours
        .metrics
        .iter()
        .chain(ours.container_metrics.iter().flat_map(|c| c.metrics.iter()))
        .collect();
    for d in descriptors {
        assert!(!d.help.is_empty() && !d.label_keys.is_empty(), "{d:?}");
        let found = all.iter().find(|m| m.name == d.name);
        match found {
            Some(m) => assert_eq!(m.label_values.len(), d.label_keys.len(), "{}", d.name),
            None => assert!(
                UNIMPLEMENTED.contains(&d.name.as_str())
                    || OPTIONAL_VALUES.contains(&d.name.as_str()),
                "{} offered but not reported",
                d.name
            ),
        }
    }
    for name in CONFORMANCE_NAMES {
        if UNIMPLEMENTED.contains(name) {
            continue;
        }
        assert!(
            descriptors.iter().any(|d| d.name == *name),
            "{name} not offered"
        );
        if !OPTIONAL_VALUES.contains(name) {
            assert!(
                all.iter()
                    .any(|m| m.name == *name && !m.label_values.is_empty()),
                "{name} not reported"
            );
        }
    }
}

/// cri-tools' `expectedMetricDescriptorNames` (pkg/validate/pod.go).
const CONFORMANCE_NAMES: &[&str] = &[
    "container_blkio_device_usage_total",
    "container_cpu_cfs_periods_total",
    "container_cpu_cfs_throttled_periods_total",
    "container_cpu_cfs_throttled_seconds_total",
    "container_cpu_system_seconds_total",
    "container_cpu_usage_seconds_total",
    "container_cpu_user_seconds_total",
    "container_file_descriptors",
    "container_fs_inodes_free",
    "container_fs_inodes_total",
    "container_fs_limit_bytes",
    "container_fs_reads_bytes_total",
    "container_fs_reads_total",
    "container_fs_usage_bytes",
    "container_fs_writes_bytes_total",
    "container_fs_writes_total",
    "container_hugetlb_max_usage_bytes",
    "container_hugetlb_usage_bytes",
    "container_last_seen",
    "container_memory_cache",
    "container_memory_failcnt",
    "container_memory_failures_total",
    "container_memory_kernel_usage",
    "container_memory_mapped_file",
    "container_memory_max_usage_bytes",
    "container_memory_rss",
    "container_memory_swap",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_network_receive_bytes_total",
    "container_network_receive_errors_total",
    "container_network_receive_packets_dropped_total",
    "container_network_receive_packets_total",
    "container_network_transmit_bytes_total",
    "container_network_transmit_errors_total",
    "container_network_transmit_packets_dropped_total",
    "container_network_transmit_packets_total",
    "container_oom_events_total",
    "container_pressure_cpu_stalled_seconds_total",
    "container_pressure_cpu_waiting_seconds_total",
    "container_pressure_io_stalled_seconds_total",
    "container_pressure_io_waiting_seconds_total",
    "container_pressure_memory_stalled_seconds_total",
    "container_pressure_memory_waiting_seconds_total",
    "container_processes",
    "container_sockets",
    "container_spec_cpu_period",
    "container_spec_cpu_quota",
    "container_spec_cpu_shares",
    "container_spec_memory_limit_bytes",
    "container_spec_memory_reservation_limit_bytes",
    "container_spec_memory_swap_limit_bytes",
    "container_start_time_seconds",
    "container_threads",
    "container_threads_max",
    "container_ulimits_soft",
];
