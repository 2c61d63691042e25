//! A container's root filesystem: an overlay of the image's snapshots with
//! the container's own upper and work dirs, and its OCI bundle.

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Where one container's files are.
#[derive(Debug, Clone)]
pub struct ContainerDirs {
    /// Persistent: the writable layer (`upper`, `work`).
    pub root: PathBuf,
    /// Runtime: the bundle (`config.json`, `rootfs` mount point).
    pub bundle: PathBuf,
}

impl ContainerDirs {
    pub fn upper(&self) -> PathBuf {
        self.root.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.bundle.join("rootfs")
    }
    pub fn spec(&self) -> PathBuf {
        self.bundle.join("config.json")
    }
    /// Anonymous volumes (the image's VOLUMEs), persistent.
    pub fn volumes(&self) -> PathBuf {
        self.root.join("volumes")
    }

    /// Makes the dirs and mounts the overlay of `lowerdirs` (top layer first).
    pub fn mount(&self, lowerdirs: &[PathBuf]) -> io::Result<()> {
        // 0755 whatever the umask: the upper dir's mode is the container's
        // `/` (kept as it is when it exists: the container may have changed it).
        for dir in [self.upper(), self.work(), self.rootfs()] {
            crate::host_dirs::make_dirs(&dir, 0o755)?;
        }
        if lowerdirs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the image has no layers",
            ));
        }
        let lower = lowerdirs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let data = format!(
            "lowerdir={lower},upperdir={},workdir={}",
            self.upper().display(),
            self.work().display()
        );
        mount(
            Some("overlay"),
            &self.rootfs(),
            Some("overlay"),
            MsFlags::empty(),
            Some(data.as_str()),
        )
        .map_err(|e| {
            io::Error::other(format!(
                "mounting overlay on {}: {e}",
                self.rootfs().display()
            ))
        })
    }

    /// Where the `n`th image volume of the container is mounted.
    pub fn image_volume(&self, n: usize) -> PathBuf {
        self.bundle.join("images").join(n.to_string())
    }

    /// Mounts an image's snapshots read-only at [`ContainerDirs::image_volume`].
    pub fn mount_image_volume(&self, n: usize, lowerdirs: &[PathBuf]) -> io::Result<PathBuf> {
        let target = self.image_volume(n);
        std::fs::create_dir_all(&target)?;
        let result = match lowerdirs {
            [] => Err(nix::errno::Errno::EINVAL),
            // One layer: a read-only bind of its snapshot.
            [only] => mount(
                Some(only),
                &target,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .and_then(|()| {
                mount(
                    None::<&str>,
                    &target,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                    None::<&str>,
                )
            }),
            // Several: an overlay without an upper dir is read-only.
            layers => {
                let lower = layers
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":");
                mount(
                    Some("overlay"),
                    &target,
                    Some("overlay"),
                    MsFlags::MS_RDONLY,
                    Some(format!("lowerdir={lower}").as_str()),
                )
            }
        };
        result.map_err(|e| {
            io::Error::other(format!(
                "mounting image volume on {}: {e}",
                target.display()
            ))
        })?;
        Ok(target)
    }

    /// Unmounts the image volumes and the overlay; not mounted is fine.
    pub fn unmount(&self) -> io::Result<()> {
        if let Ok(entries) = std::fs::read_dir(self.bundle.join("images")) {
            for entry in entries.flatten() {
                unmount_all(&entry.path())?;
            }
        }
        unmount_all(&self.rootfs())
    }
}

/// Unmounts every mount stacked on `path`; not mounted is fine.
fn unmount_all(path: &Path) -> io::Result<()> {
    loop {
        match umount2(path, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => return Ok(()),
            Err(e) => {
                return Err(io::Error::other(format!(
                    "unmounting {}: {e}",
                    path.display()
                )))
            }
        }
    }
}
