//! Port forwarding: each forwarded connection is a pair of channels, data
//! (both ways) and error (from the server: a text message if forwarding
//! failed). Over SPDY (`portforward.k8s.io`) the client opens the pair per
//! connection with the headers `streamType` (`data` / `error`), `port` and
//! `requestID`; over WebSocket the pairs are fixed per port by the request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::backend::Backend;
use crate::channel::{pump_in, pump_out, AbortOnDrop, OutChannel};
use crate::pool::ChunkReceiver;
use crate::spdy::frame::rst;
use crate::spdy::{Accept, Connection, Headers, Stream};

/// The SPDY port-forward protocol.
pub const SPDY_PROTOCOL: &str = "portforward.k8s.io";
/// Most forwarded connections of one port-forward session (one token) at once.
pub(crate) const MAX_FORWARDS: usize = 128;
/// Most connections of one session whose second stream has not come yet.
pub(crate) const MAX_PENDING_PAIRS: usize = 32;
/// Buffer of the pipe between a forwarded connection and the backend, each
/// way. Small: a session may forward [`MAX_FORWARDS`] connections, and
/// what waits in the pipes is outside the connection's byte pool.
pub const FORWARD_PIPE: usize = 16 * 1024;

/// Forwards one connection to `port`: the client's bytes (`inbound`, ending
/// at its half-close) to the backend, the backend's to `data`. A failure is
/// written as text to `error`; both channels are closed at the end.
pub(crate) async fn forward(
    backend: Arc<dyn Backend>,
    sandbox: String,
    port: u16,
    inbound: ChunkReceiver,
    data: OutChannel,
    error: OutChannel,
) {
    let (app, ours) = tokio::io::duplex(FORWARD_PIPE);
    let (read, write) = tokio::io::split(ours);
    // The client's direction ends with the backend: it may never half-close.
    let _to_backend = AbortOnDrop(tokio::spawn(pump_in(inbound, write)));
    let from_backend = {
        let data = data.clone();
        async move {
            pump_out(read, data.clone()).await;
            let _ = data.close().await;
        }
    };
    let (result, ()) = tokio::join!(backend.port_forward(&sandbox, port, app), from_backend);
    if let Err(e) = result {
        let message = format!("error forwarding port {port} to pod {sandbox}: {e}");
        tracing::debug!(%message, "port-forward");
        let _ = error.write(message.as_bytes()).await;
    }
    let _ = error.close().await;
    let _ = data.close().await;
}

/// Checks a stream's headers as kubelet does: a port above 0 and a
/// stream type of `data` or `error`.
fn accept_port_forward_stream() -> Accept {
    Box::new(|headers| {
        stream_port(headers)?;
        match headers.get("streamtype") {
            Some("data" | "error") => Ok(()),
            None => Err("\"streamType\" header is required".into()),
            Some(other) => Err(format!("invalid stream type {other:?}")),
        }
    })
}

fn stream_port(headers: &Headers) -> Result<u16, String> {
    let text = headers
        .get("port")
        .ok_or_else(|| "\"port\" header is required".to_string())?;
    match text.parse::<u16>() {
        Ok(0) => Err(format!("port {text:?} must be > 0")),
        Ok(port) => Ok(port),
        Err(e) => Err(format!("unable to parse {text:?} as a port: {e}")),
    }
}

/// The pair a stream belongs to: its `requestID`, or (older clients) one
/// made from the stream id the way kubelet does.
fn request_id(stream: &Stream) -> String {
    match stream.headers.get("requestid") {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => match stream.headers.get("streamtype") {
            Some("data") => stream.id.saturating_sub(2).to_string(),
            _ => stream.id.to_string(),
        },
    }
}

/// The streams of one forwarded connection, as they arrive.
struct Pair {
    data: Option<Stream>,
    error: Option<Stream>,
    since: Instant,
}

