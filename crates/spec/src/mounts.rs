//! The container's mounts: the runtime's defaults (proc, dev, devpts,
//! mqueue, sysfs, cgroup), the pod's /etc/hostname, /etc/hosts,
//! /etc/resolv.conf and /dev/shm, the image's VOLUMEs, and the CRI config's
//! mounts — host paths and image volumes — which win over all the others at
//! the same destination.

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};

use cri_api::v1;
use oci_spec::runtime::Mount;

use crate::error::{invalid, invalid_path, io_error, path_error, Error};
use crate::{ImageInfo, SandboxInfo};

/// An image VOLUME with no CRI mount over it: the caller creates
/// `host_path` (and may copy the image's content there) before the container
/// starts; the spec bind-mounts it read-write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnonymousVolume {
    /// Absolute, clean path in the container.
    pub container_path: String,
    /// The directory on the host.
    pub host_path: PathBuf,
}

/// The host paths of the config's mounts that do not exist: the caller
/// creates each as a directory (mode 0755, parents too) before
/// [`container_spec`](crate::container_spec), which refuses a missing host
/// path. containerd and CRI-O do the same for a mount whose source is
/// missing: kubelet leaves it to the runtime for a hostPath volume of
/// `type: ""` (it checks or creates the other types itself). Image volumes
/// and relative or empty paths (which the spec refuses) are not listed; a
/// dangling symlink exists, and is refused by the spec rather than followed
/// into a directory created somewhere else.
pub fn host_paths_to_create(config: &v1::ContainerConfig) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in &config.mounts {
        if m.image.as_ref().is_some_and(|i| !i.image.is_empty()) {
            continue;
        }
        let host = Path::new(&m.host_path);
        if !host.is_absolute() {
            continue;
        }
        let missing = matches!(
            std::fs::symlink_metadata(host),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        );
        if missing && !out.iter().any(|p| p == host) {
            out.push(host.to_owned());
        }
    }
    out
}

/// Cleans an absolute container path lexically: no `.`, `..` or doubled
/// slashes; `..` stops at `/`.
pub fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

fn depth(dest: &str) -> usize {
    dest.matches('/').count() - usize::from(dest == "/")
}

/// The image's VOLUMEs that no CRI mount covers, each given a directory
/// under `dir` (`00-var-lib-data` for the first, `/var/lib/data`).
pub fn anonymous_volumes(
    config: &v1::ContainerConfig,
    image: &ImageInfo,
    dir: &Path,
) -> Vec<AnonymousVolume> {
    let covered: HashSet<String> = config
        .mounts
        .iter()
        .map(|m| clean_path(&m.container_path))
        .collect();
    let mut seen = HashSet::new();
    image
        .volumes
        .iter()
        .map(|v| clean_path(v))
        .filter(|v| v != "/" && !covered.contains(v) && seen.insert(v.clone()))
        .enumerate()
        .map(|(i, v)| AnonymousVolume {
            host_path: dir.join(format!("{i:02}{}", v.replace('/', "-"))),
            container_path: v,
        })
        .collect()
}

pub(crate) fn mount(dest: &str, typ: &str, source: &Path, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(dest));
    m.set_typ(Some(typ.to_string()));
    m.set_source(Some(source.to_owned()));
    m.set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

/// The runtime's own mounts: destination, type (also the source), options.
const DEFAULT_MOUNTS: &[(&str, &str, &[&str])] = &[
    ("/proc", "proc", &["nosuid", "noexec", "nodev"]),
    (
        "/dev",
        "tmpfs",
        &["nosuid", "strictatime", "mode=755", "size=65536k"],
    ),
    (
        "/dev/pts",
        "devpts",
        &[
            "nosuid",
            "noexec",
            "newinstance",
            "ptmxmode=0666",
            "mode=0620",
            "gid=5",
        ],
    ),
    (
        "/dev/shm",
        "tmpfs",
        &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
    ),
    ("/dev/mqueue", "mqueue", &["nosuid", "noexec", "nodev"]),
    ("/sys", "sysfs", &["nosuid", "noexec", "nodev"]),
    (
        "/sys/fs/cgroup",
        "cgroup",
        &["nosuid", "noexec", "nodev", "relatime"],
    ),
];

