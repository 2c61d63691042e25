//! The authentication dance against a loopback stand-in registry whose
//! token endpoint checks what it is sent.
use super::*;
use base64::Engine;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests seen: (request line, authorization, body).
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

async fn token_registry() -> (String, Seen, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let (a, s) = (addr.clone(), seen.clone());
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (addr, seen) = (a.clone(), s.clone());
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&req[..head_end]).to_string();
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                        })
                        .unwrap_or_default()
                };
                let len: usize = header("content-length").parse().unwrap_or(0);
                while req.len() < head_end + len {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let body = String::from_utf8_lossy(&req[head_end..]).to_string();
                let line = head.lines().next().unwrap_or("").to_string();
                let authz = header("authorization");
                let extra = header("x-extra");
                seen.lock_unpoisoned().push((
                    format!("{line} x-extra={extra}"),
                    authz.clone(),
                    body.clone(),
                ));
                let path = line.split(' ').nth(1).unwrap_or("");
                let basic_ok = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("u:p")
                );
                let (status, extra, answer) = if path.starts_with("/token") {
                    let ok = (line.starts_with("GET") && authz == basic_ok)
                        || (line.starts_with("POST")
                            && body.contains("grant_type=refresh_token")
                            && body.contains("refresh_token=rt"));
                    if ok {
                        ("200 OK", String::new(), r#"{"access_token":"good"}"#)
                    } else {
                        ("401 Unauthorized", String::new(), r#"{"details":"no"}"#)
                    }
                } else if authz == "Bearer good" {
                    ("200 OK", String::new(), "{}")
                } else {
                    (
                        "401 Unauthorized",
                        format!(
                            "Www-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"svc\"\r\n"
                        ),
                        r#"{"errors":[{"code":"UNAUTHORIZED","message":"auth"}]}"#,
                    )
                };
                let out = format!(
                    "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = conn.write_all(out.as_bytes()).await;
            });
        }
    });
    (addr, seen, task)
}

fn host(addr: &str, creds: Creds) -> HostClient {
    let spec = HostSpec {
        plain_http: true,
        host: addr.to_string(),
        path: "/v2".into(),
        pull: true,
        resolve: true,
        ca: vec![],
        client: vec![],
        skip_verify: false,
        header: vec![("X-Extra".into(), "1".into())],
        dial_timeout: None,
        proxy: None,
        upstream: true,
        source: "test".into(),
    };
    let cache = ClientCache::default();
    let http = cache.client_for(&spec, Duration::from_secs(10)).unwrap();
    let realm_http = cache
        .client_for(&spec.without_tls(), Duration::from_secs(10))
        .unwrap();
    HostClient::new(http, realm_http, spec, addr, creds, "ref", "team/app")
}

#[test]
fn address_kinds_for_redirects_and_realms() {
    use Reach::*;
    for (host, want) in [
        ("127.0.0.1", Loopback),
        ("127.1.2.3", Loopback),
        ("[::1]", Loopback),
        ("0.0.0.0", Loopback),
        ("[::]", Loopback),
        ("localhost", Loopback),
        ("LOCALHOST.", Loopback),
        ("api.localhost", Loopback),
        ("169.254.169.254", Metadata),
        ("[fd00:ec2::254]", Metadata),
        ("[::ffff:169.254.169.254]", Metadata),
        ("169.254.1.1", LinkLocal),
        ("[fe80::1]", LinkLocal),
        ("[febf::1]", LinkLocal),
        ("[::ffff:127.0.0.1]", Loopback),
        ("10.0.0.1", Public),
        ("[fec0::1]", Public),
        ("registry.k8s.io", Public),
        ("localhost.example", Public),
    ] {
        assert_eq!(reach(host), want, "{host}");
    }
    // Other spellings of an IPv4 address are made dotted by the URL parser.
    for url in [
        "http://2852039166/",
        "http://0xa9fea9fe/",
        "http://169.254.43518/",
    ] {
        let url = Url::parse(url).unwrap();
        assert_eq!(reach(url.host_str().unwrap()), Metadata, "{url}");
    }
}

/// A listener on 127.0.0.1 that answers every connection with `answer`
/// and counts connections.
async fn answering(answer: String) -> (u16, Arc<std::sync::atomic::AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, count)
}

