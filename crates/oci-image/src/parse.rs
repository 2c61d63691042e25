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

pub use crate::registry::auth::parse_challenge as challenge;
pub use crate::store::image::{ConfigFile, Descriptor, ManifestKind, Platform};

use std::collections::{BTreeMap, BTreeSet};

use crate::reference::check_digest;
use crate::store::content::sha256_digest;
use crate::store::image::{self, Image, Layer, RawManifest};
use crate::unpack::UnpackLimits;

/// Largest manifest or index accepted (the pull reads no more).
pub const MAX_MANIFEST: usize = 4 << 20;
/// Largest image config accepted (the pull reads no more).
pub const MAX_CONFIG: usize = 16 << 20;
/// Largest image record read back from the store (real ones are a few KiB).
pub const MAX_IMAGE_RECORD: usize = 16 << 20;
/// Longest path of a file an artifact's layer becomes (bytes), and of one
/// of its names.
pub const MAX_FILE_PATH: usize = 4096;
const MAX_FILE_NAME: usize = 255;

/// The annotation that names the file an artifact's layer becomes.
pub const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
/// The CNCF model-spec's name for it, read when there is no title (as
/// CRI-O does).
pub const ANNOTATION_MODEL_FILEPATH: &str = "org.cncf.model.filepath";

/// Layer media types that are tars (plain, gzip or zstd: the unpacker
/// tells them by their first bytes), unpacked as an image's layers are.
const TAR_LAYERS: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];

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
            file: None,
        });
    }
    Ok(layers)
}

/// Refuses a manifest's layer list beyond `limits` before anything of it
/// is fetched: more than `max_layers` layers, or one whose size is
/// negative or more than `max_layer_bytes`. `manifest_digest` names the
/// manifest in the refusal.
pub fn check_layer_list(
    manifest_digest: &str,
    descriptors: &[Descriptor],
    limits: &UnpackLimits,
) -> Result<(), Refused> {
    if descriptors.len() as u64 > limits.max_layers {
        return Err(refused(
            manifest_digest,
            format!(
                "{} layers, more than the limit of {} (unpack limit max_layers)",
                descriptors.len(),
                limits.max_layers
            ),
        ));
    }
    for d in descriptors {
        let size = size(d).map_err(|r| refused(manifest_digest, r))?;
        if size > limits.max_layer_bytes {
            return Err(refused(
                &d.digest,
                format!(
                    "layer of {size} bytes, more than the limit of {} (unpack limit max_layer_bytes)",
                    limits.max_layer_bytes
                ),
            ));
        }
    }
    Ok(())
}

/// Whether an image manifest (its config descriptor and `artifactType`) is
/// an OCI artifact rather than a container image, and then its type: as
/// CRI-O tells them, an artifact has an `artifactType`, or a config whose
/// media type is not an image config's (OCI, docker, or none); its type is
/// the `artifactType`, else that media type (image-spec 1.1's guidance).
/// The empty config (`application/vnd.oci.empty.v1+json`) is an artifact's.
pub fn artifact_type(config: &Descriptor, artifact_type: Option<&str>) -> Option<String> {
    if let Some(t) = artifact_type.filter(|t| !t.is_empty()) {
        return Some(t.to_string());
    }
    match config.media_type.as_str() {
        "" | image::OCI_CONFIG | image::DOCKER_CONFIG => None,
        other => Some(other.to_string()),
    }
}

/// Whether an artifact's layer of `media_type` is a tar, unpacked as an
/// image's layer is; any other becomes one file.
pub fn is_tar_layer(media_type: &str) -> bool {
    TAR_LAYERS.contains(&media_type)
}

/// The snapshot of an artifact's tar layer `digest` (its content depends on
/// that blob alone; never an image's chain id).
fn tar_snapshot(digest: &str) -> String {
    sha256_digest(format!("berth artifact tar v1\n{digest}").as_bytes())
}

/// The snapshot of an artifact's files: each path and the blob it is, in
/// path order (the files' mode, 0444, is in the version).
fn files_snapshot(files: &BTreeMap<&str, &str>) -> String {
    let mut text = String::from("berth artifact files v1\n");
    for (path, digest) in files {
        text.push_str(path);
        text.push('\n');
        text.push_str(digest);
        text.push('\n');
    }
    sha256_digest(text.as_bytes())
}