/// The runtime's own mounts. sysfs and the cgroup tree are read-only unless
/// the container is privileged. `sysfs_bound` (a user namespace on the
/// host's network, see [`crate::sysfs_bound`]): `/sys` is the host's,
/// bound recursively and read-only even when privileged (the pod's root is
/// an unprivileged host uid: it could write nothing there anyway).
pub(crate) fn default_mounts(privileged: bool, sysfs_bound: bool) -> Vec<Mount> {
    DEFAULT_MOUNTS
        .iter()
        .map(|(dest, typ, options)| {
            if sysfs_bound && *typ == "sysfs" {
                return mount(
                    dest,
                    "bind",
                    Path::new("/sys"),
                    &["rbind", "nosuid", "noexec", "nodev", "ro"],
                );
            }
            let mut options = options.to_vec();
            if matches!(*typ, "sysfs" | "cgroup") {
                options.push(if privileged { "rw" } else { "ro" });
            }
            mount(dest, typ, Path::new(typ), &options)
        })
        .collect()
}

/// Makes the sysfs mount among `mounts` read-write (a privileged pod's
/// pause, as containerd's). The kernel keeps one sysfs superblock per
/// network namespace, and its first mount decides whether it is read-only:
/// a `ro` sysfs of the pause would make every container's `/sys` in the pod
/// read-only, a privileged one's too. A container that asks `ro` still gets
/// a read-only mount of it.
pub(crate) fn make_sysfs_writable(mounts: &mut [Mount]) {
    for m in mounts.iter_mut() {
        if m.typ().as_deref() != Some("sysfs") {
            continue;
        }
        let options = m.options().clone().unwrap_or_default();
        let options = options
            .into_iter()
            .map(|o| if o == "ro" { "rw".to_string() } else { o })
            .collect();
        m.set_options(Some(options));
    }
}

/// The mount `path` lies on (the deepest mount point above it; of stacked
/// mounts, the last), from a mountinfo text.
pub(crate) fn propagation_of(mountinfo: &str, path: &Path) -> Option<berth_mountinfo::Mount> {
    let mounts = berth_mountinfo::parse(mountinfo);
    berth_mountinfo::mount_of(&mounts, path).cloned()
}

/// Everything that decides the mounts besides the config.
pub(crate) struct MountInputs<'a> {
    pub id: &'a str,
    pub config: &'a v1::ContainerConfig,
    pub sandbox: &'a SandboxInfo,
    pub volumes: &'a [AnonymousVolume],
    pub image_mounts: &'a BTreeMap<String, PathBuf>,
    /// Idmapped views of host paths, by the index of their CRI mount (see
    /// [`crate::idmapped_mounts`]).
    pub idmapped: &'a BTreeMap<usize, PathBuf>,
    /// The pod's user namespace.
    pub userns: Option<&'a crate::UserNamespace>,
    pub privileged: bool,
    pub readonly_rootfs: bool,
    pub rro_supported: bool,
    /// SELinux is enforcing labels on this host: a mount asking to be
    /// relabelled is refused (berth applies no labels).
    pub selinux_enabled: bool,
    /// /proc/self/mountinfo, read when a mount asks for propagation; `None`
    /// reads the live one.
    pub mountinfo: Option<&'a str>,
}

/// /proc/self/mountinfo (or the test's stand-in), read once when first needed.
struct MountInfo<'a> {
    id: &'a str,
    given: Option<&'a str>,
    live: Option<String>,
}

impl MountInfo<'_> {
    /// How the mount holding `path` propagates.
    fn propagation(&mut self, path: &Path) -> Result<Option<berth_mountinfo::Mount>, Error> {
        if self.given.is_none() && self.live.is_none() {
            let file = Path::new(berth_mountinfo::SELF);
            let text =
                std::fs::read_to_string(file).map_err(|e| io_error(self.id, "reading", file, e))?;
            self.live = Some(text);
        }
        let text = self.given.or(self.live.as_deref()).unwrap_or_default();
        Ok(propagation_of(text, path))
    }
}

/// The propagation option of a host-path mount, after checking that the
/// host mount can propagate that way (as containerd does). Raises the
/// rootfs propagation to `rslave` / `rshared` as needed.
fn host_propagation(
    id: &str,
    field: &str,
    m: &v1::Mount,
    src: &Path,
    mountinfo: &mut MountInfo<'_>,
    rootfs_propagation: &mut Option<String>,
) -> Result<&'static str, Error> {
    let prop = v1::MountPropagation::try_from(m.propagation).map_err(|_| {
        invalid(
            id,
            format!("{field}.propagation"),
            format!("unknown propagation {}", m.propagation),
        )
    })?;
    let (option, ok, need) = match prop {
        v1::MountPropagation::PropagationPrivate => return Ok("rprivate"),
        v1::MountPropagation::PropagationHostToContainer => {
            let p = mountinfo.propagation(src)?;
            (
                "rslave",
                p.is_some_and(|p| p.is_shared() || p.is_slave()),
                "a shared or slave",
            )
        }
        v1::MountPropagation::PropagationBidirectional => {
            let p = mountinfo.propagation(src)?;
            ("rshared", p.is_some_and(|p| p.is_shared()), "a shared")
        }
    };
    if !ok {
        return Err(invalid_path(
            id,
            format!("{field}.host_path"),
            src,
            format!(
                "is not on {need} mount, as {} propagation needs",
                prop.as_str_name()
            ),
        ));
    }
    if rootfs_propagation.as_deref() != Some("rshared") {
        *rootfs_propagation = Some(option.to_string());
    }
    Ok(option)
}

