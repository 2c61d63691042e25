//! A pod's user namespace (`hostUsers: false`): the checks of
//! `NamespaceOption.userns_options` kubelet's contract asks for, and the
//! mapping the pause and every container of the pod share.
//!
//! kubelet (pkg/kubelet/userns) sends, for a pod with `hostUsers: false`,
//! mode POD with exactly one uid and one gid range, each
//! `{container_id: 0, host_id: N * 65536, length: 65536}` with `N >= 1`
//! (the first 65536 host ids are never handed out), and mode NODE for every
//! other pod. berth accepts exactly that shape, a little wider: one range
//! per kind, container id 0 inside it, no overflow, and never host id 0
//! (host root mapped into a pod would undo the isolation the pod asked for).

use cri_api::v1;
use oci_spec::runtime::{LinuxIdMapping, LinuxIdMappingBuilder};

use crate::error::{invalid, Error};

const FIELD: &str = "linux.security_context.namespace_options.userns_options";

/// One range of ids: `container_id..container_id+length` inside the
/// namespace is `host_id..host_id+length` on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdRange {
    pub container_id: u32,
    pub host_id: u32,
    pub length: u32,
}

impl IdRange {
    /// The host id of container id `id`, if mapped.
    pub fn host_of(&self, id: u32) -> Option<u32> {
        let offset = id.checked_sub(self.container_id)?;
        (offset < self.length).then(|| self.host_id + offset)
    }

    /// The container id of host id `id`, if mapped.
    pub fn container_of(&self, id: u32) -> Option<u32> {
        let offset = id.checked_sub(self.host_id)?;
        (offset < self.length).then(|| self.container_id + offset)
    }

    /// As `/proc/PID/uid_map` writes it: `container host length`.
    pub fn map_line(&self) -> String {
        format!("{} {} {}\n", self.container_id, self.host_id, self.length)
    }

    fn oci(&self) -> LinuxIdMapping {
        // Every field is given: the builder cannot fail.
        LinuxIdMappingBuilder::default()
            .container_id(self.container_id)
            .host_id(self.host_id)
            .size(self.length)
            .build()
            .unwrap_or_default()
    }
}

/// The user namespace of a pod: exactly one uid and one gid range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UserNamespace {
    pub uids: IdRange,
    pub gids: IdRange,
}

impl UserNamespace {
    /// The host uid of the namespace's root (container uid 0).
    pub fn host_root_uid(&self) -> u32 {
        self.uids.host_of(0).unwrap_or(self.uids.host_id)
    }

    /// The host gid of the namespace's root (container gid 0).
    pub fn host_root_gid(&self) -> u32 {
        self.gids.host_of(0).unwrap_or(self.gids.host_id)
    }

    /// The OCI `linux.uidMappings` and `linux.gidMappings`.
    pub fn oci_mappings(&self) -> (Vec<LinuxIdMapping>, Vec<LinuxIdMapping>) {
        (vec![self.uids.oci()], vec![self.gids.oci()])
    }
}

/// Checks one kind of mappings (`uids` or `gids`): exactly one range,
/// container id 0 mapped, a length, no overflow, no host id 0.
fn range(id: &str, kind: &str, maps: &[v1::IdMapping]) -> Result<IdRange, Error> {
    let field = format!("{FIELD}.{kind}");
    let [m] = maps else {
        return Err(invalid(
            id,
            field,
            format!(
                "exactly one {kind} mapping is supported, got {}",
                maps.len()
            ),
        ));
    };
    let r = IdRange {
        container_id: m.container_id,
        host_id: m.host_id,
        length: m.length,
    };
    let shown = format!(
        "container {} host {} length {}",
        r.container_id, r.host_id, r.length
    );
    if r.length == 0 {
        return Err(invalid(id, field, format!("{shown}: length 0")));
    }
    // The last id of each side must stay below u32::MAX, which is no id
    // ((uid_t)-1).
    let last = |start: u32| u64::from(start) + u64::from(r.length) - 1;
    if last(r.container_id) >= u64::from(u32::MAX) || last(r.host_id) >= u64::from(u32::MAX) {
        return Err(invalid(id, field, format!("{shown}: the range overflows")));
    }
    if r.host_of(0).is_none() {
        return Err(invalid(
            id,
            field,
            format!("{shown}: container id 0 is not mapped"),
        ));
    }
    if r.host_id == 0 {
        return Err(invalid(
            id,
            field,
            format!("{shown}: the host range includes host id 0 (root)"),
        ));
    }
    Ok(r)
}

