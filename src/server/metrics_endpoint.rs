//! The HTTP endpoint that serves berth's metrics (`crate::counters`) at
//! `/metrics` when `[metrics] address` is set (off by default), with the
//! gauges read from the stores at each scrape.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::Cri;
use crate::container::ContainerState;
use crate::counters::Gauges;
use crate::sandbox::SandboxState;

/// The gauges of `cri`'s stores and event hub now.
fn gauges(cri: &Cri) -> Gauges {
    let containers: Vec<ContainerState> = cri
        .core
        .containers
        .list()
        .iter()
        .map(|c| c.status().state)
        .collect();
    let sandboxes: Vec<(SandboxState, bool)> = cri
        .core
        .sandboxes
        .list()
        .iter()
        .map(|s| {
            let status = s.status();
            (status.state, status.pid.is_some())
        })
        .collect();
    let count = |state| containers.iter().filter(|s| **s == state).count();
    let count_pods = |state| sandboxes.iter().filter(|(s, _)| *s == state).count();
    Gauges {
        containers: vec![
            ("created", count(ContainerState::Created)),
            ("running", count(ContainerState::Running)),
            ("exited", count(ContainerState::Exited)),
            ("unknown", count(ContainerState::Unknown)),
        ],
        sandboxes: vec![
            ("ready", count_pods(SandboxState::Ready)),
            ("notready", count_pods(SandboxState::NotReady)),
            ("unknown", count_pods(SandboxState::Unknown)),
        ],
        shims: count(ContainerState::Running) + sandboxes.iter().filter(|(_, p)| *p).count(),
        subscribers: cri.events.subscribers(),
        nri_plugins: cri
            .nri
            .as_ref()
            .and_then(|n| n.nri())
            .map(|nri| nri.stats())
            .unwrap_or_default()
            .into_iter()
            .map(|s| crate::counters::NriPluginStats {
                plugin: s.plugin,
                connected: s.connected,
                requests: s.requests,
                failures: s.failures,
                timeouts: s.timeouts,
                seconds: s.latency_sum.as_secs_f64(),
            })
            .collect(),
    }
}

/// The metrics page, the gauges read from `cri` now.
pub fn render(cri: &Cri) -> String {
    crate::counters::render(&gauges(cri))
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
