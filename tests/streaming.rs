//! Exec, attach and port-forward against the real daemon, runc, CNI and the
//! busybox test image, over both transports clients use (SPDY/3.1 and
//! WebSocket), with the streaming crate's small client: output and exit
//! codes, stdin, a terminal resize that `stty size` sees, attach to a
//! container echoing its stdin, port-forward to `nc` inside the pod, no
//! process left behind by a client that goes away, and single-use,
//! expiring tokens. Root only.

use crate::common;

use std::time::{Duration, Instant};

use berth_streaming::client::{
    ClientError, CommandOptions, Finished, RemoteCommand, SpdyPortForward, Transport, WsPortForward,
};
use common::cri::Streams;
use common::cri::{container, pull, remove_pod, run_container};
use common::pods::{pod_config, TestNet};
use common::streaming::daemon_with;
use common::{registry, Daemon};
use cri_api::v1;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);

/// SPDY with its preferred protocol, WebSocket with v5 (the close signal
/// ends stdin) and v4.
const TRANSPORTS: &[(Transport, &str)] = &[
    (Transport::Spdy, "v4.channel.k8s.io"),
    (Transport::WebSocket, "v5.channel.k8s.io"),
    (Transport::WebSocket, "v4.channel.k8s.io"),
];

/// A daemon (with `extra` config) on a network of the test's own, a pod on
/// it, and the test image pulled. The network outlives the daemon.
async fn pod(name: &str, extra: &str) -> (TestNet, Daemon, String, v1::PodSandboxConfig) {
    let net = TestNet::new();
    let daemon = daemon_with(&net, extra).await;
    let cri = daemon.cri().await;
    let config = pod_config(name);
    let id = cri.run_pod(&config).await.expect("RunPodSandbox");
    pull(&daemon, &registry().busybox()).await;
    (net, daemon, id, config)
}

/// `pod` with a container that sleeps: the pod's id and the container's.
async fn shell_pod(name: &str, extra: &str) -> (TestNet, Daemon, String, String) {
    let (net, daemon, pod_id, config) = pod(name, extra).await;
    let id = run_container(
        &daemon,
        &pod_id,
        &config,
        container("shell", &["sleep", "3600"]),
    )
    .await;
    (net, daemon, pod_id, id)
}

fn options(s: Streams) -> CommandOptions {
    CommandOptions {
        stdin: s.stdin,
        stdout: s.stdout,
        stderr: s.stderr,
        tty: s.tty,
    }
}

