//! Image metadata: what the store keeps about each pulled image (one JSON
//! record per image), and the parsing of manifests and image configs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A pulled image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The config digest, `sha256:…`.
    pub id: String,
    /// Normalised `domain/path:tag` names pointing at this image.
    pub repo_tags: Vec<String>,
    /// `domain/path@sha256:…` of the manifest (or index) each name resolved to.
    pub repo_digests: Vec<String>,
    /// Bytes of the image's content: config plus compressed layers.
    pub size: u64,
    /// The config's user when it is numeric (`1000` or `1000:1000`).
    pub uid: Option<i64>,
    /// The config's user when it is a name (`app`, `app:staff`).
    pub username: String,
    /// Pinned images are never removed by kubelet's image GC.
    pub pinned: bool,
    /// The parts of the image config a container needs.
    pub config: ImageConfig,
    /// Layers, bottom first.
    pub layers: Vec<Layer>,
    /// Manifest and index blobs kept for this image.
    pub manifests: Vec<String>,
    /// Write counter: when a crash leaves a tag on two records, the higher wins.
    #[serde(default)]
    pub generation: u64,
    /// Set when this is an OCI artifact (a model, a data set, a
    /// configuration pushed with `oras`), not a container image: then `id`
    /// is the manifest's digest (artifacts often share one config, the
    /// empty `{}`), `config` is empty and the layers are what an image
    /// volume of it shows. It runs no container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
}

/// What the store keeps about an OCI artifact besides its layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Its manifest's `artifactType`, else its config's media type.
    pub artifact_type: String,
    /// The digest of its config blob (kept, never parsed).
    pub config: String,
}

/// One layer of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    /// Digest of the compressed blob.
    pub digest: String,
    pub media_type: String,
    /// Size of the compressed blob.
    pub size: u64,
    /// Digest of the uncompressed tar. For an artifact's layer, which no
    /// config lists, the blob's own digest.
    pub diff_id: String,
    /// Chain id: names the snapshot of this layer and all below it. For an
    /// artifact, the snapshot the layer is in: its own for a tar, the one
    /// of all the artifact's files for the others (see
    /// `parse::artifact_layers`).
    pub chain_id: String,
    /// An artifact's layer that is not a tar: the path of the file it
    /// becomes in the artifact's snapshot (its title annotation, checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// The runtime part of an image config (`config` in the OCI image config).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub user: String,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    /// Volume paths.
    pub volumes: Vec<String>,
    pub stop_signal: String,
    pub labels: BTreeMap<String, String>,
    /// `80/tcp`, …
    pub exposed_ports: Vec<String>,
    pub architecture: String,
    pub os: String,
    /// RFC 3339 creation time, if the image has one.
    pub created: String,
}

impl Image {
    /// The record of an image just pulled or imported, not yet named: its
    /// size is the config's `config_size` bytes plus its layers', its user
    /// split as [`split_user`] does.
    pub(crate) fn fresh(
        id: String,
        config: Option<&ConfigFile>,
        config_size: u64,
        layers: Vec<Layer>,
        artifact: Option<Artifact>,
    ) -> Image {
        let config = config.map(|c| c.image_config()).unwrap_or_default();
        let (uid, username) = split_user(&config.user);
        Image {
            id,
            repo_tags: Vec::new(),
            repo_digests: Vec::new(),
            size: config_size + layers.iter().map(|l| l.size).sum::<u64>(),
            uid,
            username,
            pinned: false,
            config,
            layers,
            manifests: Vec::new(),
            generation: 0,
            artifact,
        }
    }

    /// The config digest without `sha256:`.
    pub fn id_hex(&self) -> &str {
        crate::store::content::hex_of(&self.id)
    }

    /// The snapshots of the image, bottom first: each layer's chain id, once
    /// (an artifact's files share one snapshot, see [`Layer::chain_id`]).
    pub fn chain_ids(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            if out.last() != Some(&l.chain_id) {
                out.push(l.chain_id.clone());
            }
        }
        out
    }

    /// Whether this is an OCI artifact (see [`Image::artifact`]).
    pub fn is_artifact(&self) -> bool {
        self.artifact.is_some()
    }
}

