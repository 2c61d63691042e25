//! The streaming server end to end over loopback, with a fake backend and
//! the crate's own small SPDY and WebSocket clients: exec output and exit
//! codes, stdin, terminal resize, attach, port-forward, and the refusals
//! (used, expired and wrong tokens, protocols the server does not speak).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use berth_streaming::client::{
    ClientError, CommandOptions, RemoteCommand, SpdyPortForward, Transport, WsPortForward,
};
use berth_streaming::{AttachRequest, Config, ExecRequest, PortForwardRequest};
use common::{start, start_with, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);

fn exec_req(cmd: &[&str], opts: CommandOptions) -> ExecRequest {
    ExecRequest {
        container_id: "c1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty: opts.tty,
        stdin: opts.stdin,
        stdout: opts.stdout,
        stderr: opts.stderr,
    }
}

const OUT_ERR: CommandOptions = CommandOptions {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

/// Every transport and sub-protocol an exec is tried with.
const TRANSPORTS: &[(Transport, &str)] = &[
    (Transport::Spdy, "v4.channel.k8s.io"),
    (Transport::WebSocket, "v5.channel.k8s.io"),
    (Transport::WebSocket, "v4.channel.k8s.io"),
    (Transport::WebSocket, "v4.base64.channel.k8s.io"),
];

async fn exec(
    s: &Server,
    cmd: &[&str],
    opts: CommandOptions,
    transport: Transport,
    protocol: &str,
) -> RemoteCommand {
    let url = s.server.get_exec_url(exec_req(cmd, opts)).unwrap();
    let rc = RemoteCommand::connect(&url, transport, opts, &[protocol])
        .await
        .unwrap();
    assert_eq!(rc.protocol(), protocol);
    rc
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn exec_output_and_exit_codes_on_every_transport() {
    let s = start();
    for &(transport, protocol) in TRANSPORTS {
        let rc = exec(
            &s,
            &["echo", "hello", "world"],
            OUT_ERR,
            transport,
            protocol,
        )
        .await;
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.stdout, b"hello world\n", "{protocol}");
        assert_eq!(done.exit_code(), Some(0), "{protocol}: {done:?}");

        let rc = exec(&s, &["fail", "3"], OUT_ERR, transport, protocol).await;
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.stderr, b"oops\n", "{protocol}");
        assert_eq!(done.exit_code(), Some(3), "{protocol}: {done:?}");

        let rc = exec(&s, &["broken"], OUT_ERR, transport, protocol).await;
        let done = rc.finish(WAIT).await.unwrap();
        let status: serde_json::Value = serde_json::from_slice(&done.status).unwrap();
        assert_eq!(status["reason"], "InternalError", "{protocol}");
        assert!(status["message"]
            .as_str()
            .unwrap()
            .contains("no such command"));
    }
    wait_until("no process left", || {
        s.fake.alive.load(Ordering::SeqCst) == 0
    })
    .await;
}

#[tokio::test]
async fn older_spdy_protocols_report_failures_as_text() {
    let s = start();
    for protocol in ["v3.channel.k8s.io", "v2.channel.k8s.io"] {
        let rc = exec(&s, &["fail", "2"], OUT_ERR, Transport::Spdy, protocol).await;
        let done = rc.finish(WAIT).await.unwrap();
        let text = String::from_utf8(done.status).unwrap();
        assert!(text.contains("non-zero exit code"), "{text}");
        let rc = exec(&s, &["echo", "x"], OUT_ERR, Transport::Spdy, protocol).await;
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(
            (done.stdout.as_slice(), done.status.as_slice()),
            (&b"x\n"[..], &b""[..])
        );
    }
}

#[tokio::test]
async fn exec_with_stdin() {
    let s = start();
    let opts = CommandOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: false,
    };
    for (transport, protocol) in [
        (Transport::Spdy, "v4.channel.k8s.io"),
        (Transport::WebSocket, "v5.channel.k8s.io"),
    ] {
        let mut rc = exec(&s, &["cat"], opts, transport, protocol).await;
        rc.send_stdin(b"hello ").await.unwrap();
        rc.send_stdin(b"stdin").await.unwrap();
        rc.close_stdin().await.unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.stdout, b"hello stdin", "{protocol}");
        assert_eq!(done.exit_code(), Some(0));
    }
}

#[tokio::test]
async fn exec_in_a_terminal_sees_the_resize() {
    let s = start();
    let opts = CommandOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    for &(transport, protocol) in TRANSPORTS {
        let mut rc = exec(&s, &["size"], opts, transport, protocol).await;
        rc.resize(100, 40).await.unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.stdout, b"40 100\r\n", "{protocol}");
        assert_eq!(done.exit_code(), Some(0));
    }
}

