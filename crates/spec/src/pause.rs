//! The OCI runtime spec of a pod's pause container: the process that holds
//! the pod's namespaces. It shares with [`container_spec`](crate::container_spec)
//! the cgroup path (one driver rule for the pod's siblings), the id checks,
//! the sysctl checks, the namespace modes, the seccomp profiles, the default
//! mounts and masked paths, and the annotation allow-list.
//!
//! As containerd's sandbox container: a read-only rootfs, the pod's
//! /dev/shm bound read-only, the pod's user and supplemental groups, the
//! pod's seccomp profile, cpu shares of 2, an OOM score of -998 (or
//! berth's own, if higher), the pod's sysctls. Unlike it, the
//! pause holds no capabilities at all: it only waits for signals.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cri_api::v1;
use oci_spec::runtime::{
    Linux, LinuxCapabilities, LinuxCpu, LinuxPids, LinuxResources, Mount, Process, Root, Spec, User,
};

use crate::error::{invalid, Error};
use crate::{annotations, devices, mounts, namespaces, passthrough, resources, seccomp, sysctls};
use crate::{user, SpecOptions};

/// The OOM score adjustment of the pause, as containerd's
/// `defaultSandboxOOMAdj` (kubernetes#47938): the last of the pod to be
/// killed, since its death ends the pod's PID namespace. Never below
/// berth's own score (see [`oom_score_adj`](crate::oom_score_adj)).
pub const PAUSE_OOM_SCORE_ADJ: i64 = -998;

/// Where the pause binary is in its rootfs, for [`PauseRequest::new`].
pub const PAUSE_COMMAND: &str = "/pause";

/// The cpu shares of the pause: the least there is, as containerd's
/// `DefaultSandboxCPUshares`.
pub const PAUSE_CPU_SHARES: u64 = 2;

/// Everything the pause's spec is made of.
#[derive(Debug, Clone)]
pub struct PauseRequest<'a> {
    /// The pod sandbox id.
    pub id: &'a str,
    pub config: &'a v1::PodSandboxConfig,
    /// The pod's network namespace; `None` for a host-network pod (which
    /// `config`'s namespace options must say too).
    pub netns: Option<&'a Path>,
    /// The pod's user namespace (pinned by berth, owning `netns`), when the
    /// config asks for one (`userns_options` mode POD); `None` otherwise.
    pub userns: Option<&'a Path>,
    /// The pod's /dev/shm (a tmpfs berth mounted), or the host's /dev/shm for
    /// host IPC.
    pub shm: &'a Path,
    /// The pod's cgroup parent from [`pod_cgroup_parent`](crate::pod_cgroup_parent).
    pub cgroup_parent: &'a str,
    /// The rootfs, absolute or relative to the bundle.
    pub rootfs: &'a Path,
    /// The command.
    pub args: Vec<String>,
}

impl<'a> PauseRequest<'a> {
    /// A request for the `rootfs` directory of the bundle, running
    /// [`PAUSE_COMMAND`].
    pub fn new(
        id: &'a str,
        config: &'a v1::PodSandboxConfig,
        netns: Option<&'a Path>,
        shm: &'a Path,
        cgroup_parent: &'a str,
    ) -> Self {
        PauseRequest {
            id,
            config,
            netns,
            userns: None,
            shm,
            cgroup_parent,
            rootfs: Path::new("rootfs"),
            args: vec![PAUSE_COMMAND.to_string()],
        }
    }
}

