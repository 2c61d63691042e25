//! A runtime's Prometheus page (berth's `[metrics] address`): fetched
//! with a bounded plain HTTP/1.1 GET, and berth's RPC histogram read from it.

use anyhow::{anyhow, Context, Result};

use super::status::STATUS_TIMEOUT;
use super::Workload;
use crate::report::histogram_buckets;
use crate::target::Target;

/// A metrics page larger than this is refused.
const SCRAPE_LIMIT: u64 = 8 << 20;
/// berth's RPC latency histogram.
const RPC_HISTOGRAM: &str = "berth_grpc_request_duration_seconds";

impl Workload {
    /// The metrics page of every target that has an endpoint (`None`:
    /// none, or it did not answer).
    pub(super) async fn scrape_all(&self, targets: &[Target]) -> Vec<Option<String>> {
        let mut pages = Vec::new();
        for t in targets {
            pages.push(match self.metrics.get(t.name()) {
                Some(addr) => scrape(addr).await.ok(),
                None => None,
            });
        }
        pages
    }
}

/// The buckets of berth's RPC histogram for the successful calls of `method`.
pub(super) fn rpc_buckets(page: &str, method: &str) -> Vec<(f64, f64)> {
    histogram_buckets(page, RPC_HISTOGRAM, &[("method", method), ("code", "OK")])
}

/// `GET /metrics` from `addr` (`host:port`), plain HTTP/1.1, bounded in
/// time and size; the body.
pub(super) async fn scrape(addr: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(SCRAPE_LIMIT + 1)
            .read_to_end(&mut raw)
            .await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(STATUS_TIMEOUT, fetch)
        .await
        .map_err(|_| anyhow!("metrics {addr}: no answer in {STATUS_TIMEOUT:?}"))?
        .with_context(|| format!("metrics {addr}"))?;
    if raw.len() as u64 > SCRAPE_LIMIT {
        return Err(anyhow!("metrics {addr}: page over {SCRAPE_LIMIT} bytes"));
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("metrics {addr}: no HTTP header end"))?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(anyhow!("metrics {addr}: {status}"));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(anyhow!("metrics {addr}: chunked answers are not read"));
    }
    Ok(body.to_string())
}
