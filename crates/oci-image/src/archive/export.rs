//! Export: the images asked for, as an OCI archive that also carries
//! Docker's `manifest.json`.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::Arc;

use serde::Serialize;

use super::{oci_blob_name, ANNOTATION_IMAGE_NAME, ANNOTATION_REF_NAME, OCI_LAYOUT};
use crate::error::Error;
use crate::parse;
use crate::reference::Reference;
use crate::store::image::{self, Image, ManifestKind};
use crate::store::{self, Inner};

impl Inner {
    /// The image's own manifest reached from document `top` (stored, and
    /// the image's): `top` itself when it is that manifest, else the entry
    /// of index `top` that is. `None` when `top` leads elsewhere.
    fn exported(&self, image: &Image, top: &str) -> Option<(Document, Document)> {
        let read = |digest: &str| -> Option<Document> {
            if !image.manifests.iter().any(|m| m == digest) {
                return None;
            }
            let bytes = std::fs::read(self.paths.blob(digest)).ok()?;
            let kind = parse::manifest(&bytes).ok()?;
            Some(Document {
                digest: digest.to_string(),
                media_type: media_type_of(&bytes, &kind),
                bytes,
                kind,
            })
        };
        let ours = |doc: &Document| match &doc.kind {
            ManifestKind::Image { config, .. } => match &image.artifact {
                Some(a) => doc.digest == image.id && config.digest == a.config,
                None => config.digest == image.id,
            },
            ManifestKind::Index(_) => false,
        };
        let top = read(top)?;
        if ours(&top) {
            return Some((top.clone(), top));
        }
        let ManifestKind::Index(entries) = &top.kind else {
            return None;
        };
        let manifest = entries
            .iter()
            .filter_map(|e| read(&e.digest))
            .find(|doc| ours(doc))?;
        Some((top, manifest))
    }

    /// What `image` is exported as for one of its names (`repo` its
    /// `domain/path`) or, without a name, for its id: the document the name
    /// was pulled or imported as (a repo digest's manifest or index), else
    /// the image's manifest.
    fn exported_for(
        &self,
        image: &Image,
        repo: Option<&str>,
    ) -> Result<(Document, Document), Error> {
        let pulled_as = image.repo_digests.iter().filter_map(|rd| {
            let (r, d) = rd.split_once('@')?;
            repo.is_none_or(|want| want == r).then_some(d)
        });
        for top in pulled_as.chain(image.manifests.iter().map(String::as_str)) {
            if let Some(found) = self.exported(image, top) {
                return Ok(found);
            }
        }
        Err(Error::Internal(format!(
            "image {}: its manifest is not in the store",
            image.id
        )))
    }

