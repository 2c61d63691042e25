//! The images the benchmark needs, built here and pushed to the local
//! registry: a pause image for runtimes that want one (containerd's
//! `sandbox_image`), made of the static pause program that berth-shim embeds,
//! and a large multi-layer image of incompressible, deterministic random
//! data for the pull benchmark. The same digests every run.

use anyhow::{anyhow, Result};
use serde_json::json;

#[path = "../../oci-image/tests/support/images.rs"]
mod images;

use images::{host_arch, layer, tar_of, Entry, Pusher};

/// Layers are gzip-compressed, as most images' are.
const GZIP_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Repository and tag of the pause image.
pub const PAUSE_IMAGE: &str = "berth-bench/pause:latest";
/// Repository and tag of the large image.
pub const BIG_IMAGE: &str = "berth-bench/big:latest";

/// SplitMix64: a tiny, fast generator whose output no compressor shrinks.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// `len` bytes of random data from `seed`.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// An image config with `entrypoint` for layers with these diff ids.
fn image_config(entrypoint: &[&str], diff_ids: Vec<String>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "architecture": host_arch(),
        "os": "linux",
        "created": "2024-01-01T00:00:00Z",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": entrypoint,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .expect("an image config serializes")
}

/// Splits `repo:tag`.
fn repo_tag(name: &str) -> (&str, &str) {
    name.rsplit_once(':').unwrap_or((name, "latest"))
}

/// Pushes the pause image; returns `ADDR/repo:tag`.
pub async fn push_pause(addr: &str) -> Result<String> {
    let pusher = Pusher::new(addr, None);
    let pause = layer(
        tar_of(&[
            Entry::File("pause", 0o755, 0, berth_shim::pause_binary()),
            Entry::Dir("proc", 0o555),
            Entry::Dir("dev", 0o755),
            Entry::Dir("sys", 0o555),
            Entry::Dir("etc", 0o755),
        ]),
        GZIP_LAYER,
    );
    let config = image_config(&["/pause"], vec![pause.diff_id.clone()]);
    let (repo, tag) = repo_tag(PAUSE_IMAGE);
    pusher
        .image(repo, Some(tag), false, &config, &[&pause])
        .await
        .map_err(|e| anyhow!("pushing {PAUSE_IMAGE} to {addr}: {e}"))?;
    Ok(format!("{addr}/{PAUSE_IMAGE}"))
}

/// Pushes the large image: `layers` layers of `layer_mib` MiB of random data
/// each (one file per layer); returns `ADDR/repo:tag`.
pub async fn push_big(addr: &str, layers: usize, layer_mib: usize) -> Result<String> {
    let pusher = Pusher::new(addr, None);
    let mut built = Vec::with_capacity(layers);
    for i in 0..layers {
        let data = random_bytes(0xbe47_0000 + i as u64, layer_mib << 20);
        let path = format!("data/layer-{i}.bin");
        built.push(layer(
            tar_of(&[
                Entry::Dir("data", 0o755),
                Entry::File(&path, 0o644, 0, &data),
            ]),
            GZIP_LAYER,
        ));
    }
    let diff_ids = built.iter().map(|l| l.diff_id.clone()).collect();
    let config = image_config(&["/bin/false"], diff_ids);
    let refs: Vec<&images::Layer> = built.iter().collect();
    let (repo, tag) = repo_tag(BIG_IMAGE);
    pusher
        .image(repo, Some(tag), false, &config, &refs)
        .await
        .map_err(|e| anyhow!("pushing {BIG_IMAGE} to {addr}: {e}"))?;
    Ok(format!("{addr}/{BIG_IMAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn random_data_is_deterministic_and_incompressible() {
        let a = random_bytes(7, 1 << 20);
        assert_eq!(a, random_bytes(7, 1 << 20));
        assert_ne!(a, random_bytes(8, 1 << 20));
        assert_eq!(random_bytes(1, 13).len(), 13);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&a).unwrap();
        let packed = enc.finish().unwrap();
        assert!(packed.len() as f64 > a.len() as f64 * 0.99);
    }

    #[test]
    fn splits_repo_and_tag() {
        assert_eq!(repo_tag(PAUSE_IMAGE), ("berth-bench/pause", "latest"));
        assert_eq!(repo_tag("a/b"), ("a/b", "latest"));
    }
}