const OUT_ERR: Streams = Streams {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

/// Execs `cmd` over `transport` and connects.
async fn exec_stream(
    daemon: &Daemon,
    id: &str,
    cmd: &[&str],
    s: Streams,
    (transport, protocol): (Transport, &str),
) -> RemoteCommand {
    let cri = daemon.cri().await;
    let url = cri.exec(id, cmd, s).await.expect("Exec");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let rc = RemoteCommand::connect(&url, transport, options(s), &[protocol])
        .await
        .expect("connect");
    assert_eq!(rc.protocol(), protocol);
    rc
}

async fn exec_all(
    daemon: &Daemon,
    id: &str,
    cmd: &[&str],
    s: Streams,
    transport: (Transport, &str),
) -> Finished {
    let rc = exec_stream(daemon, id, cmd, s, transport).await;
    rc.finish(WAIT).await.expect("the exec ended")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The processes in the container whose command line contains `needle`.
async fn processes(daemon: &Daemon, id: &str, needle: &str) -> Vec<String> {
    let out = common::cri::exec(daemon, id, &["ps", "-o", "pid,args"]).await;
    text(&out.stdout)
        .lines()
        .filter(|l| l.contains(needle) && !l.contains("ps -o"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn exec_over_spdy_and_websocket() {
    require_root!();
    let (_net, daemon, pod, id) = shell_pod("exec", "").await;
    let cri = daemon.cri().await;

    for &transport in TRANSPORTS {
        let what = transport.1;
        let done = exec_all(
            &daemon,
            &id,
            &["echo", "hello", "streams"],
            OUT_ERR,
            transport,
        )
        .await;
        assert_eq!(text(&done.stdout), "hello streams\n", "{what}");
        assert_eq!(done.exit_code(), Some(0), "{what}: {done:?}");

        let cmd = ["sh", "-c", "echo out; echo oops >&2; exit 3"];
        let done = exec_all(&daemon, &id, &cmd, OUT_ERR, transport).await;
        assert_eq!(
            (text(&done.stdout), text(&done.stderr)),
            ("out\n".into(), "oops\n".into())
        );
        assert_eq!(done.exit_code(), Some(3), "{what}: {done:?}");

        let done = exec_all(&daemon, &id, &["no-such-command"], OUT_ERR, transport).await;
        assert_ne!(done.exit_code(), Some(0), "{what}: {done:?}");

        // A terminal: the size the client sets is the one the process sees.
        let tty = Streams {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true,
        };
        let cmd = [
            "sh",
            "-c",
            // busybox's stty prints nothing while the terminal has no size.
            "until [ -n \"$(stty size 2>/dev/null)\" ]; do sleep 0.1; done; stty size",
        ];
        let mut rc = exec_stream(&daemon, &id, &cmd, tty, transport).await;
        rc.resize(100, 40).await.unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert!(text(&done.stdout).contains("40 100"), "{what}: {done:?}");
        assert_eq!(done.exit_code(), Some(0), "{what}");
    }

    // Stdin, ended by the client (SPDY: FIN; WebSocket v5: close signal).
    let with_stdin = Streams {
        stdin: true,
        ..OUT_ERR
    };
    for &transport in &TRANSPORTS[..2] {
        let mut rc = exec_stream(&daemon, &id, &["cat"], with_stdin, transport).await;
        rc.send_stdin(b"hello ").await.unwrap();
        rc.send_stdin(b"stdin\n").await.unwrap();
        rc.close_stdin().await.unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(text(&done.stdout), "hello stdin\n", "{}", transport.1);
        assert_eq!(done.exit_code(), Some(0));
    }

    // A client that goes away leaves no process behind.
    for &transport in TRANSPORTS {
        let rc = exec_stream(&daemon, &id, &["sleep", "1234"], OUT_ERR, transport).await;
        let deadline = Instant::now() + WAIT;
        while processes(&daemon, &id, "sleep 1234").await.is_empty() {
            assert!(Instant::now() < deadline, "the exec did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(rc);
        loop {
            let left = processes(&daemon, &id, "sleep 1234").await;
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "{} left {left:?}", transport.1);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Requests kubelet refuses, and a container that is not running.
    for bad in [
        Streams::default(),
        Streams {
            stdout: true,
            stderr: true,
            tty: true,
            stdin: false,
        },
    ] {
        let err = cri.exec(&id, &["true"], bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}: {err}");
    }
    let created = cri
        .create_container(&pod, &pod_config("exec"), container("idle", &["true"]))
        .await
        .unwrap();
    let err = cri.exec(&created, &["true"], OUT_ERR).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    let err = cri
        .exec("nosuchcontainer", &["true"], OUT_ERR)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");

    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn attach_to_a_container_echoing_its_stdin() {
    require_root!();
    let (_net, daemon, pod, pod_config) = pod("attach", "").await;
    let cri = daemon.cri().await;
    let mut config = container("echo", &["cat"]);
    config.stdin = true;
    let id = run_container(&daemon, &pod, &pod_config, config).await;
    let all = Streams {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    for &transport in &TRANSPORTS[..2] {
        let url = cri.attach(&id, all).await.expect("Attach");
        let mut rc = RemoteCommand::connect(&url, transport.0, options(all), &[transport.1])
            .await
            .unwrap();
        let line = format!("hello over {}\n", transport.1);
        rc.send_stdin(line.as_bytes()).await.unwrap();
        rc.read_stdout_until(&line, WAIT).await.unwrap();
        // Ending stdin ends the attach; the container (not stdin_once) runs on.
        rc.close_stdin().await.unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.exit_code(), Some(0), "{}: {done:?}", transport.1);
    }
    let status = common::cri::container_status(&daemon, &id).await;
    assert_eq!(status.state, v1::ContainerState::ContainerRunning as i32);

    // A container made without stdin cannot be attached to with stdin.
    let other = run_container(
        &daemon,
        &pod,
        &pod_config,
        container("quiet", &["sleep", "3600"]),
    )
    .await;
    let err = cri.attach(&other, all).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn port_forward_into_the_pod() {
    require_root!();
    let (_net, daemon, pod, pod_config) = pod("forward", "").await;
    let cri = daemon.cri().await;
    // A server in the pod's network namespace, one answer per connection.
    let server = ["nc", "-ll", "-p", "8080", "-e", "echo", "hi from the pod"];
    let server = container("server", &server);
    run_container(&daemon, &pod, &pod_config, server).await;

    // SPDY: wait for the server to listen, then forward a few connections.
    let deadline = Instant::now() + WAIT;
    loop {
        let url = cri.port_forward(&pod, &[]).await.expect("PortForward");
        let mut pf = SpdyPortForward::connect(&url).await.unwrap();
        let got = pf.open(8080).await.unwrap().finish(WAIT).await.unwrap();
        if got.error.is_empty() {
            assert_eq!(text(&got.data), "hi from the pod\n");
            let again = pf.open(8080).await.unwrap().finish(WAIT).await.unwrap();
            assert_eq!(
                (text(&again.data), again.error),
                ("hi from the pod\n".into(), String::new())
            );
            let nothing = pf.open(8081).await.unwrap().finish(WAIT).await.unwrap();
            assert!(nothing.error.contains("8081"), "{nothing:?}");
            break;
        }
        assert!(Instant::now() < deadline, "nc did not come up: {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // WebSocket: the ports come with the request.
    for protocol in ["v4.channel.k8s.io", "portforward.k8s.io"] {
        let url = cri.port_forward(&pod, &[8080]).await.expect("PortForward");
        let pf = WsPortForward::connect(&url, &[protocol], &[8080])
            .await
            .unwrap();
        let got = pf.finish(WAIT).await.unwrap();
        assert_eq!(
            text(&got[0].data),
            "hi from the pod\n",
            "{protocol}: {got:?}"
        );
        assert_eq!(got[0].error, "", "{protocol}");
    }

    let err = cri.port_forward("nosuchpod", &[80]).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    let err = cri.port_forward(&pod, &[70000]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    remove_pod(&daemon, &pod).await;
    let err = cri.port_forward(&pod, &[8080]).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
}

fn http_status(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Http { status, body } => (status, body),
        other => panic!("expected an HTTP error, got {other}"),
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn tokens_are_single_use_and_expire() {
    require_root!();
    let (_net, mut daemon, pod, id) =
        shell_pod("tokens", "[streaming]\ntoken_ttl = \"2s\"\n").await;
    let cri = daemon.cri().await;

    for (transport, _) in &TRANSPORTS[..2] {
        let url = cri.exec(&id, &["echo", "once"], OUT_ERR).await.unwrap();
        let rc = RemoteCommand::connect(&url, *transport, options(OUT_ERR), &[])
            .await
            .unwrap();
        assert_eq!(text(&rc.finish(WAIT).await.unwrap().stdout), "once\n");
        let reused = RemoteCommand::connect(&url, *transport, options(OUT_ERR), &[]).await;
        let (status, body) = http_status(reused.err().expect("a used token is refused"));
        assert_eq!(status, 404);
        assert!(body.contains("already been used"), "{body}");
    }

    let url = cri.exec(&id, &["echo", "late"], OUT_ERR).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let late = RemoteCommand::connect(&url, Transport::Spdy, options(OUT_ERR), &[]).await;
    let (status, body) = http_status(late.err().expect("an expired token is refused"));
    assert_eq!(status, 404);
    assert!(body.contains("expired"), "{body}");

    // The server stops with the daemon.
    remove_pod(&daemon, &pod).await;
    let gone = cri.exec(&id, &["true"], OUT_ERR).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGTERM, WAIT)
        .await;
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "the streaming server still listens on {addr}"
    );
}

/// `streaming.idle_timeout`: a session with no traffic for that long ends
/// (and its process with it); one with traffic lives on.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn idle_sessions_end() {
    require_root!();
    let (_net, daemon, pod, id) = shell_pod("idle", "[streaming]\nidle_timeout = \"2s\"\n").await;
    for transport in &TRANSPORTS[..2] {
        // Output every second keeps it open past the idle timeout.
        let busy = exec_all(
            &daemon,
            &id,
            &["sh", "-c", "for i in 1 2 3 4; do echo $i; sleep 1; done"],
            OUT_ERR,
            *transport,
        )
        .await;
        assert_eq!(text(&busy.stdout), "1\n2\n3\n4\n", "{transport:?}");

        let started = Instant::now();
        let silent = exec_stream(&daemon, &id, &["sleep", "61"], OUT_ERR, *transport).await;
        let _ = silent.finish(WAIT).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(10),
            "{transport:?}: the idle session lasted {took:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !processes(&daemon, &id, "sleep 61").await.is_empty() {
            assert!(
                Instant::now() < deadline,
                "{transport:?}: the idle session's process still runs"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    remove_pod(&daemon, &pod).await;
}
