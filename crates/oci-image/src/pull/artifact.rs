//! OCI artifacts (a model, a data set, a configuration pushed with `oras`
//! or skopeo): manifests whose config or `artifactType` is not an image's
//! (see [`crate::parse::artifact_type`]). They are pulled and kept like
//! images, for image volumes only: the layers that are tars are unpacked
//! like an image's, each into a snapshot of its own; every other layer is
//! one file, named by its title annotation, and all of them together make
//! one more snapshot (see [`crate::parse::artifact_layers`]), stacked on
//! top. That snapshot holds the files as hard links of their blobs in the
//! content store (0444, owned by the store's owner, root): a model is on
//! disk once, whether one artifact or several name it, and removing the
//! blobs (a RemoveImage) leaves a snapshot that a container still uses
//! whole. Like every snapshot it is made under a temp name, synced, and
//! renamed into place only when whole.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use crate::error::Error;
use crate::layer;
use crate::parse;
use crate::store::content::{self, Paths, Usage};
use crate::store::image::Layer;
use crate::store::{join_err, Inner};

/// Mode of an artifact's files and of the directories above them.
const FILE_MODE: u32 = 0o444;
const DIR_MODE: u32 = 0o755;

/// The snapshot of an artifact's files and, for each file, its path and
/// the blob it is; `None` when every layer is a tar.
pub(crate) fn files_of(layers: &[Layer]) -> Option<(String, Vec<(String, String)>)> {
    let mut group = layers
        .iter()
        .filter(|l| !parse::is_tar_layer(&l.media_type));
    let key = group.next()?.chain_id.clone();
    let files = layers
        .iter()
        .filter_map(|l| Some((l.file.clone()?, l.digest.clone())))
        .collect();
    Some((key, files))
}

/// Makes snapshot `key` of `files` (path, blob digest): each blob of the
/// store linked at its path (checked by [`parse::check_file_path`]; the
/// directories above it made 0755), readable by all. The blobs must be
/// stored. Returns its usage: its directories and inodes (the files' bytes
/// are their blobs').
pub(crate) fn make_files_snapshot(
    paths: &Paths,
    key: &str,
    files: &[(String, String)],
) -> Result<Usage, Error> {
    let io_err = |op, path: &Path| {
        let path = path.to_path_buf();
        move |e| Error::io(op, path, e)
    };
    let (tmp_dir, fs) = layer::new_snapshot(paths)?;
    std::fs::set_permissions(&fs, std::fs::Permissions::from_mode(DIR_MODE))
        .map_err(io_err("chmod", &fs))?;
    let mut linked = 0u64;
    for (path, digest) in files {
        parse::check_file_path(path)
            .map_err(|r| Error::Internal(format!("artifact file {path:?} {r}")))?;
        let dest = fs.join(path);
        let mut dir = fs.clone();
        let names: Vec<&str> = path.split('/').collect();
        for name in &names[..names.len() - 1] {
            dir.push(name);
            match make_dir(&dir) {
                Ok(()) => {}
                // Made for an earlier file (never a file: titles are checked).
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                Err(e) => return Err(Error::io("create", &dir, e)),
            }
        }
        let blob = paths.blob(digest);
        // Whoever the container runs as reads it; the store's directories
        // stay closed to other users of the host.
        std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(FILE_MODE))
            .map_err(io_err("chmod", &blob))?;
        match std::fs::hard_link(&blob, &dest) {
            Ok(()) => {
                let md = std::fs::metadata(&dest).map_err(io_err("stat", &dest))?;
                linked += md.blocks() * 512;
            }
            // Blobs and snapshots on two file systems: a copy.
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                std::fs::copy(&blob, &dest).map_err(io_err("copy to", &dest))?;
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(FILE_MODE))
                    .map_err(io_err("chmod", &dest))?;
            }
            Err(e) => return Err(Error::io("link", &dest, e)),
        }
    }
    let mut usage = content::measure(&fs).map_err(io_err("measure", &fs))?;
    usage.bytes = usage.bytes.saturating_sub(linked);
    layer::commit_snapshot(paths, tmp_dir, key, usage)?;
    Ok(usage)
}