/// The pod's user: `run_as_user` (else root) and `run_as_group` (else 0),
/// with the supplemental groups; each a valid id.
fn pause_user(id: &str, sc: Option<&v1::LinuxSandboxSecurityContext>) -> Result<User, Error> {
    const SC: &str = "linux.security_context";
    let uid = sc.and_then(|s| s.run_as_user.as_ref());
    let gid = sc.and_then(|s| s.run_as_group.as_ref());
    if gid.is_some() && uid.is_none() {
        return Err(invalid(
            id,
            format!("{SC}.run_as_group"),
            "is set without run_as_user",
        ));
    }
    let uid = match uid {
        Some(u) => user::check_id(id, &format!("{SC}.run_as_user"), u.value)?,
        None => 0,
    };
    let gid = match gid {
        Some(g) => user::check_id(id, &format!("{SC}.run_as_group"), g.value)?,
        None => 0,
    };
    let mut gids = vec![gid];
    for g in sc
        .map(|s| s.supplemental_groups.as_slice())
        .unwrap_or_default()
    {
        gids.push(user::check_id(
            id,
            &format!("{SC}.supplemental_groups"),
            *g,
        )?);
    }
    gids.sort_unstable();
    gids.dedup();
    let mut u = User::default();
    u.set_uid(uid);
    u.set_gid(gid);
    u.set_additional_gids(Some(gids));
    Ok(u)
}

/// The pod's seccomp request in the shape the container code reads.
fn seccomp_context(
    sc: Option<&v1::LinuxSandboxSecurityContext>,
) -> v1::LinuxContainerSecurityContext {
    #[allow(deprecated)]
    let out = v1::LinuxContainerSecurityContext {
        privileged: sc.is_some_and(|s| s.privileged),
        seccomp: sc.and_then(|s| s.seccomp.clone()),
        seccomp_profile_path: sc
            .map(|s| s.seccomp_profile_path.clone())
            .unwrap_or_default(),
        ..Default::default()
    };
    out
}

/// The pause's annotations: the pod's allowed ones, then berth's.
fn pause_annotations(req: &PauseRequest<'_>, opts: &SpecOptions) -> HashMap<String, String> {
    let mut out = passthrough::passthrough(&req.config.annotations, &opts.pod_annotations);
    let meta = req.config.metadata.clone().unwrap_or_default();
    for (k, v) in [
        (annotations::CONTAINER_TYPE, "sandbox"),
        (annotations::SANDBOX_ID, req.id),
        (annotations::SANDBOX_NAME, meta.name.as_str()),
        (annotations::SANDBOX_NAMESPACE, meta.namespace.as_str()),
        (annotations::SANDBOX_UID, meta.uid.as_str()),
    ] {
        out.insert(k.to_string(), v.to_string());
    }
    if !req.config.log_directory.is_empty() {
        out.insert(
            annotations::SANDBOX_LOG_DIRECTORY.to_string(),
            req.config.log_directory.clone(),
        );
    }
    out
}

/// Builds the pause container's spec.
///
/// Errors of kind [`ErrorKind::InvalidArgument`](crate::ErrorKind) mean the
/// pod cannot be run as asked (an id out of range, a sysctl that is not the
/// pod's, a cgroup parent that does not fit the driver, a user namespace, a
/// seccomp profile that cannot be used).
pub fn pause_spec(req: &PauseRequest<'_>, opts: &SpecOptions) -> Result<Spec, Error> {
    let sc = req
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref());
    let process = pause_process(req, opts, sc)?;

    let mut root = Root::default();
    root.set_path(req.rootfs.to_owned());
    root.set_readonly(Some(true));

    let mounts = pause_mounts(req, sc);
    let linux = pause_linux(req, opts, sc)?;

    let mut spec = Spec::default();
    spec.set_process(Some(process));
    spec.set_root(Some(root));
    spec.set_mounts(Some(mounts));
    spec.set_hostname(
        req.netns
            .and(Some(req.config.hostname.clone()))
            .filter(|h| !h.is_empty()),
    );
    spec.set_annotations(Some(pause_annotations(req, opts)));
    spec.set_linux(Some(linux));
    Ok(spec)
}