    /// Writes the images `queries` name (references or ids) as an OCI
    /// archive to `out`, as containerd's exporter does: `oci-layout`, the
    /// blobs as stored (the manifest or index each name was pulled as, the
    /// image's manifest, config, and layers compressed as pulled; of an
    /// index, only the platform the store holds), `index.json` with one
    /// entry per name asked for (`io.containerd.image.name` the whole name,
    /// `org.opencontainers.image.ref.name` its tag) and Docker's
    /// `manifest.json` (`RepoTags` the names). An image asked for by id or
    /// digest gets an entry without a name; its other names are written
    /// only with `all_tags`. An unknown query fails before a byte is
    /// written.
    pub(crate) fn export(
        &self,
        queries: &[String],
        all_tags: bool,
        out: impl Write,
    ) -> Result<(), Error> {
        let picked = self.picked(queries, all_tags)?;
        let mut tar = tar::Builder::new(out);
        tar.mode(tar::HeaderMode::Deterministic);
        put(
            &mut tar,
            "oci-layout",
            OCI_LAYOUT.len() as u64,
            &mut OCI_LAYOUT.as_bytes(),
        )?;
        let mut written = HashSet::new();
        let mut entries = Vec::new();
        // Docker's `manifest.json`: one entry per image manifest (artifacts
        // are no docker images), with every name it is exported under.
        let mut docker: Vec<(String, DockerExport)> = Vec::new();
        for p in &picked {
            self.put_blobs(&mut tar, p, &mut written)?;
            entries.extend(p.index_entries()?);
            if p.image.artifact.is_none() {
                p.add_docker_entry(&mut docker)?;
            }
        }
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": image::OCI_INDEX,
            "manifests": entries,
        }))
        .map_err(|e| Error::Internal(format!("encoding index.json: {e}")))?;
        put(
            &mut tar,
            "index.json",
            index.len() as u64,
            &mut index.as_slice(),
        )?;
        if !docker.is_empty() {
            let list: Vec<&DockerExport> = docker.iter().map(|(_, e)| e).collect();
            let bytes = serde_json::to_vec(&list)
                .map_err(|e| Error::Internal(format!("encoding manifest.json: {e}")))?;
            put(
                &mut tar,
                "manifest.json",
                bytes.len() as u64,
                &mut bytes.as_slice(),
            )?;
        }
        tar.into_inner()
            .and_then(|mut w| w.flush())
            .map_err(|e| Error::io("finish archive", "index.json", e))?;
        Ok(())
    }

    /// The entries an export writes for `queries`, each document once with
    /// the names it is asked for under. An unknown query fails.
    fn picked(&self, queries: &[String], all_tags: bool) -> Result<Vec<Exported>, Error> {
        let state = self.snapshot();
        let mut picked: Vec<Exported> = Vec::new();
        for query in queries {
            let image = store::find(&state, query)
                .cloned()
                .ok_or_else(|| Error::ImageNotFound(query.clone()))?;
            for ((top, manifest), name) in self.wanted(&image, query, all_tags)? {
                let at = match picked.iter().position(|p| p.top.digest == top.digest) {
                    Some(at) => at,
                    None => {
                        picked.push(Exported {
                            image: image.clone(),
                            top,
                            manifest,
                            names: Vec::new(),
                        });
                        picked.len() - 1
                    }
                };
                if let Some(name) = name {
                    if !picked[at].names.contains(&name) {
                        picked[at].names.push(name);
                    }
                }
            }
        }
        Ok(picked)
    }

    /// (documents, name) pairs `query` asks for of `image`: a name of the
    /// image (the documents it was pulled as), a digest reference (that
    /// document, no name), or an id (no name); with `all_tags`, every tag.
    #[allow(clippy::type_complexity)]
    fn wanted(
        &self,
        image: &Image,
        query: &str,
        all_tags: bool,
    ) -> Result<Vec<((Document, Document), Option<String>)>, Error> {
        let mut wanted = Vec::new();
        match Reference::parse(query).ok() {
            Some(r)
                if r.digest().is_none()
                    && r.tagged().is_some_and(|t| image.repo_tags.contains(&t)) =>
            {
                wanted.push((self.exported_for(image, Some(&r.name()))?, r.tagged()));
            }
            Some(r)
                if r.digest()
                    .is_some_and(|d| image.repo_digests.contains(&r.with_digest(d))) =>
            {
                let found = r.digest().and_then(|d| self.exported(image, d));
                wanted.push((
                    found.map_or_else(|| self.exported_for(image, None), Ok)?,
                    None,
                ));
            }
            _ => wanted.push((self.exported_for(image, None)?, None)),
        }
        if all_tags {
            for tag in &image.repo_tags {
                let r = Reference::parse(tag)?;
                wanted.push((
                    self.exported_for(image, Some(&r.name()))?,
                    Some(tag.clone()),
                ));
            }
        }
        Ok(wanted)
    }

    /// Writes the blobs of `p` not `written` yet: its documents, config and
    /// layers as stored.
    fn put_blobs(
        &self,
        tar: &mut tar::Builder<impl Write>,
        p: &Exported,
        written: &mut HashSet<String>,
    ) -> Result<(), Error> {
        let image = &p.image;
        let config = image.artifact.as_ref().map_or(&image.id, |a| &a.config);
        let mut blobs = vec![
            p.top.digest.clone(),
            p.manifest.digest.clone(),
            config.clone(),
        ];
        blobs.extend(image.layers.iter().map(|l| l.digest.clone()));
        for d in blobs {
            if !written.insert(d.clone()) {
                continue;
            }
            let path = self.paths.blob(&d);
            let file = File::open(&path).map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    Error::Internal(format!(
                        "image {}: blob {d} is not in the store (its layer was unpacked from another image's blob)",
                        image.id
                    ))
                } else {
                    Error::io("open", &path, e)
                }
            })?;
            let size = file
                .metadata()
                .map_err(|e| Error::io("stat", &path, e))?
                .len();
            put(tar, &oci_blob_name(&d), size, &mut (&file).take(size))?;
        }
        Ok(())
    }
}

