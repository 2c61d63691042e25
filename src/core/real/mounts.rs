//! Mounts of the host: containers' rootfs overlays and image volumes
//! (idmapped for a userns pod), binds into userns trees, and removing a
//! tree only once nothing is mounted below it.

use std::path::{Path, PathBuf};

use tonic::async_trait;

use super::{blocking, Host};
use crate::container::rootfs::ContainerDirs;
use crate::core::mechanisms::{Binds, ContainerMounts, RootfsIdmap};
use crate::error::Error;
use crate::layout;

/// Makes `dir` and its missing parents with mode 0711 (traversable, not
/// listable: see [`layout::Layout::userns_dir`]).
fn make_traversable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
}

/// Makes `dir` (parents 0711) owned by the host ids of a pod's root, mode
/// 0700: its runtime set-up (which runs as that root) passes, and no other
/// local user does (the pod's /dev/shm and files are bound below it).
pub(super) fn private_to(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    make_traversable(dir)?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The mount points at or below `dir`, deepest first.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(berth_mountinfo::SELF).unwrap_or_default();
    let mut points = berth_mountinfo::points_below(&text, dir);
    points.dedup();
    points
}

/// Whether `path` is where something is mounted (the root of a mount),
/// told by statx without following a symlink: `None` when the kernel does
/// not say (before Linux 5.8) or statx failed.
fn is_mount_root(path: &Path) -> Option<bool> {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags, CWD};
    let st = rustix::fs::statx(
        CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
        StatxFlags::TYPE,
    )
    .ok()?;
    st.stx_attributes_mask
        .contains(StatxAttributes::MOUNT_ROOT)
        .then(|| st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
}

/// Whether anything is mounted at or below `dir`, told by
/// [`is_mount_root`] on `dir` and on each entry below it (symlinks are not
/// followed, and nothing below a mount is looked at): `None` when the
/// kernel does not say or the walk failed.
///
/// It costs a statx per entry of the tree, where reading the mount table
/// costs every mount of the host (hundreds of overlays on a full node), and
/// each removal would read it twice.
fn mounted_below(dir: &Path) -> Option<bool> {
    let mut dirs = vec![dir.to_path_buf()];
    if is_mount_root(dir)? {
        return Some(true);
    }
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            let entry = entry.ok()?;
            let kind = entry.file_type().ok()?;
            if kind.is_symlink() {
                continue;
            }
            let path = entry.path();
            // A file can be a mount point too (a bind of a file).
            if is_mount_root(&path)? {
                return Some(true);
            }
            if kind.is_dir() {
                dirs.push(path);
            }
        }
    }
    Some(false)
}

/// Unmounts everything at or below `dir`, then removes it; never removes
/// through a mount that could not be undone.
pub(super) fn remove_mounted_tree(id: &str, dir: &Path) -> Result<(), Error> {
    // Absent: nothing can be mounted below it, and the whole mount table
    // is not read and parsed (twice) for nothing: most pods and containers
    // have no userns tree, and RemoveContainer waited for that.
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    // Nothing mounted below (the common case: a container's rootfs was
    // unmounted before): removed without reading the mount table. Anything
    // else, or a kernel that cannot tell, takes the mount table's word.
    if mounted_below(dir) == Some(false) {
        return remove_tree(id, dir);
    }
    let points = mounts_below(dir);
    for point in &points {
        berth_idmap::unmount(point)
            .map_err(|e| Error::io(id, "unmounting", point)(std::io::Error::other(e)))?;
    }
    // Looked at again only when something was unmounted.
    if !points.is_empty() {
        if let Some(left) = mounts_below(dir).first() {
            return Err(Error::io(id, "unmounting", left)(std::io::Error::other(
                "still mounted",
            )));
        }
    }
    remove_tree(id, dir)
}

/// Makes the mount point for a bind of `source`: a dir (or, for a file, a
/// file), with its parents traversable.
fn mount_point(id: &str, source: &Path, target: &Path) -> Result<(), Error> {
    if source.is_dir() {
        return make_traversable(target).map_err(Error::io(id, "creating", target));
    }
    if let Some(parent) = target.parent() {
        make_traversable(parent).map_err(Error::io(id, "creating", parent))?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(target)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(id, "creating", target)(e)),
    }
}

/// The overlay of `lowerdirs` on `dirs.rootfs()`, over idmapped views of
/// each layer (see [`overlay_of_idmapped`]), with the upper dir owned by
/// the namespace's root: files of the image owned by root show owned by
/// root inside, and what the container writes lands in its upper dir owned
/// by its host ids. Nothing of the shared layers is changed.
fn mount_idmapped_rootfs(
    id: &str,
    dirs: &ContainerDirs,
    lowerdirs: &[PathBuf],
    idmap: &RootfsIdmap,
) -> Result<(), Error> {
    for dir in [dirs.upper(), dirs.work(), dirs.rootfs()] {
        std::fs::create_dir_all(&dir).map_err(Error::io(id, "creating", &dir))?;
    }
    let upper = dirs.upper();
    std::os::unix::fs::chown(&upper, Some(idmap.uid), Some(idmap.gid))
        .map_err(Error::io(id, "chown", &upper))?;
    // The container's userns tree: only the pod's root may pass.
    if let Some(tree) = layout::userns_container_of_bundle(&dirs.bundle) {
        private_to(&tree, idmap.uid, idmap.gid).map_err(Error::io(id, "creating", &tree))?;
    }
    overlay_of_idmapped(
        id,
        &dirs.rootfs(),
        lowerdirs,
        Some((&upper, &dirs.work())),
        &idmap.userns,
        &dirs.bundle.join("idmap"),
    )
}

