//! A hostile stand-in registry on loopback: servers on 127.x addresses,
//! plain HTTP or HTTPS (certificates from a CA made in-test with rcgen),
//! that answer each request as the test's handler says (redirects to other
//! hosts, token realms elsewhere, path-like digests in an index) and log
//! every request with all its headers, in one log shared by the servers,
//! so that a test asserts which header reached which host. One request per
//! connection (`Connection: close`). A server can also stand in for an HTTP
//! proxy: a request in absolute form (`GET http://HOST/...`) is logged with
//! the host it names, and answered like any other, never forwarded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls;

/// Largest request head read.
const MAX_HEAD: usize = 64 << 10;

/// One request a server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The label of the server that received it.
    pub server: String,
    /// The host (`host[:port]`) the request names: its absolute URL's (when
    /// sent to a proxy), else its `Host` header.
    pub target: String,
    /// Method, path (with query) as received.
    pub method: String,
    pub path: String,
    /// Every header, names lowercase, in order.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Every request of a test's servers, in arrival order.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Seen>>>);

impl Log {
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    /// The requests server `label` received.
    pub fn of(&self, label: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|s| s.server == label)
            .collect()
    }

    fn push(&self, seen: Seen) {
        self.0.lock().unwrap().push(seen);
    }
}

/// What a server answers.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A 307 to `location`.
    pub fn redirect(location: &str) -> Answer {
        Answer {
            status: 307,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// Answers a request.
pub type Handler = Arc<dyn Fn(&Seen) -> Answer + Send + Sync>;

/// A CA made in-test, and server certificates it issues.
pub struct TestCa {
    pub pem: String,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("berth test {name}"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            cert,
            key,
        }
    }

    /// Writes the CA certificate to `path` (for a `hosts.toml` `ca`).
    pub fn write(&self, path: &std::path::Path) {
        std::fs::write(path, &self.pem).unwrap();
    }

    /// A server TLS configuration with a certificate for `names` (DNS names
    /// or IP addresses).
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let chain = vec![cert.der().clone()];
        let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One stand-in host.
pub struct Server {
    pub label: String,
    /// `ip:port`.
    pub addr: String,
    pub tls: bool,
    /// TCP connections accepted (before any TLS handshake).
    pub connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Listens on `ip` (a 127.x address), any port; HTTPS when `tls` is given.
    pub async fn start(
        label: &str,
        ip: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
        log: &Log,
        handler: Handler,
    ) -> Server {
        assert!(ip.starts_with("127."), "test servers stay on loopback");
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicU64::new(0));
        let (c, l, name) = (connections.clone(), log.clone(), label.to_string());
        let is_tls = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let (log, handler, name, acceptor) =
                    (l.clone(), handler.clone(), name.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let conn: Box<dyn Io> = match acceptor {
                        Some(a) => match a.accept(tcp).await {
                            Ok(s) => Box::new(s),
                            Err(_) => return,
                        },
                        None => Box::new(tcp),
                    };
                    serve(conn, &name, &log, &handler).await;
                });
            }
        });
        Server {
            label: label.to_string(),
            addr,
            tls: is_tls,
            connections,
            task,
        }
    }

    /// `http[s]://ip:port`.
    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.addr
        )
    }

    pub fn port(&self) -> u16 {
        self.addr.rsplit_once(':').unwrap().1.parse().unwrap()
    }

    pub fn count(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut conn: Box<dyn Io>, label: &str, log: &Log, handler: &Handler) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if head.len() > MAX_HEAD {
            return;
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_string();
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let mut path = parts.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut target = headers
        .iter()
        .find(|(k, _)| k == "host")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    // Absolute form: what a client sends to a proxy.
    if let Some(rest) = path
        .strip_prefix("http://")
        .or_else(|| path.strip_prefix("https://"))
    {
        let (host, p) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        target = host.to_string();
        path = p.to_string();
    }
    let seen = Seen {
        server: label.to_string(),
        target,
        method,
        path,
        headers,
    };
    log.push(seen.clone());
    let answer = handler(&seen);
    let mut out = format!("HTTP/1.1 {} X\r\n", answer.status);
    for (k, v) in &answer.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&answer.body);
    let _ = conn.write_all(&bytes).await;
    let _ = conn.shutdown().await;
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    super::images::digest(bytes)
}

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// An image without layers (a pull of it is the manifest and the config,
/// nothing is unpacked): (manifest, config).
pub fn empty_image() -> (Vec<u8>, Vec<u8>) {
    let config = json!({
        "architecture": berth_oci_image::parse::host_arch(),
        "os": "linux",
        "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": []},
    })
    .to_string()
    .into_bytes();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digest(&config), "size": config.len()},
        "layers": [],
    })
    .to_string()
    .into_bytes();
    (manifest, config)
}

/// An index with one entry for this machine's platform, of `digest` and `size`.
pub fn index_of(digest: &str, size: usize) -> Vec<u8> {
    json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{
            "mediaType": OCI_MANIFEST,
            "digest": digest,
            "size": size,
            "platform": {"os": "linux", "architecture": berth_oci_image::parse::host_arch()},
        }],
    })
    .to_string()
    .into_bytes()
}
