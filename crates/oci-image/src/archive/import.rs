//! Import: the images of a docker archive or an OCI layout (a tarball or a
//! directory), checked the way a pull checks them, then stored.

use std::io::Write;

use sha2::{Digest, Sha256};

use super::*;
use crate::layer::{LayerJob, Progress};
use crate::parse;
use crate::pull::artifact;
use crate::reference::Reference;
use crate::store::image::{self, Descriptor, Image, Layer, ManifestKind};
use crate::store::{Inner, Registration};

/// One image of an archive, checked and ready to be stored.
struct Prepared {
    /// Manifest documents to store (digest, bytes), the top one first.
    documents: Vec<(String, Vec<u8>)>,
    top_digest: String,
    /// The image's id: its config's digest (an artifact's: its manifest's).
    id: String,
    config_digest: String,
    config_bytes: Vec<u8>,
    /// The image config (none for an artifact, whose config is not parsed).
    config: Option<image::ConfigFile>,
    artifact: Option<image::Artifact>,
    /// The layers, bottom first, and the archive file of each.
    layers: Vec<(Layer, String)>,
    /// Normalised `domain/path:tag` names.
    tags: Vec<String>,
    /// `domain/path` of each name, for the repo digests.
    repos: Vec<String>,
}

/// The names one image gets: the `RepoTags` of a docker archive, the
/// `io.containerd.image.name` annotation of an OCI index entry, else its
/// `org.opencontainers.image.ref.name` when that is a whole name (with a
/// `/` or a `:`; a bare tag such as `latest` names nothing).
fn names_of(path: &Path, names: &[String]) -> Result<(Vec<String>, Vec<String>), Error> {
    if names.len() > MAX_NAMES {
        return Err(bad(
            path,
            format!("more than {MAX_NAMES} names for one image"),
        ));
    }
    let (mut tags, mut repos) = (Vec::new(), Vec::new());
    for n in names {
        let r = Reference::parse(n).map_err(|e| bad(path, e.to_string()))?;
        let Some(tagged) = r.tagged() else {
            return Err(bad(path, format!("name {n:?} has no tag")));
        };
        if !tags.contains(&tagged) {
            tags.push(tagged);
        }
        if !repos.contains(&r.name()) {
            repos.push(r.name());
        }
    }
    Ok((tags, repos))
}

impl Inner {
    /// Imports the archive (or OCI layout directory) at `path`; on a
    /// blocking thread. See the module's documentation.
    pub(crate) fn import(self: &Arc<Self>, path: &Path) -> Result<Vec<Image>, Error> {
        let result = self.import_inner(path);
        if result.is_err() {
            // What the failed import stored is no image's: collect it now.
            let collected = self.collect_garbage(&self.writer());
            if let Ok(victims) = collected {
                self.delete(victims);
            }
        }
        result
    }

    fn import_inner(self: &Arc<Self>, path: &Path) -> Result<Vec<Image>, Error> {
        let files = Files::open(path)?;
        let prepared = if files.file("oci-layout")?.is_some() {
            self.prepare_oci(&files)?
        } else if files.file("manifest.json")?.is_some() {
            self.prepare_docker(&files)?
        } else {
            return Err(bad(
                path,
                "neither an OCI layout (oci-layout, index.json) nor a docker archive (manifest.json)",
            ));
        };
        if prepared.is_empty() {
            return Err(bad(path, "the archive holds no image"));
        }
        let reference = path.display().to_string();
        let mut keys = Vec::new();
        for p in &prepared {
            keys.extend(p.documents.iter().map(|(d, _)| d.clone()));
            keys.push(p.config_digest.clone());
            for (l, _) in &p.layers {
                keys.push(l.digest.clone());
                keys.push(l.chain_id.clone());
            }
        }
        let _lease = self.lease(keys);
        let mut registrations = Vec::new();
        for p in prepared {
            for (digest, bytes) in p.documents.iter().chain(std::iter::once(&(
                p.config_digest.clone(),
                p.config_bytes.clone(),
            ))) {
                let dest = self.paths.blob(digest);
                content::store_blob(&self.paths, digest, bytes)
                    .map_err(|e| Error::io("store blob", &dest, e))?;
            }
            let layers: Vec<Layer> = p.layers.iter().map(|(l, _)| l.clone()).collect();
            for (l, member) in &p.layers {
                self.import_layer(&files, &reference, l, member, p.artifact.is_some())?;
            }
            let artifact_files = artifact::files_of(&layers).filter(|_| p.artifact.is_some());
            if let Some((key, blobs)) = &artifact_files {
                self.import_files(key, blobs)?;
            }
            registrations.push(Registration {
                fresh: Image::fresh(
                    p.id.clone(),
                    p.config.as_ref(),
                    p.config_bytes.len() as u64,
                    layers,
                    p.artifact,
                ),
                tags: p.tags,
                repo_digests: p
                    .repos
                    .iter()
                    .map(|r| format!("{r}@{}", p.top_digest))
                    .collect(),
                manifests: p.documents.into_iter().map(|(d, _)| d).collect(),
            });
        }
        let images = self.register(registrations)?;
        for image in &images {
            tracing::info!(archive = %path.display(), id = %image.id, tags = ?image.repo_tags, "imported");
        }
        Ok(images)
    }