/// Checks the path a file of an artifact gets: relative, made of names (no
/// empty one, no `.` or `..`) of at most 255 bytes, at most
/// [`MAX_FILE_PATH`] bytes in all, with no NUL or other control character.
pub fn check_file_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("is empty".into());
    }
    if path.len() > MAX_FILE_PATH {
        return Err(format!("is longer than {MAX_FILE_PATH} bytes"));
    }
    if path.starts_with('/') {
        return Err("is absolute".into());
    }
    if path.chars().any(char::is_control) {
        return Err("has a control character".into());
    }
    for name in path.split('/') {
        match name {
            "" => return Err("has an empty name (a trailing or doubled /)".into()),
            "." | ".." => return Err(format!("has a {name:?} component")),
            n if n.len() > MAX_FILE_NAME => {
                return Err(format!("has a name longer than {MAX_FILE_NAME} bytes"))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The path of the file an artifact's layer `d` becomes: its title
/// annotation (else the model-spec's file path), checked.
fn file_path(d: &Descriptor) -> Result<&str, String> {
    let title = [ANNOTATION_TITLE, ANNOTATION_MODEL_FILEPATH]
        .iter()
        .find_map(|a| d.annotations.get(*a).filter(|t| !t.is_empty()))
        .ok_or_else(|| {
            format!(
                "layer of media type {:?} has no {ANNOTATION_TITLE} annotation: \
                 the file it would become has no name",
                d.media_type
            )
        })?;
    check_file_path(title).map_err(|r| format!("title {title:?} {r}"))?;
    Ok(title)
}

/// The layers of an OCI artifact from its manifest (digest
/// `manifest_digest`) alone, checked before any blob is fetched: every
/// digest a sha256 one, sizes not negative, no tar layer twice, and every
/// other layer named by a valid title no other file has (nor a directory
/// of another file: `a` and `a/b`). Tar layers (see [`is_tar_layer`]) come
/// first, in manifest order, each its own snapshot; then the others, all
/// in one snapshot of files ([`Layer::file`] their paths; the empty
/// descriptor, which an artifact without content carries, makes no file
/// and needs no title). The diff id of each is its blob's digest.
pub fn artifact_layers(
    manifest_digest: &str,
    descriptors: &[Descriptor],
) -> Result<Vec<Layer>, Refused> {
    let mut tars: Vec<(&Descriptor, u64)> = Vec::new();
    let mut tar_digests = BTreeSet::new();
    let mut files: Vec<(&Descriptor, u64, Option<&str>)> = Vec::new();
    // Each file's path, and the blob it is.
    let mut paths: BTreeMap<&str, &str> = BTreeMap::new();
    for d in descriptors {
        check_digest(&d.digest).map_err(|r| refused(&d.digest, r))?;
        let size = size(d).map_err(|r| refused(manifest_digest, r))?;
        if is_tar_layer(&d.media_type) {
            if !tar_digests.insert(d.digest.as_str()) {
                return Err(refused(&d.digest, "the same tar layer twice"));
            }
            tars.push((d, size));
        } else if d.media_type == image::OCI_EMPTY {
            files.push((d, size, None));
        } else {
            let path = file_path(d).map_err(|r| refused(&d.digest, r))?;
            if paths.insert(path, &d.digest).is_some() {
                return Err(refused(
                    &d.digest,
                    format!("title {path:?}: two layers have it"),
                ));
            }
            files.push((d, size, Some(path)));
        }
    }
    // A file may not also be a directory of another.
    for (path, digest) in &paths {
        for (i, _) in path.match_indices('/') {
            if paths.contains_key(&path[..i]) {
                return Err(refused(
                    digest,
                    format!("title {path:?}: {:?} is another layer's file", &path[..i]),
                ));
            }
        }
    }
    let files_key = files_snapshot(&paths);
    let layer = |d: &Descriptor, size: u64, chain_id: String, file: Option<&str>| Layer {
        digest: d.digest.clone(),
        media_type: d.media_type.clone(),
        size,
        diff_id: d.digest.clone(),
        chain_id,
        file: file.map(str::to_string),
    };
    let mut layers: Vec<Layer> = tars
        .into_iter()
        .map(|(d, size)| layer(d, size, tar_snapshot(&d.digest), None))
        .collect();
    layers.extend(
        files
            .into_iter()
            .map(|(d, size, path)| layer(d, size, files_key.clone(), path)),
    );
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
    if let Some(a) = &image.artifact {
        check_digest(&a.config).map_err(|r| format!("artifact config: {r}"))?;
    }
    for path in image.layers.iter().filter_map(|l| l.file.as_deref()) {
        check_file_path(path).map_err(|r| format!("layer file {path:?} {r}"))?;
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
            ..
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
                file: None,
            }],
            manifests: vec![d(4)],
            generation: 1,
            artifact: None,
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

    fn layer_desc(media_type: &str, n: u8, title: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: d(n),
            size: 10,
            platform: None,
            annotations: title
                .map(|t| [(ANNOTATION_TITLE.to_string(), t.to_string())].into())
                .unwrap_or_default(),
        }
    }

    const BIN: &str = "application/octet-stream";
    const GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

    #[test]
    fn artifacts_are_told_from_images_as_cri_o_tells_them() {
        let config = |media_type: &str| Descriptor {
            media_type: media_type.into(),
            ..layer_desc("", 1, None)
        };
        for image_config in [
            "",
            "application/vnd.oci.image.config.v1+json",
            "application/vnd.docker.container.image.v1+json",
        ] {
            assert_eq!(artifact_type(&config(image_config), None), None);
            assert_eq!(artifact_type(&config(image_config), Some("")), None);
        }
        let custom = config("application/vnd.lab.model.config.v1+json");
        assert_eq!(
            artifact_type(&custom, None).as_deref(),
            Some("application/vnd.lab.model.config.v1+json")
        );
        // artifactType wins, even over an image config.
        for c in [&custom, &config("application/vnd.oci.image.config.v1+json")] {
            assert_eq!(
                artifact_type(c, Some("application/vnd.lab.model.v1")).as_deref(),
                Some("application/vnd.lab.model.v1")
            );
        }
        assert_eq!(
            artifact_type(&config("application/vnd.oci.empty.v1+json"), None).as_deref(),
            Some("application/vnd.oci.empty.v1+json")
        );
        // The manifest says so too: `artifactType` is read.
        let m = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
                "artifactType":"application/vnd.lab.model.v1",
                "config":{{"mediaType":"application/vnd.oci.empty.v1+json","digest":"{}","size":2}},
                "layers":[{{"mediaType":"{BIN}","digest":"{}","size":3,
                            "annotations":{{"org.opencontainers.image.title":"model.bin"}}}}]}}"#,
            d(1),
            d(2)
        );
        let ManifestKind::Image {
            config,
            layers,
            artifact_type: t,
        } = manifest(m.as_bytes()).unwrap()
        else {
            panic!("not an image manifest")
        };
        assert_eq!(t.as_deref(), Some("application/vnd.lab.model.v1"));
        assert_eq!(layers[0].annotations[ANNOTATION_TITLE], "model.bin");
        assert!(artifact_type(&config, t.as_deref()).is_some());
    }

    #[test]
    fn an_artifacts_tars_come_first_and_its_files_share_one_snapshot() {
        let layers = artifact_layers(
            "man",
            &[
                layer_desc(BIN, 1, Some("model.bin")),
                layer_desc(GZ, 2, Some("ignored for a tar")),
                layer_desc("text/plain", 3, Some("tok/vocab.txt")),
                layer_desc(BIN, 1, Some("copy.bin")),
            ],
        )
        .unwrap();
        let digests: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
        assert_eq!(digests, [d(2), d(1), d(3), d(1)]);
        let files: Vec<Option<&str>> = layers.iter().map(|l| l.file.as_deref()).collect();
        assert_eq!(
            files,
            [
                None,
                Some("model.bin"),
                Some("tok/vocab.txt"),
                Some("copy.bin")
            ]
        );
        // Snapshot names: sha256 digests, never an image's chain id.
        for l in &layers {
            check_digest(&l.chain_id).unwrap();
            assert_eq!(l.diff_id, l.digest);
            assert_ne!(l.chain_id, l.digest);
        }
        assert_ne!(layers[0].chain_id, layers[1].chain_id);
        assert!(layers[1..].iter().all(|l| l.chain_id == layers[1].chain_id));
        // The same files in another order: the same snapshot; another name: another.
        let again = artifact_layers(
            "man",
            &[
                layer_desc(BIN, 1, Some("copy.bin")),
                layer_desc("text/plain", 3, Some("tok/vocab.txt")),
                layer_desc(BIN, 1, Some("model.bin")),
            ],
        )
        .unwrap();
        assert_eq!(again[0].chain_id, layers[1].chain_id);
        let renamed = artifact_layers("man", &[layer_desc(BIN, 1, Some("other.bin"))]).unwrap();
        assert_ne!(renamed[0].chain_id, layers[1].chain_id);
        // The empty descriptor makes no file and needs no title.
        let empty = artifact_layers(
            "man",
            &[layer_desc("application/vnd.oci.empty.v1+json", 4, None)],
        )
        .unwrap();
        assert_eq!(empty[0].file, None);
    }

    #[test]
    fn bad_titles_are_refused_naming_the_layer() {
        let long_name = "n".repeat(256);
        let long_path = ["d"; 2049].join("/");
        for (title, why) in [
            (None, "has no org.opencontainers.image.title"),
            (Some(""), "has no org.opencontainers.image.title"),
            (Some("/etc/passwd"), "is absolute"),
            (Some("../escape"), "\"..\""),
            (Some("a/../../escape"), "\"..\""),
            (Some("./a"), "\".\""),
            (Some("a//b"), "empty name"),
            (Some("dir/"), "empty name"),
            (Some("a\nb"), "control character"),
            (Some("a\0b"), "control character"),
            (Some(long_name.as_str()), "longer than 255"),
            (Some(long_path.as_str()), "longer than 4096"),
        ] {
            let e = artifact_layers("man", &[layer_desc(BIN, 7, title)]).unwrap_err();
            assert_eq!(e.digest, d(7), "{title:?}");
            assert!(e.reason.contains(why), "{title:?}: {e}");
        }
        // Two files of one name, a file that is another's directory.
        for pair in [["model.bin", "model.bin"], ["a", "a/b"], ["a/b/c", "a/b"]] {
            let e = artifact_layers(
                "man",
                &[
                    layer_desc(BIN, 1, Some(pair[0])),
                    layer_desc(BIN, 2, Some(pair[1])),
                ],
            )
            .unwrap_err();
            assert!(e.reason.contains("title"), "{pair:?}: {e}");
        }
        // The model-spec's file path stands in for a missing title.
        let mut spec = layer_desc(BIN, 1, None);
        spec.annotations.insert(
            ANNOTATION_MODEL_FILEPATH.into(),
            "weights/model.safetensors".into(),
        );
        let layers = artifact_layers("man", &[spec]).unwrap();
        assert_eq!(layers[0].file.as_deref(), Some("weights/model.safetensors"));
        // A tar layer twice, a bad digest, a negative size.
        let e = artifact_layers("man", &[layer_desc(GZ, 1, None), layer_desc(GZ, 1, None)])
            .unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");
        let mut bad = layer_desc(BIN, 1, Some("a"));
        bad.digest = "sha256:../../x".into();
        assert_eq!(
            artifact_layers("man", &[bad]).unwrap_err().digest,
            "sha256:../../x"
        );
        let mut negative = layer_desc(BIN, 1, Some("a"));
        negative.size = -1;
        let e = artifact_layers("man", &[negative]).unwrap_err();
        assert_eq!(e.digest, "man");
    }

    #[test]
    fn layer_lists_beyond_the_limits_are_refused() {
        let limits = UnpackLimits::default();
        let many: Vec<Descriptor> = (0..1000).map(|_| layer_desc(GZ, 1, None)).collect();
        check_layer_list("man", &many[..128], &limits).unwrap();
        let e = check_layer_list("man", &many, &limits).unwrap_err();
        assert_eq!(e.digest, "man");
        assert!(
            e.reason.contains("1000 layers") && e.reason.contains("max_layers"),
            "{e}"
        );
        let mut big = layer_desc(BIN, 3, Some("big"));
        big.size = (64 << 30) + 1;
        let e = check_layer_list("man", &[big], &limits).unwrap_err();
        assert_eq!(e.digest, d(3));
        assert!(e.reason.contains("max_layer_bytes"), "{e}");
    }

    #[test]
    fn artifact_records_with_path_like_files_are_refused() {
        let mut image = Image {
            id: d(1),
            repo_tags: vec![],
            repo_digests: vec![],
            size: 1,
            uid: None,
            username: String::new(),
            pinned: false,
            config: Default::default(),
            layers: artifact_layers("man", &[layer_desc(BIN, 2, Some("model.bin"))]).unwrap(),
            manifests: vec![d(1)],
            generation: 1,
            artifact: Some(image::Artifact {
                artifact_type: "application/vnd.lab.model.v1".into(),
                config: d(3),
            }),
        };
        let good = serde_json::to_vec(&image).unwrap();
        assert_eq!(image_record(&good).unwrap(), image);
        image.layers[0].file = Some("../../etc/shadow".into());
        let e = image_record(&serde_json::to_vec(&image).unwrap()).unwrap_err();
        assert!(e.contains("layer file"), "{e}");
        image.layers[0].file = Some("model.bin".into());
        image.artifact.as_mut().unwrap().config = "sha256:x".into();
        let e = image_record(&serde_json::to_vec(&image).unwrap()).unwrap_err();
        assert!(e.contains("artifact config"), "{e}");
    }
}
