//! Connection exhaustion (#28): clients without a valid token must not be
//! able to take the streaming server's connections away from kubelet. Real
//! sockets on 127.0.0.0/8; other peers are made by binding the client
//! socket to 127.0.0.2 and up.
//!
//! - one address cannot hold more than its share of connections that have
//!   not shown a token, and another address still gets in;
//! - a request without a valid token is answered and its connection closed;
//! - a flood of bare `GET`s on every slot (from many addresses, one of them
//!   kubelet's own 127.0.0.1) cannot keep a valid exec or port-forward out;
//! - keep-alive and the first request head are bounded in time.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_streaming::client::{CommandOptions, RemoteCommand, SpdyPortForward, Transport};
use berth_streaming::{Config, ExecRequest, PortForwardRequest};
use common::{start_with, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

const OUT_ERR: CommandOptions = CommandOptions {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

fn exec_url(s: &Server, cmd: &[&str]) -> String {
    s.server
        .get_exec_url(ExecRequest {
            container_id: "c1".into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty: false,
            stdin: false,
            stdout: true,
            stderr: true,
        })
        .unwrap()
}

/// `http://ADDR/PATH` split into the address and `/PATH`.
fn split(url: &str) -> (SocketAddr, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    (addr.parse().unwrap(), format!("/{path}"))
}

/// A connection to `server` from the address `from` (127.0.0.x).
async fn connect_from(from: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(server).await
}

fn peer(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// Reads everything until the server closes the connection: `Some(bytes)`
/// if it did within `within`, `None` if it was still open then.
async fn read_until_closed(tcp: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                assert!(got.len() < 1 << 20, "the server sent too much");
            }
        }
    }
}

/// Reads one response (head and `Content-Length` body), leaving the
/// connection as the server left it.
async fn read_response(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut byte))
            .await
            .expect("a response head in time")
            .unwrap();
        assert_eq!(n, 1, "closed inside the response head");
        got.push(byte[0]);
        assert!(got.len() < 64 * 1024);
    }
    let head = String::from_utf8(got).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut body))
        .await
        .expect("a response body in time")
        .unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// An exec through `s` gives its output and exit code.
