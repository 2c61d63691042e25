//! Hostile streaming clients against the live daemon process (real runc,
//! CNI and the busybox image): a SYN_STREAM whose header block decompresses
//! to a 500 KiB name with 500 KiB of NULs (the issue's ~244 GiB block), a
//! PING flood that never reads the answers, a resize object that never
//! ends, and more connections than the server serves. After each the
//! daemon is still up, its RSS (peak, `VmHWM` of `/proc/PID/status` after
//! a reset through `/proc/PID/clear_refs`) grew by less than
//! [`RSS_CEILING`], and the next exec works.
//!
//! The daemon runs in a memory cgroup of the test's own (cgroup v1
//! `memory`, or v2 with `memory.max`) limited to [`CGROUP_LIMIT`], so a
//! regression gets the daemon OOM-killed (and the test failed) instead of
//! the machine's memory eaten (tried: with the header bounds of
//! `spdy::frame` lifted, the first client gets the daemon OOM-killed in
//! its cgroup at 512 MiB and the test fails). Root only.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_streaming::client::{CommandOptions, RemoteCommand, Transport};
use berth_streaming::spdy::zlib::HeaderCompressor;
use berth_streaming::spdy::{Connection, Headers, Role};
use common::cri::Streams;
use common::cri::{container, pull, remove_pod, run_container};
use common::pods::{pod_config, TestNet};
use common::streaming::daemon_with;
use common::{registry, Daemon};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const WAIT: Duration = Duration::from_secs(30);
/// Most the daemon's peak RSS may grow during one hostile client.
const RSS_CEILING: u64 = 8 << 20;
/// The memory limit of the daemon's cgroup (the daemon, its shims).
const CGROUP_LIMIT: u64 = 512 << 20;

/// A memory cgroup of this test, removed on drop (its processes moved back
/// to the parent first).
struct MemoryCgroup {
    dir: PathBuf,
    parent: PathBuf,
}

impl MemoryCgroup {
    /// Makes the cgroup with `limit` bytes, on cgroup v1 (`memory`
    /// hierarchy) or v2 (unified, memory controller enabled).
    fn new(name: &str, limit: u64) -> MemoryCgroup {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let v2 = PathBuf::from("/sys/fs/cgroup");
        let (parent, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1, "memory.limit_in_bytes")
        } else {
            let controllers = std::fs::read_to_string(v2.join("cgroup.controllers"))
                .expect("neither a cgroup v1 memory hierarchy nor cgroup v2");
            assert!(
                controllers.split_whitespace().any(|c| c == "memory"),
                "cgroup v2 without the memory controller"
            );
            let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
            (v2, "memory.max")
        };
        let dir = parent.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        std::fs::write(dir.join(limit_file), limit.to_string()).expect("setting the memory limit");
        // No swap either, where the kernel counts it (v1 memsw, v2 swap.max).
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        MemoryCgroup { dir, parent }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .expect("moving the daemon into its memory cgroup");
    }

    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            for pid in self.procs() {
                let _ = std::fs::write(self.parent.join("cgroup.procs"), pid.to_string());
            }
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// A memory field of `/proc/PID/status`; a daemon that has died (killed by
/// its cgroup's OOM killer) has none.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| {
            panic!("no {field} in /proc/{pid}/status: the daemon died (OOM-killed in its memory cgroup?)")
        })
}

/// The daemon's peak RSS growth over one hostile client.
struct Rss {
    pid: u32,
    base: u64,
}

impl Rss {
    fn start(daemon: &Daemon) -> Rss {
        let pid = daemon.child.id();
        // 5: reset the peak (VmHWM) to the current RSS.
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
        Rss {
            pid,
            base: status_kib(pid, "VmRSS:") * 1024,
        }
    }

    fn assert_bounded(&self, what: &str) {
        let grown = (status_kib(self.pid, "VmHWM:") * 1024).saturating_sub(self.base);
        eprintln!("{what}: the daemon's peak RSS grew by {} KiB", grown / 1024);
        assert!(
            grown < RSS_CEILING,
            "{what}: the daemon's peak RSS grew by {grown} bytes (at most {RSS_CEILING})"
        );
    }
}

/// The daemon still runs and an exec through its streaming server works.
async fn still_serving(daemon: &mut Daemon, id: &str, what: &str) {
    let cri = daemon.cri().await;
    if let Some(status) = daemon.child.try_wait().unwrap() {
        panic!("{what}: the daemon died ({status}): {}", daemon.stderr());
    }
    let s = Streams {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let url = cri
        .exec(id, &["echo", "still", "here"], s)
        .await
        .expect("Exec");
    let opts = CommandOptions {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let rc = RemoteCommand::connect(&url, Transport::Spdy, opts, &[])
        .await
        .unwrap_or_else(|e| panic!("{what}: the next exec: {e}"));
    let done = rc.finish(WAIT).await.expect("the exec ended");
    assert_eq!(done.stdout, b"still here\n", "{what}");
    assert_eq!(done.exit_code(), Some(0), "{what}");
}

/// `host:port` and the path of a streaming URL.
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (addr, path) = rest.split_once('/').unwrap();
    (addr.to_string(), format!("/{path}"))
}

/// A SPDY upgrade of `url`, with a small receive buffer when asked.
async fn spdy_upgrade(url: &str, small_rcvbuf: bool) -> TcpStream {
    let (addr, path) = split_url(url);
    let socket = TcpSocket::new_v4().unwrap();
    if small_rcvbuf {
        socket.set_recv_buffer_size(4096).unwrap();
    }
    let mut tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(WAIT, tcp.read(&mut b))
            .await
            .expect("an answer to the upgrade")
            .unwrap();
        assert_eq!(n, 1, "closed in the response head");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tcp
}

/// Reads (and drops) until the daemon closes the connection.
async fn closed_by_server(tcp: &mut TcpStream, what: &str) {
    let deadline = Instant::now() + WAIT;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, tcp.read(&mut buf)).await {
            Err(_) => panic!("{what}: the daemon kept the connection open"),
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
        }
    }
}

