//! Hostile clients against the live in-process streaming server: header
//! blocks that decode to huge lists, compression bombs, PING floods that
//! never read the answers, resize objects that never end, huge DATA and
//! WebSocket frames, streams and connections past their limits. Each one
//! is refused cleanly (connection closed or stream reset, or held back by
//! TCP), the test process's peak RSS grows by at most [`RSS_CEILING`], and
//! a normal exec through the same server works afterwards.
//!
//! The tests measure the whole process, so they run one at a time (a
//! lock), with the peak reset before each (`/proc/self/clear_refs`). A
//! watchdog ends the process if its RSS ever grows past [`RSS_ABORT`] (what
//! the old code did with some of these inputs), so a regression fails
//! instead of taking the machine's memory.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use berth_streaming::client::{CommandOptions, RemoteCommand, Transport};
use berth_streaming::spdy::frame::{Encoder, Frame, Headers};
use berth_streaming::spdy::zlib::HeaderCompressor;
use berth_streaming::spdy::{Connection, Role};
use berth_streaming::{Config, ExecRequest, PortForwardRequest};
use common::{start, start_with, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const WAIT: Duration = Duration::from_secs(10);
/// Most the peak RSS of the test process may grow during one hostile client.
const RSS_CEILING: u64 = 8 << 20;
/// Growth past which the watchdog ends the process.
const RSS_ABORT: u64 = 1 << 30;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

fn rss() -> u64 {
    status_kib("VmRSS:") * 1024
}

fn peak_rss() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// Starts the watchdog once: it ends the process if RSS runs away.
fn watchdog() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let base = rss();
        std::thread::spawn(move || loop {
            let now = rss();
            if now > base + RSS_ABORT {
                eprintln!(
                    "hostile: RSS grew from {base} to {now} bytes: the server buffers what a client feeds; aborting"
                );
                std::process::exit(99);
            }
            std::thread::sleep(Duration::from_millis(2));
        });
    });
}

/// Measures the growth of the peak RSS over one hostile client.
struct Rss {
    base: u64,
}

impl Rss {
    fn start() -> Rss {
        watchdog();
        // 5: reset the peak (VmHWM) to the current RSS.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        Rss { base: rss() }
    }

    fn assert_bounded(&self, what: &str) {
        let grown = peak_rss().saturating_sub(self.base);
        eprintln!("{what}: peak RSS grew by {} KiB", grown / 1024);
        assert!(
            grown <= RSS_CEILING,
            "{what}: peak RSS grew by {grown} bytes (at most {RSS_CEILING})"
        );
    }
}

fn exec_req(cmd: &[&str], stdin: bool, tty: bool) -> ExecRequest {
    ExecRequest {
        container_id: "c1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    }
}

/// A normal exec through the same server still works.
async fn exec_still_works(s: &Server) {
    let opts = CommandOptions {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let url = s
        .server
        .get_exec_url(exec_req(&["echo", "still", "here"], false, false))
        .unwrap();
    let rc = RemoteCommand::connect(&url, Transport::Spdy, opts, &["v4.channel.k8s.io"])
        .await
        .unwrap();
    let done = rc.finish(WAIT).await.unwrap();
    assert_eq!(done.stdout, b"still here\n");
    assert_eq!(done.exit_code(), Some(0));
}

/// Connects to `url`'s server, with a small receive buffer when asked.
async fn connect(url: &str, small_rcvbuf: bool) -> (TcpStream, String, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    if small_rcvbuf {
        socket.set_recv_buffer_size(4096).unwrap();
    }
    let tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
    (tcp, addr.to_string(), format!("/{path}"))
}

/// Reads a response head byte by byte (nothing after it), returns it.
async fn read_head(tcp: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut byte))
            .await
            .expect("response head in time")
            .unwrap();
        assert_eq!(n, 1, "connection ended inside the response head");
        head.push(byte[0]);
        assert!(head.len() < 64 * 1024);
    }
    String::from_utf8(head).unwrap()
}

