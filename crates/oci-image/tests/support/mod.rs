//! Test rig: a real docker-registry on 127.0.0.1 (through hack/registry.sh)
//! with the test images pushed, stopped when dropped, over HTTP or HTTPS
//! (with certificates made by openssl, optionally requiring client
//! certificates); a TCP proxy that can stall or corrupt the registry's
//! answers; helpers to look at a store.
#![allow(dead_code)]

pub mod hostile;
pub mod images;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn registry_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/registry.sh")
}

/// What a test with the registry needs and this machine lacks, if anything.
pub fn unmet_need() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (ownership, device nodes, trusted xattrs)");
    }
    if !Path::new("/usr/bin/docker-registry").exists() {
        return Some("needs docker-registry (hack/install-deps.sh)");
    }
    if !Path::new(images::BUSYBOX).exists() {
        return Some("needs busybox-static (hack/install-deps.sh)");
    }
    None
}

/// Fails the test, saying what is missing, when it cannot run here. Every
/// test that calls it is also `#[ignore = "needs root, docker-registry and
/// busybox-static..."]`: left out (and said to be) by a plain `cargo test`,
/// and failing, never passing, when included where it cannot run.
#[macro_export]
macro_rules! require_ready {
    () => {
        if let Some(why) = support::unmet_need() {
            panic!("{why}");
        }
    };
}

/// A running registry with the test images; stopped on drop.
pub struct Registry {
    pub dir: tempfile::TempDir,
    pub addr: String,
    pub pushed: images::Pushed,
}

/// How a test registry serves.
#[derive(Default)]
pub struct Options<'a> {
    /// htpasswd auth, `user:pass`.
    pub auth: Option<&'a str>,
    /// Serve HTTPS with the server certificate of these.
    pub tls: Option<&'a Certs>,
    /// Require client certificates signed by the client CA of `tls`.
    pub client_certs: bool,
}

impl Registry {
    /// Starts a registry (with htpasswd auth for `auth` = "user:pass") and
    /// pushes the test images.
    pub async fn start(auth: Option<&str>) -> Registry {
        Registry::start_with(Options {
            auth,
            ..Default::default()
        })
        .await
    }

