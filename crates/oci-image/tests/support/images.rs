//! Builds berth's test images from Debian's busybox-static and our own files,
//! deterministically (fixed mtimes, owners and gzip headers, so every run
//! gives the same digests), and pushes them to a registry with plain HTTP
//! registry API calls. Blobs the registry already has are skipped, so a
//! second run only re-puts the small manifests.
//!
//! Shared by `examples/build_test_images.rs` (used by
//! `hack/build-test-images.sh`) and the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::json;
use sha2::{Digest, Sha256};

/// Fixed mtime of every entry (2024-01-01T00:00:00Z).
const MTIME: u64 = 1_704_067_200;
/// The busybox-static binary of the machine.
pub const BUSYBOX: &str = "/bin/busybox";

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const OCI_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const OCI_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const OCI_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
const DOCKER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Names of what was pushed: `repo:tag` → manifest (or index) digest.
pub type Pushed = BTreeMap<String, String>;

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// One layer: its uncompressed tar and its compressed blob.
pub struct Layer {
    pub diff_id: String,
    pub blob: Vec<u8>,
    pub media_type: &'static str,
}

/// Entry kinds for [`tar_of`].
pub enum Entry<'a> {
    Dir(&'a str, u32),
    /// path, mode, uid (= gid)
    DirOwned(&'a str, u32, u64),
    /// path, mode, uid, contents
    File(&'a str, u32, u64, &'a [u8]),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    Fifo(&'a str),
    /// path, xattr name, value, contents
    FileXattr(&'a str, &'a str, &'a [u8], &'a [u8]),
}

/// A deterministic tar of `entries`.
pub fn tar_of(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, uid: u64, size: u64| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_mtime(MTIME);
        h.set_size(size);
        h
    };
    for e in entries {
        match e {
            Entry::Dir(p, mode) => {
                let mut h = header(tar::EntryType::Directory, *mode, 0, 0);
                b.append_data(&mut h, p, &b""[..]).expect("tar dir");
            }
            Entry::DirOwned(p, mode, uid) => {
                let mut h = header(tar::EntryType::Directory, *mode, *uid, 0);
                b.append_data(&mut h, p, &b""[..]).expect("tar dir");
            }
            Entry::File(p, mode, uid, data) => {
                let mut h = header(tar::EntryType::Regular, *mode, *uid, data.len() as u64);
                b.append_data(&mut h, p, *data).expect("tar file");
            }
            Entry::Symlink(p, target) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0, 0);
                b.append_link(&mut h, p, target).expect("tar symlink");
            }
            Entry::Hardlink(p, target) => {
                let mut h = header(tar::EntryType::Link, 0o644, 0, 0);
                b.append_link(&mut h, p, target).expect("tar hardlink");
            }
            Entry::Fifo(p) => {
                let mut h = header(tar::EntryType::Fifo, 0o600, 0, 0);
                b.append_data(&mut h, p, &b""[..]).expect("tar fifo");
            }
            Entry::FileXattr(p, name, value, data) => {
                let key = format!("SCHILY.xattr.{name}");
                b.append_pax_extensions([(key.as_str(), *value)])
                    .expect("tar pax");
                let mut h = header(tar::EntryType::Regular, 0o644, 0, data.len() as u64);
                b.append_data(&mut h, p, *data).expect("tar file");
            }
        }
    }
    b.into_inner().expect("tar")
}

/// Compresses a tar into a layer.
pub fn layer(tar: Vec<u8>, media_type: &'static str) -> Layer {
    let diff_id = digest(&tar);
    let blob = if media_type.ends_with("gzip") {
        let mut enc = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::new(6));
        enc.write_all(&tar).expect("gzip");
        enc.finish().expect("gzip")
    } else if media_type.ends_with("zstd") {
        zstd::encode_all(&tar[..], 3).expect("zstd")
    } else {
        tar
    };
    Layer {
        diff_id,
        blob,
        media_type,
    }
}

/// The busybox base layer: /bin/busybox, a symlink per applet, passwd and
/// group with root and `app` (1000), /tmp, /root, /home/app.
pub fn busybox_layer(media_type: &'static str) -> Result<Layer, String> {
    let binary = std::fs::read(BUSYBOX)
        .map_err(|e| format!("{BUSYBOX}: {e} (apt-get install busybox-static)"))?;
    let list = std::process::Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .map_err(|e| format!("{BUSYBOX} --list: {e}"))?;
    let applets: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect();
    let passwd = b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
    let group = b"root:x:0:\napp:x:1000:\nnogroup:x:65534:\n";
    let mut entries = vec![
        Entry::Dir("bin", 0o755),
        Entry::File("bin/busybox", 0o755, 0, &binary),
    ];
    let links: Vec<String> = applets.iter().map(|a| format!("bin/{a}")).collect();
    for l in &links {
        entries.push(Entry::Symlink(l, "busybox"));
    }
    entries.extend([
        Entry::Dir("dev", 0o755),
        Entry::Dir("etc", 0o755),
        Entry::File("etc/passwd", 0o644, 0, passwd),
        Entry::File("etc/group", 0o644, 0, group),
        Entry::Dir("home", 0o755),
        Entry::DirOwned("home/app", 0o755, 1000),
        Entry::Dir("proc", 0o555),
        Entry::Dir("root", 0o700),
        Entry::Dir("sys", 0o555),
        Entry::Dir("tmp", 0o1777),
        Entry::Dir("var", 0o755),
    ]);
    Ok(layer(tar_of(&entries), media_type))
}