async fn exec_works(s: &Server, what: &str) {
    let url = exec_url(s, &["echo", "through"]);
    let rc = tokio::time::timeout(
        WAIT,
        RemoteCommand::connect(&url, Transport::Spdy, OUT_ERR, &["v4.channel.k8s.io"]),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: the exec did not connect in time"))
    .unwrap_or_else(|e| panic!("{what}: the exec was refused: {e}"));
    let done = rc.finish(WAIT).await.unwrap();
    assert_eq!(done.stdout, b"through\n", "{what}");
    assert_eq!(done.exit_code(), Some(0), "{what}");
}

/// A port-forward through `s` reaches port 80.
async fn port_forward_works(s: &Server, what: &str) {
    let url = s
        .server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: "pod1".into(),
            ports: vec![],
        })
        .unwrap();
    let mut pf = tokio::time::timeout(WAIT, SpdyPortForward::connect(&url))
        .await
        .unwrap_or_else(|_| panic!("{what}: the port-forward did not connect in time"))
        .unwrap_or_else(|e| panic!("{what}: the port-forward was refused: {e}"));
    let c = pf.open(80).await.unwrap();
    c.send(b"abc").await.unwrap();
    c.close_write().await.unwrap();
    let done = c.finish(WAIT).await.unwrap();
    assert_eq!(done.data, b"hi from 80\nabc", "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_past_its_cap_loses_its_oldest_connections_and_another_peer_gets_in() {
    // 20 slots, 16 per peer (the default): one address could take them all.
    let s = start_with(Config {
        max_connections: 20,
        ..Config::default()
    });
    let addr = s.server.local_addr();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(connect_from(peer(2), addr).await.unwrap());
        // In order: the server sees them oldest first.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut closed = Vec::new();
    for (i, tcp) in held.iter_mut().enumerate() {
        let within = if i < 4 {
            WAIT
        } else {
            Duration::from_millis(100)
        };
        if read_until_closed(tcp, within).await.is_some() {
            closed.push(i);
        }
    }
    assert_eq!(
        closed,
        [0, 1, 2, 3],
        "the 4 oldest connections of 127.0.0.2 past its 16 are closed, the rest kept"
    );
    // Another address is answered.
    let mut other = connect_from(peer(3), addr).await.unwrap();
    other
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_response(&mut other).await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    // And kubelet's exec from 127.0.0.1.
    exec_works(&s, "beside a peer at its cap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_address_has_no_per_peer_cap() {
    // 127.0.0.1 is where kubelet connects from, shared with every local
    // user: only the server's limit applies there.
    let s = start_with(Config {
        max_connections: 40,
        ..Config::default()
    });
    let addr = s.server.local_addr();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(connect_from(peer(1), addr).await.unwrap());
    }
    for (i, tcp) in held.iter_mut().enumerate() {
        let closed = read_until_closed(tcp, Duration::from_millis(100)).await;
        assert!(closed.is_none(), "connection {i} from 127.0.0.1 was closed");
    }
    exec_works(&s, "beside 20 connections from 127.0.0.1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_valid_token_is_answered_and_the_connection_closed() {
    let s = start_with(Config::default());
    let url = exec_url(&s, &["echo", "through"]);
    let (addr, path) = split(&url);
    let token = path.rsplit('/').next().unwrap().to_string();
    let requests = [
        ("GET / HTTP/1.1".to_string(), "HTTP/1.1 404"),
        ("GET /exec/bogus HTTP/1.1".to_string(), "HTTP/1.1 404"),
        (format!("GET /attach/{token} HTTP/1.1"), "HTTP/1.1 404"),
        (format!("DELETE /exec/{token} HTTP/1.1"), "HTTP/1.1 405"),
    ];
    for (line, status) in requests {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let req = format!("{line}\r\nHost: {addr}\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let got = read_until_closed(&mut tcp, Duration::from_secs(3))
            .await
            .unwrap_or_else(|| panic!("{line}: the connection was kept open after the answer"));
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with(status), "{line}: {got}");
        assert!(
            got.to_ascii_lowercase().contains("connection: close"),
            "{line}: {got}"
        );
    }
    // None of them used the token.
    let rc = RemoteCommand::connect(&url, Transport::Spdy, OUT_ERR, &["v4.channel.k8s.io"])
        .await
        .unwrap();
    let done = rc.finish(WAIT).await.unwrap();
    assert_eq!(done.stdout, b"through\n");
}

/// Flood connections: keeps its socket open, sends a bare `GET /` every
/// `every`, and reconnects at once whenever the server closes it. Counts
/// the answers it got.
async fn flood(
    from: Ipv4Addr,
    server: SocketAddr,
    every: Duration,
    stop: Arc<AtomicBool>,
    answers: Arc<AtomicUsize>,
) {
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut tcp) = connect_from(from, server).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        'conn: while !stop.load(Ordering::Relaxed) {
            // Silent for `every`, but notices a close at once.
            let quiet = Instant::now() + every;
            loop {
                match tokio::time::timeout_at(quiet, tcp.read(&mut buf)).await {
                    Err(_) => break,
                    Ok(Ok(0)) | Ok(Err(_)) => break 'conn,
                    Ok(Ok(_)) => answers.fetch_add(1, Ordering::Relaxed),
                };
            }
            if tcp
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .is_err()
            {
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bare_gets_on_every_slot_cannot_keep_a_valid_exec_out() {
    // The defaults: 256 slots, 16 per peer. 16 addresses x 16 sockets take
    // every slot; one of the addresses is kubelet's own 127.0.0.1.
    let s = start_with(Config::default());
    let addr = s.server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicUsize::new(0));
    let mut flooders = tokio::task::JoinSet::new();
    for p in 1..=16u8 {
        for _ in 0..16 {
            // A GET every 500 ms (the 20 s, scaled down).
            flooders.spawn(flood(
                peer(p),
                addr,
                Duration::from_millis(500),
                stop.clone(),
                answers.clone(),
            ));
        }
    }
    // Every flood socket connected and sent a request or two.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        answers.load(Ordering::Relaxed) >= 200,
        "the flood is not being answered: {} answers",
        answers.load(Ordering::Relaxed)
    );
    for round in 0..5 {
        exec_works(&s, &format!("exec {round} during the flood")).await;
        port_forward_works(&s, &format!("port-forward {round} during the flood")).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let all_ended = tokio::time::timeout(WAIT, async {
        while flooders.join_next().await.is_some() {}
    })
    .await;
    assert!(all_ended.is_ok(), "the flood did not stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_closed_when_idle() {
    let s = start_with(Config {
        keepalive_timeout: Duration::from_millis(500),
        ..Config::default()
    });
    // A valid token whose upgrade is refused (no protocol header) keeps the
    // connection, so the client may try again on it...
    let url = exec_url(&s, &["echo", "through"]);
    let (addr, path) = split(&url);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let refused = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
    tcp.write_all(refused.as_bytes()).await.unwrap();
    let answer = read_response(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let retry = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(retry.as_bytes()).await.unwrap();
    let answer = read_response(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    drop(tcp);
    // ... but not for long once it is idle.
    let url = exec_url(&s, &["echo", "through"]);
    let (addr, path) = split(&url);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let refused = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
    tcp.write_all(refused.as_bytes()).await.unwrap();
    let answer = read_response(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let idle = Instant::now();
    let closed = read_until_closed(&mut tcp, Duration::from_secs(3)).await;
    assert_eq!(
        closed.as_deref(),
        Some(&b""[..]),
        "an idle kept-alive connection stayed open"
    );
    assert!(
        idle.elapsed() >= Duration::from_millis(400),
        "closed before the keep-alive timeout: {:?}",
        idle.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_head_must_be_in_within_the_header_timeout_of_the_accept() {
    let s = start_with(Config {
        header_timeout: Duration::from_secs(1),
        ..Config::default()
    });
    let url = exec_url(&s, &["echo", "through"]);
    let (addr, path) = split(&url);
    // One silent connection, one that sends its head a byte every 100 ms.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let accepted = Instant::now();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(100)
    );
    let dribble = async {
        for byte in head.as_bytes() {
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Closed (written) or 10 s worth of bytes sent (the old 30 s bound).
        accepted.elapsed()
    };
    let dribbled_for = tokio::time::timeout(Duration::from_secs(5), dribble).await;
    let dribbled_for = dribbled_for.expect("the dribbling connection was kept past 5 s");
    assert!(
        dribbled_for < Duration::from_secs(3),
        "the dribbling connection was kept for {dribbled_for:?}"
    );
    let closed = read_until_closed(&mut silent, Duration::from_secs(2)).await;
    assert!(closed.is_some(), "the silent connection was kept");
    assert!(accepted.elapsed() >= Duration::from_millis(900));
    // The token was not used.
    exec_works_with(&url).await;
}

async fn exec_works_with(url: &str) {
    let rc = RemoteCommand::connect(url, Transport::Spdy, OUT_ERR, &["v4.channel.k8s.io"])
        .await
        .unwrap();
    let done = rc.finish(WAIT).await.unwrap();
    assert_eq!(done.stdout, b"through\n");
}