    /// Makes snapshot `l.chain_id` (and blob `l.digest`) from archive file
    /// `member`, with the pull's unpacker, limits and checks; for a layer
    /// of an artifact (`of_artifact`) that is a file, its blob only.
    fn import_layer(
        self: &Arc<Self>,
        files: &Files,
        reference: &str,
        l: &Layer,
        member: &str,
        of_artifact: bool,
    ) -> Result<(), Error> {
        let file = of_artifact && !parse::is_tar_layer(&l.media_type);
        let lock = self.key_lock(if file { &l.digest } else { &l.chain_id });
        let _guard = lock.blocking_lock();
        // The archive must hold every layer it names, even one the store
        // has already.
        let (reader, size) = files
            .file(member)?
            .ok_or_else(|| bad(files.path(), format!("layer {member} is missing")))?;
        if size != l.size {
            return Err(bad(
                files.path(),
                format!("layer {member}: {size} bytes, the manifest says {}", l.size),
            ));
        }
        let have_snapshot = !file && self.paths.snapshot(&l.chain_id).is_dir();
        let have_blob = self.paths.blob(&l.digest).is_file();
        if (have_snapshot || file) && have_blob {
            return Ok(());
        }
        if have_snapshot {
            // Unpacked for another image (from another compression of the
            // same content): keep the blob too, for export.
            return self.store_verified(reference, reader, l);
        }
        let job = LayerJob {
            reference: reference.to_string(),
            digest: l.digest.clone(),
            size: l.size,
            diff_id: (!of_artifact).then(|| l.diff_id.clone()),
            chain_id: l.chain_id.clone(),
            same_owner: self.same_owner,
            file,
        };
        let usage = layer::run_limited(
            &job,
            reader,
            true,
            &self.paths,
            &Progress::new(),
            &self.cfg.unpack,
        )?;
        if !file {
            self.disk().usage.insert(l.chain_id.clone(), usage);
        }
        Ok(())
    }

    /// Makes the snapshot `key` of an artifact's `files` from their stored
    /// blobs, unless it is there.
    fn import_files(&self, key: &str, files: &[(String, String)]) -> Result<(), Error> {
        let lock = self.key_lock(key);
        let _guard = lock.blocking_lock();
        if self.paths.snapshot(key).is_dir() {
            return Ok(());
        }
        let usage = artifact::make_files_snapshot(&self.paths, key, files)?;
        self.disk().usage.insert(key.to_string(), usage);
        Ok(())
    }