/// A small layer with one text file.
pub fn marker_layer(path: &str, text: &str, media_type: &'static str) -> Layer {
    layer(
        tar_of(&[Entry::File(path, 0o644, 0, text.as_bytes())]),
        media_type,
    )
}

/// An image config for `layers`.
pub fn config(arch: &str, user: &str, layers: &[&Layer]) -> Vec<u8> {
    let mut cfg = json!({
        "architecture": arch,
        "os": "linux",
        "created": "2024-01-01T00:00:00Z",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["sh"],
            "WorkingDir": "/",
            "Labels": {"org.berth.test": "yes"},
            "StopSignal": "SIGTERM",
        },
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>()},
    });
    if !user.is_empty() {
        cfg["config"]["User"] = json!(user);
    }
    if arch == "arm64" {
        cfg["variant"] = json!("v8");
    }
    serde_json::to_vec(&cfg).expect("json")
}

/// Talks to a registry over its HTTP API.
pub struct Pusher {
    http: reqwest::Client,
    base: String,
    auth: Option<(String, String)>,
}

impl Pusher {
    pub fn new(addr: &str, auth: Option<(&str, &str)>) -> Pusher {
        Pusher {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .no_proxy()
                .build()
                .expect("http client"),
            base: format!("http://{addr}"),
            auth: auth.map(|(u, p)| (u.to_string(), p.to_string())),
        }
    }

    /// A pusher to `base` (`https://addr`) through `http` (which carries
    /// the TLS settings the registry needs).
    pub fn with_client(base: &str, http: reqwest::Client, auth: Option<(&str, &str)>) -> Pusher {
        Pusher {
            http,
            base: base.to_string(),
            auth: auth.map(|(u, p)| (u.to_string(), p.to_string())),
        }
    }

    fn req(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.auth {
            Some((u, p)) => r.basic_auth(u, Some(p)),
            None => r,
        }
    }

