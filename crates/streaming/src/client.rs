//! A small client of this server (it speaks what kubelet's clients speak):
//! the HTTP upgrade, exec and attach over SPDY or WebSocket, and
//! port-forward over both (and through the WebSocket tunnel), over HTTP or
//! HTTPS ([`Dialer`]). For tests and tools; it favours plainness over
//! speed.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

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

use crate::backend::TerminalSize;
use crate::channel::AbortOnDrop;
use crate::spdy::{Connection, Headers, Role, Stream, StreamWriter};
use crate::websocket::{self, Received};

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

/// Which streams an exec or attach asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Something the server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// On the error channel: the status.
    Error(Vec<u8>),
}

enum Sender {
    Spdy {
        _conn: Connection,
        stdin: Option<StreamWriter>,
        resize: Option<StreamWriter>,
    },
    Ws {
        sink: WsSink,
        _reader: AbortOnDrop,
    },
}

/// A running exec or attach.
pub struct RemoteCommand {
    protocol: String,
    sender: Sender,
    events: mpsc::Receiver<Event>,
}

/// Everything an exec or attach sent back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finished {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The error channel's content (a JSON status in v4 and v5).
    pub status: Vec<u8>,
}

impl Finished {
    /// The exit code a v4/v5 status reports: 0 for success, the
    /// `ExitCode` cause of a `NonZeroExitCode` failure; `None` otherwise.
    pub fn exit_code(&self) -> Option<i32> {
        exit_code(&self.status)
    }
}

/// The exit code in a v4/v5 status (see [`Finished::exit_code`]).
pub fn exit_code(status: &[u8]) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_slice(status).ok()?;
    match v["status"].as_str()? {
        "Success" => Some(0),
        _ if v["reason"] == "NonZeroExitCode" => v["details"]["causes"]
            .as_array()?
            .iter()
            .find(|c| c["reason"] == "ExitCode")?["message"]
            .as_str()?
            .parse()
            .ok(),
        _ => None,
    }
}

/// Forwards a stream's data as events until it ends.
fn spdy_events(stream: Stream, tx: mpsc::Sender<Event>, make: fn(Vec<u8>) -> Event) {
    let mut rx = stream.rx;
    tokio::spawn(async move {
        while let Some(data) = rx.recv().await {
            if tx.send(make(data)).await.is_err() {
                return;
            }
        }
    });
}

impl RemoteCommand {
    /// Upgrades `url` and opens the streams `opts` ask for, offering
    /// `protocols` (most preferred first; empty: the transport's usual ones).
    pub async fn connect(
        url: &str,
        transport: Transport,
        opts: CommandOptions,
        protocols: &[&str],
    ) -> Result<RemoteCommand, ClientError> {
        RemoteCommand::connect_with(&Dialer::plain(), url, transport, opts, protocols).await
    }

    /// [`RemoteCommand::connect`] through `dialer` (for `https://` URLs).
    pub async fn connect_with(
        dialer: &Dialer,
        url: &str,
        transport: Transport,
        opts: CommandOptions,
        protocols: &[&str],
    ) -> Result<RemoteCommand, ClientError> {
        match transport {
            Transport::Spdy => {
                let protocols = or_usual(protocols, crate::REMOTE_COMMAND_SPDY_PROTOCOLS);
                let (conn, protocol) = spdy_upgrade(dialer, url, protocols).await?;
                let open =
                    |kind: &'static str| conn.open(Headers::from_pairs([("streamType", kind)]));
                let (tx, events) = mpsc::channel(64);
                // kubelet's clients open error, stdin, stdout, stderr, resize.
                spdy_events(open("error").await?, tx.clone(), Event::Error);
                let stdin = match opts.stdin {
                    true => Some(open("stdin").await?.tx),
                    false => None,
                };
                if opts.stdout {
                    spdy_events(open("stdout").await?, tx.clone(), Event::Stdout);
                }
                if opts.stderr && !opts.tty {
                    spdy_events(open("stderr").await?, tx.clone(), Event::Stderr);
                }
                let resize = match opts.tty && protocol != "v2.channel.k8s.io" {
                    true => Some(open("resize").await?.tx),
                    false => None,
                };
                Ok(RemoteCommand {
                    protocol,
                    sender: Sender::Spdy {
                        _conn: conn,
                        stdin,
                        resize,
                    },
                    events,
                })
            }
            Transport::WebSocket => {
                let protocols = or_usual(protocols, &["v5.channel.k8s.io", "v4.channel.k8s.io"]);
                let Ws {
                    sink,
                    protocol,
                    mut rx,
                    reader,
                } = ws_upgrade(dialer, url, protocols).await?;
                let (tx, events) = mpsc::channel(64);
                tokio::spawn(async move {
                    while let Some((channel, data)) = rx.recv().await {
                        let event = match channel {
                            1 => Event::Stdout(data),
                            2 => Event::Stderr(data),
                            3 => Event::Error(data),
                            _ => continue,
                        };
                        if tx.send(event).await.is_err() {
                            return;
                        }
                    }
                });
                Ok(RemoteCommand {
                    protocol,
                    sender: Sender::Ws {
                        sink,
                        _reader: reader,
                    },
                    events,
                })
            }
        }
    }