/// One CRI mount as a bind mount.
fn cri_mount(
    inp: &MountInputs<'_>,
    n: usize,
    field: &str,
    m: &v1::Mount,
    mountinfo: &mut MountInfo<'_>,
    rootfs_propagation: &mut Option<String>,
) -> Result<Mount, Error> {
    let id = inp.id;
    let dest = &m.container_path;
    if !dest.starts_with('/') {
        return Err(invalid(
            id,
            format!("{field}.container_path"),
            format!("{dest:?} is not an absolute path"),
        ));
    }
    if m.selinux_relabel && inp.selinux_enabled {
        return Err(invalid(
            id,
            format!("{field}.selinux_relabel"),
            "SELinux is enabled on this host and berth does not relabel mounts yet",
        ));
    }
    let idmapped = crate::userns::check_mount_idmap(id, field, m, inp.userns)?;
    let image = m.image.as_ref().filter(|i| !i.image.is_empty());
    let (source, propagation) = match image {
        Some(_) if !m.host_path.is_empty() => {
            return Err(invalid(
                id,
                format!("{field}.host_path"),
                "must be empty for an image volume",
            ));
        }
        Some(img) => (
            image_source(id, field, img, &m.image_sub_path, inp.image_mounts)?,
            "rprivate",
        ),
        None if m.host_path.is_empty() => {
            return Err(invalid(id, format!("{field}.host_path"), "is empty"));
        }
        None => {
            let host = Path::new(&m.host_path);
            if !host.is_absolute() {
                return Err(invalid_path(
                    id,
                    format!("{field}.host_path"),
                    host,
                    "is not an absolute path",
                ));
            }
            let src = std::fs::canonicalize(host)
                .map_err(|e| path_error(id, &format!("{field}.host_path"), "resolving", host, e))?;
            let p = host_propagation(id, field, m, &src, mountinfo, rootfs_propagation)?;
            if idmapped {
                let view = inp.idmapped.get(&n).ok_or_else(|| {
                    invalid(
                        id,
                        format!("{field}.uidMappings"),
                        "the idmapped view is not prepared",
                    )
                })?;
                (view.clone(), p)
            } else {
                (src, p)
            }
        }
    };
    // An image volume is read-only whatever the config says.
    let readonly = m.readonly || image.is_some();
    let access = if !m.recursive_read_only {
        if readonly {
            "ro"
        } else {
            "rw"
        }
    } else {
        let refuse = |why: &str| Err(invalid(id, format!("{field}.recursive_read_only"), why));
        if !readonly {
            return refuse("needs readonly");
        }
        if propagation != "rprivate" {
            return refuse("needs private propagation");
        }
        if !inp.rro_supported {
            return refuse("recursive read-only mounts are not supported on this host");
        }
        "rro"
    };
    let mut options = vec!["rbind", propagation, access];
    options.extend(mount_options(id, field, &m.mount_options)?);
    Ok(mount(dest, "bind", &source, &options))
}

/// The bind mount options a CRI mount may ask for (cri-api v0.37's
/// `Mount.mount_options`, KEP-5855): each one only tightens the mount.
pub const MOUNT_OPTIONS: &[&str] = &["nosuid", "nodev", "noexec"];

/// How many `mount_options` one mount may carry (duplicates included).
const MAX_MOUNT_OPTIONS: usize = 16;

/// A mount's `mount_options`, checked: each one of [`MOUNT_OPTIONS`] (any
/// other is refused naming it: runc would pass an unknown one to the kernel
/// as data, or apply a loosening one), each once.
fn mount_options<'a>(id: &str, field: &str, asked: &'a [String]) -> Result<Vec<&'a str>, Error> {
    if asked.len() > MAX_MOUNT_OPTIONS {
        return Err(invalid(
            id,
            format!("{field}.mount_options"),
            format!("{} options, more than {MAX_MOUNT_OPTIONS}", asked.len()),
        ));
    }
    let mut out: Vec<&str> = Vec::new();
    for (j, o) in asked.iter().enumerate() {
        if !MOUNT_OPTIONS.contains(&o.as_str()) {
            return Err(invalid(
                id,
                format!("{field}.mount_options[{j}]"),
                format!(
                    "{:?} is not a bind mount option berth applies (only {})",
                    o.chars().take(64).collect::<String>(),
                    MOUNT_OPTIONS.join(", ")
                ),
            ));
        }
        if !out.contains(&o.as_str()) {
            out.push(o);
        }
    }
    Ok(out)
}