#[tokio::test]
async fn attach_echoes_stdin_until_the_client_ends_it() {
    let s = start();
    for (transport, protocol) in [
        (Transport::Spdy, "v4.channel.k8s.io"),
        (Transport::WebSocket, "v5.channel.k8s.io"),
    ] {
        let url = s
            .server
            .get_attach_url(AttachRequest {
                container_id: "c1".into(),
                tty: false,
                stdin: true,
                stdout: true,
                stderr: true,
            })
            .unwrap();
        let opts = CommandOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let mut rc = RemoteCommand::connect(&url, transport, opts, &[protocol])
            .await
            .unwrap();
        rc.send_stdin(b"ping\n").await.unwrap();
        rc.read_stdout_until("ping\n", WAIT).await.unwrap();
        rc.close_stdin().await.unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.exit_code(), Some(0), "{protocol}: {done:?}");
    }
}

#[tokio::test]
async fn a_client_that_goes_away_ends_the_process() {
    let s = start();
    for &(transport, protocol) in TRANSPORTS {
        let rc = exec(&s, &["sleep"], OUT_ERR, transport, protocol).await;
        wait_until("exec started", || s.fake.alive.load(Ordering::SeqCst) == 1).await;
        drop(rc);
        eprintln!("dropped the {protocol} client");
        wait_until("exec dropped with its client", || {
            s.fake.alive.load(Ordering::SeqCst) == 0
        })
        .await;
    }
}

#[tokio::test]
async fn shutdown_ends_running_sessions() {
    let s = start();
    let _rc = exec(
        &s,
        &["sleep"],
        OUT_ERR,
        Transport::Spdy,
        "v4.channel.k8s.io",
    )
    .await;
    wait_until("exec started", || s.fake.alive.load(Ordering::SeqCst) == 1).await;
    s.server.shutdown();
    wait_until("exec ended by shutdown", || {
        s.fake.alive.load(Ordering::SeqCst) == 0
    })
    .await;
}

fn http_status(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Http { status, body } => (status, body),
        other => panic!("expected an HTTP error, got {other}"),
    }
}

#[tokio::test]
async fn tokens_are_single_use() {
    let s = start();
    for transport in [Transport::Spdy, Transport::WebSocket] {
        let url = s
            .server
            .get_exec_url(exec_req(&["echo", "x"], OUT_ERR))
            .unwrap();
        let rc = RemoteCommand::connect(&url, transport, OUT_ERR, &[])
            .await
            .unwrap();
        rc.finish(WAIT).await.unwrap();
        let err = RemoteCommand::connect(&url, transport, OUT_ERR, &[])
            .await
            .err()
            .unwrap();
        let (status, body) = http_status(err);
        assert_eq!(status, 404);
        assert!(body.contains("already been used"), "{body}");
    }
}

#[tokio::test]
async fn tokens_expire() {
    let s = start_with(Config {
        token_ttl: Duration::from_millis(100),
        ..Config::default()
    });
    let url = s
        .server
        .get_exec_url(exec_req(&["echo", "x"], OUT_ERR))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = RemoteCommand::connect(&url, Transport::Spdy, OUT_ERR, &[])
        .await
        .err()
        .unwrap();
    let (status, body) = http_status(err);
    assert_eq!(status, 404);
    assert!(body.contains("expired"), "{body}");
}

#[tokio::test]
async fn wrong_paths_and_tokens_are_not_found() {
    let s = start();
    let base = s.server.base_url().to_string();
    for path in ["/exec/nosuchtoken", "/", "/exec/", "/logs/abc"] {
        let err = RemoteCommand::connect(&format!("{base}{path}"), Transport::Spdy, OUT_ERR, &[])
            .await
            .err()
            .unwrap();
        assert_eq!(http_status(err).0, 404, "{path}");
    }
    let url = s
        .server
        .get_exec_url(exec_req(&["echo", "x"], OUT_ERR))
        .unwrap();
    let attach_url = url.replace("/exec/", "/attach/");
    let (status, body) = http_status(
        RemoteCommand::connect(&attach_url, Transport::Spdy, OUT_ERR, &[])
            .await
            .err()
            .unwrap(),
    );
    assert_eq!(status, 404);
    assert!(body.contains("for /exec"), "{body}");
}

#[tokio::test]
async fn unsupported_protocols_are_refused_and_the_token_stays_usable() {
    let s = start();
    let url = s
        .server
        .get_exec_url(exec_req(&["echo", "ok"], OUT_ERR))
        .unwrap();
    let (status, body) = http_status(
        RemoteCommand::connect(&url, Transport::WebSocket, OUT_ERR, &["v9.channel.k8s.io"])
            .await
            .err()
            .unwrap(),
    );
    assert_eq!(status, 403);
    assert!(body.contains("not supported"), "{body}");
    let (status, body) = http_status(
        RemoteCommand::connect(&url, Transport::Spdy, OUT_ERR, &["v9.channel.k8s.io"])
            .await
            .err()
            .unwrap(),
    );
    assert_eq!(status, 403);
    assert!(body.contains("unable to negotiate protocol"), "{body}");
    // Like client-go falling back to another transport: the token still works.
    let rc = RemoteCommand::connect(&url, Transport::Spdy, OUT_ERR, &[])
        .await
        .unwrap();
    assert_eq!(rc.protocol(), "v4.channel.k8s.io");
    assert_eq!(rc.finish(WAIT).await.unwrap().stdout, b"ok\n");
}

