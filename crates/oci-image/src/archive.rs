//! Image archives: imports docker-archive tarballs (`docker save`,
//! `skopeo copy … docker-archive:`), OCI-archive tarballs (`skopeo copy …
//! oci-archive:`) and OCI layout directories into the store, with their
//! names; exports images as an OCI archive.
//!
//! An archive is a file a client names, so every byte of it is untrusted:
//!
//! - the tar is indexed first (names, data offsets and sizes; nothing is
//!   extracted), with at most [`MAX_ENTRIES`] entries and [`MAX_HEADER_BYTES`]
//!   of headers (long names, PAX records) read in all; names with `..` or a
//!   leading `/`, duplicate names, devices and FIFOs are refused, and
//!   symlinks are followed only inside the archive;
//! - documents are read with the pull's caps (manifests 4 MiB, configs
//!   16 MiB, `index.json` and `manifest.json` 4 MiB) and parsed by the
//!   pull's parsers; OCI blobs are found only as `blobs/sha256/<64 hex>`,
//!   and every blob's size and digest are checked against its descriptor;
//! - layers go through the pull's unpacker ([`crate::layer::run_limited`]),
//!   with the same [`crate::UnpackLimits`], digest and diff id checks.
//!
//! Nothing is half-imported: blobs and snapshots are content-addressed and
//! leased while the import runs; the image records (with their names) are
//! written only once every image of the archive is whole, in one
//! registration. A failed import leaves no record, and its blobs and
//! snapshots are collected at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::artifact;
use crate::content::{self, sha256_digest};
use crate::error::Error;
use crate::image::{self, Descriptor, Image, Layer, ManifestKind};
use crate::layer::{self, LayerJob, Progress};
use crate::parse;
use crate::reference::{check_digest, Reference};
use crate::store::{self, Inner, Registration};

/// Most entries an archive's tar may have.
pub const MAX_ENTRIES: usize = 100_000;
/// Most bytes of tar headers (with long names and PAX records) read while
/// indexing an archive.
pub const MAX_HEADER_BYTES: u64 = 64 << 20;
/// Most images (index or `manifest.json` entries) one archive may hold.
pub const MAX_IMAGES: usize = 1024;
/// Most names one image may get from an archive.
const MAX_NAMES: usize = 1024;
/// Most symlinks followed to find one file of an archive.
const MAX_LINK_HOPS: usize = 8;
/// Largest `oci-layout` file read.
const MAX_LAYOUT_FILE: usize = 64 << 10;

/// The annotation containerd (and docker) put the full name in.
pub const ANNOTATION_IMAGE_NAME: &str = "io.containerd.image.name";
/// The OCI annotation of a reference's name (a tag, or a whole name).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

const OCI_LAYOUT: &str = r#"{"imageLayoutVersion":"1.0.0"}"#;
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// A refused archive: the file (or directory), and why.
fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::BadArchive {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Where a file of a tar archive is: its data's offset and size, or the
/// name a link points at.
#[derive(Debug, Clone)]
enum Member {
    File { offset: u64, size: u64 },
    Symlink(String),
    Hardlink(String),
}

/// The files of an archive, read without extracting it.
enum Files {
    Tar {
        path: PathBuf,
        file: Arc<File>,
        members: HashMap<String, Member>,
    },
    Dir {
        path: PathBuf,
    },
}

/// Reads `len` bytes at `pos` of a shared file (no shared offset).
struct At {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for At {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        if left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends inside an entry",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl layer::Source for At {}

/// Counts the bytes the tar reader reads (headers, long names, PAX records:
/// data is skipped by seeking) and stops it past [`MAX_HEADER_BYTES`].
struct HeaderBudget {
    file: File,
    read: u64,
}

impl Read for HeaderBudget {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read += n as u64;
        if self.read > MAX_HEADER_BYTES {
            return Err(io::Error::other(format!(
                "more than {} MiB of tar headers",
                MAX_HEADER_BYTES >> 20
            )));
        }
        Ok(n)
    }
}

impl io::Seek for HeaderBudget {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

/// `name` as a relative path inside the archive (`./a//b` → `a/b`), or why not.
fn clean_name(name: &Path) -> Result<String, String> {
    let mut parts = Vec::new();
    for c in name.components() {
        match c {
            Component::Normal(p) => parts.push(
                p.to_str()
                    .ok_or_else(|| format!("entry {name:?}: name is not UTF-8"))?,
            ),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "entry {:?}: path escapes the archive",
                    name.display()
                ))
            }
        }
    }
    Ok(parts.join("/"))
}

