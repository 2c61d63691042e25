//! The rewriting in front of a real h2 server (the HTTP/2 layer under hyper
//! and tonic), over an in-process pipe: a request with the socket path as
//! `:authority` is refused without it and served with it, and an h2
//! client's traffic passes unchanged.

use std::time::Duration;

use berth_h2_authority::{AuthorityFix, Rewriter, MAX_HEADER_TABLE_SIZE, PREFACE};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

const TIMEOUT: Duration = Duration::from_secs(10);

fn frame(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = len[1..].to_vec();
    out.push(frame_type);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Serves every request with 200 and the request body echoed back; sends
/// each request's URI on `uris`.
async fn serve<T>(io: T, uris: tokio::sync::mpsc::UnboundedSender<http::Uri>)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        let _ = uris.send(request.uri().clone());
        tokio::spawn(async move {
            let mut body = request.into_body();
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            let response = http::Response::builder().status(200).body(()).unwrap();
            let mut send = respond.send_response(response, false).unwrap();
            send.send_data(Bytes::from(data), true).unwrap();
        });
    }
}

/// A request as gRPC C-core sends it for `unix:/run/berth/berth.sock`
/// (HPACK literals, no Huffman), ending the stream.
fn grpcio_headers_frame(stream: u32) -> Vec<u8> {
    let headers: Vec<(&[u8], &[u8])> = vec![
        (b":scheme", b"http"),
        (b":method", b"POST"),
        (b":authority", b"/run/berth/berth.sock"),
        (b":path", b"/runtime.v1.RuntimeService/Version"),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc"),
    ];
    let block = Literals.encode(headers);
    frame(0x1, 0x4 | 0x1, stream, &block)
}

/// A minimal HPACK encoder for the test client: literals without indexing
/// (what any encoder may send).
struct Literals;
impl Literals {
    fn encode(self, headers: Vec<(&[u8], &[u8])>) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in headers {
            out.push(0x00);
            for s in [name, value] {
                assert!(s.len() < 127);
                out.push(s.len() as u8);
                out.extend_from_slice(s);
            }
        }
        out
    }
}

/// Reads frames from the server until one on `stream` that answers it:
/// returns (type, payload) of HEADERS (0x1) or RST_STREAM (0x3).
async fn answer(client: &mut DuplexStream, stream: u32) -> (u8, Vec<u8>) {
    loop {
        let mut head = [0u8; 9];
        client.read_exact(&mut head).await.unwrap();
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0; len];
        client.read_exact(&mut payload).await.unwrap();
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if id == stream && (head[3] == 0x1 || head[3] == 0x3) {
            return (head[3], payload);
        }
        assert_ne!(head[3], 0x7, "GOAWAY from the server: {payload:?}");
    }
}

async fn raw_grpcio_call(fix: bool) -> (u8, Vec<u8>, Option<http::Uri>) {
    let (mut client, server_end) = tokio::io::duplex(64 * 1024);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let server = if fix {
        tokio::spawn(serve(AuthorityFix::new(server_end), tx))
    } else {
        tokio::spawn(serve(server_end, tx))
    };
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes.extend(grpcio_headers_frame(1));
    client.write_all(&bytes).await.unwrap();
    let (frame_type, payload) = tokio::time::timeout(TIMEOUT, answer(&mut client, 1))
        .await
        .expect("an answer from the server");
    drop(client);
    let _ = server.await;
    (frame_type, payload, rx.try_recv().ok())
}

#[tokio::test]
async fn h2_refuses_the_socket_path_as_authority() {
    // The defect: RST_STREAM with PROTOCOL_ERROR (1), the request never served.
    let (frame_type, payload, uri) = raw_grpcio_call(false).await;
    assert_eq!(frame_type, 0x3, "RST_STREAM");
    assert_eq!(payload, [0, 0, 0, 1], "PROTOCOL_ERROR");
    assert!(uri.is_none());
}

#[tokio::test]
async fn through_the_rewriter_the_request_is_served() {
    let (frame_type, payload, uri) = raw_grpcio_call(true).await;
    assert_eq!(frame_type, 0x1, "HEADERS (the response)");
    // :status 200 is static table entry 8, indexed.
    assert_eq!(payload, [0x88]);
    let uri = uri.expect("the request reached the server");
    assert_eq!(uri.authority().map(|a| a.as_str()), Some("localhost"));
    assert_eq!(uri.path(), "/runtime.v1.RuntimeService/Version");
}

