//! SPDY tunnelled through a WebSocket, as kubectl 1.31+ (client-go's
//! `PortForwardWebsockets`) speaks it on the port-forward URL: the
//! WebSocket sub-protocol is `SPDY/3.1+` followed by the SPDY one
//! (`SPDY/3.1+portforward.k8s.io`), and after the handshake the binary
//! messages carry the raw SPDY byte stream, cut anywhere (each of the
//! sender's writes is one message). A text message is an error; a close
//! frame is the end of the stream.
//!
//! [`WsBytes`] turns a WebSocket into that byte stream (`AsyncRead` +
//! `AsyncWrite`), so the SPDY port-forward session runs over it unchanged.
//! What it holds from the peer is one message at most (bounded by
//! [`crate::MAX_WEBSOCKET_MESSAGE`]).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// What a tunnelled sub-protocol starts with.
pub const PREFIX: &str = "SPDY/3.1+";
/// Port-forward over SPDY over a WebSocket.
pub const PORT_FORWARD_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// A WebSocket as a byte stream: reads the payloads of binary messages in
/// order, writes each write as one binary message; shutting down sends a
/// normal close.
pub struct WsBytes<IO> {
    ws: WebSocketStream<IO>,
    /// The rest of the message being read.
    pending: Bytes,
    /// The peer closed (or the socket ended): reads return EOF.
    eof: bool,
    /// A close frame was queued by [`AsyncWrite::poll_shutdown`].
    closing: bool,
}

impl<IO> WsBytes<IO> {
    /// Wraps an upgraded WebSocket.
    pub fn new(ws: WebSocketStream<IO>) -> WsBytes<IO> {
        WsBytes {
            ws,
            pending: Bytes::new(),
            eof: false,
            closing: false,
        }
    }
}

fn ws_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            io::Error::new(io::ErrorKind::BrokenPipe, "the WebSocket is closed")
        }
        e => io::Error::new(io::ErrorKind::InvalidData, e),
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(data))) => self.pending = data,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a text message in a SPDY tunnel (only binary messages carry it)",
                    )))
                }
                // Pings are answered by the WebSocket layer.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => self.eof = true,
                Some(Err(e)) => return Poll::Ready(Err(ws_error(e))),
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let ws = Pin::new(&mut self.ws);
        ready!(Sink::<Message>::poll_ready(ws, cx)).map_err(ws_error)?;
        // One message per write, at most a WebSocket message's worth.
        let n = data.len().min(crate::websocket::MAX_MESSAGE);
        let message = Message::Binary(Bytes::copy_from_slice(&data[..n]));
        Pin::new(&mut self.ws)
            .start_send(message)
            .map_err(ws_error)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Sink::<Message>::poll_flush(Pin::new(&mut self.ws), cx).map_err(ws_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closing {
            ready!(Sink::<Message>::poll_ready(Pin::new(&mut self.ws), cx)).map_err(ws_error)?;
            let close = Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            }));
            Pin::new(&mut self.ws).start_send(close).map_err(ws_error)?;
            self.closing = true;
        }
        match ready!(Sink::<Message>::poll_flush(Pin::new(&mut self.ws), cx)) {
            Ok(()) => Poll::Ready(Ok(())),
            // The peer's close answered ours: nothing more to flush.
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(ws_error(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::protocol::Role;

    async fn pair() -> (
        WsBytes<tokio::io::DuplexStream>,
        WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        (WsBytes::new(server), client)
    }

    #[tokio::test]
    async fn binary_messages_are_one_byte_stream_cut_anywhere() {
        let (mut bytes, mut peer) = pair().await;
        for piece in [&b"hel"[..], b"", b"lo wor", b"ld"] {
            peer.send(Message::Binary(Bytes::copy_from_slice(piece)))
                .await
                .unwrap();
        }
        peer.send(Message::Ping(Bytes::new())).await.unwrap();
        peer.close(None).await.unwrap();
        let mut got = Vec::new();
        bytes.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello world");
    }

    #[tokio::test]
    async fn writes_are_binary_messages_and_shutdown_closes() {
        let (mut bytes, mut peer) = pair().await;
        bytes.write_all(b"abc").await.unwrap();
        bytes.flush().await.unwrap();
        assert_eq!(
            peer.next().await.unwrap().unwrap(),
            Message::Binary(Bytes::from_static(b"abc"))
        );
        bytes.shutdown().await.unwrap();
        assert!(matches!(
            peer.next().await.unwrap().unwrap(),
            Message::Close(Some(f)) if f.code == CloseCode::Normal
        ));
    }

    #[tokio::test]
    async fn a_text_message_is_an_error() {
        let (mut bytes, mut peer) = pair().await;
        peer.send(Message::Text("nope".into())).await.unwrap();
        let err = bytes.read(&mut [0u8; 16]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