    /// Stores blob `l.digest` from `reader`, checked (size and digest).
    fn store_verified(
        &self,
        reference: &str,
        mut reader: Box<dyn ReadSource>,
        l: &Layer,
    ) -> Result<(), Error> {
        let ingest = &self.paths.ingest;
        let mut tmp = tempfile::Builder::new()
            .prefix("import-")
            .tempfile_in(ingest)
            .map_err(|e| Error::io("create temp blob in", ingest, e))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut n_total = 0u64;
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| Error::bad(reference, &l.digest, format!("reading: {e}")))?;
            if n == 0 {
                break;
            }
            n_total += n as u64;
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n])
                .map_err(|e| Error::io("write", tmp.path(), e))?;
        }
        let got = content::finish_digest(hasher);
        if got != l.digest || n_total != l.size {
            return Err(Error::bad(
                reference,
                &l.digest,
                format!("content hashes to {got} ({n_total} bytes)"),
            ));
        }
        let dest = self.paths.blob(&l.digest);
        content::persist(tmp, &dest).map_err(|e| Error::io("store blob", &dest, e))
    }

    /// The images of an OCI layout: `index.json`'s entries, each an image
    /// manifest or an index (its entry for this platform is taken).
    fn prepare_oci(&self, files: &Files) -> Result<Vec<Prepared>, Error> {
        let path = files.path();
        let layout = files
            .small("oci-layout", MAX_LAYOUT_FILE)?
            .ok_or_else(|| bad(path, "oci-layout missing"))?;
        let version: serde_json::Value =
            serde_json::from_slice(&layout).map_err(|e| bad(path, format!("oci-layout: {e}")))?;
        if version.get("imageLayoutVersion").and_then(|v| v.as_str()) != Some("1.0.0") {
            return Err(bad(path, "oci-layout: imageLayoutVersion is not 1.0.0"));
        }
        let index = files
            .small("index.json", parse::MAX_MANIFEST)?
            .ok_or_else(|| bad(path, "index.json missing"))?;
        let index: OciIndex =
            serde_json::from_slice(&index).map_err(|e| bad(path, format!("index.json: {e}")))?;
        if index.manifests.len() > MAX_IMAGES {
            return Err(bad(
                path,
                format!("index.json: more than {MAX_IMAGES} entries"),
            ));
        }
        // One image per manifest digest, with the names of all its entries.
        let mut out: Vec<Prepared> = Vec::new();
        for entry in index.manifests {
            let mut names = Vec::new();
            if let Some(n) = entry.annotations.get(ANNOTATION_IMAGE_NAME) {
                names.push(n.clone());
            } else if let Some(n) = entry.annotations.get(ANNOTATION_REF_NAME) {
                if n.contains(['/', ':']) {
                    names.push(n.clone());
                } else {
                    tracing::info!(archive = %path.display(), digest = %entry.digest, ref_name = %n, "index entry's ref.name is a tag only: imported without a name");
                }
            }
            let (tags, repos) = names_of(path, &names)?;
            if let Some(p) = out.iter_mut().find(|p| p.top_digest == entry.digest) {
                p.add_names(tags, repos);
                continue;
            }
            let top = files.oci_blob(&entry.digest, entry.size, parse::MAX_MANIFEST)?;
            let mut documents = vec![(entry.digest.clone(), top.clone())];
            let kind = parse::manifest(&top).map_err(|r| {
                bad(
                    path,
                    format!("{} ({}): {r}", entry.digest, entry.media_type),
                )
            })?;
            let (manifest_digest, config, layers, artifact_type) =
                image_manifest(files, &entry.digest, kind, &mut documents)?;
            let config_bytes = files.oci_blob(&config.digest, config.size, parse::MAX_CONFIG)?;
            let members = layers.iter().map(|l| oci_blob_name(&l.digest)).collect();
            out.push(self.prepared(
                files,
                documents,
                entry.digest.clone(),
                &manifest_digest,
                (&config, artifact_type.as_deref()),
                config_bytes,
                &layers,
                members,
                (tags, repos),
            )?);
        }
        Ok(out)
    }

    /// The images of a docker archive (`manifest.json`): their configs and
    /// layers, and an OCI manifest made for each (as containerd does), so
    /// the image has a manifest digest and can be exported again.
    fn prepare_docker(&self, files: &Files) -> Result<Vec<Prepared>, Error> {
        let path = files.path();
        let bytes = files
            .small("manifest.json", parse::MAX_MANIFEST)?
            .ok_or_else(|| bad(path, "manifest.json missing"))?;
        let entries: Vec<DockerEntry> =
            serde_json::from_slice(&bytes).map_err(|e| bad(path, format!("manifest.json: {e}")))?;
        if entries.len() > MAX_IMAGES {
            return Err(bad(
                path,
                format!("manifest.json: more than {MAX_IMAGES} images"),
            ));
        }
        let mut out = Vec::new();
        for entry in entries {
            let config_name = clean_name(Path::new(&entry.config)).map_err(|r| bad(path, r))?;
            let config_bytes = files
                .small(&config_name, parse::MAX_CONFIG)?
                .ok_or_else(|| bad(path, format!("config {config_name} is missing")))?;
            let config_digest = sha256_digest(&config_bytes);
            let config = parse::config(&config_bytes)
                .map_err(|r| bad(path, format!("{config_name}: {r}")))?;
            let diff_ids = config.diff_ids().to_vec();
            if diff_ids.len() != entry.layers.len() {
                return Err(bad(
                    path,
                    format!(
                        "{config_name} lists {} diff ids, manifest.json {} layers",
                        diff_ids.len(),
                        entry.layers.len()
                    ),
                ));
            }
            let mut descriptors = Vec::new();
            let mut members = Vec::new();
            for (name, diff_id) in entry.layers.iter().zip(&diff_ids) {
                let (descriptor, name) = docker_layer(files, name, diff_id)?;
                descriptors.push(descriptor);
                members.push(name);
            }
            let config_desc = Descriptor {
                media_type: OCI_CONFIG.to_string(),
                digest: config_digest.clone(),
                size: config_bytes.len() as i64,
                platform: None,
                annotations: BTreeMap::new(),
            };
            let manifest = oci_manifest(&config_desc, &descriptors);
            let manifest_digest = sha256_digest(&manifest);
            let names_in = entry.repo_tags.unwrap_or_default();
            let names = names_of(path, &names_in)?;
            out.push(self.prepared(
                files,
                vec![(manifest_digest.clone(), manifest)],
                manifest_digest.clone(),
                &manifest_digest,
                (&config_desc, None),
                config_bytes,
                &descriptors,
                members,
                names,
            )?);
        }
        Ok(out)
    }

    /// Checks an image's config (with its manifest's `artifactType`) and
    /// layers the way a pull does: an artifact's config is not parsed.
    #[allow(clippy::too_many_arguments)]
    fn prepared(
        &self,
        files: &Files,
        documents: Vec<(String, Vec<u8>)>,
        top_digest: String,
        manifest_digest: &str,
        (config_desc, artifact_type): (&Descriptor, Option<&str>),
        config_bytes: Vec<u8>,
        layers: &[Descriptor],
        members: Vec<String>,
        (tags, repos): (Vec<String>, Vec<String>),
    ) -> Result<Prepared, Error> {
        let path = files.path();
        parse::check_layer_list(manifest_digest, layers, &self.cfg.unpack)
            .map_err(|r| bad(path, r.to_string()))?;
        let members: HashMap<&str, String> = layers
            .iter()
            .zip(members)
            .map(|(d, m)| (d.digest.as_str(), m))
            .collect();
        let artifact =
            parse::artifact_type(config_desc, artifact_type).map(|artifact_type| image::Artifact {
                artifact_type,
                config: config_desc.digest.clone(),
            });
        let (config, layers) = match &artifact {
            Some(_) => (
                None,
                parse::artifact_layers(manifest_digest, layers)
                    .map_err(|r| bad(path, r.to_string()))?,
            ),
            None => {
                let config = parse::config(&config_bytes)
                    .map_err(|r| bad(path, format!("{}: {r}", config_desc.digest)))?;
                let layers = parse::layers(&config, &config_desc.digest, manifest_digest, layers)
                    .map_err(|r| bad(path, r.to_string()))?;
                (Some(config), layers)
            }
        };
        // An artifact's layers are in another order than its manifest's.
        let layers = layers
            .into_iter()
            .map(|l| {
                let member = members.get(l.digest.as_str()).cloned().unwrap_or_default();
                (l, member)
            })
            .collect();
        Ok(Prepared {
            documents,
            top_digest,
            id: match artifact {
                Some(_) => manifest_digest.to_string(),
                None => config_desc.digest.clone(),
            },
            config_digest: config_desc.digest.clone(),
            config_bytes,
            config,
            artifact,
            layers,
            tags,
            repos,
        })
    }
}

