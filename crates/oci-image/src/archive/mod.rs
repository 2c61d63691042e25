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

mod export;
mod import;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::error::Error;
use crate::layer;
use crate::reference::check_digest;
use crate::store::content::{self, sha256_digest};

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
