//! Every path berth keeps on disk, in one place: no other file spells one.
//!
//! `root` (persistent, default `/var/lib/berth`) holds records, images, the
//! CNI cache, pods' shared files and containers' writable layers. `state`
//! (gone after a reboot, default `/run/berth`) holds network namespaces,
//! bundles, shims' sockets and the OCI runtime's own state.

use std::path::{Path, PathBuf};

use crate::container::rootfs::ContainerDirs;
use crate::sandbox::files::SandboxFiles;

/// The on-disk layout under the configured root and state dirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
    state: PathBuf,
}

/// Longest shim dir name: its socket path must fit a unix address.
const SHIM_DIR_NAME: usize = 24;

impl Layout {
    pub fn new(root: impl Into<PathBuf>, state: impl Into<PathBuf>) -> Layout {
        Layout {
            root: root.into(),
            state: state.into(),
        }
    }

    /// Held while a daemon runs on this root.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("berth.lock")
    }

    /// One JSON record per sandbox.
    pub fn sandbox_records(&self) -> PathBuf {
        self.root.join("records/sandboxes")
    }

    /// One JSON record per container.
    pub fn container_records(&self) -> PathBuf {
        self.root.join("records/containers")
    }

    /// Where records that could not be read are moved aside.
    pub fn quarantine(&self) -> PathBuf {
        self.root.join("records/quarantine")
    }

    /// The image store: content, metadata, snapshots.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// The CNI client's cache of configs and results (for DEL after a restart).
    pub fn cni_cache(&self) -> PathBuf {
        self.root.join("cni")
    }

    /// Where pods' network namespaces are bind-mounted.
    pub fn netns_dir(&self) -> PathBuf {
        self.state.join("netns")
    }

    /// The network namespace of sandbox `id`.
    pub fn netns(&self, id: &str) -> PathBuf {
        self.netns_dir().join(id)
    }

    /// Where pods without a pause have their UTS and IPC namespaces pinned.
    pub fn pod_ns_dir(&self) -> PathBuf {
        self.state.join("podns")
    }

    /// The pinned UTS (`uts`) and IPC (`ipc`) namespaces of sandbox `id`.
    pub fn pod_ns(&self, id: &str) -> PathBuf {
        self.pod_ns_dir().join(id)
    }

    /// The tree of what processes of pods in their own user namespace must
    /// reach by path (their root cannot search the 0700 dirs of root and
    /// state: host root is not mapped in their namespace). Mode 0711 down
    /// to `p` and `c`, so they can pass but nobody can list; each pod's and
    /// container's own tree is owned by the pod's root (its host ids), mode
    /// 0700, so only that pod's set-up passes. What is in it shows owned by
    /// the pod's host range (so a setuid file in it gives no host root).
    pub fn userns_dir(&self) -> PathBuf {
        self.state.join("userns")
    }

    /// The userns tree of pod `id`: the pinned user namespace (`ns`), the
    /// pause's rootfs (`pause`), the idmapped pod files (`files`) and
    /// /dev/shm (`shm`).
    pub fn pod_userns(&self, id: &str) -> PodUserns {
        PodUserns {
            root: self.userns_dir().join("p").join(id),
        }
    }

    /// The userns tree of container `id` of a userns pod: what its root
    /// reaches by path (the rootfs, idmapped host paths).
    pub fn userns_container(&self, id: &str) -> PathBuf {
        self.userns_dir().join("c").join(id)
    }

    /// Where the rootfs of container `id` of a userns pod is bound for the
    /// runtime.
    pub fn userns_rootfs(&self, id: &str) -> PathBuf {
        self.userns_container(id).join("rootfs")
    }

    /// Where the idmapped view of image volume `n` of container `id` is.
    pub fn userns_image_volume(&self, id: &str, n: usize) -> PathBuf {
        self.userns_container(id).join("i").join(n.to_string())
    }

    /// Where the idmapped view of anonymous volume `n` of container `id` is.
    pub fn userns_volume(&self, id: &str, n: usize) -> PathBuf {
        self.userns_container(id).join("v").join(n.to_string())
    }

    /// Where the idmapped view of the host path of CRI mount `n` of
    /// container `id` is.
    pub fn userns_mount(&self, id: &str, n: usize) -> PathBuf {
        self.userns_container(id).join("m").join(n.to_string())
    }

    /// The OCI runtime's state root (`--root` of runc and crun).
    pub fn runtime_root(&self) -> PathBuf {
        self.state.join("runtime")
    }

    /// The parent of every shim's dir.
    pub fn shim_dirs(&self) -> PathBuf {
        self.state.join("s")
    }

    /// The name of the shim dir of `id` (a prefix of it).
    pub fn shim_dir_name(id: &str) -> &str {
        &id[..id.len().min(SHIM_DIR_NAME)]
    }

    /// A shim's dir (socket, exit file, its log): short, so its socket path
    /// fits a unix address.
    pub fn shim_dir(&self, id: &str) -> PathBuf {
        self.shim_dirs().join(Self::shim_dir_name(id))
    }

    /// Parents of the sandboxes' persistent and runtime dirs.
    pub fn sandboxes_root(&self) -> PathBuf {
        self.root.join("sandboxes")
    }

    pub fn sandboxes_state(&self) -> PathBuf {
        self.state.join("sandboxes")
    }

    /// Parents of the containers' writable layers and bundles.
    pub fn containers_root(&self) -> PathBuf {
        self.root.join("containers")
    }

    pub fn containers_state(&self) -> PathBuf {
        self.state.join("containers")
    }

    /// The files a sandbox's containers share, and its pause bundle.
    pub fn sandbox_files(&self, id: &str) -> SandboxFiles {
        SandboxFiles {
            root: self.sandboxes_root().join(id),
            state: self.sandboxes_state().join(id),
        }
    }

    /// A container's writable layer and bundle.
    pub fn container_dirs(&self, id: &str) -> ContainerDirs {
        ContainerDirs {
            root: self.containers_root().join(id),
            bundle: self.containers_state().join(id),
        }
    }

    /// Where berth's default AppArmor profile is written for the parser
    /// (removed once loaded).
    pub fn apparmor_profile(&self) -> PathBuf {
        self.state.join("berth-default.apparmor")
    }

    /// The streaming server's self-signed certificate (the certificate
    /// only, for clients that want to verify it).
    pub fn streaming_cert(&self) -> PathBuf {
        self.state.join("streaming").join("tls.crt")
    }

    /// Every subtree of root and state: only root may enter them.
    pub fn private_dirs(&self) -> Vec<PathBuf> {
        vec![
            self.root.join("records"),
            self.images(),
            self.cni_cache(),
            self.sandboxes_root(),
            self.containers_root(),
            self.netns_dir(),
            self.pod_ns_dir(),
            self.runtime_root(),
            self.shim_dirs(),
            self.sandboxes_state(),
            self.containers_state(),
        ]
    }

    /// Dirs whose entries are named after a sandbox or container id (or,
    /// for shims, its prefix): what recovery sweeps for orphans, runc's own
    /// state first so an orphan container is killed before its files go.
    /// The userns trees of pods and containers come last: removing one
    /// unmounts what is below it first (see `real::Host::remove_dir`).
    pub fn owned_dirs(&self) -> [(PathBuf, Owner); 10] {
        [
            (self.runtime_root(), Owner::Id),
            (self.netns_dir(), Owner::Id),
            (self.pod_ns_dir(), Owner::Id),
            (self.sandboxes_state(), Owner::Id),
            (self.sandboxes_root(), Owner::Id),
            (self.containers_state(), Owner::Id),
            (self.containers_root(), Owner::Id),
            (self.shim_dirs(), Owner::ShimPrefix),
            (self.userns_dir().join("p"), Owner::Id),
            (self.userns_dir().join("c"), Owner::Id),
        ]
    }

    /// What kind of entry under a dir of ours `path` is.
    pub fn entry_kind(&self, path: &Path) -> EntryKind {
        let parent = path.parent().unwrap_or(Path::new(""));
        if parent == self.netns_dir() {
            EntryKind::Netns
        } else if parent == self.runtime_root() {
            EntryKind::RuntimeContainer
        } else if parent == self.shim_dirs() {
            EntryKind::ShimDir
        } else if parent == self.sandboxes_state() || parent == self.sandboxes_root() {
            EntryKind::SandboxDir
        } else if parent == self.containers_state() {
            EntryKind::ContainerBundle
        } else {
            EntryKind::Other
        }
    }
}