/// The mounts, and the rootfs propagation they need (`rslave` or `rshared`).
pub(crate) fn mounts(inp: &MountInputs<'_>) -> Result<(Vec<Mount>, Option<String>), Error> {
    let mut mountinfo = MountInfo {
        id: inp.id,
        given: inp.mountinfo,
        live: None,
    };
    let mut rootfs_propagation: Option<String> = None;
    let mut supplied: Vec<(String, Mount)> = Vec::new();
    for (i, m) in inp.config.mounts.iter().enumerate() {
        let bind = cri_mount(
            inp,
            i,
            &format!("mounts[{i}]"),
            m,
            &mut mountinfo,
            &mut rootfs_propagation,
        )?;
        supplied.push((clean_path(&m.container_path), bind));
    }

    // The pod's files, the image's volumes: unless a CRI mount (or an earlier
    // one of these) has the destination.
    let mut taken: HashSet<String> = supplied.iter().map(|(d, _)| d.clone()).collect();
    let file_mode = if inp.readonly_rootfs { "ro" } else { "rw" };
    let sb = inp.sandbox;
    let mut extra: Vec<(&str, &Path, &str)> = vec![
        ("/etc/hostname", &sb.hostname_file, file_mode),
        ("/etc/hosts", &sb.hosts_file, file_mode),
        ("/etc/resolv.conf", &sb.resolv_conf, file_mode),
        ("/dev/shm", &sb.shm, "rw"),
    ];
    extra.retain(|(_, src, _)| !src.as_os_str().is_empty() && src.exists());
    for v in inp.volumes {
        extra.push((&v.container_path, &v.host_path, "rw"));
    }
    for (dest, src, mode) in extra {
        let dest = clean_path(dest);
        if taken.insert(dest.clone()) {
            supplied.push((
                dest.clone(),
                mount(&dest, "bind", src, &["rbind", "rprivate", mode]),
            ));
        }
    }
    supplied.sort_by_key(|(d, _)| depth(d));

    let dests: HashSet<&str> = supplied.iter().map(|(d, _)| d.as_str()).collect();
    let dev_supplied = dests.contains("/dev");
    let sysfs_bound = crate::sysfs_bound(inp.userns.is_some(), inp.sandbox.netns.is_none());
    let mut out: Vec<Mount> = default_mounts(inp.privileged, sysfs_bound)
        .into_iter()
        .filter(|m| {
            let d = m.destination().to_string_lossy();
            let overridden = dests.contains(d.as_ref());
            let under_supplied_dev = dev_supplied && d.starts_with("/dev/");
            !overridden && !under_supplied_dev
        })
        .collect();
    out.extend(supplied.into_iter().map(|(_, m)| m));
    Ok((out, rootfs_propagation))
}

/// What an image volume's image is known by: the exact image kubelet
/// pulled (`image_ref`, KEP-5365) when given, else its name.
pub fn image_volume_key(image: &v1::ImageSpec) -> &str {
    if image.image_ref.is_empty() {
        &image.image
    } else {
        &image.image_ref
    }
}

/// Where an image volume's content is: the caller's directory for that
/// image, or `sub_path` inside it (which must not lead out of it).
fn image_source(
    id: &str,
    field: &str,
    image: &v1::ImageSpec,
    sub_path: &str,
    image_mounts: &BTreeMap<String, PathBuf>,
) -> Result<PathBuf, Error> {
    let root = image_mounts.get(image_volume_key(image)).ok_or_else(|| {
        invalid(
            id,
            format!("{field}.image"),
            format!("image {:?} is not prepared for mounting", image.image),
        )
    })?;
    let root = std::fs::canonicalize(root).map_err(|e| io_error(id, "resolving", root, e))?;
    if sub_path.is_empty() {
        return Ok(root);
    }
    let sub = Path::new(sub_path);
    if sub.is_absolute() || sub.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(invalid(
            id,
            format!("{field}.image_sub_path"),
            format!("{sub_path:?} must be relative, without .."),
        ));
    }
    let full = root.join(sub);
    let real = std::fs::canonicalize(&full).map_err(|e| {
        path_error(
            id,
            &format!("{field}.image_sub_path"),
            "resolving",
            &full,
            e,
        )
    })?;
    if !real.starts_with(&root) {
        return Err(invalid_path(
            id,
            format!("{field}.image_sub_path"),
            &full,
            "leads out of the image",
        ));
    }
    Ok(real)
}

#[cfg(test)]
mod tests;