/// `target` of a symlink at `link` (both inside the archive), resolved
/// against the link's directory; `None` when it leaves the archive.
fn resolve_link(link: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

impl Files {
    /// Opens `path`: a directory is an OCI layout, a regular file a tar
    /// (indexed here). A symlink as the last component, a device or a FIFO
    /// are refused (O_NOFOLLOW, O_NONBLOCK: opening a FIFO never waits).
    fn open(path: &Path) -> Result<Files, Error> {
        if !path.is_absolute() {
            return Err(bad(path, "the path must be absolute"));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => bad(path, "is a symlink (name the file it points at)"),
                _ => Error::io("open", path, e),
            })?;
        let md = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        if md.is_dir() {
            return Ok(Files::Dir {
                path: path.to_path_buf(),
            });
        }
        if !md.is_file() {
            return Err(bad(path, "neither a regular file nor a directory"));
        }
        let len = md.len();
        let mut archive = tar::Archive::new(HeaderBudget {
            file: file.try_clone().map_err(|e| Error::io("open", path, e))?,
            read: 0,
        });
        let entries = archive
            .entries_with_seek()
            .map_err(|e| bad(path, format!("not a tar archive: {e}")))?;
        let mut members = HashMap::new();
        for (n, entry) in entries.enumerate() {
            if n >= MAX_ENTRIES {
                return Err(bad(path, format!("more than {MAX_ENTRIES} entries")));
            }
            let entry = entry.map_err(|e| bad(path, format!("bad tar: {e}")))?;
            let raw = entry
                .path()
                .map_err(|e| bad(path, format!("bad entry name: {e}")))?
                .into_owned();
            let name = clean_name(&raw).map_err(|r| bad(path, r))?;
            let link = || -> Result<String, Error> {
                let target = entry
                    .link_name()
                    .map_err(|e| bad(path, format!("entry {name}: bad link: {e}")))?
                    .ok_or_else(|| bad(path, format!("entry {name}: link without a target")))?;
                target
                    .to_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(path, format!("entry {name}: link target is not UTF-8")))
            };
            let member = match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let offset = entry.raw_file_position();
                    let size = entry.size();
                    if offset.checked_add(size).is_none_or(|end| end > len) {
                        return Err(bad(path, format!("entry {name}: truncated archive")));
                    }
                    Member::File { offset, size }
                }
                tar::EntryType::Directory | tar::EntryType::XGlobalHeader => continue,
                tar::EntryType::Symlink => Member::Symlink(link()?),
                tar::EntryType::Link => Member::Hardlink(link()?),
                other => {
                    return Err(bad(
                        path,
                        format!("entry {name}: unsupported entry type {other:?}"),
                    ))
                }
            };
            if members.insert(name.clone(), member).is_some() {
                return Err(bad(path, format!("entry {name} appears twice")));
            }
        }
        Ok(Files::Tar {
            path: path.to_path_buf(),
            file: Arc::new(file),
            members,
        })
    }

    fn path(&self) -> &Path {
        match self {
            Files::Tar { path, .. } | Files::Dir { path } => path,
        }
    }

    /// The file `name` of the archive: a reader of its bytes and its size;
    /// `None` when there is no such file.
    fn file(&self, name: &str) -> Result<Option<Opened>, Error> {
        match self {
            Files::Tar {
                path,
                file,
                members,
            } => {
                let mut name = name.to_string();
                for _ in 0..=MAX_LINK_HOPS {
                    match members.get(&name) {
                        None => return Ok(None),
                        Some(Member::File { offset, size }) => {
                            let reader = At {
                                file: file.clone(),
                                pos: *offset,
                                end: offset + size,
                            };
                            return Ok(Some((Box::new(reader), *size)));
                        }
                        Some(Member::Symlink(target)) => {
                            name = resolve_link(&name, target).ok_or_else(|| {
                                bad(path, format!("entry {name}: symlink leaves the archive"))
                            })?;
                        }
                        Some(Member::Hardlink(target)) => {
                            name = clean_name(Path::new(target)).map_err(|r| bad(path, r))?;
                        }
                    }
                }
                Err(bad(path, format!("entry {name}: too many links")))
            }
            Files::Dir { path } => {
                let full = path.join(name);
                let file = match std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                    .open(&full)
                {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(Error::io("open", &full, e)),
                };
                let md = file.metadata().map_err(|e| Error::io("stat", &full, e))?;
                if !md.is_file() {
                    return Err(bad(path, format!("{name} is not a regular file")));
                }
                Ok(Some((Box::new(file), md.len())))
            }
        }
    }

    /// The whole file `name`, at most `cap` bytes (refused before reading
    /// when larger); `None` when absent.
    fn small(&self, name: &str, cap: usize) -> Result<Option<Vec<u8>>, Error> {
        let Some((mut reader, size)) = self.file(name)? else {
            return Ok(None);
        };
        if size > cap as u64 {
            return Err(bad(
                self.path(),
                format!("{name} is {size} bytes, more than the {cap} accepted"),
            ));
        }
        let mut out = Vec::with_capacity(size as usize);
        reader
            .by_ref()
            .take(cap as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| bad(self.path(), format!("reading {name}: {e}")))?;
        if out.len() as u64 != size {
            return Err(bad(self.path(), format!("{name}: truncated")));
        }
        Ok(Some(out))
    }

    /// Blob `digest` of an OCI layout, checked against its descriptor's
    /// size (cap `cap`) and digest.
    fn oci_blob(&self, digest: &str, size: i64, cap: usize) -> Result<Vec<u8>, Error> {
        let path = self.path();
        check_digest(digest).map_err(|r| bad(path, r))?;
        let want =
            u64::try_from(size).map_err(|_| bad(path, format!("{digest}: negative size")))?;
        if want > cap as u64 {
            return Err(bad(
                path,
                format!("{digest}: {want} bytes, more than the {cap} accepted"),
            ));
        }
        let name = oci_blob_name(digest);
        let bytes = self
            .small(&name, cap)?
            .ok_or_else(|| bad(path, format!("{digest}: blob missing ({name})")))?;
        if bytes.len() as u64 != want {
            return Err(bad(
                path,
                format!(
                    "{digest}: {} bytes, its descriptor says {want}",
                    bytes.len()
                ),
            ));
        }
        let got = sha256_digest(&bytes);
        if got != digest {
            return Err(bad(path, format!("{digest}: content hashes to {got}")));
        }
        Ok(bytes)
    }
}

