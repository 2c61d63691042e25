//! Port-forward the way kubectl 1.31+ asks for it: a WebSocket with the
//! sub-protocol `SPDY/3.1+portforward.k8s.io`, SPDY frames inside its binary
//! messages. The server's backend here dials real TCP listeners on
//! 127.0.0.1: bytes go both ways, several connections share one session, a
//! closed port is reported on the error stream, and a text message (not
//! part of the protocol) ends the session.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_streaming::client::SpdyPortForward;
use berth_streaming::{
    AttachRequest, Backend, BackendError, Config, ExecRequest, PortForwardRequest, PortStream,
    StreamIo, StreamingServer, PORT_FORWARD_TUNNEL_PROTOCOL,
};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(10);

/// Forwards to 127.0.0.1:PORT for real; no exec or attach.
struct Loopback;

#[async_trait]
impl Backend for Loopback {
    async fn exec(&self, _: &ExecRequest, _: StreamIo) -> Result<i32, BackendError> {
        Err(BackendError::Internal("no exec here".into()))
    }
    async fn attach(&self, _: &AttachRequest, _: StreamIo) -> Result<(), BackendError> {
        Err(BackendError::Internal("no attach here".into()))
    }
    async fn port_forward(
        &self,
        _pod: &str,
        port: u16,
        stream: PortStream,
    ) -> Result<(), BackendError> {
        let tcp = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| BackendError::FailedPrecondition(format!("127.0.0.1:{port}: {e}")))?;
        let (mut cr, mut cw) = tokio::io::split(stream);
        let (mut tr, mut tw) = tcp.into_split();
        let up = async {
            let _ = tokio::io::copy(&mut cr, &mut tw).await;
            let _ = tw.shutdown().await;
        };
        let down = async {
            let _ = tokio::io::copy(&mut tr, &mut cw).await;
            let _ = cw.shutdown().await;
        };
        tokio::join!(up, down);
        Ok(())
    }
}

fn start() -> StreamingServer {
    let server = StreamingServer::new(Config::default(), Arc::new(Loopback)).unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve().await.unwrap() });
    server
}

fn url(server: &StreamingServer) -> String {
    server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: "pod1".into(),
            ports: vec![],
        })
        .unwrap()
}

/// A TCP server on 127.0.0.1 that greets with `hello NAME`, then answers
/// every line upper-cased until the client half-closes.
async fn upper_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut tcp, peer) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                tcp.write_all(format!("hello {}\n", peer.ip()).as_bytes())
                    .await
                    .unwrap();
                let mut buf = [0u8; 4096];
                loop {
                    let n = tcp.read(&mut buf).await.unwrap();
                    if n == 0 {
                        tcp.shutdown().await.unwrap();
                        return;
                    }
                    tcp.write_all(&buf[..n].to_ascii_uppercase()).await.unwrap();
                }
            });
        }
    });
    port
}

/// A port on 127.0.0.1 with nothing listening.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn port_forward_through_a_websocket_tunnel_to_a_tcp_listener() {
    let server = start();
    let port = upper_server().await;
    let mut pf = SpdyPortForward::connect_tunnelled(&url(&server))
        .await
        .unwrap();
    // Two connections on one session, bytes both ways.
    let a = pf.open(port).await.unwrap();
    let b = pf.open(port).await.unwrap();
    a.send(b"abc\n").await.unwrap();
    b.send(&vec![b'x'; 200_000]).await.unwrap();
    a.close_write().await.unwrap();
    b.close_write().await.unwrap();
    let a = a.finish(WAIT).await.unwrap();
    let b = b.finish(WAIT).await.unwrap();
    assert_eq!(a.data, b"hello 127.0.0.1\nABC\n");
    assert_eq!(a.error, "");
    let mut want = b"hello 127.0.0.1\n".to_vec();
    want.extend(vec![b'X'; 200_000]);
    assert_eq!(b.data.len(), want.len());
    assert!(b.data == want);

    // A port where nothing listens: the error stream says so.
    let closed = closed_port();
    let failed = pf.open(closed).await.unwrap().finish(WAIT).await.unwrap();
    assert!(failed.data.is_empty());
    assert!(
        failed
            .error
            .contains(&format!("error forwarding port {closed} to pod pod1")),
        "{}",
        failed.error
    );
    assert!(failed.error.contains("refused"), "{}", failed.error);

    // The session still forwards after the failure.
    let c = pf.open(port).await.unwrap();
    c.send(b"again").await.unwrap();
    c.close_write().await.unwrap();
    assert_eq!(
        c.finish(WAIT).await.unwrap().data,
        b"hello 127.0.0.1\nAGAIN"
    );
}

/// The upgrade by hand: the answer names the tunnelled protocol exactly
/// (client-go checks it), and a text message ends the session.
#[tokio::test]
async fn the_handshake_names_the_tunnel_and_text_messages_end_it() {
    let server = start();
    let url = url(&server);
    let mut request = url
        .replace("http://", "ws://")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        PORT_FORWARD_TUNNEL_PROTOCOL.parse().unwrap(),
    );
    let (mut ws, response) = tokio_tungstenite::client_async(
        request,
        TcpStream::connect(server.local_addr()).await.unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 101);
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "SPDY/3.1+portforward.k8s.io"
    );
    ws.send(Message::Text("not SPDY".into())).await.unwrap();
    let ended =
        tokio::time::timeout(WAIT, async { while let Some(Ok(_)) = ws.next().await {} }).await;
    assert!(ended.is_ok(), "the server kept a session that sent text");
}