    /// Starts a registry as `opts` say and pushes the test images.
    pub async fn start_with(opts: Options<'_>) -> Registry {
        let auth = opts.auth;
        let dir = tempfile::Builder::new()
            .prefix("berth-registry-")
            .tempdir()
            .unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg(registry_script()).arg("start").arg(dir.path());
        cmd.args(["--max-lifetime", "900"]);
        if let Some(a) = auth {
            cmd.args(["--auth", a]);
        }
        if let Some(c) = opts.tls {
            cmd.arg("--tls").arg(format!(
                "{}:{}",
                c.path("server.crt").display(),
                c.path("server.key").display()
            ));
            if opts.client_certs {
                cmd.arg("--client-ca").arg(c.path("client-ca.crt"));
            }
        }
        let out = cmd.output().expect("run registry.sh");
        assert!(
            out.status.success(),
            "registry.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let addr = String::from_utf8(out.stdout).unwrap().trim().to_string();
        // From here on the registry runs: Drop stops it even if pushing fails.
        let mut registry = Registry {
            dir,
            addr,
            pushed: Default::default(),
        };
        let creds = auth.and_then(|a| a.split_once(':'));
        // This crate's reqwest has no TLS provider of its own.
        berth_oci_image::install_crypto_provider();
        let pusher = match opts.tls {
            None => images::Pusher::new(&registry.addr, creds),
            Some(c) => {
                let mut b = reqwest::Client::builder()
                    .timeout(std::time::Duration::from_secs(60))
                    .no_proxy()
                    .tls_certs_only(
                        reqwest::Certificate::from_pem_bundle(&c.read("ca.crt")).unwrap(),
                    );
                if opts.client_certs {
                    b = b.identity(reqwest::Identity::from_pem(&c.read("client.pem")).unwrap());
                }
                let base = format!("https://{}", registry.addr);
                images::Pusher::with_client(&base, b.build().unwrap(), creds)
            }
        };
        registry.pushed = images::build_and_push_with(pusher)
            .await
            .expect("push test images");
        registry
    }

    /// `ADDR/name`.
    pub fn image(&self, name: &str) -> String {
        format!("{}/{name}", self.addr)
    }

    /// The digest pushed for `name` (`repo:tag`).
    pub fn digest(&self, name: &str) -> String {
        self.pushed[name].clone()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(registry_script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// Test certificates made with openssl in a temporary directory: a CA
/// (`ca.crt`) and its server certificate for 127.0.0.1 (`server.crt`,
/// `server.key`); a second CA for clients (`client-ca.crt`) and its client
/// certificate (`client.crt`, `client.key`, both in `client.pem`); a CA
/// nobody uses (`other-ca.crt`).
pub struct Certs {
    pub dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Certs {
    pub fn make() -> Certs {
        let dir = tempfile::Builder::new()
            .prefix("berth-certs-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "client-ca", "other-ca"] {
            let (key, crt, subj) = (
                format!("{ca}.key"),
                format!("{ca}.crt"),
                format!("/CN=berth test {ca}"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend([
                "-keyout",
                &key,
                "-out",
                &crt,
                "-days",
                "2",
                "-subj",
                &subj,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(d, &args);
        }
        for (name, ca, ext) in [
            ("server", "ca", "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
            ("client", "client-ca", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"),
        ] {
            let (key, csr, crt, extf) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            std::fs::write(d.join(&extf), ext).unwrap();
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=127.0.0.1"]);
            openssl(d, &args);
            let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
            openssl(
                d,
                &[
                    "x509", "-req", "-in", &csr, "-CA", &ca_crt, "-CAkey", &ca_key,
                    "-CAcreateserial", "-out", &crt, "-days", "2", "-extfile", &extf,
                ],
            );
        }
        let mut pem = std::fs::read(d.join("client.crt")).unwrap();
        pem.extend(std::fs::read(d.join("client.key")).unwrap());
        std::fs::write(d.join("client.pem"), pem).unwrap();
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

/// A TCP listener on 127.0.0.1 that counts connections and closes them:
/// stands for a registry that must not be contacted.
pub struct Tripwire {
    pub addr: String,
    pub connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Tripwire {
    pub async fn start() -> Tripwire {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicU64::new(0));
        let c = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        Tripwire {
            addr,
            connections,
            task,
        }
    }

    pub fn count(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Tripwire {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Resident memory of this process, in bytes.
pub fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// What the proxy does to the registry's answers.
pub const PASS: u8 = 0;
/// Stops forwarding answers once `after` bytes went through (connections stay open).
pub const STALL: u8 = 1;
/// Flips one byte at offset `after` of the answers.
pub const CORRUPT: u8 = 2;
/// Once `after` bytes went through, waits [`SLOW_PAUSE`] after every read of
/// at most 16 KiB from the registry, on each connection: a slow link of
/// under 16 KiB per pause per connection, however many connections.
pub const SLOW: u8 = 3;
/// The pause of [`SLOW`].
pub const SLOW_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// A TCP proxy in front of a registry, on 127.0.0.1.
pub struct Proxy {
    pub addr: String,
    pub mode: Arc<AtomicU8>,
    /// Bytes sent from the registry to clients so far.
    pub bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: &str, mode: u8, after: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mode = Arc::new(AtomicU8::new(mode));
        let bytes = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_string();
        let (m, b) = (mode.clone(), bytes.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (m, b) = (m.clone(), b.clone());
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    });
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let start = b.fetch_add(n as u64, Ordering::SeqCst);
                        let end = start + n as u64;
                        match m.load(Ordering::SeqCst) {
                            STALL if end > after => {
                                // Hold the connection open, send nothing more.
                                std::future::pending::<()>().await;
                            }
                            CORRUPT if start <= after && after < end => {
                                buf[(after - start) as usize] ^= 0xff;
                            }
                            SLOW if end > after => tokio::time::sleep(SLOW_PAUSE).await,
                            _ => {}
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    up.abort();
                });
            }
        });
        Proxy {
            addr,
            mode,
            bytes,
            task,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bytes that do not compress (xorshift from `seed`): a stand-in for a
/// layer's or a model's content.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Names in a directory (empty when it does not exist).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