/// Splits the config's user into (uid, username) as containerd does: the part
/// before `:` is a uid if it is a number, a name otherwise.
pub(crate) fn split_user(user: &str) -> (Option<i64>, String) {
    let user_part = user.split(':').next().unwrap_or("");
    if user_part.is_empty() {
        return (None, String::new());
    }
    match user_part.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, user_part.to_string()),
    }
}

/// A descriptor in a manifest or index: what the document points at, as
/// the registry wrote it (unchecked: the pull checks digest and size).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the content (empty when absent).
    #[serde(default)]
    pub media_type: String,
    /// `algorithm:hex` of the content.
    pub digest: String,
    /// Size of the content in bytes (negative ones are refused where used).
    pub size: i64,
    /// The platform of an index entry.
    #[serde(default)]
    pub platform: Option<Platform>,
    /// Its annotations (an artifact layer's title is one).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The platform of an index entry.
#[derive(Debug, Clone, Deserialize)]
pub struct Platform {
    /// GOARCH name: `amd64`, `arm64`, ….
    #[serde(default)]
    pub architecture: String,
    /// GOOS name: `linux`, ….
    #[serde(default)]
    pub os: String,
    /// `v7`, `v8`, … when the architecture has variants.
    #[serde(default)]
    pub variant: Option<String>,
}

/// A manifest or an index, told apart by media type or shape.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawManifest {
    #[serde(default)]
    pub schema_version: i64,
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub artifact_type: Option<String>,
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
}

pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub(crate) const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// The empty descriptor's media type (`{}`): an artifact's config, or its
/// one layer when it has no content (image-spec 1.1).
pub(crate) const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";

/// What a manifest document is.
#[derive(Debug, Clone)]
pub enum ManifestKind {
    /// An image index (or docker manifest list): one manifest per platform.
    Index(Vec<Descriptor>),
    /// An image manifest: the config and the layers, bottom first, and its
    /// `artifactType` when it has one.
    Image {
        config: Descriptor,
        layers: Vec<Descriptor>,
        artifact_type: Option<String>,
    },
}

impl RawManifest {
    /// Classifies the document, or says why berth cannot use it.
    pub(crate) fn kind(self) -> Result<ManifestKind, String> {
        if self.schema_version != 2 {
            return Err(format!(
                "schema version {} (only schema 2 manifests are supported)",
                self.schema_version
            ));
        }
        match (
            self.media_type.as_deref(),
            self.manifests,
            self.config,
            self.layers,
        ) {
            (Some(OCI_INDEX | DOCKER_LIST) | None, Some(manifests), _, _) => {
                Ok(ManifestKind::Index(manifests))
            }
            (Some(OCI_MANIFEST | DOCKER_MANIFEST) | None, None, Some(config), Some(layers)) => {
                Ok(ManifestKind::Image {
                    config,
                    layers,
                    artifact_type: self.artifact_type.filter(|t| !t.is_empty()),
                })
            }
            (Some(other), _, _, _) => Err(format!("unsupported manifest media type {other:?}")),
            (None, _, _, _) => Err("neither an image manifest nor an index".into()),
        }
    }
}

/// The image config document (only what berth reads).
#[derive(Debug, Deserialize)]
pub struct ConfigFile {
    #[serde(default)]
    pub(crate) architecture: String,
    #[serde(default)]
    pub(crate) os: String,
    #[serde(default)]
    pub(crate) created: Option<String>,
    #[serde(default)]
    pub(crate) config: Option<RuntimeConfig>,
    pub(crate) rootfs: RootFs,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RuntimeConfig {
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub stop_signal: Option<String>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
}

impl ConfigFile {
    /// The diff ids of the layers, bottom first (unchecked).
    pub fn diff_ids(&self) -> &[String] {
        &self.rootfs.diff_ids
    }