#[tokio::test]
async fn names_resolving_to_loopback_are_refused_unless_the_host_is_one() {
    // The resolver is a table here: every name is 127.0.0.1, so nothing
    // leaves loopback whatever the client does.
    let lo: IpAddr = Ipv4Addr::LOCALHOST.into();
    let table: DnsTable = Arc::new(
        [("registry.example", lo), ("sneaky.example", lo)]
            .into_iter()
            .map(|(n, ip)| (n.to_string(), vec![ip]))
            .collect(),
    );
    let (target, reached) =
        answering("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".into())
            .await;
    let (reg, _) = answering(format!(
        "HTTP/1.1 307 X\r\nLocation: http://sneaky.example:{target}/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ))
    .await;
    let client = |host: String| {
        let spec = HostSpec {
            plain_http: true,
            host,
            path: "/v2".into(),
            pull: true,
            resolve: true,
            ca: vec![],
            client: vec![],
            skip_verify: false,
            header: vec![],
            dial_timeout: None,
            proxy: None,
            upstream: true,
            source: "test".into(),
        };
        let cache = ClientCache {
            dns: Some(table.clone()),
            ..Default::default()
        };
        let http = cache.client_for(&spec, Duration::from_secs(10)).unwrap();
        let realm = cache
            .client_for(&spec.without_tls(), Duration::from_secs(10))
            .unwrap();
        let domain = spec.host.clone();
        HostClient::new(http, realm, spec, &domain, Creds::Anonymous, "ref", "a")
    };
    let digest = format!("sha256:{}", "a".repeat(64));

    // A registry by name (its own name may resolve to loopback): the
    // redirect's name that resolves to loopback is refused.
    let e = client(format!("registry.example:{reg}"))
        .blob(&digest)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("refusing sneaky.example"), "{e}");
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);

    // A loopback registry may send us to loopback.
    client(format!("127.0.0.1:{reg}"))
        .blob(&digest)
        .await
        .unwrap();
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn resolved_addresses_are_filtered_by_kind() {
    let spec = |host: &str| HostSpec {
        plain_http: false,
        host: host.into(),
        path: "/v2".into(),
        pull: true,
        resolve: true,
        ca: vec![],
        client: vec![],
        skip_verify: false,
        header: vec![],
        dial_timeout: None,
        proxy: Some("http://LocalProxy:3128".into()),
        upstream: true,
        source: "test".into(),
    };
    let a = |ip: &str| std::net::SocketAddr::new(ip.parse().unwrap(), 0);
    let r = GuardedResolver::for_spec(&spec("Registry.Example"));
    let e = r
        .filter("metadata.google.internal.", vec![a("169.254.169.254")])
        .unwrap_err();
    assert!(e.contains("metadata.google.internal"), "{e}");
    assert!(r.filter("x.example", vec![a("::1"), a("fe80::1")]).is_err());
    // Public ones are kept, the others dropped.
    assert_eq!(
        r.filter("cdn.example", vec![a("127.0.0.1"), a("192.0.2.1")])
            .unwrap(),
        [a("192.0.2.1")]
    );
    // The configured host and its proxy resolve to anything.
    for name in ["registry.example", "REGISTRY.example.", "localproxy"] {
        assert_eq!(
            r.filter(name, vec![a("127.0.0.1")]).unwrap(),
            [a("127.0.0.1")]
        );
    }
    // A link-local registry may use link-local storage, not the metadata.
    let r = GuardedResolver::for_spec(&spec("169.254.3.4:5000"));
    assert!(r.filter("s.example", vec![a("169.254.9.9")]).is_ok());
    assert!(r.filter("s.example", vec![a("169.254.169.254")]).is_err());
}

#[tokio::test]
async fn bearer_tokens_for_basic_refresh_and_registry_tokens() {
    let (addr, seen, task) = token_registry().await;

    // Username and password: GET at the realm with basic auth, scope and
    // service; then the manifest with the token.
    let h = host(&addr, Creds::Basic("u".into(), "p".into()));
    let body = h.manifest("v1", "application/json", 1024).await.unwrap();
    assert_eq!(&body[..], b"{}");
    {
        let seen = seen.lock_unpoisoned();
        let token = seen.iter().find(|(l, _, _)| l.contains("/token")).unwrap();
        assert!(token.0.starts_with("GET"), "{token:?}");
        assert!(
            token.0.contains("scope=repository%3Ateam%2Fapp%3Apull"),
            "{token:?}"
        );
        assert!(token.0.contains("service=svc"), "{token:?}");
        assert_eq!(seen.last().unwrap().1, "Bearer good");
        let last = &seen.last().unwrap().0;
        assert!(last.contains("/v2/team/app/manifests/v1"), "{last}");
        // The host's configured headers go with every registry request.
        assert!(last.ends_with("x-extra=1"), "{last}");
    }
    // The token is kept: the next request goes straight through.
    let before = seen.lock_unpoisoned().len();
    h.manifest("v2", "application/json", 1024).await.unwrap();
    assert_eq!(seen.lock_unpoisoned().len(), before + 1);

    // A refresh token: the OAuth2 grant, POSTed.
    seen.lock_unpoisoned().clear();
    let h = host(&addr, Creds::Refresh("rt".into()));
    h.manifest("v1", "application/json", 1024).await.unwrap();
    assert!(seen
        .lock_unpoisoned()
        .iter()
        .any(|(l, _, b)| l.starts_with("POST /token") && b.contains("client_id=berth")));

    // A registry token is sent as it is, and not exchanged.
    seen.lock_unpoisoned().clear();
    let h = host(&addr, Creds::Bearer("good".into()));
    h.manifest("v1", "application/json", 1024).await.unwrap();
    assert_eq!(seen.lock_unpoisoned().len(), 1);

    // Wrong or no credentials: Unauthenticated, naming the token
    // endpoint, with no secret in the message.
    for creds in [
        Creds::Basic("u".into(), "wrong-pw".into()),
        Creds::Anonymous,
    ] {
        let e = host(&addr, creds)
            .manifest("v1", "application/json", 1024)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Unauthenticated, "{e}");
        assert!(e.to_string().contains("token endpoint"), "{e}");
        assert!(!e.to_string().contains("wrong-pw"), "{e}");
    }
    let e = host(&addr, Creds::Bearer("bad".into()))
        .manifest("v1", "application/json", 1024)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Unauthenticated, "{e}");
    task.abort();
}
