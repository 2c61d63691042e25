//! The end-to-end rounds: a real h2 client (its HPACK encoder: Huffman
//! coding, its own indexing choices, never-indexed sensitive values, size
//! updates after the server's SETTINGS) sends concurrent requests with
//! random headers, bodies and trailers through an `AuthorityFix` into a
//! real h2 server that sets a random SETTINGS_HEADER_TABLE_SIZE. Below and
//! above the rewriter, taps cut every read and write to a random size (and
//! now and then answer "not yet"), and record the octets: the server must
//! get every request as the client sent it, and the oracle compares the
//! recorded octets of both sides of the rewriter.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use berth_h2_authority::{AuthorityFix, Rewriter};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::headers;
use crate::rng::Rng;
use crate::wire::{self, Tally};

type Log = Arc<Mutex<Vec<u8>>>;

/// Cuts reads and writes to random sizes and records what passed.
struct Tap<S> {
    inner: S,
    rng: Rng,
    max_read: usize,
    max_write: usize,
    vectored: bool,
    reads: Log,
    writes: Log,
}

impl<S> Tap<S> {
    fn new(inner: S, rng: &mut Rng) -> Tap<S> {
        Tap {
            inner,
            max_read: *rng.pick(&[1, 3, 9, 100, 5000, 70_000]),
            max_write: *rng.pick(&[1, 5, 64, 3000, 70_000]),
            vectored: rng.chance(50),
            rng: rng.fork(),
            reads: Log::default(),
            writes: Log::default(),
        }
    }

    /// Sometimes "not yet" (and ready again at once).
    fn stall(&mut self, cx: &mut Context<'_>) -> bool {
        let stall = self.rng.chance(3);
        if stall {
            cx.waker().wake_by_ref();
        }
        stall
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if dst.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.stall(cx) {
            return Poll::Pending;
        }
        let limit = this.rng.size(this.max_read).min(dst.remaining());
        let mut sub = ReadBuf::new(dst.initialize_unfilled_to(limit));
        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut sub))?;
        let n = sub.filled().len();
        this.reads.lock().unwrap().extend_from_slice(sub.filled());
        dst.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() || this.stall(cx) {
            return if buf.is_empty() {
                Poll::Ready(Ok(0))
            } else {
                Poll::Pending
            };
        }
        let limit = this.rng.size(this.max_write).min(buf.len());
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..limit]))?;
        this.writes.lock().unwrap().extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.stall(cx) {
            return Poll::Pending;
        }
        // At most a random number of octets, over the first slices.
        let mut left = this.rng.size(this.max_write);
        let mut slices = Vec::new();
        for buf in bufs {
            if left == 0 {
                break;
            }
            let part = &buf[..left.min(buf.len())];
            left -= part.len();
            slices.push(io::IoSlice::new(part));
        }
        let n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, &slices))?;
        let mut log = this.writes.lock().unwrap();
        let mut left = n;
        for slice in &slices {
            let part = &slice[..left.min(slice.len())];
            log.extend_from_slice(part);
            left -= part.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The client's end of the pipe: when the h2 client is done with it, it
/// goes to the test, which drains it until the server is done too (so that
/// no write of the server meets a closed pipe).
struct Hold {
    inner: Option<DuplexStream>,
    done: Option<tokio::sync::oneshot::Sender<DuplexStream>>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let (Some(inner), Some(done)) = (self.inner.take(), self.done.take()) {
            let _ = done.send(inner);
        }
    }
}

impl Hold {
    fn io(&mut self) -> Pin<&mut DuplexStream> {
        Pin::new(self.inner.as_mut().unwrap())
    }
}

impl AsyncRead for Hold {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_read(cx, dst)
    }
}

impl AsyncWrite for Hold {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_shutdown(cx)
    }
}

/// One request: what the client sends and the server must get.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
}

/// Names an h2 client refuses to send (connection-specific), that would
/// stand for the authority, or that the server checks against the body.
fn sendable(name: &[u8]) -> bool {
    let refused: [&[u8]; 8] = [
        b"content-length",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
        b"host",
    ];
    !refused.contains(&name)
}