/// A file of an archive opened: its reader and its size.
type Opened = (Box<dyn ReadSource>, u64);

/// A file of an archive being read (to unpack a layer from it).
trait ReadSource: layer::Source + Send {}
impl<T: layer::Source + Send> ReadSource for T {}

impl layer::Source for Box<dyn ReadSource> {
    fn abort_probe(&self) -> layer::AbortProbe {
        (**self).abort_probe()
    }
}

/// `blobs/sha256/<hex>`.
fn oci_blob_name(digest: &str) -> String {
    format!("blobs/sha256/{}", content::hex_of(digest))
}

#[derive(Deserialize)]
struct OciIndex {
    #[serde(default)]
    manifests: Vec<IndexEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexEntry {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

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
            let user = p
                .config
                .as_ref()
                .map(|c| c.image_config())
                .unwrap_or_default();
            let (uid, username) = image::split_user(&user.user);
            let size = p.config_bytes.len() as u64 + layers.iter().map(|l| l.size).sum::<u64>();
            registrations.push(Registration {
                fresh: Image {
                    id: p.id.clone(),
                    repo_tags: Vec::new(),
                    repo_digests: Vec::new(),
                    size,
                    uid,
                    username,
                    pinned: false,
                    config: user,
                    layers,
                    manifests: Vec::new(),
                    generation: 0,
                    artifact: p.artifact,
                },
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
                for (t, r) in tags.into_iter().zip(repos) {
                    if !p.tags.contains(&t) {
                        p.tags.push(t);
                    }
                    if !p.repos.contains(&r) {
                        p.repos.push(r);
                    }
                }
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
            let (manifest_digest, config, layers, artifact_type) = match kind {
                ManifestKind::Image {
                    config,
                    layers,
                    artifact_type,
                } => (entry.digest.clone(), config, layers, artifact_type),
                ManifestKind::Index(manifests) => {
                    let arch = parse::host_arch();
                    let d = parse::platform(&manifests, arch).ok_or_else(|| {
                        bad(
                            path,
                            format!("index {} has no manifest for linux/{arch}", entry.digest),
                        )
                    })?;
                    let bytes = files.oci_blob(&d.digest, d.size, parse::MAX_MANIFEST)?;
                    let kind = parse::manifest(&bytes)
                        .map_err(|r| bad(path, format!("{}: {r}", d.digest)))?;
                    documents.push((d.digest.clone(), bytes));
                    match kind {
                        ManifestKind::Image {
                            config,
                            layers,
                            artifact_type,
                        } => (d.digest.clone(), config, layers, artifact_type),
                        ManifestKind::Index(_) => {
                            return Err(bad(
                                path,
                                format!("{}: an index inside an index", d.digest),
                            ))
                        }
                    }
                }
            };
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
                        Some(diff_id.clone()),
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
                descriptors.push(Descriptor {
                    media_type: media_type.to_string(),
                    digest,
                    size: i64::try_from(size).map_err(|_| bad(path, "layer too large"))?,
                    platform: None,
                    annotations: BTreeMap::new(),
                });
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
        let state = self.snapshot();
        let mut picked: Vec<Exported> = Vec::new();
        for query in queries {
            let image = store::find(&state, query)
                .cloned()
                .ok_or_else(|| Error::ImageNotFound(query.clone()))?;
            // (documents, name) pairs this query asks for: a name of the
            // image (the documents it was pulled as), a digest reference
            // (that document, no name), or an id (no name).
            let mut wanted: Vec<((Document, Document), Option<String>)> = Vec::new();
            match Reference::parse(query).ok() {
                Some(r)
                    if r.digest().is_none()
                        && r.tagged().is_some_and(|t| image.repo_tags.contains(&t)) =>
                {
                    wanted.push((self.exported_for(&image, Some(&r.name()))?, r.tagged()));
                }
                Some(r)
                    if r.digest()
                        .is_some_and(|d| image.repo_digests.contains(&r.with_digest(d))) =>
                {
                    let found = r.digest().and_then(|d| self.exported(&image, d));
                    wanted.push((
                        found.map_or_else(|| self.exported_for(&image, None), Ok)?,
                        None,
                    ));
                }
                _ => wanted.push((self.exported_for(&image, None)?, None)),
            }
            if all_tags {
                for tag in &image.repo_tags {
                    let r = Reference::parse(tag)?;
                    wanted.push((
                        self.exported_for(&image, Some(&r.name()))?,
                        Some(tag.clone()),
                    ));
                }
            }
            for ((top, manifest), name) in wanted {
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
        drop(state);

        let mut tar = tar::Builder::new(out);
        tar.mode(tar::HeaderMode::Deterministic);
        let put = |tar: &mut tar::Builder<_>, name: &str, size: u64, data: &mut dyn Read| {
            let mut h = tar::Header::new_ustar();
            h.set_size(size);
            h.set_mode(0o644);
            h.set_mtime(0);
            h.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut h, name, data)
                .map_err(|e| Error::io("write archive entry", name, e))
        };
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
                put(&mut tar, &oci_blob_name(&d), size, &mut (&file).take(size))?;
            }
            let descriptor = |annotations: Option<BTreeMap<String, String>>| ExportEntry {
                media_type: p.top.media_type.clone(),
                digest: p.top.digest.clone(),
                size: p.top.bytes.len() as u64,
                annotations,
            };
            if p.names.is_empty() {
                entries.push(descriptor(None));
            }
            for name in &p.names {
                let r = Reference::parse(name)?;
                let mut a = BTreeMap::new();
                a.insert(ANNOTATION_IMAGE_NAME.to_string(), name.clone());
                a.insert(
                    ANNOTATION_REF_NAME.to_string(),
                    r.tag().unwrap_or("latest").to_string(),
                );
                entries.push(descriptor(Some(a)));
            }
            if image.artifact.is_some() {
                continue;
            }
            let tags = p
                .names
                .iter()
                .map(|n| Reference::parse(n).map(|r| r.familiar()))
                .collect::<Result<Vec<_>, _>>()?;
            match docker.iter_mut().find(|(d, _)| *d == p.manifest.digest) {
                Some((_, entry)) => {
                    for t in tags {
                        if !entry.repo_tags.contains(&t) {
                            entry.repo_tags.push(t);
                        }
                    }
                }
                None => docker.push((
                    p.manifest.digest.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_and_escapes_refused() {
        assert_eq!(clean_name(Path::new("./a//b")).unwrap(), "a/b");
        assert!(clean_name(Path::new("../x")).is_err());
        assert!(clean_name(Path::new("a/../../x")).is_err());
        assert!(clean_name(Path::new("/etc/passwd")).is_err());
    }

    #[test]
    fn symlinks_resolve_inside_the_archive_only() {
        assert_eq!(
            resolve_link("abc/layer.tar", "../def.tar").as_deref(),
            Some("def.tar")
        );
        assert_eq!(resolve_link("abc/layer.tar", "../../x"), None);
        assert_eq!(resolve_link("abc/layer.tar", "/etc/shadow"), None);
    }
}
