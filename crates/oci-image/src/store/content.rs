//! The on-disk layout of the image store and its atomic writes:
//!
//! ```text
//! <root>/blobs/sha256/<hex>        content by digest (manifests, configs, layers)
//! <root>/ingest/                   blobs being downloaded (temp files)
//! <root>/snapshots/<chainid-hex>/fs      one unpacked layer, an overlay lowerdir
//! <root>/snapshots/<chainid-hex>/usage.json  its disk usage
//! <root>/snapshots/.tmp-*          snapshots being unpacked / removed
//! <root>/images/<config-hex>.json  one image record each
//! ```
//!
//! Every blob and record is written to a temp file in the same file system,
//! fsynced, renamed into place, and the directory fsynced.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Prefix of temp dirs under `snapshots/` (never a valid chain id).
pub(crate) const TMP_PREFIX: &str = ".tmp-";

/// Paths of one image store.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    pub root: PathBuf,
    pub blobs: PathBuf,
    pub ingest: PathBuf,
    pub snapshots: PathBuf,
    pub images: PathBuf,
}

/// Disk usage of one snapshot, measured once when it is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Usage {
    pub bytes: u64,
    pub inodes: u64,
}

impl Paths {
    pub(crate) fn new(root: &Path) -> Paths {
        Paths {
            root: root.to_path_buf(),
            blobs: root.join("blobs").join("sha256"),
            ingest: root.join("ingest"),
            snapshots: root.join("snapshots"),
            images: root.join("images"),
        }
    }

    pub(crate) fn create_dirs(&self) -> io::Result<()> {
        for dir in [&self.blobs, &self.ingest, &self.snapshots, &self.images] {
            std::fs::create_dir_all(dir)?;
        }
        Ok(())
    }

    /// The file of blob `digest` (`sha256:<hex>`, checked by the caller).
    pub(crate) fn blob(&self, digest: &str) -> PathBuf {
        self.blobs.join(hex_of(digest))
    }

    /// The directory of snapshot `chain_id`.
    pub(crate) fn snapshot(&self, chain_id: &str) -> PathBuf {
        self.snapshots.join(hex_of(chain_id))
    }

    /// The overlay lowerdir of snapshot `chain_id`.
    pub(crate) fn snapshot_fs(&self, chain_id: &str) -> PathBuf {
        self.snapshot(chain_id).join("fs")
    }

    /// The record of image `id`.
    pub(crate) fn image_record(&self, id: &str) -> PathBuf {
        self.images.join(format!("{}.json", hex_of(id)))
    }
}

/// The hex part of `sha256:<hex>`.
pub(crate) fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// `sha256:<hex>` of `bytes`.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `sha256:<hex>` of a finished hasher.
pub(crate) fn finish_digest(hasher: Sha256) -> String {
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// fsyncs a directory (after a rename or unlink in it).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Moves a finished temp file to `dest` durably: fsync, rename, fsync dir.
pub(crate) fn persist(tmp: tempfile::NamedTempFile, dest: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(dest).map_err(|e| e.error)?;
    sync_dir(dest.parent().unwrap_or(Path::new("/")))
}

/// Writes `bytes` to `path` atomically (temp file in the same dir).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    berth_atomic_file::write(path, bytes, 0o600)
}

/// Stores a small blob already in memory and already verified.
pub(crate) fn store_blob(paths: &Paths, digest: &str, bytes: &[u8]) -> io::Result<()> {
    let dest = paths.blob(digest);
    if dest.exists() {
        return Ok(());
    }
    let mut tmp = tempfile::Builder::new()
        .prefix("blob-")
        .tempfile_in(&paths.ingest)?;
    tmp.write_all(bytes)?;
    persist(tmp, &dest)
}

/// Measures a directory tree: bytes allocated and inodes (hard links once).
pub(crate) fn measure(dir: &Path) -> io::Result<Usage> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut usage = Usage::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let md = std::fs::symlink_metadata(&d)?;
        if seen.insert((md.dev(), md.ino())) {
            usage.bytes += md.blocks() * 512;
            usage.inodes += 1;
        }
        if !md.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let md = entry.metadata()?;
            if md.is_dir() {
                stack.push(entry.path());
            } else if seen.insert((md.dev(), md.ino())) {
                usage.bytes += md.blocks() * 512;
                usage.inodes += 1;
            }
        }
    }
    Ok(usage)
}