/// An OCI image manifest naming `config` and `layers`.
fn oci_manifest(config: &Descriptor, layers: &[Descriptor]) -> Vec<u8> {
    let d = |d: &Descriptor| serde_json::json!({"mediaType": d.media_type, "digest": d.digest, "size": d.size});
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": image::OCI_MANIFEST,
        "config": d(config),
        "layers": layers.iter().map(d).collect::<Vec<_>>(),
    }))
    .unwrap_or_default()
}

impl Prepared {
    /// Adds names of another index entry of the same document.
    fn add_names(&mut self, tags: Vec<String>, repos: Vec<String>) {
        for (t, r) in tags.into_iter().zip(repos) {
            if !self.tags.contains(&t) {
                self.tags.push(t);
            }
            if !self.repos.contains(&r) {
                self.repos.push(r);
            }
        }
    }
}

/// An image manifest and what it names, reached from the document `top`
/// (`kind` parsed): `top` itself, or an index's entry for this platform
/// (its bytes added to `documents`).
#[allow(clippy::type_complexity)]
fn image_manifest(
    files: &Files,
    top: &str,
    kind: ManifestKind,
    documents: &mut Vec<(String, Vec<u8>)>,
) -> Result<(String, Descriptor, Vec<Descriptor>, Option<String>), Error> {
    let path = files.path();
    match kind {
        ManifestKind::Image {
            config,
            layers,
            artifact_type,
        } => Ok((top.to_string(), config, layers, artifact_type)),
        ManifestKind::Index(manifests) => {
            let arch = parse::host_arch();
            let d = parse::platform(&manifests, arch).ok_or_else(|| {
                bad(
                    path,
                    format!("index {top} has no manifest for linux/{arch}"),
                )
            })?;
            let bytes = files.oci_blob(&d.digest, d.size, parse::MAX_MANIFEST)?;
            let kind =
                parse::manifest(&bytes).map_err(|r| bad(path, format!("{}: {r}", d.digest)))?;
            documents.push((d.digest.clone(), bytes));
            match kind {
                ManifestKind::Image {
                    config,
                    layers,
                    artifact_type,
                } => Ok((d.digest.clone(), config, layers, artifact_type)),
                ManifestKind::Index(_) => {
                    Err(bad(path, format!("{}: an index inside an index", d.digest)))
                }
            }
        }
    }
}

