//! The CRI socket's gRPC server: the tonic services served by berth's own
//! HTTP/2 connection loop, so that client deadlines are berth's to apply
//! ([`super::deadline`]; tonic's server would answer `Cancelled` at a
//! deadline, from a layer outside any of ours).
//!
//! What tonic's server did is kept: HTTP/2 only, each accepted connection
//! wrapped in [`berth_h2_authority::AuthorityFix`] (clients that send the
//! socket path as `:authority` are served), 16 MiB message limits on the
//! services, and a graceful shutdown (no new connections, GOAWAY on the
//! open ones, in-flight calls finish). The HTTP/2 settings are tonic's
//! defaults or tighter ([`http2_builder`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cri_api::v1::image_service_server::ImageServiceServer;
use cri_api::v1::runtime_service_server::RuntimeServiceServer;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tonic::service::Routes;
use tower::ServiceExt;

use super::deadline::Deadlines;
use super::{Cri, ImageApi, RuntimeApi};

/// gRPC message size limit, as kubelet's and containerd's (16 MiB).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// How long the accept loop rests after a failed accept (out of file
/// descriptors, say) before it tries again, so that it does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// tonic's default HTTP/2 keepalive timeout (no keepalive pings are sent:
/// no interval is set, as in tonic).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The RuntimeService and the ImageService, and berth's admin service
/// (image archives, `server/admin.rs`), with berth's message limits.
pub fn routes(cri: &Arc<Cri>) -> Routes {
    let runtime = RuntimeServiceServer::new(RuntimeApi(cri.clone()))
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let images = ImageServiceServer::new(ImageApi(cri.clone()))
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let admin =
        cri_api::admin::images_server::ImagesServer::new(super::admin::AdminApi(cri.clone()))
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
    // kubelet's relist (ListContainers, ListPodSandbox) from cached entries.
    Routes::new(super::relist::Relist::new(runtime, cri.clone()))
        .add_service(images)
        .add_service(admin)
        .prepare()
}

/// The HTTP/2 settings: tonic's server defaults (unbounded concurrent
/// streams as grpc-go's servers, default windows and frame size, no
/// keepalive pings, 20 s keepalive timeout), except where hyper's own
/// default is tighter than what tonic set: at most 1024 streams reset for
/// local errors per connection (tonic lifts that bound).
fn http2_builder() -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(None)
        .keep_alive_interval(None)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .adaptive_window(false);
    builder
}

/// Serves `routes` on `listener` until `shutdown` resolves, then stops
/// accepting and waits for the open connections to finish their calls and
/// close (the caller bounds that wait).
pub async fn serve(listener: UnixListener, routes: Routes, shutdown: impl Future<Output = ()>) {
    let builder = http2_builder();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => spawn_connection(&builder, stream, &routes, stop_rx.clone()),
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a CRI connection");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
    // No new connections from here (the socket is closed); the open ones
    // are told to finish.
    drop(listener);
    stop_tx.send_replace(true);
    drop(stop_rx);
    stop_tx.closed().await;
}

/// Serves one accepted connection on its own task; when `stop` turns, a
/// graceful shutdown (GOAWAY, the calls in flight finish).
fn spawn_connection(
    builder: &http2::Builder<TokioExecutor>,
    stream: UnixStream,
    routes: &Routes,
    mut stop: watch::Receiver<bool>,
) {
    let service = Deadlines::new(routes.clone())
        .map_request(|req: hyper::Request<Incoming>| req.map(tonic::body::Body::new));
    let conn = builder.serve_connection(
        TokioIo::new(berth_h2_authority::AuthorityFix::new(stream)),
        TowerToHyperService::new(service),
    );
    tokio::spawn(async move {
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = async { let _ = stop.wait_for(|stop| *stop).await; } => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "CRI connection ended with an error");
        }
    });
}
