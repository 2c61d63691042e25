//! The documents a pull gets from a registry (manifests, image indexes,
//! image configs, the `WWW-Authenticate` challenge of a registry that wants
//! credentials) and the image records the store reads back at start,
//! parsed the way the pull and the store parse them: they call these
//! functions, each of which refuses input beyond its size cap before
//! parsing. Public so that the fuzz targets (`fuzz/fuzz_targets/oci_*.rs`)
//! run the code the pull runs, not a copy.
//!
//! Nothing here checks digests against content: the pull does that before
//! it parses a document (see `remote.rs`).

pub use crate::auth::parse_challenge as challenge;
pub use crate::image::{ConfigFile, Descriptor, ManifestKind, Platform};

use crate::image::{self, Image, Layer, RawManifest};
use crate::reference::check_digest;

/// Largest manifest or index accepted (the pull reads no more).
pub const MAX_MANIFEST: usize = 4 << 20;
/// Largest image config accepted (the pull reads no more).
pub const MAX_CONFIG: usize = 16 << 20;
/// Largest image record read back from the store (real ones are a few KiB).
pub const MAX_IMAGE_RECORD: usize = 16 << 20;

/// Why the documents of a pull were refused: the digest the problem is
/// about, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{digest}: {reason}")]
pub struct Refused {
    /// The digest of the document or blob at fault.
    pub digest: String,
    /// What is wrong with it.
    pub reason: String,
}

fn refused(digest: &str, reason: impl Into<String>) -> Refused {
    Refused {
        digest: digest.to_string(),
        reason: reason.into(),
    }
}

/// Parses a manifest document: an image index (or docker manifest list),
/// or an image manifest; schema 2 only, told apart by media type or shape.
pub fn manifest(bytes: &[u8]) -> Result<ManifestKind, String> {
    if bytes.len() > MAX_MANIFEST {
        return Err(format!(
            "manifest of {} bytes is larger than 4 MiB",
            bytes.len()
        ));
    }
    let raw: RawManifest =
        serde_json::from_slice(bytes).map_err(|e| format!("bad manifest: {e}"))?;
    raw.kind()
}

/// The entry of an index for linux on `arch` (a GOARCH name), as the pull
/// picks it: on arm64 the one without a variant or `v8` first.
pub fn platform<'a>(index: &'a [Descriptor], arch: &str) -> Option<&'a Descriptor> {
    image::pick_platform(index, arch)
}

/// The GOARCH name of this machine (what the pull passes to [`platform`]).
pub fn host_arch() -> &'static str {
    image::host_arch()
}

/// The size a descriptor promises, refused when negative.
pub fn size(d: &Descriptor) -> Result<u64, String> {
    u64::try_from(d.size).map_err(|_| format!("negative size for {}", d.digest))
}