/// The descriptor of a docker archive's layer `name` (the archive file
/// named, cleaned), its media type told by its first bytes.
fn docker_layer(files: &Files, name: &str, diff_id: &str) -> Result<(Descriptor, String), Error> {
    let path = files.path();
    let name = clean_name(Path::new(name)).map_err(|r| bad(path, r))?;
    let (mut reader, size) = files
        .file(&name)?
        .ok_or_else(|| bad(path, format!("layer {name} is missing")))?;
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(bad(path, format!("reading {name}: {e}"))),
        }
    }
    let (media_type, digest) = if head.starts_with(&[0x1f, 0x8b]) {
        ("application/vnd.oci.image.layer.v1.tar+gzip", None)
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        ("application/vnd.oci.image.layer.v1.tar+zstd", None)
    } else {
        (
            "application/vnd.oci.image.layer.v1.tar",
            Some(diff_id.to_string()),
        )
    };
    // A compressed layer's digest is known only from its name
    // (`blobs/sha256/<hex>`, as docker 25 saves); the unpacker
    // checks it like any other.
    let digest = match digest {
        Some(d) => d,
        None => match name.strip_prefix("blobs/sha256/") {
            Some(hex) => format!("sha256:{hex}"),
            None => {
                return Err(bad(
                    path,
                    format!("layer {name}: compressed, and not named by its digest"),
                ))
            }
        },
    };
    let descriptor = Descriptor {
        media_type: media_type.to_string(),
        digest,
        size: i64::try_from(size).map_err(|_| bad(path, "layer too large"))?,
        platform: None,
        annotations: BTreeMap::new(),
    };
    Ok((descriptor, name))
}