#[tokio::test]
async fn an_h2_client_passes_unchanged() {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(serve(AuthorityFix::new(server_end), tx));
    let (mut client, conn) = h2::client::handshake(client_end).await.unwrap();
    let conn = tokio::spawn(conn);
    let work = async move {
        for i in 0..40usize {
            let size = [0, 1, 5, 16_383, 16_384, 70_000, 300_000][i % 7];
            let body: Vec<u8> = (0..size).map(|n| (n * 31 + i) as u8).collect();
            let request = http::Request::builder()
                .method("POST")
                .uri(format!("http://berth.test:{}/call/{i}", 1000 + i))
                .header("x-call", i.to_string())
                .header("x-same", "same value every time")
                .body(())
                .unwrap();
            client = client.ready().await.unwrap();
            let (response, mut send) = client.send_request(request, false).unwrap();
            let mut rest = Bytes::from(body.clone());
            while !rest.is_empty() {
                send.reserve_capacity(rest.len());
                let room = std::future::poll_fn(|cx| send.poll_capacity(cx))
                    .await
                    .unwrap()
                    .unwrap();
                let chunk = rest.split_to(room.min(rest.len()));
                send.send_data(chunk, false).unwrap();
            }
            send.send_data(Bytes::new(), true).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status(), 200);
            let mut recv = response.into_body();
            let mut echoed = Vec::new();
            while let Some(chunk) = recv.data().await {
                let chunk = chunk.unwrap();
                let _ = recv.flow_control().release_capacity(chunk.len());
                echoed.extend_from_slice(&chunk);
            }
            assert_eq!(echoed.len(), body.len(), "call {i}");
            assert!(echoed == body, "call {i}: body changed");
            let uri = rx.recv().await.unwrap();
            assert_eq!(
                uri.to_string(),
                format!("http://berth.test:{}/call/{i}", 1000 + i)
            );
        }
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("calls finish");
    conn.abort();
    server.abort();
}

/// A header block the rewriter cannot decode: the server reads the
/// rewriter's HPACK error, serves nothing and closes the connection.
#[tokio::test]
async fn garbage_closes_the_connection() {
    let (mut client, server_end) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        // The handshake may read the bad block already.
        let handshake =
            h2::server::Builder::new().handshake::<_, Bytes>(AuthorityFix::new(server_end));
        match handshake.await {
            Err(err) => err,
            Ok(mut conn) => match conn.accept().await {
                Some(Ok((request, _))) => panic!("garbage was served: {request:?}"),
                Some(Err(err)) => err,
                None => panic!("the connection ended without an error"),
            },
        }
    });
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes.extend(frame(0x1, 0x5, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff])); // bad HPACK integer
    client.write_all(&bytes).await.unwrap();
    let err = tokio::time::timeout(TIMEOUT, server)
        .await
        .expect("server ends")
        .unwrap();
    let io = err.get_io().expect("an I/O error");
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidData);
    assert!(io.to_string().contains("stream 1: HPACK"), "{io}");
    // The connection is closed, and no frame answered stream 1.
    let mut rest = Vec::new();
    tokio::time::timeout(TIMEOUT, client.read_to_end(&mut rest))
        .await
        .expect("EOF")
        .unwrap();
    let mut frames = rest.as_slice();
    while let [l0, l1, l2, frame_type, _, s0, s1, s2, s3, tail @ ..] = frames {
        let len = usize::from(*l0) << 16 | usize::from(*l1) << 8 | usize::from(*l2);
        let stream = u32::from_be_bytes([*s0, *s1, *s2, *s3]) & 0x7fff_ffff;
        assert_ne!(stream, 1, "frame of type {frame_type:#x} on stream 1");
        frames = &tail[len..];
    }
    assert!(frames.is_empty(), "a cut frame: {rest:?}");
}