/// The user namespace `options` ask for: `None` for the host's (no
/// `userns_options`, or mode NODE), the checked mapping for mode POD;
/// InvalidArgument for CONTAINER, TARGET, an unknown mode or a bad mapping.
pub fn user_namespace(
    id: &str,
    options: Option<&v1::NamespaceOption>,
) -> Result<Option<UserNamespace>, Error> {
    let Some(u) = options.and_then(|o| o.userns_options.as_ref()) else {
        return Ok(None);
    };
    let mode = v1::NamespaceMode::try_from(u.mode).map_err(|_| {
        invalid(
            id,
            format!("{FIELD}.mode"),
            format!("unknown mode {}", u.mode),
        )
    })?;
    match mode {
        v1::NamespaceMode::Node => {
            if !u.uids.is_empty() || !u.gids.is_empty() {
                return Err(invalid(id, FIELD, "mode NODE takes no uid or gid mappings"));
            }
            Ok(None)
        }
        v1::NamespaceMode::Pod => Ok(Some(UserNamespace {
            uids: range(id, "uids", &u.uids)?,
            gids: range(id, "gids", &u.gids)?,
        })),
        m @ (v1::NamespaceMode::Container | v1::NamespaceMode::Target) => Err(invalid(
            id,
            format!("{FIELD}.mode"),
            format!(
                "{} is not supported for user namespaces (only POD and NODE)",
                m.as_str_name()
            ),
        )),
    }
}

/// The pod's user namespace, from its config: see [`user_namespace`]. A pod
/// in its own user namespace must have its own IPC and PID namespaces too
/// (as Kubernetes validates `hostUsers: false`): a namespace of the host
/// cannot be owned by the pod's user namespace. The host's network is
/// allowed (KEP-5607, `user_namespaces_host_network`): the pod's root has
/// no privilege over it, and its `/sys` is the host's, bound read-only (see
/// [`sysfs_bound`]).
pub fn pod_user_namespace(
    id: &str,
    config: &v1::PodSandboxConfig,
) -> Result<Option<UserNamespace>, Error> {
    let options = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref());
    let userns = user_namespace(id, options)?;
    if userns.is_some() {
        let o = options.cloned().unwrap_or_default();
        for (mode, name) in [(o.ipc, "ipc"), (o.pid, "pid")] {
            if mode == v1::NamespaceMode::Node as i32 {
                return Err(invalid(
                    id,
                    format!("linux.security_context.namespace_options.{name}"),
                    "a pod with its own user namespace cannot use the host's",
                ));
            }
        }
    }
    Ok(userns)
}

/// Whether a pod's `/sys` must be the host's bound read-only instead of a
/// sysfs of its own: in its own user namespace (`userns`) and the host's
/// network namespace (`host_network`), the kernel lets only a process
/// privileged over the network namespace mount sysfs, and the pod's root is
/// not (as containerd and CRI-O do for KEP-5607).
pub fn sysfs_bound(userns: bool, host_network: bool) -> bool {
    userns && host_network
}

