//! The images the benchmark needs, built here and pushed to the local
//! registry: a pause image for runtimes that want one (containerd's
//! `sandbox_image`), made of the static pause program that berth-shim embeds,
//! and two large multi-layer images of deterministic pseudo-random data for
//! the pull benchmark: the 200 MiB one (4 layers of incompressible data, one
//! file each) and the 1 GiB one (#20: 10 layers of files that gzip to about
//! half their size, so that decompressing costs what it costs on real images).
//! The same digests every run; [`push_fresh`] pushes another image of the
//! same shape with layers of its own, for a pull that finds nothing cached.

use std::io::Write;

use anyhow::{anyhow, Context, Result};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

#[path = "../../oci-image/tests/support/images.rs"]
mod images;

use images::{host_arch, layer, tar_of, Entry, Pusher};

/// Layers are gzip-compressed, as most images' are.
const GZIP_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Repository and tag of the pause image.
pub const PAUSE_IMAGE: &str = "berth-bench/pause:latest";
/// Repository of the large image; its tag is its shape ([`Shape`]).
pub const BIG_REPO: &str = "berth-bench/big";
/// Repository of the 1 GiB image; its tag is its shape.
pub const HUGE_REPO: &str = "berth-bench/huge";

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Files in the layers of the 1 GiB image are this large (the last of a
/// layer shorter).
const HUGE_FILE_BYTES: usize = 1 << 20;
/// Fixed mtime of the entries (2024-01-01T00:00:00Z).
const MTIME: u64 = 1_704_067_200;

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

/// The shape of a benchmark image, its tag: `LAYERSxMIB` (MiB per layer
/// for the large image, in all for the 1 GiB one), and `-vN` for variant N
/// (layers of their own, [`push_fresh`]); variant 0 has no suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    layers: usize,
    mib: usize,
    variant: u64,
}

impl Shape {
    fn tag(&self) -> String {
        match self.variant {
            0 => format!("{}x{}", self.layers, self.mib),
            v => format!("{}x{}-v{v}", self.layers, self.mib),
        }
    }

    fn parse(tag: &str) -> Option<Shape> {
        let (shape, variant) = match tag.split_once("-v") {
            Some((shape, v)) => (shape, v.parse().ok()?),
            None => (tag, 0),
        };
        let (layers, mib) = shape.split_once('x')?;
        Some(Shape {
            layers: layers.parse().ok()?,
            mib: mib.parse().ok()?,
            variant,
        })
    }

    /// Seed of layer `index`'s data: `base` for variant 0, as before.
    fn seed(&self, base: u64, index: usize) -> u64 {
        base + index as u64 + (self.variant << 20)
    }
}

/// Pushes the large image: `layers` layers of `layer_mib` MiB of random data
/// each (one file per layer); returns `ADDR/repo:tag`.
pub async fn push_big(addr: &str, layers: usize, layer_mib: usize) -> Result<String> {
    let shape = Shape {
        layers,
        mib: layer_mib,
        variant: 0,
    };
    push_big_shaped(addr, shape).await
}

