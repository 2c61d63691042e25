//! The byte pools of port-forward sessions, against the live in-process
//! server: a client that pushes data at ports that never read (over SPDY,
//! and over a WebSocket), and a client that never reads what ports flood
//! it with. The server holds at most its per-stream and per-connection
//! budgets (the rest waits in TCP), so the test process's peak RSS grows by
//! at most [`RSS_CEILING`]; a normal port-forward works afterwards.
//!
//! The tests measure the whole process, so they run one at a time (a
//! lock), the peak reset before each (`/proc/self/clear_refs`); a watchdog
//! ends the process if RSS runs away.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use berth_streaming::client::{SpdyPortForward, WsPortForward};
use berth_streaming::spdy::{Connection, Headers, Role};
use berth_streaming::PortForwardRequest;
use common::{start, Server};
use tokio::net::TcpSocket;

const WAIT: Duration = Duration::from_secs(10);
/// Most the peak RSS may grow during one hostile client (the server's
/// budgets, 1 MiB in and 1 MiB out per connection, the client's, and the
/// 16 KiB pipes of the forwarded connections; the old code, 16 chunks per
/// stream whatever their sum, grew by 8 and 18 MiB in the first two tests).
const RSS_CEILING: u64 = 6 << 20;
/// Growth past which the watchdog ends the process.
const RSS_ABORT: u64 = 1 << 30;
/// How long the hostile client pushes before RSS is read.
const PUSH: Duration = Duration::from_secs(3);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static BLOCK: [u8; 32 * 1024] = [b'a'; 32 * 1024];

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

struct Rss {
    base: u64,
}

impl Rss {
    fn start() -> Rss {
        static WATCHDOG: OnceLock<()> = OnceLock::new();
        WATCHDOG.get_or_init(|| {
            let base = rss();
            std::thread::spawn(move || loop {
                if rss() > base + RSS_ABORT {
                    eprintln!("pool: RSS ran away; aborting");
                    std::process::exit(99);
                }
                std::thread::sleep(Duration::from_millis(2));
            });
        });
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        Rss { base: rss() }
    }

    fn assert_bounded(&self, what: &str) {
        let grown = (status_kib("VmHWM:") * 1024).saturating_sub(self.base);
        eprintln!("{what}: peak RSS grew by {} KiB", grown / 1024);
        assert!(
            grown <= RSS_CEILING,
            "{what}: peak RSS grew by {grown} bytes (at most {RSS_CEILING})"
        );
    }
}

fn pf_url(s: &Server, ports: Vec<u16>) -> String {
    s.server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: "pod1".into(),
            ports,
        })
        .unwrap()
}

/// A normal port-forward through the same server still works.
async fn forward_still_works(s: &Server) {
    let mut pf = SpdyPortForward::connect(&pf_url(s, vec![])).await.unwrap();
    let c = pf.open(80).await.unwrap();
    c.send(b"ok").await.unwrap();
    c.close_write().await.unwrap();
    assert_eq!(c.finish(WAIT).await.unwrap().data, b"hi from 80\nok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_for_ports_that_never_read_is_held_to_the_pool_over_spdy() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let mut pf = SpdyPortForward::connect(&pf_url(&s, vec![])).await.unwrap();
    let rss = Rss::start();
    // 64 connections to a port that never reads (all opened first: once
    // the server holds its most it reads no more frames, SYN_STREAMs
    // included), then 2 MiB pushed at each, all at once (their DATA frames
    // interleave): 128 MiB.
    let mut conns = Vec::new();
    for _ in 0..64 {
        conns.push(pf.open(9).await.unwrap());
    }
    let sent = Arc::new(AtomicUsize::new(0));
    let mut pushers = Vec::new();
    for c in conns {
        let sent = sent.clone();
        pushers.push(tokio::spawn(async move {
            for _ in 0..64 {
                c.send(&BLOCK).await.unwrap();
                sent.fetch_add(BLOCK.len(), Ordering::SeqCst);
            }
            c
        }));
    }
    tokio::time::sleep(PUSH).await;
    rss.assert_bounded("64 forwards pushing at a port that never reads");
    // The server stopped taking: most of the 128 MiB is still unsent (what
    // went is in the server's budgets and the sockets' buffers).
    let sent = sent.load(Ordering::SeqCst);
    eprintln!("sent {} KiB of 128 MiB", sent / 1024);
    assert!(
        sent < 32 << 20,
        "{sent} bytes went to ports that never read"
    );
    for p in &pushers {
        p.abort();
    }
    drop(pf);
    forward_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_for_ports_that_never_read_is_held_to_the_pool_over_websocket() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let ports = vec![9u16; 32];
    let mut pf = WsPortForward::connect(&pf_url(&s, ports.clone()), &["v4.channel.k8s.io"], &ports)
        .await
        .unwrap();
    let rss = Rss::start();
    // 256 KiB messages, round robin over the 32 ports, until the server
    // stops reading (a send that does not finish in time).
    let message = BLOCK.repeat(8);
    let mut stalled = false;
    'push: for _ in 0..16 {
        for port in 0..ports.len() {
            let sent = tokio::time::timeout(Duration::from_secs(1), pf.send(port, &message)).await;
            if sent.is_err() {
                stalled = true;
                break 'push;
            }
        }
    }
    rss.assert_bounded("32 WebSocket ports pushing at ports that never read");
    assert!(stalled, "the server took 128 MiB for ports that never read");
    drop(pf);
    forward_still_works(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_what_ports_flood_it_with_is_held_back() {
    let _serial = SERIAL.lock().await;
    let s = start();
    let url = pf_url(&s, vec![]);
    // SPDY by hand over a socket with a small receive buffer, so TCP
    // pushes back soon; the client's own streams are never read.
    let addr = url
        .strip_prefix("http://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
    let path = &url[url.find("/portforward").unwrap()..];
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(tcp.read(&mut b).await.unwrap(), 1);
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    let conn = Connection::new(tcp, Role::Client, None).unwrap();
    let rss = Rss::start();
    let mut streams = Vec::new();
    'open: for id in 0..64 {
        let id = id.to_string();
        for kind in ["error", "data"] {
            let headers = Headers::from_pairs([
                ("streamType", kind),
                ("port", "19"),
                ("requestID", id.as_str()),
            ]);
            // Opening stalls too once the connection is held back.
            match tokio::time::timeout(Duration::from_secs(2), conn.open(headers)).await {
                Ok(stream) => streams.push(stream.unwrap()),
                Err(_) => break 'open,
            }
        }
    }
    tokio::time::sleep(PUSH).await;
    rss.assert_bounded("64 flooding ports, a client that never reads");
    drop(streams);
    drop(conn);
    forward_still_works(&s).await;
}
