//! The calls kubelet makes all the time, on the socket: its relist
//! (ListContainers and ListPodSandbox) and the status calls
//! (ContainerStatus, PodSandboxStatus) are served here, before the
//! generated RuntimeService. The two lists answer with their whole gRPC
//! message made of cached entries (`list_containers.rs`,
//! `list_pod_sandbox.rs`), sent as it is ([`serve_wire`]); the unfiltered
//! one, kubelet's relist, is kept until its store changes ([`KeptAnswer`]).
//! The status calls answer with the wire twins of their answers
//! (`cri_api::prepacked`) made of cached bytes (`container_status.rs`,
//! `pod_sandbox_status.rs`), each encoded once per change. Every other
//! method goes to the generated service. These calls go through the
//! instrument layer as every RPC does (the gate, the deadline, the log line,
//! the metrics, a panic as Internal) and keep the message size limits.

use berth_lock::MutexExt;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use cri_api::prepacked::GRPC_PREFIX_LEN;
use hyper::http;
use prost::bytes::Bytes;
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic_prost::ProstCodec;

use super::grpc::MAX_MESSAGE_SIZE;
use super::instrument::{self, RequestIds};
use super::{deadline, Cri};

const LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";
const LIST_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/ListPodSandbox";
const CONTAINER_STATUS: &str = "/runtime.v1.RuntimeService/ContainerStatus";
const POD_SANDBOX_STATUS: &str = "/runtime.v1.RuntimeService/PodSandboxStatus";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The RuntimeService `S` (the generated server), with the two list calls
/// of the relist served from cached entries.
#[derive(Clone)]
pub struct Relist<S> {
    inner: S,
    cri: Arc<Cri>,
}

impl<S> Relist<S> {
    pub fn new(inner: S, cri: Arc<Cri>) -> Relist<S> {
        Relist { inner, cri }
    }
}

impl<S: NamedService> NamedService for Relist<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for Relist<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let cri = self.cri.clone();
        match req.uri().path() {
            LIST_CONTAINERS => serve_wire(cri, "ListContainers", req, |cri, r| {
                Box::pin(async move { cri.list_containers_wire(r).await })
            }),
            LIST_POD_SANDBOX => serve_wire(cri, "ListPodSandbox", req, |cri, r| {
                Box::pin(async move { cri.list_pod_sandbox_wire(r).await })
            }),
            CONTAINER_STATUS => serve(cri, "ContainerStatus", req, |cri, r| {
                Box::pin(async move { cri.container_status_packed(r).await })
            }),
            POD_SANDBOX_STATUS => serve(cri, "PodSandboxStatus", req, |cri, r| {
                Box::pin(async move { cri.pod_sandbox_status_packed(r).await })
            }),
            _ => Box::pin(self.inner.call(req)),
        }
    }
}

/// Serves `req` as the call `rpc` with the core's `answer` (see [`Packed`]).
fn serve<Req, Resp>(
    cri: Arc<Cri>,
    rpc: &'static str,
    req: http::Request<Body>,
    answer: fn(Arc<Cri>, Req) -> BoxFuture<Result<Resp, crate::error::Error>>,
) -> BoxFuture<Result<http::Response<Body>, Infallible>>
where
    Req: prost::Message + Default + RequestIds + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    let method = Packed { cri, rpc, answer };
    Box::pin(async move { Ok(grpc().unary(method, req).await) })
}

/// Serves `req` as the call `rpc`, whose `answer` is the whole gRPC
/// message of its response ([`framed`]): the request read and decoded as
/// tonic's server does (its limits, its codes), the call through the
/// instrument layer, and the answer's bytes sent as they are, with no copy
/// into an encoder's buffer (a fresh one each call, 200 KiB for 500
/// containers).
fn serve_wire<Req>(
    cri: Arc<Cri>,
    rpc: &'static str,
    req: http::Request<Body>,
    answer: fn(Arc<Cri>, Req) -> BoxFuture<Result<Bytes, crate::error::Error>>,
) -> BoxFuture<Result<http::Response<Body>, Infallible>>
where
    Req: prost::Message + Default + RequestIds + Send + 'static,
{
    Box::pin(async move {
        let answered = async {
            let (parts, body) = req.into_parts();
            let deadline = parts.extensions.get::<deadline::Deadline>().map(|d| d.0);
            let req: Req = read_request(body).await?;
            let ids = req.ids();
            let body = answer(cri.clone(), req);
            let message = instrument::call(&cri.gate, rpc, ids, deadline, body)
                .await?
                .into_inner();
            let len = message.len() - GRPC_PREFIX_LEN;
            if len > MAX_MESSAGE_SIZE {
                return Err(tonic::Status::out_of_range(format!(
                    "Error, encoded message length too large: found {len} bytes, the limit is: {MAX_MESSAGE_SIZE} bytes"
                )));
            }
            Ok(message)
        };
        Ok(match answered.await {
            Ok(message) => {
                let mut response = http::Response::new(Body::new(WireBody {
                    message: Some(message),
                    trailers: true,
                }));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                response
            }
            Err(status) => status.into_http(),
        })
    })
}

