//! Client deadlines (`grpc-timeout`), answered as gRPC says: a call whose
//! deadline passes before it is answered gets `DeadlineExceeded`, and a
//! server stream that is still open at the deadline ends with it (the
//! deadline is that of the whole call, as grpc-go's servers apply it).
//!
//! [`Deadlines`] wraps the tonic services of one connection. It takes the
//! `grpc-timeout` header off each request and puts the [`Deadline`] it
//! names into the request's extensions, where the RPC layer
//! ([`super::instrument::call`]) finds it: that layer answers
//! `DeadlineExceeded` when the handler has not finished by then, counts and
//! logs it, and lets the handler's task run on (its work is never cut
//! short; it sees that its client has gone). [`Deadlines`] itself answers
//! for what lies outside the handler: a request still being read at the
//! deadline, and a reply stream still open ([`DeadlineBody`]). tonic's own
//! server would answer `Cancelled` there instead.
//!
//! A malformed `grpc-timeout` is refused with `Internal` (HTTP 400), and a
//! zero timeout with `DeadlineExceeded` before any handler runs, both as
//! grpc-go's servers do.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame, SizeHint};
use hyper::http;
use tokio::time::{Instant, Sleep};
use tonic::body::Body;
use tonic::{Code, Status};

/// The request header that carries the client's timeout.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// When the client stops waiting for the call, put in the request's
/// extensions by [`Deadlines`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub Instant);

/// The deadline of a request, if its client gave one.
pub fn of<T>(request: &tonic::Request<T>) -> Option<Instant> {
    request.extensions().get::<Deadline>().map(|d| d.0)
}

/// The status of a call whose deadline has passed.
pub fn exceeded(what: &str) -> Status {
    Status::deadline_exceeded(format!(
        "deadline exceeded: the client's deadline passed before {what}"
    ))
}

/// Parses a `grpc-timeout` value as the gRPC over HTTP/2 protocol defines
/// it: 1 to 8 ASCII digits, then one unit letter (`H`ours, `M`inutes,
/// `S`econds, `m`illi-, `u` micro-, `n`anoseconds).
pub fn parse_timeout(value: &[u8]) -> Result<Duration, String> {
    let shown = || String::from_utf8_lossy(value).into_owned();
    let Some((&unit, digits)) = value.split_last() else {
        return Err("empty".into());
    };
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(format!("{:?} is not 1 to 8 digits and a unit", shown()));
    }
    // At most 8 digits: no overflow, even in nanoseconds or hours.
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(format!("{:?} has no valid unit", shown())),
    })
}

/// A trailers-only answer of `status` (with HTTP status `http`).
fn answer(status: Status, http: http::StatusCode) -> http::Response<Body> {
    let mut response = status.into_http::<Body>();
    *response.status_mut() = http;
    response
}

/// What [`Deadlines`] makes of a request's `grpc-timeout`: the deadline
/// (none without the header, or too far to be represented), or the answer
/// that refuses the request.
fn take_deadline<B>(
    request: &mut http::Request<B>,
) -> Result<Option<Instant>, Box<http::Response<Body>>> {
    let Some(value) = request.headers_mut().remove(GRPC_TIMEOUT) else {
        return Ok(None);
    };
    let timeout = parse_timeout(value.as_bytes()).map_err(|e| {
        tracing::debug!(error = %e, "malformed grpc-timeout");
        let status = Status::internal(format!("malformed grpc-timeout: {e}"));
        Box::new(answer(status, http::StatusCode::BAD_REQUEST))
    })?;
    if timeout.is_zero() {
        return Err(Box::new(answer(
            exceeded("the call was received"),
            http::StatusCode::OK,
        )));
    }
    let deadline = Instant::now().checked_add(timeout);
    if let Some(deadline) = deadline {
        request.extensions_mut().insert(Deadline(deadline));
    }
    Ok(deadline)
}

/// The tonic services of a connection, with client deadlines applied (see
/// the module documentation).
#[derive(Debug, Clone)]
pub struct Deadlines<S> {
    inner: S,
}

impl<S> Deadlines<S> {
    pub fn new(inner: S) -> Deadlines<S> {
        Deadlines { inner }
    }
}

impl<S, B> tower::Service<http::Request<B>> for Deadlines<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let deadline = match take_deadline(&mut request) {
            Ok(deadline) => deadline,
            Err(refused) => return Box::pin(std::future::ready(Ok(*refused))),
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let Some(deadline) = deadline else {
                return answer.await;
            };
            tokio::select! {
                // The service first: when the deadline passes while a
                // handler runs, the RPC layer's answer (the same code,
                // counted and logged with the RPC) is the one sent.
                biased;
                response = answer => {
                    Ok(response?.map(|body| Body::new(DeadlineBody::new(body, deadline))))
                }
                () = tokio::time::sleep_until(deadline) => {
                    tracing::debug!("deadline passed before the call was answered");
                    Ok(answer_deadline())
                }
            }
        })
    }
}

fn answer_deadline() -> http::Response<Body> {
    answer(exceeded("the call was answered"), http::StatusCode::OK)
}

/// A reply body that ends with `DeadlineExceeded` at the deadline, dropping
/// what it still had to send (a stream's source goes with it).
pub struct DeadlineBody {
    inner: Option<Body>,
    deadline: Pin<Box<Sleep>>,
}

impl DeadlineBody {
    pub fn new(inner: Body, deadline: Instant) -> DeadlineBody {
        DeadlineBody {
            inner: Some(inner),
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }
}

/// The trailers that end a reply at the deadline.
fn deadline_trailers() -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    let status = exceeded("the reply was complete");
    if status.add_header(&mut trailers).is_err() {
        // Cannot happen (a fixed ASCII message); the code alone then.
        trailers.insert(Status::GRPC_STATUS, (Code::DeadlineExceeded as i32).into());
    }
    trailers
}

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(frame) = Pin::new(inner).poll_frame(cx) {
            let ends = match &frame {
                None | Some(Err(_)) => true,
                Some(Ok(frame)) => frame.is_trailers(),
            };
            if ends {
                this.inner = None;
            }
            return Poll::Ready(frame);
        }
        ready!(this.deadline.as_mut().poll(cx));
        tracing::debug!("deadline passed with the reply still open: ending it");
        this.inner = None;
        Poll::Ready(Some(Ok(Frame::trailers(deadline_trailers()))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // Never exact: the deadline may cut the data short.
        let mut hint = SizeHint::new();
        if let Some(upper) = self.inner.as_ref().and_then(|b| b.size_hint().upper()) {
            hint.set_upper(upper);
        }
        hint
    }
}

#[cfg(test)]
mod tests;