    /// The sub-protocol the server chose.
    pub fn protocol(&self) -> &str {
        &self.protocol
    }

    /// Sends bytes to the process's stdin.
    pub async fn send_stdin(&mut self, data: &[u8]) -> Result<(), ClientError> {
        match &mut self.sender {
            Sender::Spdy { stdin, .. } => match stdin {
                Some(s) => Ok(s.write(data).await?),
                None => Err(protocol_err("no stdin stream")),
            },
            Sender::Ws { sink, .. } => ws_send(sink, encode_ws(&self.protocol, 0, data)).await,
        }
    }

    /// Ends stdin (SPDY: FIN on the stream; WebSocket v5: the close signal).
    pub async fn close_stdin(&mut self) -> Result<(), ClientError> {
        match &mut self.sender {
            Sender::Spdy { stdin, .. } => match stdin {
                Some(s) => Ok(s.close().await?),
                None => Err(protocol_err("no stdin stream")),
            },
            Sender::Ws { sink, .. } if self.protocol == "v5.channel.k8s.io" => {
                ws_send(sink, Message::Binary(vec![255u8, 0].into())).await
            }
            Sender::Ws { .. } => Err(protocol_err(format!(
                "{:?} cannot close stdin",
                self.protocol
            ))),
        }
    }

    /// Tells the server the terminal's size.
    pub async fn resize(&mut self, width: u16, height: u16) -> Result<(), ClientError> {
        let json = serde_json::to_vec(&TerminalSize { width, height })
            .map_err(|e| protocol_err(e.to_string()))?;
        match &mut self.sender {
            Sender::Spdy { resize, .. } => match resize {
                Some(s) => Ok(s.write(&json).await?),
                None => Err(protocol_err("no resize stream")),
            },
            Sender::Ws { sink, .. } => ws_send(sink, encode_ws(&self.protocol, 4, &json)).await,
        }
    }

    /// The next thing the server sent; `None` once it has ended everything.
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// Reads stdout until it contains `needle` (or `timeout` passes), and
    /// returns all stdout read so far.
    pub async fn read_stdout_until(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        let found = tokio::time::timeout(timeout, async {
            while let Some(event) = self.next().await {
                if let Event::Stdout(data) = event {
                    out.extend_from_slice(&data);
                    if String::from_utf8_lossy(&out).contains(needle) {
                        return true;
                    }
                }
            }
            false
        })
        .await;
        match found {
            Ok(true) => Ok(out),
            _ => Err(protocol_err(format!(
                "{needle:?} not in stdout {:?}",
                String::from_utf8_lossy(&out)
            ))),
        }
    }

    /// Reads everything until the server ends, bounded by `timeout`.
    pub async fn finish(mut self, timeout: Duration) -> Result<Finished, ClientError> {
        let mut done = Finished::default();
        tokio::time::timeout(timeout, async {
            while let Some(event) = self.next().await {
                match event {
                    Event::Stdout(d) => done.stdout.extend(d),
                    Event::Stderr(d) => done.stderr.extend(d),
                    Event::Error(d) => done.status.extend(d),
                }
            }
        })
        .await
        .map_err(|_| protocol_err(format!("the session did not end in {timeout:?}: {done:?}")))?;
        Ok(done)
    }
}

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
