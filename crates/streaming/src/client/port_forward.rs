//! Port-forward: over SPDY (also tunnelled in a WebSocket), a stream pair
//! per forwarded connection; over a WebSocket, the ports the URL names.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{
    encode_ws, or_usual, protocol_err, spdy_upgrade, ws_handshake, ws_send, ws_upgrade,
    ClientError, Dialer, Ws, WsSink,
};
use crate::channel::AbortOnDrop;
use crate::spdy::{Connection, Headers, Role, Stream};

/// Port forwarding over SPDY: one connection, a stream pair per
/// forwarded connection.
pub struct SpdyPortForward {
    conn: Connection,
    next_request: u32,
}

/// One forwarded connection.
pub struct ForwardedConnection {
    data: Stream,
    error: Stream,
}

/// What one forwarded connection brought back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forwarded {
    pub data: Vec<u8>,
    /// The error stream's text (empty when forwarding worked).
    pub error: String,
}

async fn drain(rx: &mut crate::pool::ChunkReceiver, into: &mut Vec<u8>) {
    while let Some(d) = rx.recv().await {
        into.extend(d);
    }
}

impl SpdyPortForward {
    /// Upgrades `url` with `portforward.k8s.io`.
    pub async fn connect(url: &str) -> Result<SpdyPortForward, ClientError> {
        SpdyPortForward::connect_with(&Dialer::plain(), url).await
    }

    /// [`SpdyPortForward::connect`] through `dialer`.
    pub async fn connect_with(dialer: &Dialer, url: &str) -> Result<SpdyPortForward, ClientError> {
        let (conn, _) = spdy_upgrade(dialer, url, &[crate::PORT_FORWARD_SPDY_PROTOCOL]).await?;
        Ok(SpdyPortForward {
            conn,
            next_request: 0,
        })
    }

    /// Upgrades `url` to a WebSocket with `SPDY/3.1+portforward.k8s.io`
    /// (as kubectl 1.31+ does) and speaks SPDY inside its binary messages.
    pub async fn connect_tunnelled(url: &str) -> Result<SpdyPortForward, ClientError> {
        SpdyPortForward::connect_tunnelled_with(&Dialer::plain(), url).await
    }

    /// [`SpdyPortForward::connect_tunnelled`] through `dialer`.
    pub async fn connect_tunnelled_with(
        dialer: &Dialer,
        url: &str,
    ) -> Result<SpdyPortForward, ClientError> {
        let (ws, protocol) =
            ws_handshake(dialer, url, &[crate::PORT_FORWARD_TUNNEL_PROTOCOL]).await?;
        if protocol != crate::PORT_FORWARD_TUNNEL_PROTOCOL {
            return Err(protocol_err(format!(
                "the server chose sub-protocol {protocol:?}, not {:?}",
                crate::PORT_FORWARD_TUNNEL_PROTOCOL
            )));
        }
        let conn = Connection::new(crate::tunnel::WsBytes::new(ws), Role::Client, None)
            .map_err(|e| protocol_err(e.to_string()))?;
        Ok(SpdyPortForward {
            conn,
            next_request: 0,
        })
    }

    /// Opens the error and data streams of a new connection to `port`.
    pub async fn open(&mut self, port: u16) -> Result<ForwardedConnection, ClientError> {
        let id = self.next_request.to_string();
        self.next_request += 1;
        let port = port.to_string();
        let headers = |kind: &'static str| {
            Headers::from_pairs([
                ("streamType", kind),
                ("port", port.as_str()),
                ("requestID", id.as_str()),
            ])
        };
        let error = self.conn.open(headers("error")).await?;
        // Nothing is sent on the error stream.
        error.tx.close().await?;
        let data = self.conn.open(headers("data")).await?;
        Ok(ForwardedConnection { data, error })
    }
}

impl ForwardedConnection {
    /// Sends bytes to the port.
    pub async fn send(&self, data: &[u8]) -> Result<(), ClientError> {
        Ok(self.data.tx.write(data).await?)
    }

    /// Ends the client's direction (half-close).
    pub async fn close_write(&self) -> Result<(), ClientError> {
        Ok(self.data.tx.close().await?)
    }