/// The userns tree of a pod (see [`Layout::pod_userns`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodUserns {
    pub root: PathBuf,
}

impl PodUserns {
    /// The pod's user namespace, bind-mounted (the pause joins it).
    pub fn ns(&self) -> PathBuf {
        self.root.join("ns")
    }
    /// The pause's rootfs, bound.
    pub fn pause_rootfs(&self) -> PathBuf {
        self.root.join("pause")
    }
    /// The pod's hostname, hosts and resolv.conf dir, idmapped.
    pub fn files(&self) -> PathBuf {
        self.root.join("files")
    }
    /// The pod's /dev/shm, idmapped.
    pub fn shm(&self) -> PathBuf {
        self.root.join("shm")
    }
}

/// The userns tree of the pod whose network namespace is `netns`
/// (`<state>/netns/<id>`), for the mechanisms that are given only that.
pub fn pod_userns_of_netns(netns: &Path) -> Option<PodUserns> {
    let id = netns.file_name()?;
    let state = netns.parent()?.parent()?;
    Some(Layout::new("", state).pod_userns(&id.to_string_lossy()))
}

/// The userns tree of the pod whose runtime dir is `state_dir`
/// (`<state>/sandboxes/<id>`).
pub fn pod_userns_of_state(state_dir: &Path) -> Option<PodUserns> {
    pod_userns_of_netns(state_dir)
}