fn header_map(rng: &mut Rng, recent: &mut Vec<(Vec<u8>, Vec<u8>)>) -> HeaderMap {
    let mut map = HeaderMap::new();
    // Fewer fields than the encoder-level rounds: every string is
    // Huffman-coded, and decoded twice (rewriter and oracle), slowly.
    for (name, value, sensitive) in headers::regular(rng, recent, (5, true), sendable) {
        let name = HeaderName::from_bytes(&name).unwrap();
        let mut value = HeaderValue::from_bytes(&value).unwrap();
        value.set_sensitive(sensitive);
        map.append(name, value);
    }
    map
}

fn call(rng: &mut Rng, seq: usize, recent: &mut Vec<(Vec<u8>, Vec<u8>)>, big: bool) -> Call {
    let method = rng
        .pick(&["GET", "POST", "PUT", "DELETE", "OPTIONS", "X-CUSTOM"])
        .parse()
        .unwrap();
    let uri = loop {
        let scheme = rng.pick(&["http", "https"]);
        let authority = rng.pick(&headers::VALID_AUTHORITIES);
        let path = match rng.below(3) {
            0 => "/".to_string(),
            1 => "/index.html".to_string(),
            _ => format!(
                "/runtime.v1.RuntimeService/Call{}?q={}",
                seq,
                rng.size(1000)
            ),
        };
        if let Ok(uri) = format!("{scheme}://{authority}{path}").parse::<Uri>() {
            break uri;
        }
    };
    let mut headers = header_map(rng, recent);
    headers.insert("x-seq", HeaderValue::from(seq));
    if big {
        // A header block over 16 KiB even Huffman-coded: CONTINUATION frames.
        let len = rng.range(18_500, 20_000);
        let value = headers::printable(rng, len);
        headers.insert("x-big", HeaderValue::from_bytes(&value).unwrap());
    }
    let body = if rng.chance(50) {
        Vec::new()
    } else {
        let n = rng.size(100_000);
        rng.bytes(n)
    };
    let trailers = rng.chance(30).then(|| header_map(rng, recent));
    Call {
        method,
        uri,
        headers,
        body,
        trailers,
    }
}

/// Serves every request: reads it whole, sends it on `calls`, answers 200.
async fn serve<T>(io: T, table_size: Option<u32>, calls: tokio::sync::mpsc::UnboundedSender<Call>)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    if let Some(size) = table_size {
        builder.header_table_size(size);
    }
    let mut conn = builder
        .handshake::<_, Bytes>(io)
        .await
        .expect("server handshake");
    while let Some(request) = conn.accept().await {
        let (request, mut respond) = request.expect("server: a request");
        let calls = calls.clone();
        tokio::spawn(async move {
            let (parts, mut body) = request.into_parts();
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.expect("server: request body");
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            let trailers = body.trailers().await.expect("server: trailers");
            let len = data.len();
            let _ = calls.send(Call {
                method: parts.method,
                uri: parts.uri,
                headers: parts.headers,
                body: data,
                trailers,
            });
            let response = http::Response::builder().status(200).body(()).unwrap();
            let mut send = respond.send_response(response, false).unwrap();
            send.send_data(Bytes::from(len.to_string()), true).unwrap();
        });
    }
}