    /// Uploads a blob unless the repository has it; returns its descriptor.
    pub async fn blob(
        &self,
        repo: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<serde_json::Value, String> {
        let d = digest(bytes);
        let desc = json!({"mediaType": media_type, "digest": d, "size": bytes.len()});
        let url = format!("{}/v2/{repo}/blobs/{d}", self.base);
        let head = self
            .req(reqwest::Method::HEAD, &url)
            .send()
            .await
            .map_err(|e| format!("HEAD {url}: {e}"))?;
        if head.status().is_success() {
            return Ok(desc);
        }
        let url = format!("{}/v2/{repo}/blobs/uploads/", self.base);
        let start = self
            .req(reqwest::Method::POST, &url)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        if start.status() != reqwest::StatusCode::ACCEPTED {
            return Err(format!("POST {url}: {}", start.status()));
        }
        let location = start
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or("upload without Location")?
            .to_string();
        let location = if location.starts_with('/') {
            format!("{}{location}", self.base)
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{sep}digest={d}");
        let put = self
            .req(reqwest::Method::PUT, &url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .map_err(|e| format!("PUT blob: {e}"))?;
        if put.status() != reqwest::StatusCode::CREATED {
            return Err(format!("PUT blob {d}: {}", put.status()));
        }
        Ok(desc)
    }

    /// Puts a manifest or index under `reference` (tag or digest); returns its digest.
    pub async fn manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<String, String> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base);
        let res = self
            .req(reqwest::Method::PUT, &url)
            .header(reqwest::header::CONTENT_TYPE, media_type)
            .body(bytes.to_vec())
            .send()
            .await
            .map_err(|e| format!("PUT {url}: {e}"))?;
        if res.status() != reqwest::StatusCode::CREATED {
            let status = res.status();
            let body = res.text().await.unwrap_or_default();
            return Err(format!("PUT {url}: {status}: {body}"));
        }
        Ok(digest(bytes))
    }

    /// Pushes config + layers and a manifest; returns (manifest digest, manifest bytes).
    pub async fn image(
        &self,
        repo: &str,
        tag: Option<&str>,
        docker: bool,
        config: &[u8],
        layers: &[&Layer],
    ) -> Result<(String, Vec<u8>), String> {
        let (manifest_type, config_type) = if docker {
            (DOCKER_MANIFEST, DOCKER_CONFIG)
        } else {
            (OCI_MANIFEST, OCI_CONFIG)
        };
        let config_desc = self.blob(repo, config_type, config).await?;
        let mut layer_descs = Vec::new();
        for l in layers {
            let media_type = if docker && l.media_type == OCI_GZIP {
                DOCKER_GZIP
            } else {
                l.media_type
            };
            layer_descs.push(self.blob(repo, media_type, &l.blob).await?);
        }
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": config_desc,
            "layers": layer_descs,
        }))
        .expect("json");
        let d = digest(&manifest);
        self.manifest(repo, tag.unwrap_or(&d), manifest_type, &manifest)
            .await?;
        Ok((d, manifest))
    }

    /// Pushes an OCI artifact: its config (media type, bytes) and layers
    /// (media type, bytes, title annotation), with `artifact_type` when
    /// given; returns (manifest digest, manifest bytes).
    pub async fn artifact(
        &self,
        repo: &str,
        tag: &str,
        artifact_type: Option<&str>,
        config: (&str, &[u8]),
        layers: &[(&str, &[u8], Option<&str>)],
    ) -> Result<(String, Vec<u8>), String> {
        let config_desc = self.blob(repo, config.0, config.1).await?;
        let mut layer_descs = Vec::new();
        for (media_type, bytes, title) in layers {
            let mut desc = self.blob(repo, media_type, bytes).await?;
            if let Some(t) = title {
                desc["annotations"] = json!({"org.opencontainers.image.title": t});
            }
            layer_descs.push(desc);
        }
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": config_desc,
            "layers": layer_descs,
        });
        if let Some(t) = artifact_type {
            manifest["artifactType"] = json!(t);
        }
        let manifest = serde_json::to_vec(&manifest).expect("json");
        let d = self.manifest(repo, tag, OCI_MANIFEST, &manifest).await?;
        Ok((d, manifest))
    }

    /// Deletes blob `digest` of `repo` (the registry must allow deletes):
    /// manifests still naming it name a missing blob.
    pub async fn delete_blob(&self, repo: &str, digest: &str) -> Result<(), String> {
        let url = format!("{}/v2/{repo}/blobs/{digest}", self.base);
        let res = self
            .req(reqwest::Method::DELETE, &url)
            .send()
            .await
            .map_err(|e| format!("DELETE {url}: {e}"))?;
        if res.status() != reqwest::StatusCode::ACCEPTED {
            return Err(format!("DELETE {url}: {}", res.status()));
        }
        Ok(())
    }

    /// Puts `manifest` with its layer sizes changed by `delta` (a lying manifest).
    pub async fn lying_image(
        &self,
        repo: &str,
        tag: &str,
        manifest: &[u8],
        delta: i64,
    ) -> Result<String, String> {
        let mut m: serde_json::Value =
            serde_json::from_slice(manifest).map_err(|e| e.to_string())?;
        for l in m["layers"].as_array_mut().ok_or("no layers")? {
            let size = l["size"].as_i64().ok_or("no size")?;
            l["size"] = json!(size + delta);
        }
        let bytes = serde_json::to_vec(&m).expect("json");
        let media_type = m["mediaType"].as_str().unwrap_or(OCI_MANIFEST).to_string();
        self.manifest(repo, tag, &media_type, &bytes).await
    }
}

/// Builds every test image and pushes it to the registry at `addr`.
pub async fn build_and_push(addr: &str, auth: Option<(&str, &str)>) -> Result<Pushed, String> {
    build_and_push_with(Pusher::new(addr, auth)).await
}