/// The pause's process: the pod's user, no capabilities, no new
/// privileges, the pod's LSM profile and the pause's OOM score.
fn pause_process(
    req: &PauseRequest<'_>,
    opts: &SpecOptions,
    sc: Option<&v1::LinuxSandboxSecurityContext>,
) -> Result<Process, Error> {
    let id = req.id;
    let mut process = Process::default();
    process.set_terminal(Some(false));
    process.set_args(Some(req.args.clone()));
    process.set_env(Some(vec![format!("PATH={}", crate::DEFAULT_PATH)]));
    process.set_cwd(PathBuf::from("/"));
    process.set_user(pause_user(id, sc)?);
    let none = LinuxCapabilities::default()
        .set_bounding(Some(Default::default()))
        .set_effective(Some(Default::default()))
        .set_inheritable(Some(Default::default()))
        .set_permitted(Some(Default::default()))
        .set_ambient(Some(Default::default()))
        .clone();
    process.set_capabilities(Some(none));
    process.set_no_new_privileges(Some(true));
    process.set_rlimits(None);
    crate::lsm::check_selinux(id, sc.and_then(|s| s.selinux_options.as_ref()), opts)?;
    process.set_apparmor_profile(crate::lsm::apparmor_profile(
        id,
        sc.and_then(|s| s.apparmor.as_ref()),
        "",
        opts,
    )?);
    process.set_oom_score_adj(resources::oom_score_adj(
        id,
        PAUSE_OOM_SCORE_ADJ,
        opts.oom_score_adj_floor,
    )?);
    Ok(process)
}

/// The pause's mounts: the defaults, with the pod's /dev/shm bound
/// read-only in place of a private one.
fn pause_mounts(
    req: &PauseRequest<'_>,
    sc: Option<&v1::LinuxSandboxSecurityContext>,
) -> Vec<Mount> {
    let sysfs_bound = crate::sysfs_bound(req.userns.is_some(), req.netns.is_none());
    let mut mounts: Vec<_> = mounts::default_mounts(false, sysfs_bound)
        .into_iter()
        .filter(|m| m.destination() != Path::new("/dev/shm"))
        .collect();
    if sc.is_some_and(|s| s.privileged) {
        mounts::make_sysfs_writable(&mut mounts);
    }
    mounts.push(mounts::mount(
        "/dev/shm",
        "bind",
        req.shm,
        &["rbind", "ro", "nosuid", "nodev", "noexec"],
    ));
    mounts
}

/// The pause's Linux section: the pod's namespaces (and the user
/// namespace's mappings), its cgroup, seccomp profile and sysctls.
fn pause_linux(
    req: &PauseRequest<'_>,
    opts: &SpecOptions,
    sc: Option<&v1::LinuxSandboxSecurityContext>,
) -> Result<Linux, Error> {
    let id = req.id;
    let ns_options = sc.and_then(|s| s.namespace_options.as_ref());
    let userns = crate::userns::pod_user_namespace(id, req.config)?;
    if userns.is_some() != req.userns.is_some() {
        return Err(invalid(
            id,
            "linux.security_context.namespace_options.userns_options",
            "the user namespace given does not fit the pod's user namespace mode",
        ));
    }
    let namespaces = namespaces::pod_namespaces(id, req.netns, req.userns, ns_options)?;
    let host_ipc = ns_options.is_some_and(|o| o.ipc == v1::NamespaceMode::Node as i32);
    let (masked, readonly) = crate::masked_and_readonly(false, None, false);
    let mut linux = Linux::default();
    linux.set_namespaces(Some(namespaces));
    if let Some(u) = &userns {
        let (uids, gids) = u.oci_mappings();
        linux.set_uid_mappings(Some(uids));
        linux.set_gid_mappings(Some(gids));
    }
    linux.set_resources(Some(pause_resources(opts)));
    linux.set_cgroups_path(Some(PathBuf::from(resources::cgroups_path(
        req.cgroup_parent,
        id,
        opts.cgroup_driver_systemd,
    )?)));
    linux.set_devices(None);
    linux.set_seccomp(seccomp::seccomp(
        id,
        Some(&seccomp_context(sc)),
        &Default::default(),
        opts.seccomp_available,
        opts.default_seccomp,
    )?);
    linux.set_masked_paths(Some(masked));
    linux.set_readonly_paths(Some(readonly));
    linux.set_sysctl(sysctls::pod_sysctls(
        id,
        req.config,
        req.netns.is_none(),
        host_ipc,
    )?);
    Ok(linux)
}