/// Appends one regular file to an export.
fn put(
    tar: &mut tar::Builder<impl Write>,
    name: &str,
    size: u64,
    data: &mut dyn Read,
) -> Result<(), Error> {
    let mut h = tar::Header::new_ustar();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, data)
        .map_err(|e| Error::io("write archive entry", name, e))
}

impl Exported {
    /// Its entries of `index.json`: one per name, or one without a name.
    fn index_entries(&self) -> Result<Vec<ExportEntry>, Error> {
        let descriptor = |annotations: Option<BTreeMap<String, String>>| ExportEntry {
            media_type: self.top.media_type.clone(),
            digest: self.top.digest.clone(),
            size: self.top.bytes.len() as u64,
            annotations,
        };
        let mut entries = Vec::new();
        if self.names.is_empty() {
            entries.push(descriptor(None));
        }
        for name in &self.names {
            let r = Reference::parse(name)?;
            let mut a = BTreeMap::new();
            a.insert(ANNOTATION_IMAGE_NAME.to_string(), name.clone());
            a.insert(
                ANNOTATION_REF_NAME.to_string(),
                r.tag().unwrap_or("latest").to_string(),
            );
            entries.push(descriptor(Some(a)));
        }
        Ok(entries)
    }

    /// Adds its names to Docker's `manifest.json` entry of its manifest
    /// (made when it is the first to name that manifest).
    fn add_docker_entry(&self, docker: &mut Vec<(String, DockerExport)>) -> Result<(), Error> {
        let image = &self.image;
        let tags = self
            .names
            .iter()
            .map(|n| Reference::parse(n).map(|r| r.familiar()))
            .collect::<Result<Vec<_>, _>>()?;
        match docker.iter_mut().find(|(d, _)| *d == self.manifest.digest) {
            Some((_, entry)) => {
                for t in tags {
                    if !entry.repo_tags.contains(&t) {
                        entry.repo_tags.push(t);
                    }
                }
            }
            None => docker.push((
                self.manifest.digest.clone(),
                DockerExport {
                    config: oci_blob_name(&image.id),
                    repo_tags: tags,
                    layers: image
                        .layers
                        .iter()
                        .map(|l| oci_blob_name(&l.digest))
                        .collect(),
                },
            )),
        }
        Ok(())
    }
}

/// A manifest or index of the store, read for an export.
#[derive(Clone)]
struct Document {
    digest: String,
    media_type: String,
    bytes: Vec<u8>,
    kind: ManifestKind,
}

/// The media type a document says it has, else the OCI one of its kind.
fn media_type_of(bytes: &[u8], kind: &ManifestKind) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("mediaType")?.as_str().map(str::to_string))
        .unwrap_or_else(|| {
            match kind {
                ManifestKind::Index(_) => image::OCI_INDEX,
                ManifestKind::Image { .. } => image::OCI_MANIFEST,
            }
            .to_string()
        })
}

/// One entry of an export's `index.json`: the document `top` (the image's
/// manifest or an index holding it) under `names` (none: an entry without a
/// name).
struct Exported {
    image: Arc<Image>,
    top: Document,
    manifest: Document,
    names: Vec<String>,
}

/// One image of Docker's `manifest.json`, as `docker save` writes it.
#[derive(Serialize)]
struct DockerExport {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags")]
    repo_tags: Vec<String>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExportEntry {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<String, String>>,
}