/// A container's `userns_options` against its pod's: unset follows the
/// pod; set, it must ask for the pod's mode and (with POD) the pod's very
/// mappings, or be InvalidArgument.
pub fn check_container_user_namespace(
    id: &str,
    options: Option<&v1::NamespaceOption>,
    pod: Option<&UserNamespace>,
) -> Result<(), Error> {
    if options.and_then(|o| o.userns_options.as_ref()).is_none() {
        return Ok(());
    }
    let own = user_namespace(id, options)?;
    if own.as_ref() != pod {
        let show = |u: Option<&UserNamespace>| match u {
            None => "the host's (NODE)".to_string(),
            Some(u) => format!(
                "POD with uids {}gids {}",
                u.uids.map_line(),
                u.gids.map_line()
            )
            .replace('\n', " "),
        };
        return Err(invalid(
            id,
            FIELD,
            format!(
                "the container asks for {} but its pod has {}",
                show(own.as_ref()),
                show(pod)
            ),
        ));
    }
    Ok(())
}

/// Whether CRI mount `m` (field `field`) asks for an idmapped mount: it
/// has `uidMappings`/`gidMappings`, which must then be exactly the pod's
/// (its user namespace is what the mount maps through), on a host path (an
/// image volume is idmapped by berth already), with private propagation (an
/// idmapped view is a mount of its own, which propagates nothing).
pub(crate) fn check_mount_idmap(
    id: &str,
    field: &str,
    m: &v1::Mount,
    pod: Option<&UserNamespace>,
) -> Result<bool, Error> {
    if m.uid_mappings.is_empty() && m.gid_mappings.is_empty() {
        return Ok(false);
    }
    let field = format!("{field}.uidMappings");
    let Some(pod) = pod else {
        return Err(invalid(
            id,
            field,
            "an idmapped mount needs a pod with its own user namespace",
        ));
    };
    let same = |maps: &[v1::IdMapping], r: &IdRange| matches!(maps, [m] if (m.container_id, m.host_id, m.length) == (r.container_id, r.host_id, r.length));
    if !same(&m.uid_mappings, &pod.uids) || !same(&m.gid_mappings, &pod.gids) {
        return Err(invalid(
            id,
            field,
            "the mount's mappings must be the pod's user namespace mappings",
        ));
    }
    if m.image.as_ref().is_some_and(|i| !i.image.is_empty()) {
        return Err(invalid(id, field, "an image volume cannot be idmapped"));
    }
    if m.propagation != v1::MountPropagation::PropagationPrivate as i32 {
        return Err(invalid(
            id,
            field,
            "an idmapped mount needs private propagation",
        ));
    }
    Ok(true)
}