impl Pair {
    async fn fail(self, message: &str) {
        if let Some(error) = &self.error {
            let _ = error.tx.write(message.as_bytes()).await;
        }
        for s in [self.data, self.error].into_iter().flatten() {
            let _ = s.tx.close().await;
        }
    }
}

/// Serves port forwarding over an upgraded SPDY connection until the client
/// hangs up; every complete pair of streams is one forwarded connection.
pub(crate) async fn serve_spdy<IO>(
    io: IO,
    sandbox: String,
    backend: Arc<dyn Backend>,
    creation_timeout: Duration,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let Some(mut conn) = Connection::serve(io, accept_port_forward_stream()) else {
        return;
    };
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut forwards = JoinSet::new();
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            stream = conn.accept() => {
                let Some(stream) = stream else { break };
                let id = request_id(&stream);
                if !pairs.contains_key(&id) && pairs.len() >= MAX_PENDING_PAIRS {
                    tracing::debug!(%id, "port-forward: too many half-opened connections; refusing a stream");
                    let _ = stream.tx.reset(rst::REFUSED_STREAM).await;
                    continue;
                }
                let pair = pairs.entry(id.clone()).or_insert_with(|| Pair {
                    data: None,
                    error: None,
                    since: Instant::now(),
                });
                let slot = match stream.headers.get("streamtype") {
                    Some("data") => &mut pair.data,
                    _ => &mut pair.error,
                };
                if slot.is_some() {
                    let message = format!(
                        "error processing stream for request {id}: {} stream already assigned",
                        stream.headers.get("streamtype").unwrap_or_default()
                    );
                    let _ = stream.tx.reset(rst::PROTOCOL_ERROR).await;
                    if let Some(error) = &pair.error {
                        let _ = error.tx.write(message.as_bytes()).await;
                    }
                    continue;
                }
                *slot = Some(stream);
                if pair.data.is_some() && pair.error.is_some() {
                    let Some(Pair { data: Some(data), error: Some(error), .. }) = pairs.remove(&id) else {
                        continue;
                    };
                    if forwards.len() >= MAX_FORWARDS {
                        Pair { data: Some(data), error: Some(error), since: Instant::now() }
                            .fail(&format!("error forwarding to pod {sandbox}: {MAX_FORWARDS} connections are forwarded already"))
                            .await;
                        continue;
                    }
                    // The accept check made sure the port parses.
                    let port = stream_port(&data.headers).unwrap_or_default();
                    forwards.spawn(forward(
                        backend.clone(),
                        sandbox.clone(),
                        port,
                        data.rx,
                        Arc::new(data.tx),
                        Arc::new(error.tx),
                    ));
                }
            }
            _ = sweep.tick() => {
                let stale: Vec<String> = pairs
                    .iter()
                    .filter(|(_, p)| p.since.elapsed() >= creation_timeout)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in stale {
                    if let Some(pair) = pairs.remove(&id) {
                        pair.fail(&format!("timed out waiting for streams of request {id}")).await;
                    }
                }
            }
            Some(_) = forwards.join_next(), if !forwards.is_empty() => {}
        }
    }
    // The client hung up: dropping `forwards` ends every forwarded connection.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_headers_are_checked() {
        let accept = accept_port_forward_stream();
        let h = |pairs: &[(&str, &str)]| Headers::from_pairs(pairs.iter().copied());
        assert!(accept(&h(&[("streamType", "data"), ("port", "80")])).is_ok());
        assert!(accept(&h(&[("streamType", "error"), ("port", "65535")])).is_ok());
        for bad in [
            h(&[("streamType", "data")]),
            h(&[("streamType", "data"), ("port", "0")]),
            h(&[("streamType", "data"), ("port", "70000")]),
            h(&[("streamType", "stdout"), ("port", "80")]),
            h(&[("port", "80")]),
        ] {
            assert!(accept(&bad).is_err(), "{bad:?}");
        }
    }
}