#[tokio::test]
async fn requests_that_are_not_upgrades_are_bad_requests() {
    let s = start();
    let url = s
        .server
        .get_exec_url(exec_req(&["echo", "x"], OUT_ERR))
        .unwrap();
    let addr = s.server.local_addr();
    let path = url.split_once(&addr.to_string()).unwrap().1;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("X-Stream-Protocol-Version is required"),
        "{answer}"
    );
}

#[tokio::test]
async fn requests_kubelet_refuses_get_no_url() {
    let s = start();
    let none = CommandOptions::default();
    let tty_stderr = CommandOptions {
        stdout: true,
        stderr: true,
        tty: true,
        ..CommandOptions::default()
    };
    for opts in [none, tty_stderr] {
        let err = s
            .server
            .get_exec_url(exec_req(&["echo"], opts))
            .unwrap_err();
        assert!(
            matches!(err, berth_streaming::Error::InvalidArgument(_)),
            "{err}"
        );
    }
    let err = s.server.get_exec_url(exec_req(&[], OUT_ERR)).unwrap_err();
    assert!(err.to_string().contains("cmd"), "{err}");
    let err = s
        .server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: String::new(),
            ports: vec![80],
        })
        .unwrap_err();
    assert!(err.to_string().contains("pod_sandbox_id"), "{err}");
}

#[tokio::test]
async fn port_forward_over_spdy() {
    let s = start();
    let url = s
        .server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: "pod1".into(),
            ports: vec![],
        })
        .unwrap();
    let mut pf = SpdyPortForward::connect(&url).await.unwrap();
    // Two connections at once on one session, then a failing one.
    let a = pf.open(80).await.unwrap();
    let b = pf.open(8080).await.unwrap();
    a.send(b"abc").await.unwrap();
    b.send(b"xyz").await.unwrap();
    a.close_write().await.unwrap();
    b.close_write().await.unwrap();
    let a = a.finish(WAIT).await.unwrap();
    let b = b.finish(WAIT).await.unwrap();
    assert_eq!(a.data, b"hi from 80\nabc");
    assert_eq!(b.data, b"hi from 8080\nxyz");
    assert_eq!((a.error.as_str(), b.error.as_str()), ("", ""));
    let failing = pf.open(1).await.unwrap();
    let failed = failing.finish(WAIT).await.unwrap();
    assert!(failed.data.is_empty());
    assert!(
        failed.error.contains("nothing listens on port 1 in pod1"),
        "{}",
        failed.error
    );
}

#[tokio::test]
async fn port_forward_over_websocket() {
    let s = start();
    let url = |ports: Vec<u16>| {
        s.server
            .get_port_forward_url(PortForwardRequest {
                pod_sandbox_id: "pod1".into(),
                ports,
            })
            .unwrap()
    };
    for protocol in [
        "v4.channel.k8s.io",
        "portforward.k8s.io",
        "v4.base64.channel.k8s.io",
    ] {
        // A port that answers and hangs up, and one where nothing listens:
        // the session ends by itself.
        let pf = WsPortForward::connect(&url(vec![7, 1]), &[protocol], &[7, 1])
            .await
            .unwrap();
        let got = pf.finish(WAIT).await.unwrap();
        assert_eq!(got[0].data, b"hi from 7\n", "{protocol}");
        assert_eq!(got[0].error, "", "{protocol}");
        assert!(
            got[1].error.contains("nothing listens on port 1"),
            "{protocol}: {got:?}"
        );

        // An echo: both directions.
        let mut pf = WsPortForward::connect(&url(vec![80]), &[protocol], &[80])
            .await
            .unwrap();
        pf.read_until(0, "hi from 80\n", WAIT).await.unwrap();
        pf.send(0, b"abc").await.unwrap();
        let got = pf.read_until(0, "abc", WAIT).await.unwrap();
        assert_eq!(got.data, b"hi from 80\nabc", "{protocol}");
    }
    // Ports may come from the URL when the request named none.
    let pf = WsPortForward::connect(&format!("{}?port=7", url(vec![])), &[], &[7])
        .await
        .unwrap();
    assert_eq!(pf.finish(WAIT).await.unwrap()[0].data, b"hi from 7\n");
    let (status, _) = http_status(
        WsPortForward::connect(&url(vec![]), &[], &[7])
            .await
            .err()
            .unwrap(),
    );
    assert_eq!(status, 400);
}