    /// Reads until the server ends both streams, bounded by `timeout`.
    pub async fn finish(mut self, timeout: Duration) -> Result<Forwarded, ClientError> {
        let mut data = Vec::new();
        let mut error = Vec::new();
        tokio::time::timeout(timeout, async {
            tokio::join!(
                drain(&mut self.data.rx, &mut data),
                drain(&mut self.error.rx, &mut error)
            )
        })
        .await
        .map_err(|_| protocol_err("the forwarded connection did not end in time"))?;
        Ok(Forwarded {
            data,
            error: String::from_utf8_lossy(&error).into_owned(),
        })
    }
}

/// Port forwarding over a WebSocket: the ports are fixed by the request.
pub struct WsPortForward {
    protocol: String,
    sink: WsSink,
    rx: mpsc::Receiver<(u8, Vec<u8>)>,
    _reader: AbortOnDrop,
    /// What each port brought back so far.
    got: Vec<Forwarded>,
}

impl WsPortForward {
    /// Upgrades `url`, offering `protocols` (empty: `v4.channel.k8s.io`),
    /// and checks that every channel of the `ports` starts with its port.
    pub async fn connect(
        url: &str,
        protocols: &[&str],
        ports: &[u16],
    ) -> Result<WsPortForward, ClientError> {
        WsPortForward::connect_with(&Dialer::plain(), url, protocols, ports).await
    }

    /// [`WsPortForward::connect`] through `dialer`.
    pub async fn connect_with(
        dialer: &Dialer,
        url: &str,
        protocols: &[&str],
        ports: &[u16],
    ) -> Result<WsPortForward, ClientError> {
        let protocols = or_usual(protocols, &["v4.channel.k8s.io"]);
        let Ws {
            sink,
            protocol,
            mut rx,
            reader,
        } = ws_upgrade(dialer, url, protocols).await?;
        let mut seen = 0;
        while seen < 2 * ports.len() {
            let (channel, data) = rx
                .recv()
                .await
                .ok_or_else(|| protocol_err("closed before naming the ports"))?;
            let port = ports
                .get(usize::from(channel) / 2)
                .ok_or_else(|| protocol_err(format!("unexpected channel {channel}")))?;
            if data != port.to_le_bytes() {
                return Err(protocol_err(format!(
                    "channel {channel} starts with {data:?}, not port {port}"
                )));
            }
            seen += 1;
        }
        Ok(WsPortForward {
            protocol,
            sink,
            rx,
            _reader: reader,
            got: vec![Forwarded::default(); ports.len()],
        })
    }

    /// Sends bytes to the `index`th port.
    pub async fn send(&mut self, index: usize, data: &[u8]) -> Result<(), ClientError> {
        let message = encode_ws(&self.protocol, (2 * index) as u8, data);
        ws_send(&mut self.sink, message).await
    }

    /// Files one received message; false once the server has closed.
    async fn receive(&mut self) -> bool {
        let Some((channel, data)) = self.rx.recv().await else {
            return false;
        };
        if let Some(f) = self.got.get_mut(usize::from(channel) / 2) {
            match channel % 2 {
                0 => f.data.extend(data),
                _ => f.error.push_str(&String::from_utf8_lossy(&data)),
            }
        }
        true
    }

    /// Reads until the `index`th port's data or error contains `needle`
    /// (bounded by `timeout`); returns what that port brought so far.
    pub async fn read_until(
        &mut self,
        index: usize,
        needle: &str,
        timeout: Duration,
    ) -> Result<Forwarded, ClientError> {
        let has = |f: &Forwarded| {
            String::from_utf8_lossy(&f.data).contains(needle) || f.error.contains(needle)
        };
        let found = tokio::time::timeout(timeout, async {
            loop {
                match self.got.get(index) {
                    Some(f) if has(f) => return true,
                    None => return false,
                    _ => {}
                }
                if !self.receive().await {
                    return false;
                }
            }
        })
        .await;
        match (found, self.got.get(index)) {
            (Ok(true), Some(f)) => Ok(f.clone()),
            (_, f) => Err(protocol_err(format!(
                "{needle:?} not received from port #{index}: {f:?}"
            ))),
        }
    }

    /// Reads until the server closes, bounded by `timeout`: what each port
    /// brought back.
    pub async fn finish(mut self, timeout: Duration) -> Result<Vec<Forwarded>, ClientError> {
        tokio::time::timeout(timeout, async { while self.receive().await {} })
            .await
            .map_err(|_| protocol_err("the port-forward did not end in time"))?;
        Ok(self.got)
    }
}