/// An upgraded SPDY connection to `url`, speaking `protocol`.
async fn spdy_upgrade(url: &str, protocol: &str, small_rcvbuf: bool) -> TcpStream {
    let (mut tcp, addr, path) = connect(url, small_rcvbuf).await;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tcp
}

/// Reads (and drops) until the server closes the connection; panics if it
/// does not within `WAIT`.
async fn assert_closed_by_server(tcp: &mut TcpStream, what: &str) {
    let deadline = Instant::now() + WAIT;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, tcp.read(&mut buf)).await {
            Err(_) => panic!("{what}: the server kept the connection open"),
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
        }
    }
}

/// A SYN_STREAM frame carrying `block` (an uncompressed name/value block).
fn syn_stream(stream_id: u32, block: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&stream_id.to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(&[0, 0]);
    payload.extend(HeaderCompressor::new().unwrap().compress(block).unwrap());
    control_frame(1, &payload)
}

fn control_frame(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80, 3];
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(0);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

/// A name/value block of one name and one value.
fn block(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut b = 1u32.to_be_bytes().to_vec();
    for s in [name, value] {
        b.extend_from_slice(&(s.len() as u32).to_be_bytes());
        b.extend_from_slice(s);
    }
    b
}

fn exec_url(s: &Server, stdin: bool, tty: bool, cmd: &[&str]) -> String {
    s.server.get_exec_url(exec_req(cmd, stdin, tty)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_block_repeating_a_long_name_is_refused_before_it_is_copied() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, false, false, &["echo"]);
    let mut tcp = spdy_upgrade(&url, "v4.channel.k8s.io", false).await;
    // 500 KiB name; the value is 500 KiB of NULs, i.e. 512001 empty values,
    // each a pair with the whole name: about 244 GiB decoded.
    let bomb = syn_stream(1, &block(&vec![b'a'; 500 << 10], &vec![0u8; 500 << 10]));
    assert!(bomb.len() < 4096, "{} bytes on the wire", bomb.len());
    let rss = Rss::start();
    tcp.write_all(&bomb).await.unwrap();
    assert_closed_by_server(&mut tcp, "a header block of 512001 values").await;
    rss.assert_bounded("header block of a long name and many values");
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_block_of_too_many_names_closes_the_connection() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, false, false, &["echo"]);
    let mut tcp = spdy_upgrade(&url, "v4.channel.k8s.io", false).await;
    // 100000 values (NUL-separated) of a one-letter name.
    let many = syn_stream(1, &block(b"x", &vec![0u8; 100_000]));
    let rss = Rss::start();
    tcp.write_all(&many).await.unwrap();
    assert_closed_by_server(&mut tcp, "a header block of 100001 values").await;
    rss.assert_bounded("header block of many values");
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compression_bomb_in_a_big_control_frame_is_refused_by_its_head() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, false, false, &["echo"]);
    let mut tcp = spdy_upgrade(&url, "v4.channel.k8s.io", false).await;
    // 8 MiB of deflate in zeros (it inflates a thousand to one), padded
    // to an 8 MiB frame.
    let mut zlib = flate2::Compress::new(flate2::Compression::best(), true);
    zlib.set_dictionary(berth_streaming::spdy::zlib::DICTIONARY)
        .unwrap();
    let zeros = vec![0u8; 8 << 20];
    let mut payload = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    payload.reserve(8 << 20);
    zlib.compress_vec(&zeros, &mut payload, flate2::FlushCompress::Sync)
        .unwrap();
    assert_eq!(zlib.total_in(), 8 << 20);
    payload.resize(8 << 20, 0);
    let frame = control_frame(1, &payload);
    drop((zeros, payload));
    let rss = Rss::start();
    // The server may close before it has all of it.
    let _ = tcp.write_all(&frame).await;
    assert_closed_by_server(&mut tcp, "an 8 MiB SYN_STREAM").await;
    rss.assert_bounded("8 MiB compression bomb");
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_that_never_reads_is_disconnected() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, false, false, &["echo"]);
    let mut tcp = spdy_upgrade(&url, "v4.channel.k8s.io", true).await;
    let mut batch = Vec::new();
    for i in 0..1000u32 {
        batch.extend(control_frame(6, &(2 * i + 1).to_be_bytes()));
    }
    let rss = Rss::start();
    let started = Instant::now();
    let mut sent = 0u64;
    let mut refused = false;
    while sent < 2_000_000 && started.elapsed() < Duration::from_secs(60) {
        match tokio::time::timeout(Duration::from_secs(5), tcp.write_all(&batch)).await {
            Ok(Ok(())) => sent += 1000,
            Ok(Err(_)) => {
                refused = true;
                break;
            }
            // The server stopped reading: then it must close soon.
            Err(_) => break,
        }
    }
    if !refused {
        assert_closed_by_server(&mut tcp, "a PING flood").await;
    }
    eprintln!("PING flood: {sent} pings sent before the server hung up");
    rss.assert_bounded("PING flood");
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_object_that_never_ends_is_not_kept() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, false, true, &["size"]);
    let tcp = spdy_upgrade(&url, "v4.channel.k8s.io", false).await;
    let conn = Connection::new(tcp, Role::Client, None).unwrap();
    let open = |t: &str| Headers::from_pairs([("streamType", t)]);
    let _error = conn.open(open("error")).await.unwrap();
    let _stdout = conn.open(open("stdout")).await.unwrap();
    let resize = conn.open(open("resize")).await.unwrap();
    let spaces = vec![b' '; 32 << 10];
    let rss = Rss::start();
    let started = Instant::now();
    resize.tx.write(b"{\"Width\":").await.unwrap();
    // 16 MiB of an object that never ends.
    for _ in 0..512 {
        resize.tx.write(&spaces).await.unwrap();
    }
    // Let the server take what is still queued.
    tokio::time::sleep(Duration::from_millis(500)).await;
    eprintln!("resize: 16 MiB sent in {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the server re-parses what it keeps"
    );
    rss.assert_bounded("endless resize object");
    drop(conn);
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_data_frame_is_read_in_pieces_not_buffered_whole() {
    let _serial = SERIAL.lock().await;
    let s = start();
    // `sleep` never reads its stdin.
    let url = exec_url(&s, true, false, &["sleep"]);
    let mut tcp = spdy_upgrade(&url, "v4.channel.k8s.io", true).await;
    let mut enc = Encoder::new().unwrap();
    let mut wire = Vec::new();
    for (id, t) in [(1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")] {
        enc.encode(
            &Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: Headers::from_pairs([("streamType", t)]),
            },
            &mut wire,
        )
        .unwrap();
    }
    tcp.write_all(&wire).await.unwrap();
    let zeros = vec![0u8; 1 << 20];
    let rss = Rss::start();
    // Four DATA frames of 16 MiB on stdin, written until the server stops
    // taking them (it must, as nothing reads them).
    let mut written = 0usize;
    'frames: for _ in 0..4 {
        let len = (1usize << 24) - 1;
        let head = [
            0,
            0,
            0,
            3,
            0,
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
        ];
        tcp.write_all(&head).await.unwrap();
        let mut left = len;
        while left > 0 {
            let n = left.min(zeros.len());
            match tokio::time::timeout(Duration::from_secs(2), tcp.write_all(&zeros[..n])).await {
                Ok(Ok(())) => {
                    left -= n;
                    written += n;
                }
                Ok(Err(e)) => panic!("the server hung up: {e}"),
                Err(_) => break 'frames,
            }
        }
    }
    eprintln!(
        "DATA: {} KiB taken before the server stopped reading",
        written >> 10
    );
    assert!(
        written < 32 << 20,
        "the server took {written} bytes of stdin nobody reads"
    );
    rss.assert_bounded("16 MiB DATA frames");
    drop(tcp);
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_websocket_message_is_refused() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, true, false, &["sleep"]);
    let (mut tcp, addr, path) = connect(&url, false).await;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // One binary frame of 12 MiB for stdin, masked with a zero key.
    let len: u64 = 12 << 20;
    let mut frame = vec![0x82, 0x80 | 127];
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    let rss = Rss::start();
    let mut refused = tcp.write_all(&frame).await.is_err();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..12 {
        if refused {
            break;
        }
        refused = tokio::time::timeout(Duration::from_secs(5), tcp.write_all(&zeros))
            .await
            .map_or(true, |r| r.is_err());
    }
    assert_closed_by_server(&mut tcp, "a 12 MiB WebSocket message").await;
    rss.assert_bounded("12 MiB WebSocket message");
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_streams_past_the_pending_limit_are_reset() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = s
        .server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: "p1".into(),
            ports: vec![],
        })
        .unwrap();
    let tcp = spdy_upgrade(&url, "portforward.k8s.io", false).await;
    let conn = Connection::new(tcp, Role::Client, None).unwrap();
    let rss = Rss::start();
    let mut streams = Vec::new();
    // Data streams whose error stream never comes. The server answers each
    // SYN_STREAM at once; those past the limit are reset right after.
    for id in 0..100 {
        let headers = Headers::from_pairs([
            ("streamType", "data"),
            ("port", "80"),
            ("requestID", &id.to_string()),
        ]);
        streams.push(conn.open(headers).await.unwrap());
    }
    let mut reset = 0;
    for stream in &mut streams {
        // A reset stream's data ends at once; a kept one waits 30 s for its pair.
        if let Ok(None) = tokio::time::timeout(Duration::from_millis(500), stream.rx.recv()).await {
            reset += 1;
        }
    }
    assert_eq!(reset, 100 - 32, "half-open connections reset (32 are kept)");
    rss.assert_bounded("half-open port-forward connections");
    drop((streams, conn));
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_server_limit_are_closed_at_once() {
    let _serial = SERIAL.lock().await;
    let s = start_with(Config {
        max_connections: 4,
        ..Config::default()
    });
    let addr = s.server.local_addr();
    // Four sessions: connections without a token would be closed to make
    // room (tests/exhaustion.rs), sessions are not.
    let opts = CommandOptions {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut held = Vec::new();
    for _ in 0..4 {
        let url = s
            .server
            .get_exec_url(exec_req(&["sleep"], false, false))
            .unwrap();
        held.push(
            RemoteCommand::connect(&url, Transport::Spdy, opts, &["v4.channel.k8s.io"])
                .await
                .unwrap(),
        );
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(3), extra.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a fifth connection was kept open: {read:?}"
    );
    drop(held);
    // The slots come back once the server saw the held ones end.
    let deadline = Instant::now() + WAIT;
    loop {
        let mut probe = TcpStream::connect(addr).await.unwrap();
        let open = tokio::time::timeout(Duration::from_millis(200), probe.read(&mut buf))
            .await
            .is_err();
        if open {
            break;
        }
        assert!(Instant::now() < deadline, "the slots never came back");
    }
    exec_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_64_kib_is_refused() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = exec_url(&s, false, false, &["echo"]);
    let (mut tcp, addr, path) = connect(&url, false).await;
    let pad = "a".repeat(200 << 10);
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-Pad: {pad}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    let rss = Rss::start();
    // The server may close before it took the whole head: the write may
    // fail, and a reset may follow the answer (read_to_end keeps the bytes).
    let _ = tokio::time::timeout(WAIT, tcp.write_all(req.as_bytes())).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "kept open past {WAIT:?}: {answer:?}");
    assert!(
        answer.starts_with("HTTP/1.1 431 "),
        "a 200 KiB request head was not refused as too large: {answer:?}"
    );
    rss.assert_bounded("200 KiB request head");
    exec_still_works(&s).await;
}
