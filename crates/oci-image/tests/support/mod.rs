//! Test rig: a real docker-registry on 127.0.0.1 (through hack/registry.sh)
//! with the test images pushed, stopped when dropped; a TCP proxy that can
//! stall or corrupt the registry's answers; helpers to look at a store.
#![allow(dead_code)]

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

/// Why a test cannot run here, if it cannot.
pub fn skip_reason() -> Option<&'static str> {
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

/// Returns from the test with a note when it cannot run here.
#[macro_export]
macro_rules! skip_unless_ready {
    () => {
        if let Some(why) = support::skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

/// A running registry with the test images; stopped on drop.
pub struct Registry {
    pub dir: tempfile::TempDir,
    pub addr: String,
    pub pushed: images::Pushed,
}

impl Registry {
    /// Starts a registry (with htpasswd auth for `auth` = "user:pass") and
    /// pushes the test images.
    pub async fn start(auth: Option<&str>) -> Registry {
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
        registry.pushed = images::build_and_push(&registry.addr, creds)
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

/// What the proxy does to the registry's answers.
pub const PASS: u8 = 0;
/// Stops forwarding answers once `after` bytes went through (connections stay open).
pub const STALL: u8 = 1;
/// Flips one byte at offset `after` of the answers.
pub const CORRUPT: u8 = 2;

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
