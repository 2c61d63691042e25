//! A small client of this server (it speaks what kubelet's clients speak):
//! the HTTP upgrade, exec and attach over SPDY or WebSocket, and
//! port-forward over both (and through the WebSocket tunnel), over HTTP or
//! HTTPS ([`Dialer`]). For tests and tools; it favours plainness over
//! speed.
//!
//! This module dials and upgrades; `command` runs exec and attach on the
//! upgraded connection, and `port_forward` forwards ports.

use std::collections::HashMap;
use std::io;

use base64::Engine;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::channel::AbortOnDrop;
use crate::spdy::{Connection, Role};
use crate::websocket::{self, Received};

mod command;
mod port_forward;

pub use command::{exit_code, CommandOptions, Event, Finished, RemoteCommand};
pub use port_forward::{Forwarded, ForwardedConnection, SpdyPortForward, WsPortForward};

/// Largest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// What a client call failed with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The server answered the upgrade with something other than 101.
    #[error("HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("protocol: {0}")]
    Protocol(String),
}

fn protocol_err(message: impl Into<String>) -> ClientError {
    ClientError::Protocol(message.into())
}

/// Which upgrade to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Spdy,
    WebSocket,
}

/// A connection to the server, plain or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
type BoxIo = Box<dyn Io>;

/// A 101 answer: the connection, the response headers (names lowered).
struct Upgraded {
    tcp: BoxIo,
    headers: HashMap<String, String>,
}

impl Upgraded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// How the client reaches the server: `http://` URLs in plain text, and
/// `https://` ones with TLS, trusting only the CA it was given.
#[derive(Clone, Default)]
pub struct Dialer {
    tls: Option<TlsConnector>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Dialer {
    /// Plain HTTP only (what [`RemoteCommand::connect`] and the other
    /// `connect`s use).
    pub fn plain() -> Dialer {
        Dialer::default()
    }

    /// Also `https://`, verifying the server's certificate against the
    /// certificates of `ca_pem` (a CA, or the server's self-signed
    /// certificate) and the URL's host.
    pub fn trusting(ca_pem: &[u8]) -> Result<Dialer, ClientError> {
        let config = crate::tls::client_config(ca_pem).map_err(|e| protocol_err(e.to_string()))?;
        Ok(Dialer {
            tls: Some(TlsConnector::from(config)),
        })
    }

    /// Connects to `host` (`ADDR:PORT`, `[V6]:PORT` or `NAME:PORT`), with
    /// TLS when `tls`.
    async fn connect(&self, host: &str, tls: bool) -> Result<BoxIo, ClientError> {
        let tcp = TcpStream::connect(host).await?;
        let _ = tcp.set_nodelay(true);
        if !tls {
            return Ok(Box::new(tcp));
        }
        let connector = self
            .tls
            .as_ref()
            .ok_or_else(|| protocol_err("an https:// URL needs a Dialer that trusts a CA"))?;
        let name = match host.parse::<std::net::SocketAddr>() {
            Ok(addr) => ServerName::IpAddress(addr.ip().into()),
            Err(_) => {
                let name = host.rsplit_once(':').map_or(host, |(n, _)| n);
                ServerName::try_from(name.to_string())
                    .map_err(|e| protocol_err(format!("{name}: {e}")))?
            }
        };
        Ok(Box::new(connector.connect(name, tcp).await?))
    }
}

/// Sends `method url` with `headers` and reads the answer's head; anything
/// but 101 is an [`ClientError::Http`] with the body.
async fn upgrade(
    dialer: &Dialer,
    method: &str,
    url: &str,
    headers: &[(&str, String)],
) -> Result<Upgraded, ClientError> {
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => {
            return Err(protocol_err(format!(
                "{url}: only http:// and https:// URLs"
            )))
        }
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut tcp = dialer.connect(host, tls).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).await?;
    // Byte by byte, so nothing after the head is taken from the stream.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return Err(protocol_err("response head too long"));
        }
        let mut b = [0u8];
        if tcp.read(&mut b).await? == 0 {
            return Err(protocol_err("the server hung up before answering"));
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol_err(format!("bad status line in {head:?}")))?;
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if status != 101 {
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len.min(MAX_HEAD)];
        tcp.read_exact(&mut body).await?;
        return Err(ClientError::Http {
            status,
            body: String::from_utf8_lossy(&body).trim().to_string(),
        });
    }
    Ok(Upgraded { tcp, headers })
}

