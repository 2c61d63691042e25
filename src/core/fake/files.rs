//! The fake pod files, bundle specs and directories.

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;
use tonic::async_trait;

use super::Fake;
use crate::core::mechanisms::{Files, PodFileContent, PodFiles};
use crate::error::Error;
use crate::sandbox::files::SandboxFiles;

#[async_trait]
impl PodFiles for Fake {
    async fn write_pod_files(
        &self,
        id: &str,
        _files: &SandboxFiles,
        content: PodFileContent,
    ) -> Result<(), Error> {
        self.call("files.pod", id).await?;
        let mut world = self.world.lock().unwrap();
        world.pod_files.insert(id.to_string());
        if content.shm {
            world.shm_mounted.insert(id.to_string());
        }
        Ok(())
    }
    async fn unmount_shm(&self, id: &str, _files: &SandboxFiles) -> Result<(), Error> {
        self.call("files.unmount_shm", id).await?;
        self.world.lock().unwrap().shm_mounted.remove(id);
        Ok(())
    }
    async fn remove_pod_files(&self, id: &str, files: &SandboxFiles) -> Result<(), Error> {
        self.call("files.remove_pod", id).await?;
        let mut world = self.world.lock().unwrap();
        world.shm_mounted.remove(id);
        world.pod_files.remove(id);
        if let Some(tree) = crate::layout::pod_userns_of_state(&files.state) {
            world.unbind_below(&tree.root);
        }
        Ok(())
    }
    async fn write_pause_bundle(&self, id: &str, bundle: &Path, _spec: &Spec) -> Result<(), Error> {
        self.call("files.pause_bundle", id).await?;
        self.world
            .lock()
            .unwrap()
            .bundles
            .insert(bundle.to_path_buf());
        Ok(())
    }
}

#[async_trait]
impl Files for Fake {
    async fn write_spec(&self, id: &str, path: &Path, spec: &Spec) -> Result<(), Error> {
        self.call("files.write_spec", id).await?;
        let mut world = self.world.lock().unwrap();
        world.specs.insert(path.to_path_buf(), spec.clone());
        Ok(())
    }
    async fn read_spec(&self, id: &str, path: &Path) -> Result<Spec, Error> {
        self.call("files.read_spec", id).await?;
        let world = self.world.lock().unwrap();
        world.specs.get(path).cloned().ok_or_else(|| {
            Error::io(id, "reading the spec", path)(std::io::ErrorKind::NotFound.into())
        })
    }
    async fn create_dirs(&self, id: &str, dirs: Vec<PathBuf>) -> Result<(), Error> {
        self.call("files.create_dirs", id).await?;
        self.world.lock().unwrap().dirs.extend(dirs);
        Ok(())
    }
    async fn make_volumes(
        &self,
        id: &str,
        _rootfs: &Path,
        volumes: Vec<berth_spec::AnonymousVolume>,
        _userns: Option<berth_spec::UserNamespace>,
    ) -> Result<(), Error> {
        self.call("files.make_volumes", id).await?;
        let mut world = self.world.lock().unwrap();
        world.dirs.extend(volumes.into_iter().map(|v| v.host_path));
        Ok(())
    }
    async fn remove_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        self.call("files.remove_dir", id).await?;
        let mut world = self.world.lock().unwrap();
        world.bundles.remove(path);
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            if let Some(entries) = world.entries.get_mut(parent) {
                entries.retain(|e| e.as_str() != name.to_string_lossy());
            }
        }
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let world = self.world.lock().unwrap();
        path.file_name()
            .is_some_and(|n| world.runtime.contains_key(n.to_string_lossy().as_ref()))
    }
    fn entries(&self, dir: &Path) -> Vec<String> {
        self.world
            .lock()
            .unwrap()
            .entries
            .get(dir)
            .cloned()
            .unwrap_or_default()
    }
}
