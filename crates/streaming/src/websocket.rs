//! The WebSocket transport (kubelet's "wsstream"): every message starts with
//! its channel number. Binary sub-protocols (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`, `channel.k8s.io`, `portforward.k8s.io`) prefix a
//! byte; the base64 ones send text: the channel as a digit, then the data
//! in base64. `v5.channel.k8s.io` adds the close signal: `[255, channel]`
//! ends the client's side of that channel (its stdin).
//!
//! Exec and attach use channels 0 stdin, 1 stdout, 2 stderr, 3 error,
//! 4 resize. Port forwarding uses a pair per port, `2i` data and `2i+1`
//! error, each starting with the port (2 bytes, little endian).

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Mutex};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::backend::Backend;
use crate::channel::{AbortOnDrop, Channel, OutChannel};
use crate::pool::{BytePool, ChunkSender};
use crate::portforward::forward;
use crate::remotecommand::{self, Channels, Command, Outcome, StatusFormat, LINGER};
use crate::spdy::conn::{CONNECTION_BYTES, STREAM_BYTES};

/// Exec and attach sub-protocols, most preferred first ("" is a client
/// that names none).
pub const REMOTE_COMMAND_PROTOCOLS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
    "",
];

/// Port-forward sub-protocols; the first is SPDY tunnelled through the
/// WebSocket (see [`crate::tunnel`]), the others carry a pair of channels
/// per port.
pub const PORT_FORWARD_PROTOCOLS: &[&str] = &[
    crate::tunnel::PORT_FORWARD_PROTOCOL,
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "portforward.k8s.io",
    "",
];

/// Most ports one WebSocket port-forward carries (two channels each; 255 is
/// reserved).
pub const MAX_PORTS: usize = 100;

/// Largest message (and frame) accepted from a client; a larger one ends
/// the connection before it is buffered whole. Clients write their stdin
/// and port data in pieces of 32 KiB.
pub const MAX_MESSAGE: usize = 4 << 20;

/// The WebSocket settings of every server connection: messages and frames
/// bounded by [`MAX_MESSAGE`].
pub(crate) fn limits() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// The v5 close signal.
const CLOSE_SIGNAL: u8 = 255;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// How a negotiated sub-protocol frames its messages.
#[derive(Debug, Clone, Copy)]
struct Framing {
    base64: bool,
    close_signal: bool,
}

impl Framing {
    fn of(protocol: &str) -> Framing {
        Framing {
            base64: protocol.contains("base64"),
            close_signal: protocol == "v5.channel.k8s.io",
        }
    }
}

/// A channel's message: the channel byte and the data (binary), or the
/// channel digit and the data in base64 (text).
pub(crate) fn encode(base64: bool, channel: u8, data: &[u8]) -> Message {
    if base64 {
        let text = format!(
            "{}{}",
            char::from(b'0' + channel),
            base64::engine::general_purpose::STANDARD.encode(data)
        );
        Message::Text(text.into())
    } else {
        let mut frame = Vec::with_capacity(data.len() + 1);
        frame.push(channel);
        frame.extend_from_slice(data);
        Message::Binary(frame.into())
    }
}

/// What a message carries.
pub(crate) enum Received {
    /// Data on a channel.
    Data(u8, Vec<u8>),
    /// Nothing to act on (control frames, empty or undecodable messages).
    Skip,
    /// The peer closed the connection.
    Closed,
}

/// The channel and data of a received message (see [`encode`]); a v5 close
/// signal comes out as data on channel 255.
pub(crate) fn decode(
    base64: bool,
    message: Result<Message, tokio_tungstenite::tungstenite::Error>,
) -> Received {
    let data: Vec<u8> = match message {
        Ok(Message::Binary(data)) => data.into(),
        Ok(Message::Text(text)) => text.as_bytes().to_vec(),
        Ok(Message::Close(_)) | Err(_) => return Received::Closed,
        Ok(_) => return Received::Skip,
    };
    match decode_message(base64, &data) {
        Some((channel, payload)) => Received::Data(channel, payload),
        None => Received::Skip,
    }
}

/// The channel and data of one message's bytes (binary, or the text of a
/// base64 sub-protocol): `None` for an empty message or bad base64. A v5
/// close signal comes out as data on channel 255.
pub fn decode_message(base64: bool, data: &[u8]) -> Option<(u8, Vec<u8>)> {
    let (&first, payload) = data.split_first()?;
    if first == CLOSE_SIGNAL || !base64 {
        return Some((first, payload.to_vec()));
    }
    match base64::engine::general_purpose::STANDARD.decode(payload) {
        Ok(bytes) => Some((first.wrapping_sub(b'0'), bytes)),
        Err(_) => {
            tracing::warn!("WebSocket: a message is not base64");
            None
        }
    }
}

type Sink<IO> = SplitSink<WebSocketStream<IO>, Message>;

/// Sends messages; shared by every channel of a connection.
struct Writer<IO> {
    sink: Mutex<Sink<IO>>,
    framing: Framing,
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send> Writer<IO> {
    async fn send(&self, channel: u8, data: &[u8]) -> io::Result<()> {
        let message = encode(self.framing.base64, channel, data);
        self.sink
            .lock()
            .await
            .send(message)
            .await
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e))
    }

    async fn close(&self) {
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = self
            .sink
            .lock()
            .await
            .send(Message::Close(Some(frame)))
            .await;
    }
}

/// One channel of a connection.
struct WsChannel<IO> {
    writer: Arc<Writer<IO>>,
    channel: u8,
}

#[async_trait]
impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Channel for WsChannel<IO> {
    async fn write(&self, data: &[u8]) -> io::Result<()> {
        self.writer.send(self.channel, data).await
    }
    async fn close(&self) -> io::Result<()> {
        // These protocols cannot end one channel from the server's side.
        Ok(())
    }
}