/// The one message of a unary request, as tonic's server reads it: at most
/// [`MAX_MESSAGE_SIZE`], not compressed (berth takes no compression).
async fn read_request<Req: prost::Message + Default>(body: Body) -> Result<Req, tonic::Status> {
    use http_body_util::BodyExt;
    let bytes = http_body_util::Limited::new(body, GRPC_PREFIX_LEN + MAX_MESSAGE_SIZE)
        .collect()
        .await
        .map_err(
            |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => tonic::Status::out_of_range(format!(
                "Error, decoded message length too large: the limit is: {MAX_MESSAGE_SIZE} bytes"
            )),
                None => tonic::Status::cancelled(format!("reading the request: {e}")),
            },
        )?
        .to_bytes();
    let Some(prefix) = bytes.get(..GRPC_PREFIX_LEN) else {
        return Err(tonic::Status::internal("Missing request message."));
    };
    if prefix[0] != 0 {
        return Err(tonic::Status::unimplemented(
            "the request message is compressed: berth takes no compression",
        ));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > MAX_MESSAGE_SIZE {
        return Err(tonic::Status::out_of_range(format!(
            "Error, decoded message length too large: found {len} bytes, the limit is: {MAX_MESSAGE_SIZE} bytes"
        )));
    }
    let Some(message) = bytes.get(GRPC_PREFIX_LEN..GRPC_PREFIX_LEN + len) else {
        return Err(tonic::Status::internal("Unexpected EOF decoding stream."));
    };
    Req::decode(message).map_err(|e| tonic::Status::internal(e.to_string()))
}

/// The body of a list answer: its message, then the trailers of success.
struct WireBody {
    message: Option<Bytes>,
    trailers: bool,
}

impl hyper::body::Body for WireBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, tonic::Status>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(message))));
        }
        if std::mem::take(&mut self.trailers) {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            return Poll::Ready(Some(Ok(hyper::body::Frame::trailers(trailers))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && !self.trailers
    }
}

/// A list answer packed as one gRPC message
/// (`cri_api::prepacked::pack_grpc_message`), shared.
pub(super) fn framed(packed: Option<Vec<u8>>) -> Result<Bytes, crate::error::Error> {
    packed.map(Bytes::from).ok_or_else(|| {
        crate::error::Error::ResourceExhausted(
            "the list answer is longer than a gRPC message can be".into(),
        )
    })
}

/// The relist's two answers, each kept with the count of changes of its
/// store it was made at ([`berth_store::Store::changes`]).
#[derive(Default)]
pub(super) struct KeptLists {
    pub containers: KeptAnswer,
    pub sandboxes: KeptAnswer,
}

/// One answer kept while its store does not change: kubelet relists every
/// second, and on a settled node nothing changes between two relists.
#[derive(Default)]
pub(super) struct KeptAnswer(std::sync::Mutex<Option<(u64, Bytes)>>);

impl KeptAnswer {
    /// The answer kept for `changes` (the store's count, read before
    /// anything of the store is), or `make`'s, then kept unless a newer one
    /// was kept meanwhile.
    pub fn get<E>(
        &self,
        changes: u64,
        make: impl FnOnce() -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        let lock = || self.0.lock_unpoisoned();
        if let Some((at, answer)) = &*lock() {
            if *at == changes {
                return Ok(answer.clone());
            }
        }
        let answer = make()?;
        let mut kept = lock();
        if kept.as_ref().is_none_or(|(at, _)| *at <= changes) {
            *kept = Some((changes, answer.clone()));
        }
        Ok(answer)
    }
}

/// The gRPC server side of one call, with the services' message limits.
fn grpc<T, U>() -> Grpc<ProstCodec<T, U>>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    Grpc::new(ProstCodec::default())
        .apply_max_message_size_config(Some(MAX_MESSAGE_SIZE), Some(MAX_MESSAGE_SIZE))
}

/// One of the status calls: its name, and the core's answer to it (an
/// `async fn` of [`Cri`], boxed), encoded by tonic's codec.
struct Packed<Req, Resp> {
    cri: Arc<Cri>,
    rpc: &'static str,
    answer: fn(Arc<Cri>, Req) -> BoxFuture<Result<Resp, crate::error::Error>>,
}

impl<Req, Resp> UnaryService<Req> for Packed<Req, Resp>
where
    Req: RequestIds + Send + 'static,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<tonic::Response<Resp>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        let (cri, rpc, answer) = (self.cri.clone(), self.rpc, self.answer);
        Box::pin(async move {
            let deadline = deadline::of(&request);
            let req = request.into_inner();
            let ids = req.ids();
            let body = answer(cri.clone(), req);
            instrument::call(&cri.gate, rpc, ids, deadline, body).await
        })
    }
}

#[cfg(test)]
mod tests;