fn control_frame(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80, 3];
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(0);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn hostile_streaming_clients_against_the_daemon() {
    require_root!();
    // Declared first: dropped last, after the daemon and its shims are gone.
    let cgroup = MemoryCgroup::new("berth-test-streaming-hostile", CGROUP_LIMIT);
    let net = TestNet::new();
    let mut daemon = daemon_with(&net, "").await;
    let cri = daemon.cri().await;
    cgroup.add(daemon.child.id());
    let config = pod_config("hostile");
    let pod = cri.run_pod(&config).await.expect("RunPodSandbox");
    pull(&daemon, &registry().busybox()).await;
    let id = run_container(
        &daemon,
        &pod,
        &config,
        container("shell", &["sleep", "3600"]),
    )
    .await;
    still_serving(&mut daemon, &id, "before").await;
    let plain = Streams {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };

    // 1. One SYN_STREAM whose block decompresses to a 500 KiB name and
    //    500 KiB of NULs: ~512k values of that name.
    let url = cri.exec(&id, &["echo"], plain).await.unwrap();
    let mut tcp = spdy_upgrade(&url, false).await;
    let name = vec![b'n'; 500 << 10];
    let nuls = vec![0u8; 500 << 10];
    let mut block = 1u32.to_be_bytes().to_vec();
    for s in [&name[..], &nuls[..]] {
        block.extend_from_slice(&(s.len() as u32).to_be_bytes());
        block.extend_from_slice(s);
    }
    let mut payload = 1u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(&[0, 0]);
    payload.extend(HeaderCompressor::new().unwrap().compress(&block).unwrap());
    assert!(payload.len() < 64 << 10, "{} bytes", payload.len());
    let rss = Rss::start(&daemon);
    let _ = tcp.write_all(&control_frame(1, &payload)).await;
    closed_by_server(&mut tcp, "a header block of 512k values").await;
    rss.assert_bounded("a header block of 512k values");
    still_serving(&mut daemon, &id, "after the header block").await;

    // 2. PINGs that are never answered back because the client never reads.
    let url = cri.exec(&id, &["echo"], plain).await.unwrap();
    let mut tcp = spdy_upgrade(&url, true).await;
    let mut batch = Vec::new();
    for i in 0..1000u32 {
        batch.extend(control_frame(6, &(2 * i + 1).to_be_bytes()));
    }
    let rss = Rss::start(&daemon);
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
            // The daemon stopped reading: then it must hang up soon.
            Err(_) => break,
        }
    }
    if !refused {
        closed_by_server(&mut tcp, "a PING flood").await;
    }
    eprintln!("PING flood: {sent} pings sent before the daemon hung up");
    rss.assert_bounded("a PING flood");
    still_serving(&mut daemon, &id, "after the PING flood").await;

    // 3. A resize object that never ends: 16 MiB of `{"Width":` and spaces.
    let tty = Streams {
        stdin: false,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let url = cri.exec(&id, &["sleep", "60"], tty).await.unwrap();
    let conn = Connection::new(spdy_upgrade(&url, false).await, Role::Client, None).unwrap();
    let open = |t: &str| Headers::from_pairs([("streamType", t)]);
    let _error = conn.open(open("error")).await.unwrap();
    let _stdout = conn.open(open("stdout")).await.unwrap();
    let resize = conn.open(open("resize")).await.unwrap();
    let spaces = vec![b' '; 32 << 10];
    let rss = Rss::start(&daemon);
    let started = Instant::now();
    resize.tx.write(b"{\"Width\":").await.unwrap();
    for _ in 0..512 {
        tokio::time::timeout(WAIT, resize.tx.write(&spaces))
            .await
            .expect("the daemon stopped reading the resize stream")
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    eprintln!("resize: 16 MiB sent in {:?}", started.elapsed());
    rss.assert_bounded("an endless resize object");
    drop((resize, conn));
    still_serving(&mut daemon, &id, "after the resize object").await;

    // 4. More connections than the server serves (256): each one past it
    //    closes the oldest connection that has shown no token (#28), and
    //    the server serves again once they go.
    let (addr, _) = split_url(&url);
    let rss = Rss::start(&daemon);
    let mut conns = Vec::new();
    for _ in 0..300 {
        conns.push(TcpStream::connect(&addr).await.unwrap());
    }
    let mut closed = 0;
    for tcp in &mut conns {
        let mut b = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut b)).await
        {
            closed += 1;
        }
    }
    assert!(
        closed >= 300 - 256,
        "only {closed} of 300 connections were refused"
    );
    rss.assert_bounded("300 connections");
    drop(conns);
    // The slots come back as the daemon sees the connections end.
    let deadline = Instant::now() + WAIT;
    loop {
        let s = plain;
        let url = cri.exec(&id, &["echo", "x"], s).await.unwrap();
        let opts = CommandOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        if RemoteCommand::connect(&url, Transport::Spdy, opts, &[])
            .await
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the server did not serve again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    still_serving(&mut daemon, &id, "after 300 connections").await;

    // The cgroup held the daemon all along (an OOM kill would have ended it).
    assert!(cgroup.procs().contains(&daemon.child.id()));
    remove_pod(&daemon, &pod).await;
}