/// The pause's cgroup resources: the least cpu shares, no devices, and
/// berth's pids limit if it has one.
fn pause_resources(opts: &SpecOptions) -> LinuxResources {
    let mut cpu = LinuxCpu::default();
    cpu.set_shares(Some(PAUSE_CPU_SHARES));
    let mut resources = LinuxResources::default();
    resources.set_cpu(Some(cpu));
    resources.set_devices(Some(vec![devices::cgroup_rule(
        false, None, None, None, "rwm",
    )]));
    if let Some(limit) = opts.pids_limit.filter(|l| *l != 0) {
        let mut pids = LinuxPids::default();
        pids.set_limit(limit);
        resources.set_pids(Some(pids));
    }
    resources
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use oci_spec::runtime::LinuxNamespaceType;

    fn types(spec: &Spec) -> Vec<LinuxNamespaceType> {
        spec.linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| n.typ())
            .collect()
    }

    fn joins_netns(spec: &Spec, path: &Path) -> bool {
        spec.linux()
            .as_ref()
            .and_then(|l| l.namespaces().as_ref())
            .is_some_and(|nss| {
                nss.iter().any(|ns| {
                    ns.typ() == LinuxNamespaceType::Network && ns.path().as_deref() == Some(path)
                })
            })
    }

    fn pod(f: impl FnOnce(&mut v1::LinuxSandboxSecurityContext)) -> v1::PodSandboxConfig {
        let mut sc = v1::LinuxSandboxSecurityContext::default();
        f(&mut sc);
        v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: "web-0".into(),
                uid: "uid-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: "web-0".into(),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/podX".into(),
                security_context: Some(sc),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn host_ns() -> impl FnOnce(&mut v1::LinuxSandboxSecurityContext) {
        |sc| {
            sc.namespace_options = Some(v1::NamespaceOption {
                network: v1::NamespaceMode::Node as i32,
                ipc: v1::NamespaceMode::Node as i32,
                pid: v1::NamespaceMode::Node as i32,
                ..Default::default()
            })
        }
    }

    /// No live reads: a fixed OOM floor.
    fn opts() -> SpecOptions {
        SpecOptions {
            oom_score_adj_floor: Some(0),
            ..Default::default()
        }
    }

    const NETNS: &str = "/run/berth/netns/abc";
    const SHM: &str = "/run/berth/sandboxes/abc/shm";

    fn spec_of(config: &v1::PodSandboxConfig, opts: &SpecOptions) -> Result<Spec, Error> {
        let req = PauseRequest::new(
            "abc",
            config,
            Some(Path::new(NETNS)),
            Path::new(SHM),
            "/kubepods/podX",
        );
        pause_spec(&req, opts)
    }

    fn invalid_argument(config: &v1::PodSandboxConfig) -> String {
        let e = spec_of(config, &opts()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("abc"), "{e}");
        e.to_string()
    }

    #[test]
    fn pod_network_spec() {
        let spec = spec_of(&pod(|_| {}), &opts()).unwrap();
        assert!(joins_netns(&spec, Path::new(NETNS)));
        assert_eq!(spec.hostname().as_deref(), Some("web-0"));
        let t = types(&spec);
        assert!(t.contains(&LinuxNamespaceType::Uts));
        assert!(t.contains(&LinuxNamespaceType::Ipc));
        assert!(t.contains(&LinuxNamespaceType::Pid));
        assert!(t.contains(&LinuxNamespaceType::Mount));
        assert!(!t.contains(&LinuxNamespaceType::Cgroup));
        let p = spec.process().as_ref().unwrap();
        assert_eq!(p.args().as_ref().unwrap(), &vec!["/pause".to_string()]);
        // -998, raised to the floor: never below berth's own score.
        assert_eq!(p.oom_score_adj(), Some(0));
        let o = SpecOptions {
            oom_score_adj_floor: Some(-999),
            ..opts()
        };
        let s2 = spec_of(&pod(|_| {}), &o).unwrap();
        assert_eq!(s2.process().as_ref().unwrap().oom_score_adj(), Some(-998));
        assert_eq!((p.user().uid(), p.user().gid()), (0, 0));
        assert_eq!(p.no_new_privileges(), Some(true));
        let caps = p.capabilities().as_ref().unwrap();
        assert!(caps.bounding().as_ref().unwrap().is_empty());
        assert!(caps.ambient().as_ref().unwrap().is_empty());
        let root = spec.root().as_ref().unwrap();
        assert_eq!(root.path(), Path::new("rootfs"));
        assert_eq!(root.readonly(), Some(true));
        let shm: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.destination() == Path::new("/dev/shm"))
            .collect();
        assert_eq!(shm.len(), 1);
        assert_eq!(shm[0].source().as_deref(), Some(Path::new(SHM)));
        assert!(shm[0]
            .options()
            .as_ref()
            .unwrap()
            .contains(&"ro".to_string()));
        let l = spec.linux().as_ref().unwrap();
        assert_eq!(
            l.cgroups_path().as_deref(),
            Some(Path::new("/kubepods/podX/abc"))
        );
        assert!(l
            .masked_paths()
            .as_ref()
            .unwrap()
            .contains(&"/proc/kcore".to_string()));
        let r = l.resources().as_ref().unwrap();
        assert_eq!(r.cpu().as_ref().unwrap().shares(), Some(PAUSE_CPU_SHARES));
        assert!(l.seccomp().is_none());
        assert!(l.sysctl().is_none());
        let a = spec.annotations().as_ref().unwrap();
        assert_eq!(a[annotations::CONTAINER_TYPE], "sandbox");
        assert_eq!(a[annotations::SANDBOX_ID], "abc");
        assert_eq!(a[annotations::SANDBOX_NAME], "web-0");
        assert_eq!(a[annotations::SANDBOX_UID], "uid-1");
    }

    /// The options of the mount at `dest`.
    fn options_at(spec: &Spec, dest: &str) -> Vec<String> {
        let m = spec.mounts().as_ref().unwrap();
        let m = m.iter().find(|m| m.destination() == Path::new(dest));
        m.unwrap().options().clone().unwrap_or_default()
    }

    /// A privileged pod's pause mounts sysfs rw (the pod's containers share
    /// its superblock); the cgroup tree stays ro, as containerd's.
    #[test]
    fn sysfs_is_rw_only_for_a_privileged_pod() {
        let plain = spec_of(&pod(|_| {}), &opts()).unwrap();
        assert!(options_at(&plain, "/sys").contains(&"ro".to_string()));
        let privileged = spec_of(&pod(|sc| sc.privileged = true), &opts()).unwrap();
        let sys = options_at(&privileged, "/sys");
        assert!(sys.contains(&"rw".to_string()) && !sys.contains(&"ro".to_string()));
        let cgroup = options_at(&privileged, "/sys/fs/cgroup");
        assert!(cgroup.contains(&"ro".to_string()), "{cgroup:?}");
    }

    #[test]
    fn host_namespaces_spec() {
        let config = pod(host_ns());
        let req = PauseRequest::new("abc", &config, None, Path::new("/dev/shm"), "/berth");
        let spec = pause_spec(&req, &opts()).unwrap();
        let t = types(&spec);
        assert!(!t.contains(&LinuxNamespaceType::Network));
        assert!(!t.contains(&LinuxNamespaceType::Uts));
        assert!(!t.contains(&LinuxNamespaceType::Ipc));
        assert!(!t.contains(&LinuxNamespaceType::Pid));
        assert!(t.contains(&LinuxNamespaceType::Mount));
        assert!(spec.hostname().is_none());
        // A netns for a host-network pod (or none for a pod network): refused.
        let req = PauseRequest::new("abc", &config, Some(Path::new(NETNS)), Path::new(SHM), "");
        assert!(pause_spec(&req, &opts()).is_err());
        let own = pod(|_| {});
        let req = PauseRequest::new("abc", &own, None, Path::new(SHM), "");
        assert!(pause_spec(&req, &opts()).is_err());
    }

    #[test]
    fn ids_are_range_checked_not_truncated() {
        // Before: the daemon's `as u32` made 4294967296 uid 0, root.
        for (uid, gid) in [
            (4294967296, None),
            (0, Some(4294967296)),
            (4294967295, None),
            (-1, None),
        ] {
            let config = pod(|sc| {
                sc.run_as_user = Some(v1::Int64Value { value: uid });
                sc.run_as_group = gid.map(|value| v1::Int64Value { value });
            });
            let e = invalid_argument(&config);
            assert!(e.contains("out of range"), "{e}");
        }
        let e = invalid_argument(&pod(|sc| {
            sc.run_as_group = Some(v1::Int64Value { value: 5 })
        }));
        assert!(e.contains("run_as_group"), "{e}");
        let e = invalid_argument(&pod(|sc| sc.supplemental_groups = vec![1 << 32]));
        assert!(e.contains("supplemental_groups"), "{e}");

        let config = pod(|sc| {
            sc.run_as_user = Some(v1::Int64Value { value: 65535 });
            sc.run_as_group = Some(v1::Int64Value { value: 65534 });
            sc.supplemental_groups = vec![3000, 65534];
        });
        let spec = spec_of(&config, &opts()).unwrap();
        let u = spec.process().as_ref().unwrap().user();
        assert_eq!((u.uid(), u.gid()), (65535, 65534));
        assert_eq!(u.additional_gids().as_ref().unwrap(), &vec![3000, 65534]);
    }

    #[test]
    fn sysctls_userns_and_seccomp_are_checked_as_for_containers() {
        let mut config = pod(host_ns());
        config
            .linux
            .as_mut()
            .unwrap()
            .sysctls
            .insert("net.ipv4.ip_forward".into(), "1".into());
        let req = PauseRequest::new("abc", &config, None, Path::new("/dev/shm"), "");
        let e = pause_spec(&req, &opts()).unwrap_err();
        assert!(e.to_string().contains("linux.sysctls"), "{e}");

        let mut config = pod(|_| {});
        config
            .linux
            .as_mut()
            .unwrap()
            .sysctls
            .insert("net.ipv4.ip_unprivileged_port_start".into(), "0".into());
        let spec = spec_of(&config, &opts()).unwrap();
        let l = spec.linux().as_ref().unwrap();
        assert_eq!(
            l.sysctl().as_ref().unwrap()["net.ipv4.ip_unprivileged_port_start"],
            "0"
        );

        // POD without mappings.
        let e = invalid_argument(&pod(|sc| {
            sc.namespace_options = Some(v1::NamespaceOption {
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            })
        }));
        assert!(e.contains("userns_options"), "{e}");
        // TARGET means nothing for a pod (CONTAINER, kubelet's default, is
        // fine: the pause gets its own PID namespace).
        let e = invalid_argument(&pod(|sc| {
            sc.namespace_options = Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Target as i32,
                ..Default::default()
            })
        }));
        assert!(e.contains("namespace_options.pid"), "{e}");

        let config = pod(|sc| {
            sc.seccomp = Some(v1::SecurityProfile {
                profile_type: v1::security_profile::ProfileType::RuntimeDefault as i32,
                localhost_ref: String::new(),
            })
        });
        let spec = spec_of(&config, &opts()).unwrap();
        assert!(spec.linux().as_ref().unwrap().seccomp().is_some());
        let o = SpecOptions {
            default_seccomp: true,
            ..opts()
        };
        let spec = spec_of(&pod(|_| {}), &o).unwrap();
        assert!(spec.linux().as_ref().unwrap().seccomp().is_some());
    }

    fn userns_pod() -> v1::PodSandboxConfig {
        let map = v1::IdMapping {
            container_id: 0,
            host_id: 100000,
            length: 65536,
        };
        pod(|sc| {
            sc.namespace_options = Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Container as i32,
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Pod as i32,
                    uids: vec![map],
                    gids: vec![map],
                }),
                ..Default::default()
            })
        })
    }

    #[test]
    fn a_userns_pod_gets_its_mapping_and_joins_the_pinned_namespace() {
        let config = userns_pod();
        let mut req = PauseRequest::new(
            "abc",
            &config,
            Some(Path::new(NETNS)),
            Path::new(SHM),
            "/kubepods/podX",
        );
        req.userns = Some(Path::new("/run/berth/userns/abc"));
        let spec = pause_spec(&req, &opts()).unwrap();
        let l = spec.linux().as_ref().unwrap();
        let user = l
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .find(|n| n.typ() == LinuxNamespaceType::User)
            .unwrap();
        assert_eq!(
            user.path().as_deref(),
            Some(Path::new("/run/berth/userns/abc"))
        );
        for maps in [l.uid_mappings(), l.gid_mappings()] {
            let maps = maps.as_ref().unwrap();
            assert_eq!(maps.len(), 1);
            assert_eq!(
                (maps[0].container_id(), maps[0].host_id(), maps[0].size()),
                (0, 100000, 65536)
            );
        }
        // No pinned namespace for a userns pod, or one for a host-userns pod:
        // refused (the daemon's mistake, never a half-isolated pod).
        req.userns = None;
        assert!(pause_spec(&req, &opts()).is_err());
        let plain = pod(|_| {});
        let mut req = PauseRequest::new("abc", &plain, Some(Path::new(NETNS)), Path::new(SHM), "");
        req.userns = Some(Path::new("/run/berth/userns/abc"));
        assert!(pause_spec(&req, &opts()).is_err());
        // NODE mode: as before, no user namespace.
        let node = pod(|sc| {
            sc.namespace_options = Some(v1::NamespaceOption {
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            })
        });
        let spec = spec_of(&node, &opts()).unwrap();
        assert!(!types(&spec).contains(&LinuxNamespaceType::User));
        assert!(spec.linux().as_ref().unwrap().uid_mappings().is_none());
    }

    #[test]
    fn pod_annotations_need_the_handlers_patterns() {
        let mut config = pod(|_| {});
        config
            .annotations
            .insert("run.oci.keep_original_groups".into(), "1".into());
        config
            .annotations
            .insert("io.katacontainers.config.x".into(), "y".into());
        config
            .annotations
            .insert(annotations::CONTAINER_TYPE.into(), "container".into());
        let spec = spec_of(&config, &opts()).unwrap();
        let a = spec.annotations().as_ref().unwrap();
        assert!(!a.contains_key("run.oci.keep_original_groups"));
        assert!(!a.contains_key("io.katacontainers.config.x"));
        assert_eq!(a[annotations::CONTAINER_TYPE], "sandbox");
        let o = SpecOptions {
            pod_annotations: vec!["io.katacontainers.*".into(), "io.kubernetes.cri.*".into()],
            ..opts()
        };
        let spec = spec_of(&config, &o).unwrap();
        let a = spec.annotations().as_ref().unwrap();
        assert_eq!(a["io.katacontainers.config.x"], "y");
        assert!(!a.contains_key("run.oci.keep_original_groups"));
        assert_eq!(a[annotations::CONTAINER_TYPE], "sandbox");
    }

    #[test]
    fn systemd_driver_paths() {
        let config = pod(|_| {});
        let o = SpecOptions {
            cgroup_driver_systemd: true,
            ..opts()
        };
        let req = PauseRequest::new(
            "abc",
            &config,
            Some(Path::new(NETNS)),
            Path::new(SHM),
            "kubepods-besteffort-podX.slice",
        );
        let spec = pause_spec(&req, &o).unwrap();
        assert_eq!(
            spec.linux().as_ref().unwrap().cgroups_path().as_deref(),
            Some(Path::new("kubepods-besteffort-podX.slice:berth:abc"))
        );
        // A cgroupfs path with the systemd driver: before, the daemon's pause
        // went to "/kubepods/podX/abc" whatever the driver.
        let req = PauseRequest::new(
            "abc",
            &config,
            Some(Path::new(NETNS)),
            Path::new(SHM),
            "/kubepods/podX",
        );
        let e = pause_spec(&req, &o).unwrap_err();
        assert!(e.to_string().contains("cgroup_parent"), "{e}");
    }
}
