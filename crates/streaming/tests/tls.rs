//! The streaming server with TLS: URLs are `https://`, a client that
//! verifies the certificate (against the self-signed certificate, or the
//! CA that signed the configured one) runs exec and port-forward through
//! it, a client trusting another CA is refused in the handshake, and plain
//! HTTP gets 400.

mod common;

use std::time::Duration;

use berth_streaming::client::{
    ClientError, CommandOptions, Dialer, RemoteCommand, SpdyPortForward, Transport,
};
use berth_streaming::{Config, ExecRequest, PortForwardRequest, TlsIdentity};
use common::{start_with, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);

fn tls_server(identity: TlsIdentity) -> Server {
    start_with(Config {
        tls: Some(identity),
        ..Config::default()
    })
}

fn echo_url(s: &Server) -> String {
    s.server
        .get_exec_url(ExecRequest {
            container_id: "c1".into(),
            cmd: vec!["echo".into(), "over".into(), "tls".into()],
            tty: false,
            stdin: false,
            stdout: true,
            stderr: true,
        })
        .unwrap()
}

const OUT_ERR: CommandOptions = CommandOptions {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

async fn exec_over(dialer: &Dialer, s: &Server) {
    for (transport, protocol) in [
        (Transport::Spdy, "v4.channel.k8s.io"),
        (Transport::WebSocket, "v5.channel.k8s.io"),
    ] {
        let url = echo_url(s);
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let rc = RemoteCommand::connect_with(dialer, &url, transport, OUT_ERR, &[protocol])
            .await
            .unwrap();
        let done = rc.finish(WAIT).await.unwrap();
        assert_eq!(done.stdout, b"over tls\n", "{protocol}");
        assert_eq!(done.exit_code(), Some(0), "{protocol}");
    }
}

async fn port_forward_over(dialer: &Dialer, s: &Server) {
    let url = s
        .server
        .get_port_forward_url(PortForwardRequest {
            pod_sandbox_id: "pod1".into(),
            ports: vec![],
        })
        .unwrap();
    let mut pf = SpdyPortForward::connect_tunnelled_with(dialer, &url)
        .await
        .unwrap();
    let c = pf.open(80).await.unwrap();
    c.send(b"secret").await.unwrap();
    c.close_write().await.unwrap();
    assert_eq!(c.finish(WAIT).await.unwrap().data, b"hi from 80\nsecret");
}

#[tokio::test]
async fn a_self_signed_server_is_reached_by_a_client_that_trusts_its_certificate() {
    let identity = TlsIdentity::self_signed(&["127.0.0.1".into(), "localhost".into()]).unwrap();
    let dialer = Dialer::trusting(identity.cert_pem().as_bytes()).unwrap();
    let s = tls_server(identity);
    assert!(s.server.base_url().starts_with("https://"));
    exec_over(&dialer, &s).await;
    port_forward_over(&dialer, &s).await;
}

#[tokio::test]
async fn a_configured_certificate_signed_by_a_ca_is_verified_against_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, cert, key) = common::tls::ca_signed(dir.path(), "127.0.0.1");
    let identity = TlsIdentity::from_files(&cert, &key).unwrap();
    let s = tls_server(identity);
    let dialer = Dialer::trusting(&ca_pem).unwrap();
    exec_over(&dialer, &s).await;
    port_forward_over(&dialer, &s).await;
}

#[tokio::test]
async fn a_client_that_trusts_another_certificate_or_name_is_refused() {
    let identity = TlsIdentity::self_signed(&["127.0.0.1".into()]).unwrap();
    let good = Dialer::trusting(identity.cert_pem().as_bytes()).unwrap();
    let s = tls_server(identity);
    let other = TlsIdentity::self_signed(&["127.0.0.1".into()]).unwrap();
    let wrong = Dialer::trusting(other.cert_pem().as_bytes()).unwrap();
    let url = echo_url(&s);
    let err = RemoteCommand::connect_with(&wrong, &url, Transport::Spdy, OUT_ERR, &[])
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ClientError::Io(e) if e.to_string().contains("certificate")),
        "{err:?}"
    );
    // The refused handshake did not use the token.
    let rc = RemoteCommand::connect_with(&good, &url, Transport::Spdy, OUT_ERR, &[])
        .await
        .unwrap();
    assert_eq!(rc.finish(WAIT).await.unwrap().stdout, b"over tls\n");

    // A certificate for another name, trusted, is still refused.
    let named = TlsIdentity::self_signed(&["example.invalid".into()]).unwrap();
    let trusting = Dialer::trusting(named.cert_pem().as_bytes()).unwrap();
    let s = tls_server(named);
    let err = RemoteCommand::connect_with(&trusting, &echo_url(&s), Transport::Spdy, OUT_ERR, &[])
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ClientError::Io(e) if e.to_string().contains("certificate")),
        "{err:?}"
    );
    // Without a CA the client does not try https at all.
    let err = RemoteCommand::connect(&echo_url(&s), Transport::Spdy, OUT_ERR, &[])
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("trusts a CA"), "{err}");
}

#[tokio::test]
async fn plain_http_to_a_tls_server_is_refused() {
    let s = tls_server(TlsIdentity::self_signed(&["127.0.0.1".into()]).unwrap());
    let url = echo_url(&s);
    // A client speaking plain HTTP to it gets 400…
    let plain = url.replace("https://", "http://");
    let err = RemoteCommand::connect(&plain, Transport::Spdy, OUT_ERR, &[])
        .await
        .err()
        .unwrap();
    match err {
        ClientError::Http { status, body } => {
            assert_eq!(status, 400);
            assert!(body.contains("HTTPS server"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    // …and a raw request gets 400 and the connection closed.
    let mut tcp = tokio::net::TcpStream::connect(s.server.local_addr())
        .await
        .unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with(b"HTTP/1.0 400"), "{answer:?}");
}