/// The userns tree of the container whose bundle is `bundle`
/// (`<state>/containers/<id>`), if it is in a userns pod.
pub fn userns_container_of_bundle(bundle: &Path) -> Option<PathBuf> {
    let id = bundle.file_name()?;
    let state = bundle.parent()?.parent()?;
    Some(Layout::new("", state).userns_container(&id.to_string_lossy()))
}

/// How entries of an owned dir are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The full id.
    Id,
    /// [`Layout::shim_dir_name`] of the id.
    ShimPrefix,
}

/// What an entry of an owned dir is, for removing it the right way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Netns,
    RuntimeContainer,
    ShimDir,
    SandboxDir,
    ContainerBundle,
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let l = Layout::new("/var/lib/berth", "/run/berth");
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            l.shim_dir(id),
            Path::new("/run/berth/s/0123456789abcdef01234567")
        );
        assert_eq!(l.netns("abc"), Path::new("/run/berth/netns/abc"));
        assert_eq!(
            l.sandbox_files("abc").shm(),
            Path::new("/run/berth/sandboxes/abc/shm")
        );
        assert_eq!(
            l.container_dirs("c").upper(),
            Path::new("/var/lib/berth/containers/c/upper")
        );
        assert_eq!(l.entry_kind(&l.netns("x")), EntryKind::Netns);
        // The userns trees, derived from what the mechanisms are given.
        assert_eq!(
            l.pod_userns("p").ns(),
            Path::new("/run/berth/userns/p/p/ns")
        );
        assert_eq!(pod_userns_of_netns(&l.netns("p")), Some(l.pod_userns("p")));
        assert_eq!(
            pod_userns_of_state(&l.sandbox_files("p").state),
            Some(l.pod_userns("p"))
        );
        assert_eq!(
            userns_container_of_bundle(&l.container_dirs("c").bundle),
            Some(PathBuf::from("/run/berth/userns/c/c"))
        );
        assert!(l.userns_mount("c", 2).starts_with(l.userns_container("c")));
        assert!(l.userns_rootfs("c").starts_with(l.userns_container("c")));
        assert_eq!(l.entry_kind(&l.shim_dir(id)), EntryKind::ShimDir);
        assert_eq!(
            l.entry_kind(&l.runtime_root().join("x")),
            EntryKind::RuntimeContainer
        );
        assert_eq!(
            l.entry_kind(&l.containers_root().join("x")),
            EntryKind::Other
        );
    }
}
