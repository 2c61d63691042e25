use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, StreamBody};
use hyper::body::Body as _;
use tokio_stream::StreamExt as _;
use tower::ServiceExt;

use super::*;

#[test]
fn timeouts_parse_as_the_protocol_defines_them() {
    let ok = |s: &str| parse_timeout(s.as_bytes()).unwrap();
    assert_eq!(ok("2H"), Duration::from_secs(7200));
    assert_eq!(ok("3M"), Duration::from_secs(180));
    assert_eq!(ok("10S"), Duration::from_secs(10));
    assert_eq!(ok("1m"), Duration::from_millis(1));
    assert_eq!(ok("999u"), Duration::from_micros(999));
    assert_eq!(ok("12345678n"), Duration::from_nanos(12_345_678));
    assert_eq!(ok("0m"), Duration::ZERO);
    assert_eq!(ok("00000007S"), Duration::from_secs(7));
    // The largest value does not overflow.
    assert_eq!(ok("99999999H"), Duration::from_secs(99_999_999 * 3600));
    for bad in [
        "",
        "S",
        "1",
        "1x",
        "1s",
        "123456789n",
        "+1S",
        "-1S",
        " 1S",
        "1 S",
        "1.5S",
        "1SS",
        "½S",
    ] {
        assert!(parse_timeout(bad.as_bytes()).is_err(), "{bad:?} parsed");
    }
    assert!(parse_timeout(b"\xff1S").is_err());
}

type Reply = Pin<Box<dyn Future<Output = http::Response<Body>> + Send>>;
type Inner = tower::util::BoxCloneService<http::Request<Body>, http::Response<Body>, Infallible>;

/// What the inner service saw of the last request.
#[derive(Default)]
struct Seen {
    header: Option<Vec<u8>>,
    deadline: Option<Instant>,
    calls: usize,
}

/// A service that records what it sees and answers with `reply`.
fn recording(
    seen: Arc<Mutex<Seen>>,
    reply: impl Fn() -> Reply + Clone + Send + Sync + 'static,
) -> Inner {
    Inner::new(tower::service_fn(move |req: http::Request<Body>| {
        let mut s = seen.lock().unwrap();
        s.calls += 1;
        s.header = req
            .headers()
            .get(GRPC_TIMEOUT)
            .map(|v| v.as_bytes().to_vec());
        s.deadline = req.extensions().get::<Deadline>().map(|d| d.0);
        let reply = reply();
        async move { Ok::<_, Infallible>(reply.await) }
    }))
}

fn ok_reply() -> Reply {
    Box::pin(async { http::Response::new(Body::empty()) })
}

fn request(timeout: Option<&str>) -> http::Request<Body> {
    let mut req = http::Request::new(Body::empty());
    if let Some(t) = timeout {
        req.headers_mut()
            .insert(GRPC_TIMEOUT, http::HeaderValue::from_str(t).unwrap());
    }
    req
}

fn grpc_status(headers: &http::HeaderMap) -> Option<&str> {
    headers.get("grpc-status").map(|v| v.to_str().unwrap())
}

async fn call(svc: Inner, timeout: Option<&str>) -> http::Response<Body> {
    Deadlines::new(svc).oneshot(request(timeout)).await.unwrap()
}

#[tokio::test]
async fn the_header_becomes_a_deadline_in_the_extensions() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let before = Instant::now();
    let resp = call(recording(seen.clone(), ok_reply), Some("50m")).await;
    assert_eq!(resp.status(), http::StatusCode::OK);
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.header, None, "grpc-timeout is taken off");
        let deadline = s.deadline.expect("deadline in the extensions");
        assert!(deadline >= before + Duration::from_millis(50));
        assert!(deadline <= Instant::now() + Duration::from_millis(50));
    }

    let resp = call(recording(seen.clone(), ok_reply), None).await;
    assert_eq!(grpc_status(resp.headers()), None);
    assert_eq!(seen.lock().unwrap().deadline, None);
}

#[tokio::test]
async fn malformed_and_zero_timeouts_are_refused_before_the_service() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let resp = call(recording(seen.clone(), ok_reply), Some("1 hour")).await;
    assert_eq!(resp.status(), http::StatusCode::BAD_REQUEST);
    assert_eq!(
        grpc_status(resp.headers()),
        Some("13"),
        "Internal, as grpc-go"
    );
    let resp = call(recording(seen.clone(), ok_reply), Some("0n")).await;
    assert_eq!(resp.status(), http::StatusCode::OK);
    assert_eq!(grpc_status(resp.headers()), Some("4"));
    assert_eq!(seen.lock().unwrap().calls, 0);
}

#[tokio::test]
async fn an_unanswered_call_gets_deadline_exceeded_at_its_deadline() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let never = || -> Reply { Box::pin(std::future::pending()) };
    let started = Instant::now();
    let resp = call(recording(seen, never), Some("30m")).await;
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(grpc_status(resp.headers()), Some("4"));
    assert!(resp.body().is_end_stream());
}

/// A reply of one message, then `rest` (a stream that never ends, or trailers).
fn streaming(ends: bool) -> Reply {
    let first = tokio_stream::iter([Ok::<_, Status>(Frame::data(Bytes::from_static(b"one")))]);
    let body = if ends {
        let mut ok = http::HeaderMap::new();
        ok.insert("grpc-status", http::HeaderValue::from_static("0"));
        Body::new(StreamBody::new(
            first.chain(tokio_stream::iter([Ok(Frame::trailers(ok))])),
        ))
    } else {
        Body::new(StreamBody::new(first.chain(tokio_stream::pending())))
    };
    Box::pin(async move { http::Response::new(body) })
}

async fn frames_of(body: Body) -> Vec<Frame<Bytes>> {
    let mut body = std::pin::pin!(body);
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        out.push(frame.unwrap());
    }
    out
}

#[tokio::test]
async fn a_stream_open_at_the_deadline_ends_with_deadline_exceeded() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let started = Instant::now();
    let resp = call(recording(seen.clone(), || streaming(false)), Some("40m")).await;
    assert_eq!(
        grpc_status(resp.headers()),
        None,
        "headers sent as the service's"
    );
    let frames = frames_of(resp.into_body()).await;
    assert!(started.elapsed() >= Duration::from_millis(40));
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0].data_ref().unwrap().as_ref(), b"one");
    let trailers = frames[1].trailers_ref().expect("trailers");
    assert_eq!(grpc_status(trailers), Some("4"));

    // A reply that ends before its deadline keeps its own trailers.
    let resp = call(recording(seen, || streaming(true)), Some("10S")).await;
    let frames = frames_of(resp.into_body()).await;
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(grpc_status(frames[1].trailers_ref().unwrap()), Some("0"));
}