/// The CRI mounts of `config` that ask for an idmapped view of their host
/// path, checked: (index, host path). The daemon prepares a view of each
/// and names it in [`SpecRequest::idmapped`](crate::SpecRequest::idmapped).
pub fn idmapped_mounts(
    id: &str,
    config: &v1::ContainerConfig,
    pod: Option<&UserNamespace>,
) -> Result<Vec<(usize, std::path::PathBuf)>, Error> {
    let mut out = Vec::new();
    for (n, m) in config.mounts.iter().enumerate() {
        if check_mount_idmap(id, &format!("mounts[{n}]"), m, pod)? {
            out.push((n, std::path::PathBuf::from(&m.host_path)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn map(container_id: u32, host_id: u32, length: u32) -> v1::IdMapping {
        v1::IdMapping {
            container_id,
            host_id,
            length,
        }
    }

    /// What kubelet sends for a `hostUsers: false` pod.
    fn kubelets(host: u32) -> v1::NamespaceOption {
        v1::NamespaceOption {
            userns_options: Some(v1::UserNamespace {
                mode: v1::NamespaceMode::Pod as i32,
                uids: vec![map(0, host, 65536)],
                gids: vec![map(0, host, 65536)],
            }),
            ..Default::default()
        }
    }

    fn refused(o: &v1::NamespaceOption) -> String {
        let e = user_namespace("p", Some(o)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("userns_options"), "{e}");
        e.to_string()
    }

    #[test]
    fn kubelets_mapping_is_taken_as_is() {
        let u = user_namespace("p", Some(&kubelets(65536 * 2)))
            .unwrap()
            .unwrap();
        assert_eq!(
            u.uids,
            IdRange {
                container_id: 0,
                host_id: 131072,
                length: 65536
            }
        );
        assert_eq!((u.host_root_uid(), u.host_root_gid()), (131072, 131072));
        let (uids, gids) = u.oci_mappings();
        assert_eq!((uids[0].host_id(), uids[0].size()), (131072, 65536));
        assert_eq!(gids[0].container_id(), 0);
        // NODE, or nothing at all: the host's.
        let node = v1::NamespaceOption {
            userns_options: Some(v1::UserNamespace {
                mode: v1::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(user_namespace("p", Some(&node)).unwrap(), None);
        assert_eq!(user_namespace("p", None).unwrap(), None);
        assert_eq!(
            user_namespace("p", Some(&Default::default())).unwrap(),
            None
        );
    }

    #[test]
    fn container_and_target_modes_are_refused() {
        for mode in [v1::NamespaceMode::Container, v1::NamespaceMode::Target] {
            let mut o = kubelets(65536);
            o.userns_options.as_mut().unwrap().mode = mode as i32;
            let e = refused(&o);
            assert!(e.contains(mode.as_str_name()), "{e}");
        }
        let mut o = kubelets(65536);
        o.userns_options.as_mut().unwrap().mode = 9;
        assert!(refused(&o).contains("unknown mode 9"));
    }

    #[test]
    fn exactly_one_range_of_each() {
        let mut o = kubelets(65536);
        o.userns_options
            .as_mut()
            .unwrap()
            .uids
            .push(map(65536, 200000, 10));
        assert!(refused(&o).contains("exactly one uids mapping"));
        let mut o = kubelets(65536);
        o.userns_options.as_mut().unwrap().gids.clear();
        let e = refused(&o);
        assert!(
            e.contains("exactly one gids mapping") && e.contains("got 0"),
            "{e}"
        );
        // POD with no mappings at all (a client that only set the mode).
        let o = v1::NamespaceOption {
            userns_options: Some(v1::UserNamespace::default()),
            ..Default::default()
        };
        refused(&o);
        // NODE with mappings is a contradiction.
        let mut o = kubelets(65536);
        o.userns_options.as_mut().unwrap().mode = v1::NamespaceMode::Node as i32;
        assert!(refused(&o).contains("NODE takes no"));
    }

    #[test]
    fn bad_ranges_are_refused() {
        for (m, why) in [
            (map(1, 65536, 65536), "container id 0 is not mapped"),
            (map(0, 65536, 0), "length 0"),
            (map(0, u32::MAX - 10, 65536), "overflows"),
            (map(0, 65536, u32::MAX), "overflows"),
            (map(u32::MAX - 5, 65536, 10), "overflows"),
            (map(0, 0, 65536), "host id 0"),
        ] {
            let mut o = kubelets(65536);
            o.userns_options.as_mut().unwrap().uids = vec![m];
            let e = refused(&o);
            assert!(e.contains(why), "{m:?}: {e}");
            let mut o = kubelets(65536);
            o.userns_options.as_mut().unwrap().gids = vec![m];
            let e = refused(&o);
            assert!(e.contains(why) && e.contains("gids"), "{m:?}: {e}");
        }
        // The last valid id is u32::MAX - 1.
        let mut o = kubelets(65536);
        o.userns_options.as_mut().unwrap().uids = vec![map(0, u32::MAX - 65536, 65536)];
        assert!(user_namespace("p", Some(&o)).unwrap().is_some());
    }

    #[test]
    fn a_userns_pod_cannot_use_host_namespaces_but_the_network() {
        let config = |o: v1::NamespaceOption| v1::PodSandboxConfig {
            linux: Some(v1::LinuxPodSandboxConfig {
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(o),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut o = kubelets(65536);
        o.network = v1::NamespaceMode::Node as i32;
        assert!(pod_user_namespace("p", &config(o)).unwrap().is_some());
        assert!(sysfs_bound(true, true));
        assert!(!sysfs_bound(true, false) && !sysfs_bound(false, true));
        for set in [
            |o: &mut v1::NamespaceOption| o.ipc = v1::NamespaceMode::Node as i32,
            |o: &mut v1::NamespaceOption| o.pid = v1::NamespaceMode::Node as i32,
        ] {
            let mut o = kubelets(65536);
            set(&mut o);
            let config = v1::PodSandboxConfig {
                linux: Some(v1::LinuxPodSandboxConfig {
                    security_context: Some(v1::LinuxSandboxSecurityContext {
                        namespace_options: Some(o),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let e = pod_user_namespace("p", &config).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("host's"), "{e}");
        }
    }

    #[test]
    fn idmapped_mounts_must_use_the_pods_mapping() {
        let pod = user_namespace("p", Some(&kubelets(65536)))
            .unwrap()
            .unwrap();
        let mount = |host: u32| v1::Mount {
            container_path: "/data".into(),
            host_path: "/srv/data".into(),
            uid_mappings: vec![map(0, host, 65536)],
            gid_mappings: vec![map(0, host, 65536)],
            ..Default::default()
        };
        let config = v1::ContainerConfig {
            mounts: vec![
                v1::Mount {
                    host_path: "/plain".into(),
                    ..mount(65536)
                },
                mount(65536),
            ],
            ..Default::default()
        };
        let mut config = config;
        config.mounts[0].uid_mappings.clear();
        config.mounts[0].gid_mappings.clear();
        assert_eq!(
            idmapped_mounts("c", &config, Some(&pod)).unwrap(),
            vec![(1, std::path::PathBuf::from("/srv/data"))]
        );
        // Not the pod's mapping, no userns pod, an image, propagation: refused.
        let mut bad = vec![mount(131072)];
        let mut image = mount(65536);
        image.image = Some(v1::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        });
        bad.push(image);
        let mut shared = mount(65536);
        shared.propagation = v1::MountPropagation::PropagationBidirectional as i32;
        bad.push(shared);
        for m in bad {
            let config = v1::ContainerConfig {
                mounts: vec![m],
                ..Default::default()
            };
            let e = idmapped_mounts("c", &config, Some(&pod)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("mounts[0].uidMappings"), "{e}");
        }
        let config = v1::ContainerConfig {
            mounts: vec![mount(65536)],
            ..Default::default()
        };
        assert!(idmapped_mounts("c", &config, None).is_err());
    }

    #[test]
    fn a_container_follows_its_pod() {
        let pod = user_namespace("p", Some(&kubelets(65536))).unwrap();
        // Unset, or the same: fine.
        check_container_user_namespace("c", None, pod.as_ref()).unwrap();
        check_container_user_namespace("c", Some(&Default::default()), pod.as_ref()).unwrap();
        check_container_user_namespace("c", Some(&kubelets(65536)), pod.as_ref()).unwrap();
        // Another range, NODE in a POD pod, POD in a NODE pod: refused.
        for (own, pod) in [
            (kubelets(131072), pod),
            (
                v1::NamespaceOption {
                    userns_options: Some(v1::UserNamespace {
                        mode: v1::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                pod,
            ),
            (kubelets(65536), None),
        ] {
            let e = check_container_user_namespace("c", Some(&own), pod.as_ref()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("its pod has"), "{e}");
        }
        // A container's own bad mapping is refused as such.
        let mut o = kubelets(65536);
        o.userns_options.as_mut().unwrap().mode = v1::NamespaceMode::Container as i32;
        assert!(check_container_user_namespace("c", Some(&o), pod.as_ref()).is_err());
    }
}