    /// The runtime part of the config, as kept in the image record.
    pub fn image_config(&self) -> ImageConfig {
        let c = self.config.as_ref();
        let keys = |m: Option<&BTreeMap<String, serde_json::Value>>| {
            m.map(|m| m.keys().cloned().collect()).unwrap_or_default()
        };
        ImageConfig {
            user: c.and_then(|c| c.user.clone()).unwrap_or_default(),
            env: c.and_then(|c| c.env.clone()).unwrap_or_default(),
            entrypoint: c.and_then(|c| c.entrypoint.clone()).unwrap_or_default(),
            cmd: c.and_then(|c| c.cmd.clone()).unwrap_or_default(),
            working_dir: c.and_then(|c| c.working_dir.clone()).unwrap_or_default(),
            volumes: keys(c.and_then(|c| c.volumes.as_ref())),
            stop_signal: c.and_then(|c| c.stop_signal.clone()).unwrap_or_default(),
            labels: c.and_then(|c| c.labels.clone()).unwrap_or_default(),
            exposed_ports: keys(c.and_then(|c| c.exposed_ports.as_ref())),
            architecture: self.architecture.clone(),
            os: self.os.clone(),
            created: self.created.clone().unwrap_or_default(),
        }
    }
}

/// Chain ids from diff ids: `chain[0] = diff[0]`,
/// `chain[i] = sha256(chain[i-1] + " " + diff[i])`.
pub(crate) fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let next = match out.last() {
            None => diff.clone(),
            Some(prev) => crate::store::content::sha256_digest(format!("{prev} {diff}").as_bytes()),
        };
        out.push(next);
    }
    out
}

/// The GOARCH name of the machine we run on.
pub(crate) fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// Picks the manifest for linux on this machine's architecture from an index.
pub(crate) fn pick_platform<'a>(manifests: &'a [Descriptor], arch: &str) -> Option<&'a Descriptor> {
    let matching = |d: &&Descriptor| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == "linux" && p.architecture == arch)
    };
    // On arm64 prefer no variant or v8; elsewhere take the first match.
    manifests
        .iter()
        .filter(matching)
        .find(|d| {
            let variant = d.platform.as_ref().and_then(|p| p.variant.as_deref());
            arch != "arm64" || matches!(variant, None | Some("v8") | Some(""))
        })
        .or_else(|| manifests.iter().find(matching))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_split_as_containerd_does() {
        assert_eq!(split_user(""), (None, String::new()));
        assert_eq!(split_user("1000"), (Some(1000), String::new()));
        assert_eq!(split_user("1000:1000"), (Some(1000), String::new()));
        assert_eq!(split_user("app"), (None, "app".to_string()));
        assert_eq!(split_user("app:staff"), (None, "app".to_string()));
    }

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = "sha256:aaaa".to_string();
        let b = "sha256:bbbb".to_string();
        let ids = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(ids[0], a);
        assert_eq!(
            ids[1],
            crate::store::content::sha256_digest(b"sha256:aaaa sha256:bbbb")
        );
    }

    #[test]
    fn manifests_are_classified() {
        let index: RawManifest = serde_json::from_str(
            r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json",
                "manifests":[{"digest":"sha256:1","size":1,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},
                             {"digest":"sha256:2","size":1,"platform":{"os":"linux","architecture":"amd64"}}]}"#,
        )
        .unwrap();
        let ManifestKind::Index(m) = index.kind().unwrap() else {
            panic!("not an index")
        };
        assert_eq!(pick_platform(&m, "amd64").unwrap().digest, "sha256:2");
        assert_eq!(pick_platform(&m, "arm64").unwrap().digest, "sha256:1");
        assert!(pick_platform(&m, "s390x").is_none());
        let schema1: RawManifest =
            serde_json::from_str(r#"{"schemaVersion":1,"fsLayers":[]}"#).unwrap();
        assert!(schema1.kind().is_err());
        let weird: RawManifest =
            serde_json::from_str(r#"{"schemaVersion":2,"mediaType":"text/plain"}"#).unwrap();
        assert!(weird.kind().is_err());
    }

    #[test]
    fn docker_configs_with_nulls_parse() {
        let cfg: ConfigFile = serde_json::from_str(
            r#"{"architecture":"amd64","os":"linux","config":{"User":"app","Env":["A=1"],"Entrypoint":null,
                "Cmd":["sh"],"Volumes":{"/data":{}},"Labels":null,"StopSignal":"SIGQUIT","WorkingDir":"/w"},
                "rootfs":{"type":"layers","diff_ids":["sha256:x"]}}"#,
        )
        .unwrap();
        let c = cfg.image_config();
        assert_eq!(c.user, "app");
        assert_eq!(c.cmd, ["sh"]);
        assert!(c.entrypoint.is_empty());
        assert_eq!(c.volumes, ["/data"]);
        assert_eq!(c.stop_signal, "SIGQUIT");
        assert_eq!(c.working_dir, "/w");
    }
}