/// Builds every test image and pushes it through `p`.
pub async fn build_and_push_with(p: Pusher) -> Result<Pushed, String> {
    let mut pushed = Pushed::new();
    let arch = host_arch();
    let busybox = busybox_layer(OCI_GZIP)?;

    // busybox, Docker schema 2, under several names.
    let cfg = config(arch, "", &[&busybox]);
    for (repo, tag) in [
        ("berth-test/busybox", "latest"),
        ("e2e-test-images/busybox", "1.29-2"),
        ("library/busybox", "latest"),
    ] {
        let (d, _) = p.image(repo, Some(tag), true, &cfg, &[&busybox]).await?;
        pushed.insert(format!("{repo}:{tag}"), d);
    }

    // Several layers: an uncompressed one with links, a FIFO and an xattr,
    // then whiteouts and an opaque directory.
    let l2 = layer(
        tar_of(&[
            Entry::Dir("data", 0o755),
            Entry::FileXattr("data/a", "user.berth", b"1", b"a\n"),
            Entry::File("data/b", 0o600, 1000, b"b\n"),
            Entry::Hardlink("data/a-hard", "data/a"),
            Entry::Symlink("data/a-sym", "a"),
            Entry::Fifo("data/fifo"),
            Entry::Dir("data/dir", 0o755),
            Entry::File("data/dir/x", 0o644, 0, b"x\n"),
            Entry::Dir("data/dir/sub", 0o755),
            Entry::File("data/dir/sub/y", 0o644, 0, b"y\n"),
        ]),
        OCI_TAR,
    );
    let l3 = layer(
        tar_of(&[
            Entry::Dir("data", 0o755),
            Entry::File("data/.wh.a", 0o644, 0, b""),
            Entry::File("data/b", 0o644, 0, b"b2\n"),
            Entry::Dir("data/dir", 0o755),
            Entry::File("data/dir/.wh..wh..opq", 0o644, 0, b""),
            Entry::File("data/dir/z", 0o644, 0, b"z\n"),
        ]),
        OCI_GZIP,
    );
    let cfg = config(arch, "", &[&busybox, &l2, &l3]);
    let (d, _) = p
        .image(
            "berth-test/layers",
            Some("latest"),
            false,
            &cfg,
            &[&busybox, &l2, &l3],
        )
        .await?;
    pushed.insert("berth-test/layers:latest".into(), d);

    // User as uid and as name.
    for (repo, user) in [
        ("berth-test/user-uid", "1000"),
        ("berth-test/user-name", "app"),
    ] {
        let cfg = config(arch, user, &[&busybox]);
        let (d, _) = p
            .image(repo, Some("latest"), false, &cfg, &[&busybox])
            .await?;
        pushed.insert(format!("{repo}:latest"), d);
    }

    // A zstd layer.
    let z = marker_layer("etc/zstd-marker", "zstd\n", OCI_ZSTD);
    let cfg = config(arch, "", &[&busybox, &z]);
    let (d, _) = p
        .image(
            "berth-test/zstd",
            Some("latest"),
            false,
            &cfg,
            &[&busybox, &z],
        )
        .await?;
    pushed.insert("berth-test/zstd:latest".into(), d);

    // A multi-platform index: amd64 and arm64 share the busybox layer (the
    // binary is the host's; only the marker tells them apart).
    let mut entries = Vec::new();
    for (a, variant) in [("amd64", None), ("arm64", Some("v8"))] {
        let marker = marker_layer("etc/arch", &format!("{a}\n"), OCI_GZIP);
        let cfg = config(a, "", &[&busybox, &marker]);
        let (d, m) = p
            .image("berth-test/multi", None, false, &cfg, &[&busybox, &marker])
            .await?;
        let mut platform = json!({"os": "linux", "architecture": a});
        if let Some(v) = variant {
            platform["variant"] = json!(v);
        }
        entries.push(
            json!({"mediaType": OCI_MANIFEST, "digest": d, "size": m.len(), "platform": platform}),
        );
    }
    let index = serde_json::to_vec(
        &json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}),
    )
    .expect("json");
    let d = p
        .manifest("berth-test/multi", "latest", OCI_INDEX, &index)
        .await?;
    pushed.insert("berth-test/multi:latest".into(), d);

    // Manifests that lie about their layer's size (the blobs are honest).
    let lie = marker_layer("etc/lie", "lie\n", OCI_GZIP);
    let cfg = config(arch, "", &[&lie]);
    let (_, m) = p
        .image("berth-test/lie", Some("honest"), false, &cfg, &[&lie])
        .await?;
    for (tag, delta) in [("bigger", 100), ("smaller", -10)] {
        let d = p.lying_image("berth-test/lie", tag, &m, delta).await?;
        pushed.insert(format!("berth-test/lie:{tag}"), d);
    }
    Ok(pushed)
}

/// The GOARCH name of this machine.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// A tar with one GNU sparse (type 'S') entry `name` of apparent size
/// `real_size` and no data (one hole), then `tail` as file `tail`.
pub fn sparse_tar(name: &str, real_size: u64, tail: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_704_067_200);
    h.set_path(name).unwrap();
    {
        let gnu = h.as_gnu_mut().unwrap();
        // GNU tar ends the map with an empty block at the apparent size.
        gnu.sparse[0].set_offset(real_size);
        gnu.sparse[0].set_length(0);
        gnu.set_real_size(real_size);
    }
    h.set_size(0);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &b""[..]).unwrap();
    if !tail.is_empty() {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_704_067_200);
        h.set_size(tail.len() as u64);
        b.append_data(&mut h, "tail", tail).unwrap();
    }
    b.into_inner().unwrap()
}
