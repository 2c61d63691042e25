//! The fake mounts: containers' rootfs and image volumes, and binds.

use std::path::{Path, PathBuf};

use tonic::async_trait;

use super::Fake;
use crate::container::rootfs::ContainerDirs;
use crate::core::mechanisms::{Binds, ContainerMounts, RootfsIdmap};
use crate::error::Error;

#[async_trait]
impl ContainerMounts for Fake {
    async fn mount_idmapped_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        lowerdirs: Vec<PathBuf>,
        idmap: &RootfsIdmap,
    ) -> Result<(), Error> {
        self.world
            .lock()
            .unwrap()
            .rootfs_idmaps
            .insert(id.to_string(), idmap.clone());
        self.mount_rootfs(id, dirs, lowerdirs).await
    }
    async fn mount_rootfs(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        _lowerdirs: Vec<PathBuf>,
    ) -> Result<(), Error> {
        self.call("files.mount_rootfs", id).await?;
        // The spec generator reads the rootfs: an empty one will do.
        std::fs::create_dir_all(dirs.rootfs()).map_err(Error::io(id, "creating", dirs.rootfs()))?;
        let mut world = self.world.lock().unwrap();
        world.container_files.insert(id.to_string());
        world.rootfs_mounted.insert(id.to_string());
        Ok(())
    }
    async fn mount_image_volume(
        &self,
        id: &str,
        dirs: &ContainerDirs,
        n: usize,
        _lowerdirs: Vec<PathBuf>,
    ) -> Result<PathBuf, Error> {
        self.call("files.mount_image_volume", id).await?;
        // A real (empty) dir in the test's temp dir: the spec resolves it.
        let target = dirs.image_volume(n);
        std::fs::create_dir_all(&target).map_err(Error::io(id, "making", &target))?;
        Ok(target)
    }
    async fn mount_idmapped_image_volume(
        &self,
        id: &str,
        target: &Path,
        _lowerdirs: Vec<PathBuf>,
        userns: &Path,
    ) -> Result<(), Error> {
        self.call("files.mount_idmapped_image_volume", id).await?;
        let _ = std::fs::create_dir_all(target);
        self.world.lock().unwrap().bind(target, Some(userns));
        Ok(())
    }
    async fn unmount_rootfs(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        self.call("files.unmount_rootfs", id).await?;
        let mut world = self.world.lock().unwrap();
        world.rootfs_mounted.remove(id);
        if let Some(bound) = crate::layout::userns_container_of_bundle(&dirs.bundle) {
            world.unbind_below(&bound);
        }
        Ok(())
    }
    async fn remove_container_files(&self, id: &str, dirs: &ContainerDirs) -> Result<(), Error> {
        self.call("files.remove_container", id).await?;
        let _ = std::fs::remove_dir_all(&dirs.bundle);
        let _ = std::fs::remove_dir_all(&dirs.root);
        let mut world = self.world.lock().unwrap();
        world.rootfs_mounted.remove(id);
        world.container_files.remove(id);
        // What was made in the container's trees goes with them.
        let mine = |p: &Path| p.starts_with(&dirs.bundle) || p.starts_with(&dirs.root);
        world.specs.retain(|p, _| !mine(p));
        world.dirs.retain(|p| !mine(p));
        if let Some(bound) = crate::layout::userns_container_of_bundle(&dirs.bundle) {
            world.unbind_below(&bound);
        }
        Ok(())
    }
    fn is_mounted(&self, path: &Path) -> bool {
        let world = self.world.lock().unwrap();
        world.rootfs_mounted.iter().any(|id| {
            path.parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n.to_string_lossy() == *id)
        })
    }
}

#[async_trait]
impl Binds for Fake {
    async fn idmapped_bind(
        &self,
        id: &str,
        _source: &Path,
        target: &Path,
        userns: &Path,
    ) -> Result<(), Error> {
        self.call("files.idmapped_bind", id).await?;
        self.world.lock().unwrap().bind(target, Some(userns));
        Ok(())
    }
    async fn bind(&self, id: &str, _source: &Path, target: &Path) -> Result<(), Error> {
        self.call("files.bind", id).await?;
        // What the spec generator reads through it: an empty dir will do.
        let _ = std::fs::create_dir_all(target);
        self.world.lock().unwrap().bind(target, None);
        Ok(())
    }
    async fn remove_mounted_tree(&self, id: &str, dir: &Path) -> Result<(), Error> {
        self.call("files.remove_mounted_tree", id).await?;
        self.world.lock().unwrap().unbind_below(dir);
        Ok(())
    }
}
