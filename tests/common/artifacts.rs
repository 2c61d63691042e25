//! OCI artifacts the tests build themselves: blobs and a manifest written
//! into an OCI layout, pushed to the test registry with skopeo (as one
//! pushes a model from a layout `oras` wrote), and the registry API calls
//! that make one hostile afterwards (a blob deleted).

use std::path::Path;
use std::process::Command;

use cri_api::v1;
use sha2::{Digest, Sha256};

pub const MODEL_TYPE: &str = "application/vnd.lab.model.v1";
pub const MODEL_CONFIG: &str = "application/vnd.lab.model.config.v1+json";
pub const EMPTY: &str = "application/vnd.oci.empty.v1+json";
pub const BIN: &str = "application/octet-stream";
pub const TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `n` bytes that do not compress (a stand-in for a model's weights).
pub fn weights(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A plain tar of `files` (path, contents; mode 0644, root's).
pub fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// One layer of an artifact: media type, bytes, title annotation.
pub type Layer<'a> = (&'a str, &'a [u8], Option<&'a str>);

/// Writes an OCI layout of an artifact (its config as `(media type,
/// bytes)`, `artifactType` when given) into `dir`, tagged `v`; the
/// manifest's digest and bytes.
pub fn write_layout(
    dir: &Path,
    artifact_type: Option<&str>,
    config: (&str, &[u8]),
    layers: &[Layer<'_>],
) -> (String, Vec<u8>) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |media_type: &str, bytes: &[u8]| {
        let d = digest(bytes);
        std::fs::write(blobs.join(&d["sha256:".len()..]), bytes).unwrap();
        serde_json::json!({"mediaType": media_type, "digest": d, "size": bytes.len()})
    };
    let config = put(config.0, config.1);
    let layers: Vec<serde_json::Value> = layers
        .iter()
        .map(|(media_type, bytes, title)| {
            let mut desc = put(media_type, bytes);
            if let Some(t) = title {
                desc["annotations"] = serde_json::json!({"org.opencontainers.image.title": t});
            }
            desc
        })
        .collect();
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    });
    if let Some(t) = artifact_type {
        manifest["artifactType"] = t.into();
    }
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let mut desc = put("application/vnd.oci.image.manifest.v1+json", &bytes);
    desc["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "v"});
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [desc]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    (digest(&bytes), bytes)
}

/// Builds the artifact (see [`write_layout`]) and pushes it with skopeo
/// to `registry` (`host:port`) as `name` (`repo:tag`); the manifest's
/// digest (skopeo copies it as it is).
pub fn push(
    registry: &str,
    name: &str,
    artifact_type: Option<&str>,
    config: (&str, &[u8]),
    layers: &[Layer<'_>],
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (d, _) = write_layout(dir.path(), artifact_type, config, layers);
    let out = Command::new("skopeo")
        .args(["copy", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:v", dir.path().display()))
        .arg(format!("docker://{registry}/{name}"))
        .output()
        .expect("skopeo (hack/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "skopeo copy to {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// Deletes blob `digest` of `repo` from `registry` (the test registry
/// allows deletes): a manifest naming it then names a missing blob.
pub fn delete_blob(registry: &str, repo: &str, digest: &str) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "DELETE",
        ])
        .arg(format!("http://{registry}/v2/{repo}/blobs/{digest}"))
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "202",
        "DELETE {digest}"
    );
}

/// An image volume of `image` at `path` (`sub_path` inside it), read-only
/// as kubelet asks for one.
pub fn artifact_mount(path: &str, image: &str, sub_path: &str) -> v1::Mount {
    v1::Mount {
        container_path: path.into(),
        image: Some(v1::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        image_sub_path: sub_path.into(),
        readonly: true,
        ..Default::default()
    }
}

/// The lab's model: `model.bin` (256 KiB), `tok/vocab.txt`, and a plain tar
/// with `data/a.txt`; pushed once per test binary. Its name and digest.
pub fn model() -> (String, String) {
    static MODEL: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    MODEL
        .get_or_init(|| {
            let reg = super::registry();
            let name = "berth-test/artifact-model:v1";
            let tar = tar_of(&[("data/a.txt", b"from a tar\n")]);
            let digest = push(
                &reg.addr,
                name,
                Some(MODEL_TYPE),
                (MODEL_CONFIG, br#"{"name":"m"}"#),
                &[
                    (BIN, &weights(256 << 10), Some("model.bin")),
                    ("text/plain", VOCAB, Some("tok/vocab.txt")),
                    (TAR, &tar, None),
                ],
            );
            (format!("{}/{name}", reg.addr), digest)
        })
        .clone()
}

pub const VOCAB: &[u8] = b"hello\nworld\n";