/// Makes directory `dir`, mode 0755 whatever the umask.
fn make_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

impl Inner {
    /// Makes sure the snapshot of an artifact's files (see [`files_of`])
    /// exists, its blobs stored and leased by the caller; with the
    /// snapshot's lock held, so that two pulls make it once.
    pub(crate) async fn ensure_files(
        self: &Arc<Self>,
        key: String,
        files: Vec<(String, String)>,
    ) -> Result<(), Error> {
        let lock = self.key_lock(&key);
        let _guard = lock.lock().await;
        if self.paths.snapshot(&key).is_dir() {
            return Ok(());
        }
        let inner = self.clone();
        let usage = {
            let key = key.clone();
            tokio::task::spawn_blocking(move || make_files_snapshot(&inner.paths, &key, &files))
                .await
                .map_err(join_err)??
        };
        self.disk().usage.insert(key, usage);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::image::Descriptor;

    fn setup() -> (tempfile::TempDir, Paths) {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path());
        paths.create_dirs().unwrap();
        (dir, paths)
    }

    fn blob(paths: &Paths, bytes: &[u8]) -> String {
        let digest = content::sha256_digest(bytes);
        content::store_blob(paths, &digest, bytes).unwrap();
        digest
    }

    fn descriptor(media_type: &str, digest: &str, title: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: digest.into(),
            size: 1,
            platform: None,
            annotations: title
                .map(|t| [(parse::ANNOTATION_TITLE.to_string(), t.to_string())].into())
                .unwrap_or_default(),
        }
    }

    #[test]
    fn files_are_linked_read_only_at_their_titles() {
        let (_dir, paths) = setup();
        let model = blob(&paths, b"weights");
        let vocab = blob(&paths, b"tokens");
        let layers = parse::artifact_layers(
            "sha256:m",
            &[
                descriptor("application/octet-stream", &model, Some("model.bin")),
                descriptor("text/plain", &vocab, Some("tok/vocab.txt")),
            ],
        )
        .unwrap();
        let (key, files) = files_of(&layers).unwrap();
        assert_eq!(
            files,
            [
                ("model.bin".to_string(), model.clone()),
                ("tok/vocab.txt".to_string(), vocab.clone())
            ]
        );
        let usage = make_files_snapshot(&paths, &key, &files).unwrap();
        let fs = paths.snapshot_fs(&key);
        assert_eq!(std::fs::read(fs.join("model.bin")).unwrap(), b"weights");
        assert_eq!(std::fs::read(fs.join("tok/vocab.txt")).unwrap(), b"tokens");
        let md = std::fs::metadata(fs.join("model.bin")).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o444);
        // The blob itself: one inode, on disk once.
        assert_eq!(
            md.ino(),
            std::fs::metadata(paths.blob(&model)).unwrap().ino()
        );
        for dir in [fs.clone(), fs.join("tok")] {
            let mode = std::fs::metadata(&dir).unwrap().mode() & 0o7777;
            assert_eq!(mode, 0o755, "{}", dir.display());
        }
        assert_eq!(usage.inodes, 4, "fs, tok and two files");
        // Nothing left under a temp name.
        let names: Vec<_> = std::fs::read_dir(&paths.snapshots)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [key.strip_prefix("sha256:").unwrap().to_string()]);
    }

    #[test]
    fn a_missing_blob_leaves_no_snapshot() {
        let (_dir, paths) = setup();
        let absent = content::sha256_digest(b"absent");
        let e = make_files_snapshot(
            &paths,
            &content::sha256_digest(b"key"),
            &[("a".to_string(), absent)],
        )
        .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Internal, "{e}");
        assert_eq!(std::fs::read_dir(&paths.snapshots).unwrap().count(), 0);
    }
}