/// An overlay on `target` of idmapped views of `lowerdirs` (top first)
/// through the user namespace file `userns`, attached in `staging` only
/// until the overlay holds its own private clones of them (overlayfs
/// clones its layers at mount time), then detached and removed. Without
/// `upper` it is read-only (a single layer is then its read-only idmapped
/// bind: overlayfs needs two lower layers without an upper one).
fn overlay_of_idmapped(
    id: &str,
    target: &Path,
    lowerdirs: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    userns: &Path,
    staging: &Path,
) -> Result<(), Error> {
    use nix::mount::{mount, MsFlags};
    use std::os::fd::AsFd;
    if lowerdirs.is_empty() {
        return Err(Error::io(id, "mounting on", target)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the image has no layers",
        )));
    }
    let fd = berth_idmap::open_userns(userns)
        .map_err(|e| Error::io(id, "opening", userns)(std::io::Error::other(e)))?;
    if let ([only], None) = (lowerdirs, upper) {
        berth_idmap::bind(only, target, fd.as_fd(), false)
            .map_err(|e| Error::io(id, "idmapping the layer", only)(std::io::Error::other(e)))?;
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        return mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(|e| {
            let _ = berth_idmap::unmount(target);
            Error::io(id, "making read-only", target)(e.into())
        });
    }
    let result = (|| {
        let mut lower = Vec::new();
        for (n, layer) in lowerdirs.iter().enumerate() {
            let view = staging.join(n.to_string());
            std::fs::create_dir_all(&view).map_err(Error::io(id, "creating", &view))?;
            berth_idmap::bind(layer, &view, fd.as_fd(), false).map_err(|e| {
                Error::io(id, "idmapping the layer", layer)(std::io::Error::other(e))
            })?;
            lower.push(view);
        }
        crate::container::rootfs::mount_overlay(target, &lower, upper).map_err(Error::io(
            id,
            "mounting an overlay on",
            target,
        ))
    })();
    let cleanup = remove_mounted_tree(id, staging);
    result.and(cleanup)
}

/// Unmounts and removes the container's userns tree, if it has one (see
/// [`layout::userns_container_of_bundle`]).
fn remove_userns_tree(id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
    match layout::userns_container_of_bundle(&dirs.bundle) {
        Some(tree) => remove_mounted_tree(id, &tree),
        None => Ok(()),
    }
}

fn remove_tree(id: &str, path: &Path) -> Result<(), Error> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A plain file (or a mount point that is not a dir).
        Err(e) => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::io(id, "removing", path)(e)),
        },
    }
}

#[async_trait]
impl ContainerMounts for Host {
    async fn mount_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
    ) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            dirs.mount(&lowerdirs)
                .map_err(Error::io(&id, "mounting the rootfs on", dirs.rootfs()))
        })
        .await
    }

    async fn mount_idmapped_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
        idmap: &RootfsIdmap,
    ) -> Result<(), Error> {
        let (id, dirs, idmap) = (id.to_string(), dirs.clone(), idmap.clone());
        blocking(move || mount_idmapped_rootfs(&id, &dirs, &lowerdirs, &idmap)).await
    }

    async fn mount_idmapped_image_volume(
        &self,
        id: &str,
        target: &Path,
        lowerdirs: Vec<PathBuf>,
        userns: &Path,
    ) -> Result<(), Error> {
        let (id, target, userns) = (id.to_string(), target.to_path_buf(), userns.to_path_buf());
        blocking(move || {
            mount_point(&id, Path::new("/"), &target)?;
            let staging = target.with_extension("layers");
            overlay_of_idmapped(&id, &target, &lowerdirs, None, &userns, &staging)
        })
        .await
    }

    async fn mount_image_volume(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        n: usize,
        lowerdirs: Vec<PathBuf>,
    ) -> Result<PathBuf, Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            dirs.mount_image_volume(n, &lowerdirs).map_err(Error::io(
                &id,
                "mounting an image volume on",
                dirs.image_volume(n),
            ))
        })
        .await
    }

    async fn unmount_rootfs(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            remove_userns_tree(&id, &dirs)?;
            dirs.unmount()
                .map_err(Error::io(&id, "unmounting", dirs.rootfs()))
        })
        .await
    }

    /// Unmounted here; the two trees are moved aside and emptied after
    /// the call answers ([`super::trash`]).
    async fn remove_container_files(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        let (id, dirs) = (id.to_string(), dirs.clone());
        blocking(move || {
            remove_userns_tree(&id, &dirs)?;
            dirs.unmount()
                .map_err(Error::io(&id, "unmounting", dirs.rootfs()))?;
            for dir in [&dirs.bundle, &dirs.root] {
                super::trash::discard(&id, dir, remove_mounted_tree)?;
            }
            Ok(())
        })
        .await
    }

    fn is_mounted(&self, path: &Path) -> bool {
        // Recovery asks it of each container: statx, not the whole table
        // once per container.
        if let Some(mounted) = is_mount_root(path) {
            return mounted;
        }
        std::fs::read_to_string(berth_mountinfo::SELF)
            .map(|text| berth_mountinfo::mounts(&text).any(|m| m.mount_point == path))
            .unwrap_or(false)
    }
}