/// Parses an image config (only what berth reads of it).
pub fn config(bytes: &[u8]) -> Result<ConfigFile, String> {
    if bytes.len() > MAX_CONFIG {
        return Err(format!(
            "image config of {} bytes is larger than 16 MiB",
            bytes.len()
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("bad image config: {e}"))
}

/// The layers of an image from its config (digest `config_digest`) and the
/// layer descriptors of its manifest (digest `manifest_digest`): one diff id
/// per layer, every digest a sha256 one, layer media types tar (not
/// encrypted) or absent, sizes not negative; chain ids computed.
pub fn layers(
    config: &ConfigFile,
    config_digest: &str,
    manifest_digest: &str,
    descriptors: &[Descriptor],
) -> Result<Vec<Layer>, Refused> {
    let diff_ids = config.diff_ids();
    if diff_ids.len() != descriptors.len() {
        return Err(refused(
            config_digest,
            format!(
                "config lists {} diff ids, the manifest {} layers",
                diff_ids.len(),
                descriptors.len()
            ),
        ));
    }
    for d in diff_ids {
        check_digest(d).map_err(|r| refused(d, r))?;
    }
    let chain_ids = image::chain_ids(diff_ids);
    let mut layers = Vec::with_capacity(descriptors.len());
    for ((desc, diff_id), chain_id) in descriptors.iter().zip(diff_ids).zip(chain_ids) {
        check_digest(&desc.digest).map_err(|r| refused(&desc.digest, r))?;
        if !desc.media_type.is_empty()
            && (!desc.media_type.contains("tar") || desc.media_type.contains("encrypted"))
        {
            return Err(refused(
                &desc.digest,
                format!("unsupported layer media type {:?}", desc.media_type),
            ));
        }
        layers.push(Layer {
            digest: desc.digest.clone(),
            media_type: desc.media_type.clone(),
            size: size(desc).map_err(|r| refused(manifest_digest, r))?,
            diff_id: diff_id.clone(),
            chain_id,
        });
    }
    Ok(layers)
}

/// Parses an image record of the store (`images/<id>.json`). Every digest
/// in it (id, layers, manifests) must be a sha256 one: the store makes paths
/// of them.
pub fn image_record(bytes: &[u8]) -> Result<Image, String> {
    if bytes.len() > MAX_IMAGE_RECORD {
        return Err(format!(
            "image record of {} bytes is larger than 16 MiB",
            bytes.len()
        ));
    }
    let image: Image = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    check_digest(&image.id).map_err(|r| format!("id: {r}"))?;
    for layer in &image.layers {
        for (what, d) in [
            ("layer digest", &layer.digest),
            ("layer diff id", &layer.diff_id),
            ("layer chain id", &layer.chain_id),
        ] {
            check_digest(d).map_err(|r| format!("{what}: {r}"))?;
        }
    }
    for d in &image.manifests {
        check_digest(d).map_err(|r| format!("manifest: {r}"))?;
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn manifest_json(layers: &[(&str, i64)]) -> String {
        let layers: Vec<String> = layers
            .iter()
            .map(|(digest, size)| {
                format!(
                    r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{digest}","size":{size}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
                "config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":2}},
                "layers":[{}]}}"#,
            d(9),
            layers.join(",")
        )
    }

    fn config_json(diff_ids: &[String]) -> String {
        let ids: Vec<String> = diff_ids.iter().map(|d| format!("{d:?}")).collect();
        format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"User":"1000:1000","Cmd":["sh"]}},
                "rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
            ids.join(",")
        )
    }

    #[test]
    fn a_manifest_and_its_config_give_layers_with_chain_ids() {
        let (a, b) = (d(1), d(2));
        let m = manifest(manifest_json(&[(&a, 10), (&b, 20)]).as_bytes()).unwrap();
        let ManifestKind::Image {
            config: c,
            layers: descs,
        } = m
        else {
            panic!("not an image manifest")
        };
        assert_eq!(c.digest, d(9));
        let cfg = config(config_json(&[d(3), d(4)]).as_bytes()).unwrap();
        let layers = layers(&cfg, &c.digest, &d(8), &descs).unwrap();
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0].chain_id, d(3));
        assert_eq!(layers[1].chain_id, image::chain_ids(&[d(3), d(4)])[1]);
        assert_eq!((layers[0].size, layers[1].size), (10, 20));
        assert_eq!(cfg.image_config().user, "1000:1000");
    }

    #[test]
    fn bad_layer_lists_are_refused_naming_the_digest_at_fault() {
        let (a, b) = (d(1), d(2));
        let descs = |m: String| match manifest(m.as_bytes()).unwrap() {
            ManifestKind::Image { layers, .. } => layers,
            ManifestKind::Index(_) => panic!("an index"),
        };
        let two = descs(manifest_json(&[(&a, 1), (&b, 1)]));
        let cfg = config(config_json(&[d(3)]).as_bytes()).unwrap();
        let e = layers(&cfg, "cfg", "man", &two).unwrap_err();
        assert_eq!(e.digest, "cfg");
        assert!(
            e.reason.contains("1 diff ids, the manifest 2 layers"),
            "{e}"
        );

        let cfg = config(config_json(&["sha256:../../x".into()]).as_bytes()).unwrap();
        let e = layers(&cfg, "cfg", "man", &two[..1]).unwrap_err();
        assert_eq!(e.digest, "sha256:../../x");

        let cfg = config(config_json(&[d(3)]).as_bytes()).unwrap();
        let negative = descs(manifest_json(&[(&a, -1)]));
        let e = layers(&cfg, "cfg", "man", &negative).unwrap_err();
        assert_eq!(e.digest, "man");
        assert!(e.reason.contains("negative size"), "{e}");

        let bad_digest = descs(manifest_json(&[("md5:00", 1)]));
        let e = layers(&cfg, "cfg", "man", &bad_digest).unwrap_err();
        assert_eq!(e.digest, "md5:00");
    }

    #[test]
    fn documents_beyond_their_cap_are_refused_before_parsing() {
        let big = vec![b' '; MAX_MANIFEST + 1];
        assert!(manifest(&big).unwrap_err().contains("larger than 4 MiB"));
        let big = vec![b' '; MAX_CONFIG + 1];
        assert!(config(&big).unwrap_err().contains("larger than 16 MiB"));
        let big = vec![b' '; MAX_IMAGE_RECORD + 1];
        assert!(image_record(&big)
            .unwrap_err()
            .contains("larger than 16 MiB"));
    }

    #[test]
    fn image_records_with_path_like_digests_are_refused() {
        let image = Image {
            id: d(1),
            repo_tags: vec!["docker.io/library/a:1".into()],
            repo_digests: vec![],
            size: 1,
            uid: None,
            username: String::new(),
            pinned: false,
            config: Default::default(),
            layers: vec![Layer {
                digest: d(2),
                media_type: String::new(),
                size: 1,
                diff_id: d(3),
                chain_id: d(3),
            }],
            manifests: vec![d(4)],
            generation: 1,
        };
        let good = serde_json::to_vec_pretty(&image).unwrap();
        assert_eq!(image_record(&good).unwrap(), image);
        let mut bad = image.clone();
        bad.id = "sha256:../../../etc/passwd".into();
        let e = image_record(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(e.contains("id"), "{e}");
        let mut bad = image.clone();
        bad.layers[0].chain_id = "../x".into();
        let e = image_record(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(e.contains("chain id"), "{e}");
        let mut bad = image;
        bad.manifests.push("sha256:".into());
        assert!(image_record(&serde_json::to_vec(&bad).unwrap()).is_err());
    }
}