#[tokio::test]
async fn a_server_table_size_the_rewriter_cannot_follow_closes_the_connection() {
    // The rewriter's HPACK tables follow the server's SETTINGS as the server
    // writes them; one it cannot follow fails that write, loudly.
    let (mut client, server_end) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let mut builder = h2::server::Builder::new();
        builder.header_table_size(u32::try_from(MAX_HEADER_TABLE_SIZE + 1).unwrap());
        match builder
            .handshake::<_, Bytes>(AuthorityFix::new(server_end))
            .await
        {
            Err(err) => err,
            Ok(mut conn) => loop {
                match conn.accept().await {
                    Some(Ok(_)) => continue,
                    Some(Err(err)) => break err,
                    None => panic!("the connection ended without an error"),
                }
            },
        }
    });
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes.extend(grpcio_headers_frame(1));
    client.write_all(&bytes).await.unwrap();
    let err = tokio::time::timeout(TIMEOUT, server)
        .await
        .expect("server ends")
        .unwrap();
    let io = err.get_io().expect("an I/O error");
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidData);
    assert!(
        io.to_string().contains("SETTINGS_HEADER_TABLE_SIZE"),
        "{io}"
    );
}

#[tokio::test]
async fn a_server_with_a_small_table_serves_through_the_rewriter() {
    // h2 sets 0: the rewriter's encoder says so before its next block.
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let mut builder = h2::server::Builder::new();
        builder.header_table_size(0);
        let mut conn = builder
            .handshake::<_, Bytes>(AuthorityFix::with_rewriter(
                server_end,
                Rewriter::always_rewrite(),
            ))
            .await
            .unwrap();
        while let Some(request) = conn.accept().await {
            let (request, mut respond) = request.unwrap();
            assert_eq!(request.headers()["x-call"], "same");
            let response = http::Response::builder().status(200).body(()).unwrap();
            respond.send_response(response, true).unwrap();
        }
    });
    let (mut client, conn) = h2::client::handshake(client_end).await.unwrap();
    let conn = tokio::spawn(conn);
    for i in 0..5 {
        let request = http::Request::builder()
            .uri(format!("http://localhost/{i}"))
            .header("x-call", "same")
            .body(())
            .unwrap();
        client = client.ready().await.unwrap();
        let (response, _) = client.send_request(request, true).unwrap();
        let response = tokio::time::timeout(TIMEOUT, response).await.unwrap();
        assert_eq!(response.unwrap().status(), 200);
    }
    drop(client);
    let _ = conn.await;
    server.abort();
}

/// Records what is written through it.
struct Recorder<T> {
    inner: T,
    written: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Recorder<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Recorder<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let result = std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = result {
            this.written.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        result
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The rewriter's CPU time per request of a tonic-like h2 client (gRPC
/// headers, `:path` Huffman-coded on every request as h2 sends it, a
/// 5-octet message): the client's bytes of 2,000 requests are recorded,
/// then fed through fresh rewriters.
#[tokio::test]
#[ignore = "a measurement: cargo test -p berth-h2-authority --release --test h2_server -- --ignored --nocapture"]
async fn rewriter_per_request_cost() {
    const CALLS: usize = 2000;
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(serve(server_end, tx));
    let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = Recorder {
        inner: client_end,
        written: written.clone(),
    };
    let (mut client, conn) = h2::client::handshake(recorder).await.unwrap();
    let conn = tokio::spawn(conn);
    for _ in 0..CALLS {
        let request = http::Request::builder()
            .method("POST")
            .uri("http://[::]:50051/runtime.v1.RuntimeService/Version")
            .header("te", "trailers")
            .header("content-type", "application/grpc")
            .header("user-agent", "tonic/0.14.9")
            .body(())
            .unwrap();
        client = client.ready().await.unwrap();
        let (response, mut send) = client.send_request(request, false).unwrap();
        send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
            .unwrap();
        let mut body = response.await.unwrap().into_body();
        while let Some(chunk) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.unwrap().len());
        }
    }
    conn.abort();
    server.abort();
    let bytes = written.lock().unwrap().clone();
    let mut per_request = Vec::new();
    for _ in 0..7 {
        let mut rewriter = berth_h2_authority::Rewriter::new();
        let mut out = Vec::with_capacity(bytes.len() * 2);
        let start = std::time::Instant::now();
        for chunk in bytes.chunks(4096) {
            rewriter.feed(chunk, &mut out).unwrap();
        }
        per_request.push(start.elapsed() / CALLS as u32);
    }
    per_request.sort();
    println!(
        "{} octets from the client for {CALLS} requests; rewriter time per request: median {:?} (of {per_request:?})",
        bytes.len(),
        per_request[3]
    );
}