async fn push_big_shaped(addr: &str, shape: Shape) -> Result<String> {
    let pusher = Pusher::new(addr, None);
    let name = format!("{BIG_REPO}:{}", shape.tag());
    let mut built = Vec::with_capacity(shape.layers);
    for i in 0..shape.layers {
        let data = random_bytes(shape.seed(0xbe47_0000, i), shape.mib << 20);
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
    pusher
        .image(BIG_REPO, Some(&shape.tag()), false, &config, &refs)
        .await
        .map_err(|e| anyhow!("pushing {name} to {addr}: {e}"))?;
    Ok(format!("{addr}/{name}"))
}

/// Pushes variant `variant` of benchmark image `image` (`ADDR/REPO:SHAPE`,
/// as [`push_big`] or [`push_huge`] printed it): the same shape, layers of
/// its own, so that a runtime pulling it finds none of them anywhere.
/// `None` when `image` is not one of them.
pub async fn push_fresh(image: &str, variant: u64) -> Option<Result<String>> {
    let (addr, name) = image.split_once('/')?;
    let (repo, tag) = name.rsplit_once(':')?;
    let shape = Shape {
        variant,
        ..Shape::parse(tag)?
    };
    match repo {
        BIG_REPO => Some(push_big_shaped(addr, shape).await),
        HUGE_REPO => Some(push_huge_shaped(addr, shape).await),
        _ => None,
    }
}

/// Fills `buf` with bytes of 4 random bits each (0..16): Huffman coding
/// halves them, LZ77 finds next to nothing, as in binaries and packed data.
fn nibbles(rng: &mut SplitMix64, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let v = (rng.next() & 0x0f0f_0f0f_0f0f_0f0f).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Hashes what passes to the gzip encoder: the diff id.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Layer `index` of the 1 GiB image: `bytes` of nibble data in files of
/// [`HUGE_FILE_BYTES`] under `data/<index>/`, tarred and gzipped (level 2:
/// fast, so building 1 GiB takes seconds, not minutes, and with dynamic
/// Huffman codes with either flate2 backend — zlib-rs's level 1 has static
/// ones, which leave nibble data at 0.86) in one pass, never holding the tar.
fn huge_layer(index: usize, bytes: usize, seed: u64) -> std::io::Result<images::Layer> {
    let gz = flate2::GzBuilder::new().mtime(0).write(
        Vec::with_capacity(bytes / 16 * 9),
        flate2::Compression::new(2),
    );
    let mut tar = tar::Builder::new(HashingWriter {
        inner: gz,
        hasher: Sha256::new(),
    });
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(MTIME);
        h.set_size(size);
        h
    };
    for dir in ["data".to_string(), format!("data/{index}")] {
        tar.append_data(
            &mut header(tar::EntryType::Directory, 0o755, 0),
            dir,
            std::io::empty(),
        )?;
    }
    let mut rng = SplitMix64(seed);
    let mut buf = vec![0u8; HUGE_FILE_BYTES];
    let (mut left, mut file) = (bytes, 0);
    while left > 0 {
        let n = left.min(HUGE_FILE_BYTES);
        nibbles(&mut rng, &mut buf[..n]);
        let mut h = header(tar::EntryType::Regular, 0o644, n as u64);
        tar.append_data(&mut h, format!("data/{index}/{file:04}.bin"), &buf[..n])?;
        left -= n;
        file += 1;
    }
    let hashing = tar.into_inner()?;
    let diff_id = format!("sha256:{}", hex::encode(hashing.hasher.finalize()));
    Ok(images::Layer {
        diff_id,
        blob: hashing.inner.finish()?,
        media_type: GZIP_LAYER,
    })
}

/// Pushes the 1 GiB image: `layers` layers sharing `total_mib` MiB of
/// files, built on every core while the finished ones are uploaded (at most
/// one compressed layer per core is held); returns `ADDR/repo:tag`.
pub async fn push_huge(addr: &str, layers: usize, total_mib: usize) -> Result<String> {
    let shape = Shape {
        layers,
        mib: total_mib,
        variant: 0,
    };
    push_huge_shaped(addr, shape).await
}

async fn push_huge_shaped(addr: &str, shape: Shape) -> Result<String> {
    let layers = shape.layers;
    if layers == 0 {
        return Err(anyhow!("the 1 GiB image needs at least one layer"));
    }
    let pusher = Pusher::new(addr, None);
    let (repo, tag) = (HUGE_REPO, shape.tag());
    let name = format!("{repo}:{tag}");
    let total = shape.mib << 20;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut descs = vec![serde_json::Value::Null; layers];
    let mut diff_ids = vec![String::new(); layers];
    let mut building = JoinSet::new();
    let mut next = 0;
    while next < layers || !building.is_empty() {
        while next < layers && building.len() < workers {
            let (i, bytes) = (
                next,
                total / layers
                    + if next + 1 == layers {
                        total % layers
                    } else {
                        0
                    },
            );
            let seed = shape.seed(0x4a6e_0000, i);
            building.spawn_blocking(move || (i, huge_layer(i, bytes, seed)));
            next += 1;
        }
        let Some(done) = building.join_next().await else {
            break;
        };
        let (i, built) = done.context("building a layer")?;
        let built = built.with_context(|| format!("building layer {i} of {name}"))?;
        descs[i] = pusher
            .blob(repo, GZIP_LAYER, &built.blob)
            .await
            .map_err(|e| anyhow!("pushing layer {i} of {name} to {addr}: {e}"))?;
        diff_ids[i] = built.diff_id;
    }
    let config = image_config(&["/bin/false"], diff_ids);
    let config_desc = pusher
        .blob(repo, OCI_CONFIG, &config)
        .await
        .map_err(|e| anyhow!("pushing the config of {name} to {addr}: {e}"))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_desc,
        "layers": descs,
    }))?;
    pusher
        .manifest(repo, &tag, OCI_MANIFEST, &manifest)
        .await
        .map_err(|e| anyhow!("pushing {name} to {addr}: {e}"))?;
    Ok(format!("{addr}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn huge_layers_are_deterministic_and_gzip_to_about_half() {
        let bytes = (3 << 20) + 12345;
        let a = huge_layer(3, bytes, 3).unwrap();
        let b = huge_layer(3, bytes, 3).unwrap();
        assert_eq!((&a.blob, &a.diff_id), (&b.blob, &b.diff_id));
        assert_ne!(a.diff_id, huge_layer(3, bytes, 4).unwrap().diff_id);
        let ratio = a.blob.len() as f64 / bytes as f64;
        assert!((0.4..0.7).contains(&ratio), "ratio {ratio}");
        // A tar of the files, whose hash is the diff id.
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&a.blob[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(images::digest(&tar), a.diff_id);
        let mut archive = tar::Archive::new(&tar[..]);
        let sizes: Vec<(String, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.size())
            })
            .collect();
        assert_eq!(sizes.len(), 2 + 4);
        assert_eq!(sizes[2], ("data/3/0000.bin".to_string(), 1 << 20));
        assert_eq!(sizes[5], ("data/3/0003.bin".to_string(), 12345));
    }

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
    fn a_shape_is_its_tag_and_a_variant_has_seeds_of_its_own() {
        for tag in ["4x50", "10x1024-v3"] {
            assert_eq!(Shape::parse(tag).unwrap().tag(), tag);
        }
        assert_eq!(Shape::parse("latest"), None);
        let base = Shape::parse("4x50").unwrap();
        let fresh = Shape::parse("4x50-v1").unwrap();
        // Variant 0 keeps the seeds (the digests) of the images pushed before.
        assert_eq!(base.seed(0xbe47_0000, 2), 0xbe47_0002);
        let seeds = |s: Shape| (0..4).map(|i| s.seed(0xbe47_0000, i)).collect::<Vec<_>>();
        assert!(seeds(base).iter().all(|b| !seeds(fresh).contains(b)));
    }

    #[test]
    fn splits_repo_and_tag() {
        assert_eq!(repo_tag(PAUSE_IMAGE), ("berth-bench/pause", "latest"));
        assert_eq!(repo_tag("a/b"), ("a/b", "latest"));
    }
}
