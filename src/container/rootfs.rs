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
        let (upper, work) = (self.upper(), self.work());
        mount_overlay(&self.rootfs(), lowerdirs, Some((&upper, &work))).map_err(|e| {
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
            [] => Err(io::Error::from(nix::errno::Errno::EINVAL)),
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
            })
            .map_err(io::Error::from),
            // Several: an overlay without an upper dir is read-only.
            layers => mount_overlay(&target, layers, None),
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

/// The most bytes of options `mount(2)` takes: the kernel copies one page
/// of them (and overlayfs needs a NUL within it); what is longer comes
/// to the file system cut short.
fn max_mount_data() -> usize {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as usize);
    page - 1
}

/// The options of an overlay of `lower` (top first) on `upper`/`work` (none:
/// read-only).
fn overlay_data(lower: &[String], upper: Option<(&Path, &Path)>) -> String {
    let lower = lower.join(":");
    match upper {
        Some((upper, work)) => format!(
            "lowerdir={lower},upperdir={},workdir={}",
            upper.display(),
            work.display()
        ),
        None => format!("lowerdir={lower}"),
    }
}

/// Mounts an overlay of `lowerdirs` (top first) at `target`, on `upper`
/// (upper and work dirs) or read-only without. The layers are named by
/// their paths; where the paths of many layers (a snapshot's path is about
/// 100 bytes: some 40 layers) would not fit in the page `mount(2)` takes,
/// by `/proc/self/fd/N` of a descriptor of each, opened for the mount
/// (overlayfs resolves each name once, at the mount: 18 bytes a layer,
/// 200 and more in a page), as a short-named snapshotter would. More than
/// that is refused, named, rather than cut short.
pub fn mount_overlay<P: AsRef<Path>>(
    target: &Path,
    lowerdirs: &[P],
    upper: Option<(&Path, &Path)>,
) -> io::Result<()> {
    let named: Vec<String> = lowerdirs
        .iter()
        .map(|p| p.as_ref().display().to_string())
        .collect();
    let max = max_mount_data();
    let mut data = overlay_data(&named, upper);
    // Held until the mount has resolved them.
    let mut fds = Vec::new();
    if data.len() > max {
        for dir in lowerdirs {
            let dir = dir.as_ref();
            let fd = nix::fcntl::open(
                dir,
                nix::fcntl::OFlag::O_PATH
                    | nix::fcntl::OFlag::O_DIRECTORY
                    | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| io::Error::other(format!("opening layer {}: {e}", dir.display())))?;
            fds.push(fd);
        }
        use std::os::fd::AsRawFd;
        let by_fd: Vec<String> = fds
            .iter()
            .map(|fd| format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .collect();
        data = overlay_data(&by_fd, upper);
        if data.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} layers: an overlay of them does not fit in the {max} bytes of options a mount takes",
                    lowerdirs.len()
                ),
            ));
        }
    }
    let flags = if upper.is_some() {
        MsFlags::empty()
    } else {
        MsFlags::MS_RDONLY
    };
    let mounted = mount(
        Some("overlay"),
        target,
        Some("overlay"),
        flags,
        Some(data.as_str()),
    );
    drop(fds);
    mounted.map_err(io::Error::from)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` layers under `base`, each a dir with a path of about 100
    /// bytes (as a snapshot's is) holding one file named after it.
    fn layers(base: &Path, count: usize) -> Vec<PathBuf> {
        (0..count)
            .map(|n| {
                let dir = base.join(format!("{n:064}")).join("fs");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(format!("f{n}")), n.to_string()).unwrap();
                dir
            })
            .collect()
    }

    fn options_of(target: &Path) -> String {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let target = target.display().to_string();
        mounts
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some(target.as_str()))
            .unwrap_or_else(|| panic!("{target} is not mounted"))
            .to_string()
    }

    /// 150 layers of 100-byte paths (15 KB of options by path) mount, as
    /// an image's rootfs (with an upper dir) and as a read-only volume, and
    /// show every layer's file; before, such a mount got its options cut
    /// at a page and failed. A few layers are still named by their paths.
    #[test]
    #[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
    fn an_overlay_of_more_layers_than_a_page_of_paths_mounts() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
        );
        let tmp = tempfile::tempdir().unwrap();
        let lower = layers(&tmp.path().join("snapshots"), 150);
        let (upper, work) = (tmp.path().join("upper"), tmp.path().join("work"));
        for dir in [&upper, &work] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for (name, with_upper) in [("rw", true), ("ro", false)] {
            let target = tmp.path().join(name);
            std::fs::create_dir_all(&target).unwrap();
            let upper = with_upper.then_some((upper.as_path(), work.as_path()));
            mount_overlay(&target, &lower, upper).unwrap();
            let seen = std::fs::read_dir(&target).unwrap().count();
            let last = std::fs::read_to_string(target.join("f149"));
            let writable = std::fs::write(target.join("new"), "x").is_ok();
            let options = options_of(&target);
            unmount_all(&target).unwrap();
            assert_eq!(seen, 150, "{name}");
            assert_eq!(last.unwrap(), "149", "{name}");
            assert_eq!(writable, with_upper, "{name}");
            assert!(options.contains("/proc/self/fd/"), "{options}");
        }

        let few = &lower[..3];
        let target = tmp.path().join("few");
        std::fs::create_dir_all(&target).unwrap();
        mount_overlay(&target, few, None).unwrap();
        let options = options_of(&target);
        unmount_all(&target).unwrap();
        assert!(options.contains(&few[0].display().to_string()), "{options}");
    }

    #[test]
    fn overlay_options_name_the_upper_dir_or_none() {
        let lower = ["/a".to_string(), "/b".to_string()];
        assert_eq!(overlay_data(&lower, None), "lowerdir=/a:/b");
        assert_eq!(
            overlay_data(&lower, Some((Path::new("/u"), Path::new("/w")))),
            "lowerdir=/a:/b,upperdir=/u,workdir=/w"
        );
    }
}