async fn spdy_upgrade(
    dialer: &Dialer,
    url: &str,
    protocols: &[&str],
) -> Result<(Connection, String), ClientError> {
    let mut headers = vec![
        ("Connection", "Upgrade".to_string()),
        ("Upgrade", "SPDY/3.1".to_string()),
    ];
    for p in protocols {
        headers.push(("X-Stream-Protocol-Version", p.to_string()));
    }
    let up = upgrade(dialer, "POST", url, &headers).await?;
    let protocol = up
        .header("x-stream-protocol-version")
        .unwrap_or_default()
        .to_string();
    let conn =
        Connection::new(up.tcp, Role::Client, None).map_err(|e| protocol_err(e.to_string()))?;
    Ok((conn, protocol))
}

type WsSink = SplitSink<WebSocketStream<BoxIo>, Message>;

/// A WebSocket after the upgrade.
struct Ws {
    sink: WsSink,
    protocol: String,
    /// Received messages as (channel, payload).
    rx: mpsc::Receiver<(u8, Vec<u8>)>,
    /// The reader; the connection closes when it goes.
    reader: AbortOnDrop,
}

/// The WebSocket handshake: the connection and the chosen sub-protocol.
async fn ws_handshake(
    dialer: &Dialer,
    url: &str,
    protocols: &[&str],
) -> Result<(WebSocketStream<BoxIo>, String), ClientError> {
    let mut key = [0u8; 16];
    getrandom::getrandom(&mut key).map_err(|e| protocol_err(e.to_string()))?;
    let key = base64::engine::general_purpose::STANDARD.encode(key);
    let mut headers = vec![
        ("Connection", "Upgrade".to_string()),
        ("Upgrade", "websocket".to_string()),
        ("Sec-WebSocket-Version", "13".to_string()),
        ("Sec-WebSocket-Key", key.clone()),
    ];
    if !protocols.is_empty() {
        headers.push(("Sec-WebSocket-Protocol", protocols.join(", ")));
    }
    let up = upgrade(dialer, "GET", url, &headers).await?;
    if up.header("sec-websocket-accept") != Some(derive_accept_key(key.as_bytes()).as_str()) {
        return Err(protocol_err("wrong Sec-WebSocket-Accept"));
    }
    let protocol = up
        .header("sec-websocket-protocol")
        .unwrap_or_default()
        .to_string();
    let ws = WebSocketStream::from_raw_socket(up.tcp, WsRole::Client, None).await;
    Ok((ws, protocol))
}

async fn ws_upgrade(dialer: &Dialer, url: &str, protocols: &[&str]) -> Result<Ws, ClientError> {
    let (ws, protocol) = ws_handshake(dialer, url, protocols).await?;
    let base64 = protocol.contains("base64");
    let (sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::channel(64);
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let item = match websocket::decode(base64, message) {
                Received::Data(channel, data) => (channel, data),
                Received::Skip => continue,
                Received::Closed => break,
            };
            if tx.send(item).await.is_err() {
                break;
            }
        }
    });
    Ok(Ws {
        sink,
        protocol,
        rx,
        reader: AbortOnDrop(reader),
    })
}

fn encode_ws(protocol: &str, channel: u8, data: &[u8]) -> Message {
    websocket::encode(protocol.contains("base64"), channel, data)
}

/// `protocols`, or `usual` when none are given.
fn or_usual<'a>(protocols: &'a [&'a str], usual: &'a [&'a str]) -> &'a [&'a str] {
    if protocols.is_empty() {
        usual
    } else {
        protocols
    }
}

async fn ws_send(sink: &mut WsSink, message: Message) -> Result<(), ClientError> {
    sink.send(message)
        .await
        .map_err(|e| ClientError::Io(io::Error::new(io::ErrorKind::BrokenPipe, e)))
}
