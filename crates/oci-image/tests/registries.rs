//! Registries as operators configure them, against real docker-registry
//! instances on 127.0.0.1: HTTPS with a private CA and with required client
//! certificates through containerd `hosts.toml` files; mirror-only modes
//! (inline and hosts.toml) proven by an upstream that counts connections;
//! node credentials from a docker `config.json`; and a hostile registry
//! whose manifest and token answers never end.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use berth_oci_image::{Auth, ErrorKind, ImageStore, RegistryConfig};
use support::{Certs, Options, Registry, Tripwire};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BUSYBOX: &str = "berth-test/busybox:latest";

fn have_openssl() -> bool {
    std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

async fn store(dir: &Path, cfg: RegistryConfig) -> ImageStore {
    ImageStore::open(dir, cfg).await.expect("open store")
}

fn from_toml(text: &str) -> RegistryConfig {
    #[derive(serde::Deserialize)]
    struct File {
        registry: RegistryConfig,
    }
    let cfg = toml::from_str::<File>(text).unwrap().registry;
    cfg.validate().unwrap();
    cfg
}

/// `DIR/<host as containerd names its directory>/hosts.toml` = `text`.
fn write_hosts(dir: &Path, host: &str, text: &str) {
    let name = match host.rsplit_once(':') {
        Some((h, p)) => format!("{h}_{p}_"),
        None => host.to_string(),
    };
    std::fs::create_dir_all(dir.join(&name)).unwrap();
    std::fs::write(dir.join(name).join("hosts.toml"), text).unwrap();
}

fn hosts_cfg(dir: &Path) -> RegistryConfig {
    RegistryConfig {
        config_path: dir.to_path_buf(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry, busybox-static and openssl: hack/test.sh runs it (--include-ignored)"]
async fn https_registry_with_a_private_ca_through_hosts_toml() {
    require_ready!();
    assert!(have_openssl(), "needs openssl (hack/install-deps.sh)");
    let certs = Certs::make();
    let reg = Registry::start_with(Options {
        tls: Some(&certs),
        ..Default::default()
    })
    .await;
    let name = reg.image(BUSYBOX);
    let hosts = tempfile::tempdir().unwrap();
    let cfg = hosts_cfg(hosts.path());

    // The CA the server's certificate chains to: the pull works.
    let ca = certs.path("ca.crt");
    write_hosts(
        hosts.path(),
        &reg.addr,
        &format!("server = \"https://{}\"\nca = {:?}\n", reg.addr, ca),
    );
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg.clone()).await;
    let image = s.pull(&name, None).await.unwrap();
    assert_eq!(image.repo_tags, std::slice::from_ref(&name));
    assert!(s.lowerdirs(&image)[0].join("bin/busybox").is_file());

    // Without a CA, or with the wrong one, the certificate is refused (the
    // file is read at each pull).
    for text in [
        format!("server = \"https://{}\"\n", reg.addr),
        format!(
            "server = \"https://{}\"\nca = {:?}\n",
            reg.addr,
            certs.path("other-ca.crt")
        ),
    ] {
        write_hosts(hosts.path(), &reg.addr, &text);
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), cfg.clone()).await;
        let e = s.pull(&name, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    }

    // skip_verify, where configured, takes any certificate.
    write_hosts(
        hosts.path(),
        &reg.addr,
        &format!("server = \"https://{}\"\nskip_verify = true\n", reg.addr),
    );
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg.clone()).await;
    s.pull(&name, None).await.unwrap();

    // A relative `ca` is relative to the hosts.toml; a [host] entry works
    // as well as `server`.
    let host_dir = hosts.path().join(reg.addr.replace(':', "_") + "_");
    std::fs::copy(&ca, host_dir.join("my-ca.pem")).unwrap();
    write_hosts(
        hosts.path(),
        &reg.addr,
        &format!(
            "[host.\"https://{}\"]\ncapabilities = [\"pull\", \"resolve\"]\nca = \"my-ca.pem\"\n",
            reg.addr
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg).await;
    s.pull(&reg.image("berth-test/zstd:latest"), None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry, busybox-static and openssl: hack/test.sh runs it (--include-ignored)"]
async fn registry_that_requires_client_certificates() {
    require_ready!();
    assert!(have_openssl(), "needs openssl (hack/install-deps.sh)");
    let certs = Certs::make();
    let reg = Registry::start_with(Options {
        tls: Some(&certs),
        client_certs: true,
        ..Default::default()
    })
    .await;
    let name = reg.image(BUSYBOX);
    let hosts = tempfile::tempdir().unwrap();
    let cfg = hosts_cfg(hosts.path());
    let ca = certs.path("ca.crt");

    // The CA alone: the server wants a certificate we do not have.
    write_hosts(
        hosts.path(),
        &reg.addr,
        &format!("server = \"https://{}\"\nca = {ca:?}\n", reg.addr),
    );
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg.clone()).await;
    let e = s.pull(&name, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");

    // Certificate and key as a pair, and as one file.
    for client in [
        format!(
            "[[{:?}, {:?}]]",
            certs.path("client.crt"),
            certs.path("client.key")
        ),
        format!("{:?}", certs.path("client.pem")),
    ] {
        write_hosts(
            hosts.path(),
            &reg.addr,
            &format!(
                "server = \"https://{}\"\nca = {ca:?}\nclient = {client}\n",
                reg.addr
            ),
        );
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), cfg.clone()).await;
        let image = s.pull(&name, None).await.unwrap();
        assert!(s.lowerdirs(&image)[0].join("bin/busybox").is_file());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn mirror_only_never_contacts_the_upstream() {
    require_ready!();
    let mirror = Registry::start(None).await;
    // The registry the images are named under: it must see no connection.
    let upstream = Tripwire::start().await;
    let missing = format!("{}/berth-test/not-mirrored:latest", upstream.addr);
    let present = format!("{}/{BUSYBOX}", upstream.addr);

    let inline = |mirror_only: bool| {
        from_toml(&format!(
            "[registry.mirrors.\"{}\"]\nendpoints = [\"http://{}\"]\nmirror_only = {mirror_only}\n",
            upstream.addr, mirror.addr
        ))
    };
    let hosts = tempfile::tempdir().unwrap();
    let mut configs = vec![("inline mirror_only", inline(true))];
    // hosts.toml: the mirror as `server` never falls back to the registry.
    let h1 = hosts.path().join("server");
    write_hosts(
        &h1,
        &upstream.addr,
        &format!("server = \"http://{}\"\n", mirror.addr),
    );
    configs.push(("hosts.toml server", hosts_cfg(&h1)));
    // hosts.toml with the mirror as a [host], plus the global switch.
    let h2 = hosts.path().join("host");
    write_hosts(
        &h2,
        &upstream.addr,
        &format!(
            "[host.\"http://{}\"]\ncapabilities = [\"pull\", \"resolve\"]\n",
            mirror.addr
        ),
    );
    configs.push((
        "hosts.toml host + global mirror_only",
        RegistryConfig {
            mirror_only: true,
            ..hosts_cfg(&h2)
        },
    ));
    // Global switch with inline mirrors.
    configs.push((
        "global mirror_only",
        RegistryConfig {
            mirror_only: true,
            ..inline(false)
        },
    ));

    for (what, cfg) in configs {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), cfg).await;
        let e = s.pull(&missing, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e}");
        let image = s.pull(&present, None).await.unwrap();
        assert_eq!(image.repo_tags, std::slice::from_ref(&present), "{what}");
        assert_eq!(upstream.count(), 0, "{what}: the upstream was contacted");
    }

    // Global mirror-only and a registry without a mirror: refused, no
    // connection anywhere.
    let other = Tripwire::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(
        dir.path(),
        RegistryConfig {
            mirror_only: true,
            ..inline(false)
        },
    )
    .await;
    let e = s
        .pull(&format!("{}/{BUSYBOX}", other.addr), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("mirror-only"), "{e}");
    assert_eq!(other.count(), 0);

    // The check has teeth: without mirror_only the missing image falls back
    // to the upstream, which is contacted (and fails).
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), inline(false)).await;
    let e = s.pull(&missing, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(upstream.count() > 0);
    // The error tells of the mirror's answer too, not only the upstream's.
    let text = e.to_string();
    assert!(
        text.contains(&format!("tried before: {}", mirror.addr)),
        "{text}"
    );
    assert!(text.contains("404"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn node_credentials_from_a_docker_config_json() {
    require_ready!();
    let reg = Registry::start(Some("berth:s3cret")).await;
    let name = reg.image(BUSYBOX);
    let files = tempfile::tempdir().unwrap();
    let auth_file = files.path().join("config.json");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cfg = RegistryConfig {
        auth_file: auth_file.clone(),
        ..Default::default()
    };

    // No file yet: anonymous, refused.
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg.clone()).await;
    let e = s.pull(&name, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");

    // Keys as docker writes them: bare host, with a scheme and a path;
    // `auth` or username/password. The file is read at each pull.
    for entry in [
        serde_json::json!({ reg.addr.clone(): {"auth": b64("berth:s3cret")} }),
        serde_json::json!({ format!("http://{}/v2/", reg.addr): {"username": "berth", "password": "s3cret"} }),
    ] {
        std::fs::write(
            &auth_file,
            serde_json::json!({"auths": entry, "credsStore": "none"}).to_string(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), cfg.clone()).await;
        let image = s.pull(&name, None).await.unwrap();
        assert_eq!(image.repo_tags, std::slice::from_ref(&name));
    }

    // The request's own credentials win over the file's.
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg.clone()).await;
    let e = s
        .pull(&name, Some(Auth::basic("berth", "wrong")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");

    // Credentials are never sent to a mirror of another host: a mirror that
    // wants the same user gets nothing from the registry's entry (nor from
    // the request), and only its own entry lets it in.
    let mirrored = "registry.invalid";
    let cfg = RegistryConfig {
        auth_file: auth_file.clone(),
        ..from_toml(&format!(
            "[registry.mirrors.\"{mirrored}\"]\nendpoints = [\"http://{}\"]\nmirror_only = true\n",
            reg.addr
        ))
    };
    let via_mirror = format!("{mirrored}/{BUSYBOX}");
    std::fs::write(
        &auth_file,
        serde_json::json!({"auths": {mirrored: {"auth": b64("berth:s3cret")}}}).to_string(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg.clone()).await;
    let e = s
        .pull(&via_mirror, Some(Auth::basic("berth", "s3cret")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    std::fs::write(
        &auth_file,
        serde_json::json!({"auths": {reg.addr.clone(): {"auth": b64("berth:s3cret")}}}).to_string(),
    )
    .unwrap();
    let image = s.pull(&via_mirror, None).await.unwrap();
    assert_eq!(image.repo_tags, [via_mirror]);
}

/// Answers every request on 127.0.0.1: `/v2/endless/...` with a manifest
/// that never ends, `/v2/tokened/...` with a bearer challenge whose token
/// endpoint never ends. Each answer stops by itself after `limit` bytes.
async fn hostile_registry(limit: u64) -> (String, Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sent = Arc::new(AtomicU64::new(0));
    let (a, s) = (addr.clone(), sent.clone());
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (addr, sent) = (a.clone(), s.clone());
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 65536 {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let path = line.split(' ').nth(1).unwrap_or("");
                let endless = if path.starts_with("/v2/tokened/") {
                    let head = format!(
                        "HTTP/1.1 401 Unauthorized\r\nWww-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"hostile\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    return;
                } else if path.starts_with("/token") {
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"token\":\""
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nConnection: close\r\n\r\n{\"schemaVersion\":2,\"x\":\""
                };
                if conn.write_all(endless.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'a'; 64 << 10];
                let mut total = 0u64;
                while total < limit {
                    if conn.write_all(&chunk).await.is_err() {
                        return;
                    }
                    total += chunk.len() as u64;
                    sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
            });
        }
    });
    (addr, sent, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_manifest_and_token_answers_are_capped_while_read() {
    // No registry, no root needed: a loopback server of our own.
    const LIMIT: u64 = 256 << 20; // what a server sends at most
    let (addr, sent, task) = hostile_registry(LIMIT).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let before = support::rss();
    for (repo, want) in [
        ("endless", "manifest larger than"),
        ("tokened", "token endpoint"),
    ] {
        let e = s
            .pull(&format!("{addr}/{repo}:latest"), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DataLoss, "{repo}: {e}");
        assert!(e.to_string().contains(want), "{repo}: {e}");
    }
    let grown = support::rss().saturating_sub(before);
    // The caps are 4 MiB (manifests) and 1 MiB (token answers); reading a
    // whole answer would be 256 MiB.
    assert!(grown < 64 << 20, "memory grew by {grown} bytes");
    let total = sent.load(Ordering::SeqCst);
    assert!(total < 64 << 20, "the server could send {total} bytes");
    task.abort();
}
