//! Trees removed after the call that removed them has answered: a
//! container's writable layer, bundle and shim dir are renamed aside (one
//! rename each, on the file system they are on) and emptied on a blocking
//! thread, as containerd's garbage collector removes a snapshot's
//! directory after RemoveContainer answers. What the call waits for is the
//! renames, not an `rm -rf`.
//!
//! The removal waits a little ([`DELAY`]): it would slow the very call it
//! is taken off (the same journal commit, the same two CPUs).
//!
//! The name a tree is moved to is a hidden sibling, `.removing-NAME-N`: no
//! record is named so, so a start after a crash (or a removal that failed)
//! sweeps it as an orphan, unmounting whatever is below it first, as it
//! sweeps any entry no record owns.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// The prefix of a tree moved aside to be removed.
pub const PREFIX: &str = ".removing-";

/// How long a tree waits aside before it is emptied: past the call that
/// discarded it, whose record deletion's fsync would otherwise commit the
/// removal's unlinks with it, and take a CPU from it.
const DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// Moves `path` aside to a hidden sibling and removes it there on a
/// blocking thread of its own (`remove` is what empties it: it unmounts
/// first what is below). Absent is fine. Where it cannot be moved (or
/// there is no runtime to remove it on) it is removed here, before this
/// returns. Blocking: call it off the tokio workers.
pub fn discard(
    id: &str,
    path: &Path,
    remove: fn(&str, &Path) -> Result<(), Error>,
) -> Result<(), Error> {
    discard_later(id, path, remove).map(drop)
}

/// [`discard`], and the task that removes the tree aside, if there is one
/// (a test waits for it to see what it left).
fn discard_later(
    id: &str,
    path: &Path,
    remove: fn(&str, &Path) -> Result<(), Error>,
) -> Result<Option<tokio::task::JoinHandle<()>>, Error> {
    let Some(aside) = aside_name(path) else {
        return remove(id, path).map(|()| None);
    };
    match std::fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // Busy (a mount point), or anything else: the slow way.
        Err(_) => return remove(id, path).map(|()| None),
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return remove(id, &aside).map(|()| None);
    };
    let id = id.to_string();
    Ok(Some(runtime.spawn(async move {
        tokio::time::sleep(DELAY).await;
        let removed = tokio::task::spawn_blocking(move || {
            remove(&id, &aside).map_err(|e| (id, aside, e))
        })
        .await;
        if let Ok(Err((id, aside, e))) = removed {
            tracing::warn!(%id, path = %aside.display(), error = %e, "removing a discarded tree (the next start sweeps it)");
        }
    })))
}

/// `.removing-NAME-N` beside `path` (N tells apart two of one name).
fn aside_name(path: &Path) -> Option<PathBuf> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name()?.to_string_lossy();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    Some(path.with_file_name(format!("{PREFIX}{name}-{n}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remove_tree(_: &str, path: &Path) -> Result<(), Error> {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::Internal(e.to_string()))
            }
            _ => Ok(()),
        }
    }

    fn refuse(_: &str, path: &Path) -> Result<(), Error> {
        Err(Error::Internal(format!("not removing {}", path.display())))
    }

    #[tokio::test]
    async fn a_discarded_tree_is_gone_at_once_and_emptied_after() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("c1");
        std::fs::create_dir_all(tree.join("upper/etc")).unwrap();
        std::fs::write(tree.join("upper/etc/file"), b"x").unwrap();
        let removal = tokio::task::spawn_blocking({
            let tree = tree.clone();
            move || discard_later("c1", &tree, remove_tree)
        })
        .await
        .unwrap()
        .unwrap()
        .expect("removed in the background");
        assert!(
            !tree.exists(),
            "gone from where it was when discard returns"
        );
        removal.await.unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "the moved tree was not removed: {left:?}");
    }

    #[tokio::test]
    async fn a_tree_that_cannot_be_removed_stays_aside_for_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("c2");
        std::fs::create_dir(&tree).unwrap();
        let t = tree.clone();
        let removal = tokio::task::spawn_blocking(move || discard_later("c2", &t, refuse))
            .await
            .unwrap()
            .unwrap()
            .expect("removed in the background");
        // The removal was tried, and has given up.
        removal.await.unwrap();
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].starts_with(".removing-c2-"), "{left:?}");
    }

    #[test]
    fn absent_is_fine_and_without_a_runtime_it_is_removed_in_place() {
        let dir = tempfile::tempdir().unwrap();
        discard("c3", &dir.path().join("absent"), refuse).unwrap();
        let tree = dir.path().join("c4");
        std::fs::create_dir(&tree).unwrap();
        discard("c4", &tree, remove_tree).unwrap();
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
