//! Devices: the CRI config's host devices (a node, or a directory of nodes)
//! made in the container and allowed in its device cgroup; every host device
//! for a privileged container.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use cri_api::v1;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType};

use crate::error::{invalid, invalid_path, io_error, path_error, Error};

/// Directories under /dev that hold no devices a container should get.
const SKIPPED_DIRS: &[&str] = &["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

/// The device node at `path` (not following a final symlink), or `None` when
/// it is not a block or character device.
pub fn device_from_path(path: &Path) -> std::io::Result<Option<LinuxDevice>> {
    let md = std::fs::symlink_metadata(path)?;
    let ft = md.file_type();
    let typ = if ft.is_block_device() {
        LinuxDeviceType::B
    } else if ft.is_char_device() {
        LinuxDeviceType::C
    } else {
        return Ok(None);
    };
    let rdev = md.rdev();
    let mut d = LinuxDevice::default();
    d.set_path(path.to_owned());
    d.set_typ(typ);
    d.set_major(libc::major(rdev) as i64);
    d.set_minor(libc::minor(rdev) as i64);
    d.set_file_mode(Some(md.mode() & 0o7777));
    d.set_uid(Some(md.uid()));
    d.set_gid(Some(md.gid()));
    Ok(Some(d))
}

/// The devices under directory `dir`, recursively, placed under `dest`.
/// Symlinks are not followed, so each node comes once under its real name.
fn devices_in_dir(dir: &Path, dest: &Path, out: &mut Vec<LinuxDevice>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        let ft = entry.file_type()?;
        if ft.is_dir() {
            if SKIPPED_DIRS.iter().any(|s| name == *s) {
                continue;
            }
            devices_in_dir(&path, &dest.join(&name), out)?;
        } else if name == "console" {
            continue;
        } else {
            match device_from_path(&path) {
                Ok(Some(mut d)) => {
                    d.set_path(dest.join(&name));
                    out.push(d);
                }
                Ok(None) => {}
                // Devices come and go under /dev.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Every device node of the host's /dev, as a privileged container gets them.
pub fn host_devices() -> std::io::Result<Vec<LinuxDevice>> {
    let mut out = Vec::new();
    devices_in_dir(Path::new("/dev"), Path::new("/dev"), &mut out)?;
    Ok(out)
}

fn check_permissions(id: &str, field: &str, p: &str) -> Result<String, Error> {
    if p.is_empty() {
        return Ok("rwm".to_string());
    }
    if p.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        Ok(p.to_string())
    } else {
        Err(invalid(
            id,
            field,
            format!("invalid permissions {p:?}: only r, w and m"),
        ))
    }
}

/// A device cgroup rule.
pub(crate) fn cgroup_rule(
    allow: bool,
    typ: Option<LinuxDeviceType>,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> LinuxDeviceCgroup {
    let mut r = LinuxDeviceCgroup::default();
    r.set_allow(allow);
    r.set_typ(typ);
    r.set_major(major);
    r.set_minor(minor);
    r.set_access(Some(access.to_string()));
    r
}

/// The devices of a container and its device cgroup rules: deny all, then
/// allow each requested device (or, privileged, every device).
pub(crate) fn devices(
    id: &str,
    config: &v1::ContainerConfig,
    privileged: bool,
) -> Result<(Vec<LinuxDevice>, Vec<LinuxDeviceCgroup>), Error> {
    let mut devices = Vec::new();
    let mut rules = vec![cgroup_rule(false, None, None, None, "rwm")];
    let mut requested = config.devices.clone();

    // With the host's /dev bind-mounted and a terminal, the container needs
    // /dev/console as a device, as containerd gives it.
    let dev_mounted = config
        .mounts
        .iter()
        .any(|m| m.container_path == "/dev" && m.host_path == "/dev");
    if config.tty && dev_mounted && !requested.iter().any(|d| d.container_path == "/dev/console") {
        requested.push(v1::Device {
            container_path: "/dev/console".into(),
            host_path: "/dev/console".into(),
            permissions: "rwm".into(),
        });
    }

    for (i, d) in requested.iter().enumerate() {
        let field = format!("devices[{i}]");
        let host = Path::new(&d.host_path);
        if d.host_path.is_empty() {
            return Err(invalid(id, format!("{field}.host_path"), "is empty"));
        }
        let access = check_permissions(id, &format!("{field}.permissions"), &d.permissions)?;
        let dest = PathBuf::from(if d.container_path.is_empty() {
            &d.host_path
        } else {
            &d.container_path
        });
        if !dest.is_absolute() {
            return Err(invalid_path(
                id,
                format!("{field}.container_path"),
                &dest,
                "is not absolute",
            ));
        }
        let real = std::fs::canonicalize(host)
            .map_err(|e| path_error(id, &format!("{field}.host_path"), "resolving", host, e))?;
        let md = std::fs::metadata(&real).map_err(|e| io_error(id, "inspecting", &real, e))?;
        let mut found = Vec::new();
        if md.is_dir() {
            devices_in_dir(&real, &dest, &mut found)
                .map_err(|e| io_error(id, "listing", &real, e))?;
        } else {
            match device_from_path(&real).map_err(|e| io_error(id, "inspecting", &real, e))? {
                Some(mut dev) => {
                    dev.set_path(dest.clone());
                    found.push(dev);
                }
                None => {
                    return Err(invalid_path(
                        id,
                        format!("{field}.host_path"),
                        host,
                        "is not a device",
                    ));
                }
            }
        }
        for dev in found {
            rules.push(cgroup_rule(
                true,
                Some(dev.typ()),
                Some(dev.major()),
                Some(dev.minor()),
                &access,
            ));
            devices.push(dev);
        }
    }

    if privileged {
        let host = host_devices().map_err(|e| io_error(id, "listing", Path::new("/dev"), e))?;
        for dev in host {
            if !devices.iter().any(|d: &LinuxDevice| d.path() == dev.path()) {
                devices.push(dev);
            }
        }
        rules = vec![cgroup_rule(true, None, None, None, "rwm")];
    }
    Ok((devices, rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(devs: &[(&str, &str, &str)]) -> v1::ContainerConfig {
        v1::ContainerConfig {
            devices: devs
                .iter()
                .map(|(h, c, p)| v1::Device {
                    host_path: h.to_string(),
                    container_path: c.to_string(),
                    permissions: p.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn dev_null_is_a_char_device_1_3() {
        let d = device_from_path(Path::new("/dev/null")).unwrap().unwrap();
        assert_eq!(d.typ(), LinuxDeviceType::C);
        assert_eq!((d.major(), d.minor()), (1, 3));
        assert_eq!(d.file_mode(), Some(0o666));
        assert!(device_from_path(Path::new("/etc/hostname"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn requested_device_is_made_and_allowed() {
        let (devs, rules) =
            devices("c", &config(&[("/dev/null", "/dev/mynull", "rw")]), false).unwrap();
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].path(), Path::new("/dev/mynull"));
        assert_eq!((devs[0].major(), devs[0].minor()), (1, 3));
        assert_eq!(rules.len(), 2);
        assert!(!rules[0].allow());
        assert_eq!(rules[0].access().as_deref(), Some("rwm"));
        assert!(rules[1].allow());
        assert_eq!(rules[1].typ(), Some(LinuxDeviceType::C));
        assert_eq!((rules[1].major(), rules[1].minor()), (Some(1), Some(3)));
        assert_eq!(rules[1].access().as_deref(), Some("rw"));
    }

    #[test]
    fn symlinked_device_is_resolved_and_container_path_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("null-link");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let (devs, _) = devices("c", &config(&[(link.to_str().unwrap(), "", "")]), false).unwrap();
        assert_eq!(devs[0].path(), link.as_path());
        assert_eq!((devs[0].major(), devs[0].minor()), (1, 3));
    }

    #[test]
    fn bad_devices_are_invalid() {
        let e = devices(
            "c",
            &config(&[("/dev/nonexistent-xyz", "/dev/x", "rwm")]),
            false,
        )
        .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("/dev/nonexistent-xyz"), "{e}");
        let e = devices("c", &config(&[("/etc/hostname", "/dev/x", "rwm")]), false).unwrap_err();
        assert!(e.to_string().contains("not a device"), "{e}");
        let e = devices("c", &config(&[("/dev/null", "/dev/x", "rwx")]), false).unwrap_err();
        assert!(e.to_string().contains("permissions"), "{e}");
        let e = devices("c", &config(&[("/dev/null", "dev/x", "r")]), false).unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn privileged_gets_every_device_and_allow_all() {
        let (devs, rules) = devices("c", &config(&[]), true).unwrap();
        assert!(devs.iter().any(|d| d.path() == Path::new("/dev/null")));
        assert!(!devs.iter().any(|d| d.path().starts_with("/dev/pts")));
        assert_eq!(rules.len(), 1);
        assert!(rules[0].allow());
        assert_eq!(rules[0].typ(), None);
    }
}
