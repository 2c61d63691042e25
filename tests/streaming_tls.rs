//! The daemon's streaming server with `streaming.enable_tls`, against real
//! runc, CNI and the busybox test image: Exec and PortForward hand out
//! `https://` URLs; a client that verifies the certificate (the self-signed
//! one the daemon wrote to `<state>/streaming/tls.crt`, or the CA of a
//! configured certificate made with openssl) runs exec over SPDY and
//! WebSocket and port-forward through the WebSocket tunnel
//! (`SPDY/3.1+portforward.k8s.io`, kubectl 1.31+) to `nc` in the pod; plain
//! HTTP is refused. Root only.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use berth_streaming::client::{
    ClientError, CommandOptions, Dialer, RemoteCommand, SpdyPortForward, Transport,
};
use common::cri::Streams;
use common::cri::{container, pull, remove_pod, run_container};
use common::pods::{pod_config, TestNet};
use common::streaming::daemon_with;
use common::{registry, Daemon};

const WAIT: Duration = Duration::from_secs(30);

const OUT_ERR: Streams = Streams {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

const OPTS: CommandOptions = CommandOptions {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A daemon with `extra` config, a pod with a sleeping container and an
/// `nc` server on port 8080: (network, daemon, pod, container).
async fn tls_pod(name: &str, extra: &str) -> (TestNet, Daemon, String, String) {
    let net = TestNet::new();
    let daemon = daemon_with(&net, extra).await;
    let cri = daemon.cri().await;
    let config = pod_config(name);
    let pod = cri.run_pod(&config).await.expect("RunPodSandbox");
    pull(&daemon, &registry().busybox()).await;
    let shell = run_container(
        &daemon,
        &pod,
        &config,
        container("shell", &["sleep", "3600"]),
    )
    .await;
    let server = ["nc", "-ll", "-p", "8080", "-e", "echo", "hi from the pod"];
    run_container(&daemon, &pod, &config, container("server", &server)).await;
    (net, daemon, pod, shell)
}

/// Exec over both transports, and port-forward through the tunnel, all
/// over https with `dialer`.
async fn streams_over_https(daemon: &Daemon, pod: &str, id: &str, dialer: &Dialer) {
    let cri = daemon.cri().await;
    for (transport, protocol) in [
        (Transport::Spdy, "v4.channel.k8s.io"),
        (Transport::WebSocket, "v5.channel.k8s.io"),
    ] {
        let url = cri
            .exec(id, &["echo", "over", "https"], OUT_ERR)
            .await
            .expect("Exec");
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let rc = RemoteCommand::connect_with(dialer, &url, transport, OPTS, &[protocol])
            .await
            .expect("connect");
        let done = rc.finish(WAIT).await.expect("the exec ended");
        assert_eq!(text(&done.stdout), "over https\n", "{protocol}");
        assert_eq!(done.exit_code(), Some(0), "{protocol}");
    }

    // Port-forward through the WebSocket tunnel, once nc listens.
    let deadline = Instant::now() + WAIT;
    loop {
        let url = cri.port_forward(pod, &[]).await.expect("PortForward");
        assert!(url.starts_with("https://"), "{url}");
        let mut pf = SpdyPortForward::connect_tunnelled_with(dialer, &url)
            .await
            .expect("tunnel");
        let got = pf.open(8080).await.unwrap().finish(WAIT).await.unwrap();
        if got.error.is_empty() {
            assert_eq!(text(&got.data), "hi from the pod\n");
            let nothing = pf.open(8081).await.unwrap().finish(WAIT).await.unwrap();
            assert!(nothing.data.is_empty(), "{nothing:?}");
            assert!(nothing.error.contains("8081"), "{nothing:?}");
            break;
        }
        assert!(Instant::now() < deadline, "nc did not come up: {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A plain HTTP client gets 400 from the TLS server.
async fn plain_http_is_refused(daemon: &Daemon, id: &str) {
    let cri = daemon.cri().await;
    let url = cri.exec(id, &["echo", "x"], OUT_ERR).await.unwrap();
    let plain = url.replace("https://", "http://");
    match RemoteCommand::connect(&plain, Transport::Spdy, OPTS, &[]).await {
        Err(ClientError::Http { status, body }) => {
            assert_eq!(status, 400, "{body}");
            assert!(body.contains("HTTPS server"), "{body}");
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("plain HTTP was served"),
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn self_signed_tls_streaming() {
    require_root!();
    let (_net, daemon, pod, id) = tls_pod("tls-self", "[streaming]\nenable_tls = true\n").await;
    let cri = daemon.cri().await;
    let cert = daemon.sandbox.path("state/streaming/tls.crt");
    let pem = std::fs::read(&cert).expect("the daemon wrote its certificate");
    let dialer = Dialer::trusting(&pem).unwrap();
    streams_over_https(&daemon, &pod, &id, &dialer).await;
    plain_http_is_refused(&daemon, &id).await;

    // A client that trusts another certificate is refused in the handshake.
    let other = berth_streaming::TlsIdentity::self_signed(&["127.0.0.1".into()]).unwrap();
    let wrong = Dialer::trusting(other.cert_pem().as_bytes()).unwrap();
    let url = cri.exec(&id, &["echo", "x"], OUT_ERR).await.unwrap();
    let err = RemoteCommand::connect_with(&wrong, &url, Transport::Spdy, OPTS, &[])
        .await
        .err()
        .expect("an untrusted certificate was accepted");
    assert!(err.to_string().contains("certificate"), "{err}");
    remove_pod(&daemon, &pod).await;
}

/// A CA and a server certificate it signed for 127.0.0.1, made with openssl
/// in `dir`: (CA PEM, cert file, key file).
fn openssl_certs(dir: &Path) -> (Vec<u8>, String, String) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            text(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"],
        &ec[..],
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=berth test CA",
        ],
    ]
    .concat());
    run(&[
        &["req"],
        &ec[..],
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=berth streaming",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    (
        std::fs::read(dir.join("ca.crt")).unwrap(),
        path("server.crt"),
        path("server.key"),
    )
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn configured_certificate_tls_streaming() {
    require_root!();
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = openssl_certs(certs.path());
    let extra = format!(
        "[streaming]\nenable_tls = true\ntls_cert_file = {cert:?}\ntls_key_file = {key:?}\n"
    );
    let (_net, daemon, pod, id) = tls_pod("tls-ca", &extra).await;
    assert!(
        !daemon.sandbox.path("state/streaming/tls.crt").exists(),
        "a self-signed certificate was made although one is configured"
    );
    let dialer = Dialer::trusting(&ca).unwrap();
    streams_over_https(&daemon, &pod, &id, &dialer).await;
    plain_http_is_refused(&daemon, &id).await;
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_key_that_does_not_match_stops_the_start() {
    require_root!();
    let certs = tempfile::tempdir().unwrap();
    let (_, cert, _) = openssl_certs(certs.path());
    // The CA's key is not the certificate's.
    let key = certs.path().join("ca.key");
    let sandbox = common::Sandbox::new();
    let config = sandbox.write_test_config(&format!(
        "[streaming]\nenable_tls = true\ntls_cert_file = {cert:?}\ntls_key_file = {key:?}\n"
    ));
    let mut child = sandbox
        .command(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(sandbox.path("start.log")).unwrap())
        .spawn()
        .unwrap();
    let status = common::wait_exit(&mut child, WAIT).await;
    assert!(!status.success());
    let stderr = std::fs::read_to_string(sandbox.path("start.log")).unwrap();
    assert!(stderr.contains("streaming.tls_cert_file"), "{stderr}");
    assert!(stderr.contains("server.crt"), "{stderr}");
}