/// Sends one call and checks the answer.
async fn send(client: h2::client::SendRequest<Bytes>, call: Call, rng: &mut Rng) {
    let mut request = http::Request::builder()
        .method(call.method.clone())
        .uri(call.uri.clone())
        .body(())
        .unwrap();
    *request.headers_mut() = call.headers.clone();
    let mut client = client.ready().await.expect("client ready");
    let end = call.body.is_empty() && call.trailers.is_none();
    let (response, mut stream) = client.send_request(request, end).expect("send_request");
    let mut rest = Bytes::from(call.body.clone());
    while !rest.is_empty() {
        let want = rng.size(rest.len());
        stream.reserve_capacity(want);
        let room = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .expect("capacity")
            .expect("capacity");
        let chunk = rest.split_to(room.min(want));
        let last = rest.is_empty() && call.trailers.is_none();
        stream.send_data(chunk, last).unwrap();
        if rng.chance(30) {
            tokio::task::yield_now().await;
        }
    }
    if let Some(trailers) = call.trailers.clone() {
        stream.send_trailers(trailers).unwrap();
    }
    let response = response.await.expect("response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(got, call.body.len().to_string().as_bytes());
}

/// One connection with `rng`'s calls (one with a header block over 16 KiB
/// if `big`), checked.
async fn connection(rng: &mut Rng, always_rewrite: bool, big: bool, tally: &mut Tally) {
    let table_size = *rng.pick(&[
        None,
        Some(0),
        Some(1),
        Some(100),
        Some(4096),
        Some(8192),
        Some(65_536),
    ]);
    let (client_io, server_io) = tokio::io::duplex(rng.range(16, 70_000));
    let below = Tap::new(server_io, rng);
    let (input, server_writes) = (below.reads.clone(), below.writes.clone());
    let rewriter = if always_rewrite {
        Rewriter::always_rewrite()
    } else {
        Rewriter::new()
    };
    let above = Tap::new(AuthorityFix::with_rewriter(below, rewriter), rng);
    let output = above.reads.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(serve(above, table_size, tx));

    let (done, held) = tokio::sync::oneshot::channel();
    let client_io = Hold {
        inner: Some(client_io),
        done: Some(done),
    };
    let (client, conn) = h2::client::handshake(client_io)
        .await
        .expect("client handshake");
    let conn = tokio::spawn(conn);
    let mut recent = Vec::new();
    let count = rng.range(1, 12);
    let big = big.then(|| rng.below(count));
    let calls: Vec<Call> = (0..count)
        .map(|seq| call(rng, seq, &mut recent, big == Some(seq)))
        .collect();
    let lanes = rng.range(1, 4);
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let mine: Vec<Call> = calls.iter().skip(lane).step_by(lanes).cloned().collect();
        let client = client.clone();
        let mut rng = rng.fork();
        tasks.push(tokio::spawn(async move {
            for call in mine {
                send(client.clone(), call, &mut rng).await;
            }
        }));
    }
    drop(client);
    for task in tasks {
        task.await.expect("a call failed");
    }
    conn.await.unwrap().expect("client connection");
    let mut held = held.await.unwrap();
    let drain = tokio::spawn(async move {
        let mut rest = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut held, &mut rest).await;
    });
    server.await.expect("server");
    drain.await.unwrap();
    let mut served = Vec::new();
    while let Ok(call) = rx.try_recv() {
        served.push(call);
    }
    served.sort_by_key(|c| {
        c.headers["x-seq"]
            .to_str()
            .unwrap()
            .parse::<usize>()
            .unwrap()
    });
    assert_eq!(served.len(), calls.len(), "calls served");
    for (got, sent) in served.iter().zip(&calls) {
        assert!(got == sent, "the server got\n{got:?}\nfor\n{sent:?}");
    }
    let (input, output, server) = (
        input.lock().unwrap(),
        output.lock().unwrap(),
        server_writes.lock().unwrap(),
    );
    let connection = wire::Connection {
        input: &input,
        output: &output,
        server: &server,
        always_rewrite,
    };
    wire::check(&connection, tally);
}

#[tokio::test]
async fn h2_client_through_the_rewriter_into_an_h2_server() {
    let seed = crate::rng::base_seed() ^ 0x4832;
    let rounds = crate::rng::rounds(32);
    let mut tally = Tally::default();
    let start = std::time::Instant::now();
    for round in 0..rounds {
        let mut rng = Rng::new(seed ^ (round as u64).wrapping_mul(0x9e37_79b9));
        eprintln!(
            "round {round} (BERTH_DIFF_SEED={})",
            crate::rng::base_seed()
        );
        // Every fifth connection passes untouched (unless its first block
        // has to be rewritten); a few have a block over 16 KiB.
        let always_rewrite = round % 5 != 0;
        let big = round % 16 == 1;
        let work = connection(&mut rng, always_rewrite, big, &mut tally);
        tokio::time::timeout(Duration::from_secs(30), work)
            .await
            .expect("the connection finishes");
    }
    println!("{rounds} connections in {:?}: {tally:#?}", start.elapsed());
    crate::assert_covered(&tally, rounds);
}