#[async_trait]
impl Binds for Host {
    async fn idmapped_bind(
        &self,
        id: &str,
        source: &Path,
        target: &Path,
        userns: &Path,
    ) -> Result<(), Error> {
        let (id, source, target, userns) = (
            id.to_string(),
            source.to_path_buf(),
            target.to_path_buf(),
            userns.to_path_buf(),
        );
        blocking(move || {
            use std::os::fd::AsFd;
            mount_point(&id, &source, &target)?;
            let fd = berth_idmap::open_userns(&userns)
                .map_err(|e| Error::io(&id, "opening", &userns)(std::io::Error::other(e)))?;
            berth_idmap::bind(&source, &target, fd.as_fd(), false)
                .map_err(|e| Error::io(&id, "idmapped bind of", &source)(std::io::Error::other(e)))
        })
        .await
    }

    async fn bind(&self, id: &str, source: &Path, target: &Path) -> Result<(), Error> {
        let (id, source, target) = (id.to_string(), source.to_path_buf(), target.to_path_buf());
        blocking(move || {
            mount_point(&id, &source, &target)?;
            nix::mount::mount(
                Some(&source),
                &target,
                None::<&str>,
                nix::mount::MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| Error::io(&id, "bind-mounting", &source)(e.into()))
        })
        .await
    }

    async fn remove_mounted_tree(&self, id: &str, dir: &Path) -> Result<(), Error> {
        let (id, dir) = (id.to_string(), dir.to_path_buf());
        blocking(move || remove_mounted_tree(&id, &dir)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::mount::{mount, umount2, MntFlags, MsFlags};

    fn bind(source: &Path, target: &Path) {
        mount(
            Some(source),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
    }

    /// A tree `t/a/b` with a file in each dir, and a dir and a file
    /// outside it (`outside/`, `outside/keep`).
    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().join("t");
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::fs::write(t.join("f"), "x").unwrap();
        std::fs::write(t.join("a/b/f"), "x").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "kept").unwrap();
        (tmp, t, outside)
    }

    #[test]
    fn mounts_below_a_tree_are_told_without_the_mount_table() {
        let (_tmp, t, outside) = tree();
        assert_eq!(mounted_below(&t), Some(false));
        // A symlink to a mount point is not followed.
        std::os::unix::fs::symlink("/proc", t.join("a/proc")).unwrap();
        assert_eq!(mounted_below(&t), Some(false));

        // A dir deep below, a file, the tree itself.
        bind(&outside, &t.join("a/b"));
        assert_eq!(mounted_below(&t), Some(true));
        assert_eq!(is_mount_root(&t.join("a/b")), Some(true));
        assert_eq!(is_mount_root(&t.join("a")), Some(false));
        assert_eq!(is_mount_root(&t.join("a/proc")), Some(false));
        umount2(&t.join("a/b"), MntFlags::MNT_DETACH).unwrap();
        assert_eq!(mounted_below(&t), Some(false));

        bind(&outside.join("keep"), &t.join("a/b/f"));
        assert_eq!(mounted_below(&t), Some(true));
        umount2(&t.join("a/b/f"), MntFlags::MNT_DETACH).unwrap();

        bind(&outside, &t);
        assert_eq!(mounted_below(&t), Some(true));
        umount2(&t, MntFlags::MNT_DETACH).unwrap();
        assert_eq!(mounted_below(&t), Some(false));
    }

    #[test]
    fn a_tree_is_removed_and_what_is_mounted_below_it_is_left_whole() {
        // Nothing mounted: the fast way.
        let (_tmp, t, outside) = tree();
        remove_mounted_tree("c1", &t).unwrap();
        assert!(!t.exists());

        // A bind of `outside` below: unmounted first, never removed through.
        let (_tmp, t, outside2) = tree();
        bind(&outside2, &t.join("a/b"));
        bind(&outside2.join("keep"), &t.join("f"));
        remove_mounted_tree("c2", &t).unwrap();
        assert!(!t.exists());
        assert_eq!(
            std::fs::read_to_string(outside2.join("keep")).unwrap(),
            "kept"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "kept"
        );
    }
}
