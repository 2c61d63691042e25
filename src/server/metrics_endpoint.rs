//! The HTTP endpoint that serves berth's metrics (`crate::counters`) at
//! `/metrics` when `[metrics] address` is set (off by default); the page
//! (its gauges read from the stores at each scrape) is made by its owner,
//! `crate::node`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

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

/// The metrics page, made at each scrape.
pub type Page = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `GET /metrics` on `listener` for as long as the daemon runs.
pub async fn serve(listener: tokio::net::TcpListener, page: Page) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a metrics connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let page = page.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = respond(&*page, &req);
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

fn respond<B>(
    page: &(dyn Fn() -> String + Send + Sync),
    req: &Request<B>,
) -> Response<Full<Bytes>> {
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
        (&Method::GET, "/metrics") => reply(StatusCode::OK, prometheus::TEXT_FORMAT, page()),
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
