//! Pulls from a hostile stand-in registry on loopback
//! (`support/hostile.rs`) that logs every header it receives: redirects to
//! other hosts, from HTTPS to HTTP, to loopback, link-local and metadata
//! addresses; token realms on other hosts; path-like digests in an index;
//! upper-case registry names. No root needed: the images have no layers.
//! Nothing here sends traffic off loopback: a non-loopback registry name is
//! reached through a `proxy` that is itself the stand-in, so that even a
//! redirect the client wrongly followed ends on loopback, in the log.

mod support;

use std::path::Path;
use std::sync::Arc;

use berth_oci_image::{Auth, ErrorKind, ImageStore, RegistryConfig};
use support::hostile::{digest, empty_image, index_of, Answer, Log, Seen, Server, TestCa};
use support::Tripwire;

async fn store(dir: &Path, cfg: RegistryConfig) -> ImageStore {
    ImageStore::open(dir, cfg).await.expect("open store")
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

/// The repository of a registry request (`/v2/team/app/manifests/v1` →
/// `team/app`).
fn repo(path: &str) -> &str {
    let p = path.strip_prefix("/v2/").unwrap_or(path);
    let end = p
        .find("/manifests/")
        .or_else(|| p.find("/blobs/"))
        .unwrap_or(p.len());
    &p[..end]
}

/// A registry handler for the empty image under any repository, whose
/// config blob request is answered by `blob(seen)`.
fn registry(blob: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> support::hostile::Handler {
    let (manifest, config) = empty_image();
    let config_digest = digest(&config);
    Arc::new(move |seen: &Seen| {
        if seen.path.contains("/manifests/") {
            Answer::ok(support::hostile::OCI_MANIFEST, manifest.clone())
        } else if seen.path.contains(&format!("/blobs/{config_digest}")) {
            blob(seen)
        } else {
            Answer::status(404, "{}")
        }
    })
}

/// Answers anything with the empty image's config (a storage host).
fn storage() -> support::hostile::Handler {
    let (_, config) = empty_image();
    Arc::new(move |_: &Seen| Answer::ok("application/octet-stream", config.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_headers_and_credentials_stay_on_the_configured_host() {
    let log = Log::default();
    let blobs = Server::start("storage", "127.0.0.1", None, &log, storage()).await;
    let storage_url = blobs.url();
    let reg = Server::start(
        "registry",
        "127.0.0.1",
        None,
        &log,
        Arc::new({
            let inner = registry(move |_| {
                Answer::redirect(&format!("{storage_url}/bucket/blob?X-Signature=s1"))
            });
            move |seen: &Seen| match seen.header("authorization") {
                // Basic credentials wanted, like a private registry.
                None => {
                    Answer::status(401, "{}").with_header("WWW-Authenticate", "Basic realm=\"r\"")
                }
                Some(_) => inner(seen),
            }
        }),
    )
    .await;
    let hosts = tempfile::tempdir().unwrap();
    write_hosts(
        hosts.path(),
        &reg.addr,
        &format!(
            "server = \"http://{}\"\n[header]\nx-api-key = \"k-123\"\n",
            reg.addr
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), hosts_cfg(hosts.path())).await;
    let name = format!("{}/team/app:v1", reg.addr);
    s.pull(&name, Some(Auth::basic("u", "pw"))).await.unwrap();

    // The registry got its header on every request; the storage host it
    // redirected to got the blob request, without the header and without
    // the credentials.
    let to_reg = log.of("registry");
    assert!(!to_reg.is_empty());
    for r in &to_reg {
        assert_eq!(r.header("x-api-key"), Some("k-123"), "{r:?}");
    }
    let to_storage = log.of("storage");
    assert_eq!(to_storage.len(), 1, "{to_storage:?}");
    for r in &to_storage {
        assert_eq!(r.header("x-api-key"), None, "{r:?}");
        assert_eq!(r.header("authorization"), None, "{r:?}");
        assert!(r.path.starts_with("/bucket/blob"), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_bodies_of_hosts_not_configured_are_not_quoted() {
    let log = Log::default();
    let blobs = Server::start(
        "storage",
        "127.0.0.1",
        None,
        &log,
        Arc::new(|_: &Seen| Answer::status(403, "<Error>SECRET-BODY of the other host</Error>")),
    )
    .await;
    let storage_url = blobs.url();
    let reg = Server::start(
        "registry",
        "127.0.0.1",
        None,
        &log,
        registry(move |_| Answer::redirect(&format!("{storage_url}/blob"))),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let e = s
        .pull(&format!("{}/team/app:v1", reg.addr), None)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert_eq!(log.of("storage").len(), 1);
    assert!(!text.contains("SECRET-BODY"), "{text}");
    // It says who answered what.
    assert!(text.contains("403"), "{text}");
    assert!(text.contains(&blobs.addr), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_registries_are_not_redirected_to_plain_http() {
    let ca = TestCa::new("ca");
    let files = tempfile::tempdir().unwrap();
    let ca_file = files.path().join("ca.pem");
    ca.write(&ca_file);
    let log = Log::default();
    // Storage over plain HTTP, and over HTTPS on another host (127.0.0.2).
    let plain = Server::start("plain-storage", "127.0.0.1", None, &log, storage()).await;
    let tls = Server::start(
        "tls-storage",
        "127.0.0.2",
        Some(ca.server_config(&["127.0.0.2"])),
        &log,
        storage(),
    )
    .await;
    let (plain_url, tls_url) = (plain.url(), tls.url());
    let reg = Server::start(
        "registry",
        "127.0.0.1",
        Some(ca.server_config(&["127.0.0.1"])),
        &log,
        registry(move |seen| match repo(&seen.path) {
            "team/down" => Answer::redirect(&format!("{plain_url}/blob")),
            _ => Answer::redirect(&format!("{tls_url}/blob")),
        }),
    )
    .await;
    let hosts = tempfile::tempdir().unwrap();
    write_hosts(
        hosts.path(),
        &reg.addr,
        &format!("server = \"https://{}\"\nca = {ca_file:?}\n", reg.addr),
    );

    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), hosts_cfg(hosts.path())).await;
    let e = s
        .pull(&format!("{}/team/down:v1", reg.addr), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("HTTPS to plain HTTP"), "{e}");
    assert_eq!(plain.count(), 0, "the plain HTTP host was contacted");

    // A blob on storage elsewhere over HTTPS is fine (S3, CDNs).
    s.pull(&format!("{}/team/up:v1", reg.addr), None)
        .await
        .unwrap();
    assert_eq!(log.of("tls-storage").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_by_tag_come_over_the_configured_scheme_only() {
    let ca = TestCa::new("ca");
    let log = Log::default();
    let (manifest, _) = empty_image();
    let elsewhere = Server::start(
        "elsewhere",
        "127.0.0.1",
        Some(ca.server_config(&["127.0.0.1"])),
        &log,
        Arc::new(move |_: &Seen| Answer::ok(support::hostile::OCI_MANIFEST, manifest.clone())),
    )
    .await;
    let url = elsewhere.url();
    let reg = Server::start(
        "registry",
        "127.0.0.1",
        None,
        &log,
        Arc::new(move |seen: &Seen| Answer::redirect(&format!("{url}{}", seen.path))),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let e = s
        .pull(&format!("{}/team/app:v1", reg.addr), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("by tag"), "{e}");
    assert_eq!(
        elsewhere.count(),
        0,
        "the other scheme's host was contacted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_redirect_or_realm_reaches_loopback_link_local_or_metadata() {
    // `registry.example` is reached through a proxy that is the stand-in
    // itself: every request the client makes lands here, whatever host it
    // names, and is logged with that host.
    let log = Log::default();
    let (_, config) = empty_image();
    let inner = registry(|seen| {
        let to = match repo(&seen.path) {
            "team/metadata" => "http://169.254.169.254/latest/meta-data/iam/",
            "team/metadata-decimal" => "http://2852039166/latest/meta-data/",
            "team/link-local" => "http://169.254.10.1/x",
            "team/v6-link-local" => "http://[fe80::1]/x",
            "team/loopback" => "http://127.0.0.1:1/x",
            "team/localhost" => "http://localhost:1/x",
            "team/v6-mapped" => "http://[::ffff:169.254.169.254]/x",
            _ => "http://storage.example/bucket/blob",
        };
        Answer::redirect(to)
    });
    let proxy = Server::start(
        "proxy",
        "127.0.0.1",
        None,
        &log,
        Arc::new(move |seen: &Seen| {
            if seen.target == "registry.example" {
                if seen.path.starts_with("/v2/team/realm/") {
                    return Answer::status(401, "{}").with_header(
                        "WWW-Authenticate",
                        "Bearer realm=\"http://169.254.169.254/token\",service=\"x\"",
                    );
                }
                inner(seen)
            } else {
                // Stands in for whatever host was named (never forwarded).
                Answer::ok("application/octet-stream", config.clone())
            }
        }),
    )
    .await;
    let hosts = tempfile::tempdir().unwrap();
    write_hosts(
        hosts.path(),
        "registry.example",
        &format!(
            "server = \"http://registry.example\"\nproxy = \"http://{}\"\n[header]\nx-api-key = \"k-123\"\n",
            proxy.addr
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), hosts_cfg(hosts.path())).await;

    for case in [
        "metadata",
        "metadata-decimal",
        "link-local",
        "v6-link-local",
        "loopback",
        "localhost",
        "v6-mapped",
        "realm",
    ] {
        let e = s
            .pull(&format!("registry.example/team/{case}:v1"), None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("refusing"), "{case}: {e}");
        let elsewhere: Vec<Seen> = log
            .all()
            .into_iter()
            .filter(|r| r.target != "registry.example")
            .collect();
        assert!(elsewhere.is_empty(), "{case}: {elsewhere:?}");
    }

    // The control: a public storage host is followed (and gets no header).
    s.pull("registry.example/team/public:v1", None)
        .await
        .unwrap();
    let elsewhere: Vec<Seen> = log
        .all()
        .into_iter()
        .filter(|r| r.target != "registry.example")
        .collect();
    assert_eq!(elsewhere.len(), 1, "{elsewhere:?}");
    assert_eq!(elsewhere[0].target, "storage.example");
    assert_eq!(elsewhere[0].header("x-api-key"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_realm_on_another_host_is_verified_with_the_system_roots() {
    let ca = TestCa::new("ca");
    let files = tempfile::tempdir().unwrap();
    let ca_file = files.path().join("ca.pem");
    ca.write(&ca_file);
    let log = Log::default();
    let token = || Arc::new(|_: &Seen| Answer::ok("application/json", r#"{"token":"good"}"#));
    // Another host, with a certificate of the registry's own CA.
    let far = Server::start(
        "far-realm",
        "127.0.0.2",
        Some(ca.server_config(&["127.0.0.2"])),
        &log,
        token(),
    )
    .await;
    // The registry's own host, another port.
    let near = Server::start(
        "near-realm",
        "127.0.0.1",
        Some(ca.server_config(&["127.0.0.1"])),
        &log,
        token(),
    )
    .await;
    let (far_url, near_url) = (far.url(), near.url());
    let inner = registry(|_| {
        let (_, config) = empty_image();
        Answer::ok("application/octet-stream", config)
    });
    let reg = Server::start(
        "registry",
        "127.0.0.1",
        Some(ca.server_config(&["127.0.0.1"])),
        &log,
        Arc::new(move |seen: &Seen| {
            if seen.header("authorization") == Some("Bearer good") {
                return inner(seen);
            }
            let realm = match repo(&seen.path) {
                "team/far" => &far_url,
                _ => &near_url,
            };
            Answer::status(401, "{}").with_header(
                "WWW-Authenticate",
                &format!("Bearer realm=\"{realm}/token\",service=\"reg\""),
            )
        }),
    )
    .await;

    let hosts = tempfile::tempdir().unwrap();
    for settings in [
        format!("ca = {ca_file:?}"),
        "skip_verify = true".to_string(),
    ] {
        write_hosts(
            hosts.path(),
            &reg.addr,
            &format!("server = \"https://{}\"\n{settings}\n", reg.addr),
        );
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), hosts_cfg(hosts.path())).await;
        let e = s
            .pull(&format!("{}/team/far:v1", reg.addr), None)
            .await
            .unwrap_err();
        assert!(
            e.to_string().to_lowercase().contains("certificate"),
            "{settings}: {e}"
        );
        assert!(
            log.of("far-realm").is_empty(),
            "{settings}: the realm got a request"
        );
        // The registry's own host: its settings apply.
        s.pull(&format!("{}/team/near:v1", reg.addr), None)
            .await
            .unwrap_or_else(|e| panic!("{settings}: {e}"));
    }
    assert_eq!(log.of("near-realm").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_entries_with_path_like_digests_are_refused_before_a_request() {
    let hex = "0123456789abcdef".repeat(4);
    let digests = [
        "sha256:../../x".to_string(),
        "sha256:../../../blobs/x".to_string(),
        format!("sha256:{hex}/../../../../x"),
        "sha256:%2e%2e/x".to_string(),
        format!("sha256:{}", hex.to_uppercase()),
        format!("md5:{}", &hex[..32]),
        hex.clone(),
    ];
    let log = Log::default();
    let table = digests.clone();
    let reg = Server::start(
        "registry",
        "127.0.0.1",
        None,
        &log,
        Arc::new(move |seen: &Seen| {
            let n: usize = repo(&seen.path)
                .trim_start_matches("team/evil")
                .parse()
                .unwrap_or(0);
            Answer::ok(support::hostile::OCI_INDEX, index_of(&table[n], 100))
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    for (n, d) in digests.iter().enumerate() {
        let before = log.all().len();
        let e = s
            .pull(&format!("{}/team/evil{n}:v1", reg.addr), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DataLoss, "{d}: {e}");
        let seen = log.all()[before..].to_vec();
        assert_eq!(seen.len(), 1, "{d}: {seen:?}");
        assert!(seen[0].path.ends_with("/manifests/v1"), "{d}: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upper_case_registry_names_find_their_configuration() {
    let log = Log::default();
    let (_, config) = empty_image();
    let mirror = Server::start(
        "mirror",
        "127.0.0.1",
        None,
        &log,
        registry(move |_| Answer::ok("application/octet-stream", config.clone())),
    )
    .await;
    // Whatever is configured for other registries: never to be contacted.
    let elsewhere = Tripwire::start().await;

    let hosts = tempfile::tempdir().unwrap();
    write_hosts(
        hosts.path(),
        "registry.example",
        &format!(
            "server = \"http://{}\"\n[header]\nx-api-key = \"k-123\"\n",
            mirror.addr
        ),
    );
    write_hosts(
        hosts.path(),
        "_default",
        &format!("server = \"http://{}\"\n", elsewhere.addr),
    );
    let inline = |key: &str| {
        let text = format!(
            "[mirrors.{key:?}]\nendpoints = [\"http://{}\"]\nmirror_only = true\n\
             [mirrors.\"*\"]\nendpoints = [\"http://{}\"]\nmirror_only = true\n",
            mirror.addr, elsewhere.addr
        );
        let cfg: RegistryConfig = toml::from_str(&text).unwrap();
        cfg.validate().unwrap();
        cfg
    };
    for (what, cfg, name) in [
        (
            "hosts.toml",
            hosts_cfg(hosts.path()),
            "REGISTRY.EXAMPLE/team/app:v1",
        ),
        (
            "inline mirror",
            inline("registry.example"),
            "Registry.Example/team/app:v1",
        ),
        (
            "inline mirror written in upper case",
            inline("REGISTRY.Example"),
            "registry.example/team/app:v1",
        ),
    ] {
        let before = log.of("mirror").len();
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), cfg).await;
        let image = s
            .pull(name, None)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(image.repo_tags, ["registry.example/team/app:v1"], "{what}");
        assert_eq!(elsewhere.count(), 0, "{what}: the wrong host was contacted");
        let seen = log.of("mirror")[before..].to_vec();
        assert!(!seen.is_empty(), "{what}");
        for r in &seen {
            assert!(r.path.contains("ns=registry.example"), "{what}: {r:?}");
        }
        // The store finds it by any spelling of the host.
        assert!(s.get("REGISTRY.example/team/app:v1").is_some(), "{what}");
    }
    assert!(log.of("mirror")[0].header("x-api-key") == Some("k-123"));
}