/// A started connection: its writer, the reader task, and whether the
/// client has gone.
struct Ws<IO> {
    writer: Arc<Writer<IO>>,
    closed: watch::Receiver<bool>,
    _reader: AbortOnDrop,
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Ws<IO> {
    /// Starts reading `ws`; client data on channel `c` goes to `routes[c]`.
    fn start(ws: WebSocketStream<IO>, protocol: &str, routes: HashMap<u8, ChunkSender>) -> Ws<IO> {
        let framing = Framing::of(protocol);
        let (sink, stream) = ws.split();
        let (closed_tx, closed) = watch::channel(false);
        let reader = tokio::spawn(async move {
            read_loop(stream, routes, framing).await;
            closed_tx.send_replace(true);
        });
        Ws {
            writer: Arc::new(Writer {
                sink: Mutex::new(sink),
                framing,
            }),
            closed,
            _reader: AbortOnDrop(reader),
        }
    }

    fn channel(&self, channel: u8) -> OutChannel {
        Arc::new(WsChannel {
            writer: self.writer.clone(),
            channel,
        })
    }

    fn gone(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut closed = self.closed.clone();
        async move {
            let _ = closed.wait_for(|c| *c).await;
        }
    }

    /// Says goodbye and waits (bounded) for the client's answer.
    async fn finish(&self) {
        self.writer.close().await;
        let _ = tokio::time::timeout(LINGER, self.gone()).await;
    }
}

async fn read_loop<IO: AsyncRead + AsyncWrite + Unpin>(
    mut stream: SplitStream<WebSocketStream<IO>>,
    mut routes: HashMap<u8, ChunkSender>,
    framing: Framing,
) {
    while let Some(message) = stream.next().await {
        let (channel, payload) = match decode(framing.base64, message) {
            Received::Data(channel, payload) => (channel, payload),
            Received::Skip => continue,
            Received::Closed => break,
        };
        if framing.close_signal && channel == CLOSE_SIGNAL {
            match payload[..] {
                [closed] => {
                    routes.remove(&closed);
                    continue;
                }
                _ => {
                    tracing::warn!("WebSocket: a close signal must name one channel");
                    break;
                }
            }
        }
        if payload.is_empty() {
            continue;
        }
        if let Some(tx) = routes.get(&channel) {
            // Handed on in pieces: what waits for the consumer stays small.
            for piece in payload.chunks(crate::channel::CHUNK) {
                if tx.send(piece.to_vec()).await.is_err() {
                    routes.remove(&channel);
                    break;
                }
            }
        }
    }
}

/// Serves an exec or attach over a WebSocket.
pub(crate) async fn serve_remote_command<IO>(
    ws: WebSocketStream<IO>,
    protocol: &str,
    cmd: Command,
    backend: Arc<dyn Backend>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut routes = HashMap::new();
    let pool = BytePool::new(CONNECTION_BYTES);
    let (stdin_tx, stdin_rx) = pool.channel(STREAM_BYTES);
    let (resize_tx, resize_rx) = pool.channel(STREAM_BYTES);
    if cmd.stdin() {
        routes.insert(STDIN, stdin_tx);
    }
    if cmd.tty() {
        routes.insert(RESIZE, resize_tx);
    }
    let ws = Ws::start(ws, protocol, routes);
    // An empty message on the lowest channel the server writes tells the
    // client the connection is ready.
    let first = if cmd.stdout() {
        STDOUT
    } else if cmd.stderr() {
        STDERR
    } else {
        ERROR
    };
    if ws.writer.send(first, &[]).await.is_err() {
        return;
    }
    let status = match protocol {
        "v5.channel.k8s.io" | "v4.channel.k8s.io" | "v4.base64.channel.k8s.io" => {
            StatusFormat::Json
        }
        _ => StatusFormat::Text,
    };
    let channels = Channels {
        stdin: Some(stdin_rx),
        resize: Some(resize_rx),
        stdout: Some(ws.channel(STDOUT)),
        stderr: Some(ws.channel(STDERR)),
        error: Some(ws.channel(ERROR)),
        status,
    };
    if remotecommand::run(backend, &cmd, channels, ws.gone()).await == Outcome::Done {
        ws.finish().await;
    }
}

/// Serves port forwarding of `ports` over a WebSocket until every port's
/// connection has ended.
pub(crate) async fn serve_port_forward<IO>(
    ws: WebSocketStream<IO>,
    protocol: &str,
    sandbox: String,
    ports: Vec<u16>,
    backend: Arc<dyn Backend>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut routes = HashMap::new();
    let mut inbound = Vec::new();
    let pool = BytePool::new(CONNECTION_BYTES);
    for i in 0..ports.len() {
        let (tx, rx) = pool.channel(STREAM_BYTES);
        routes.insert((2 * i) as u8, tx);
        inbound.push(rx);
    }
    let ws = Ws::start(ws, protocol, routes);
    let mut forwards = Vec::new();
    for (i, (port, rx)) in ports.into_iter().zip(inbound).enumerate() {
        let (data, error) = (ws.channel((2 * i) as u8), ws.channel((2 * i + 1) as u8));
        for ch in [&data, &error] {
            if ch.write(&port.to_le_bytes()).await.is_err() {
                return;
            }
        }
        forwards.push(forward(
            backend.clone(),
            sandbox.clone(),
            port,
            rx,
            data,
            error,
        ));
    }
    tokio::select! {
        _ = futures_util::future::join_all(forwards) => ws.finish().await,
        _ = ws.gone() => {}
    }
}
