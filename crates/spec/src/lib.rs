//! OCI runtime spec generation for CRI containers.
//!
//! [`container_spec`] turns a CRI v1 `ContainerConfig`, the pod's
//! `PodSandboxConfig`, what berth knows of the running sandbox
//! ([`SandboxInfo`]) and the image's config ([`ImageInfo`]) into the
//! `config.json` runc or crun runs, behaving as kubelet expects of a CRI
//! runtime (containerd's CRI plugin is the reference): command and args over
//! the image's Entrypoint/Cmd, environment, working directory, user and
//! groups resolved in the container's rootfs, mounts, devices, namespaces of
//! the pod, capabilities, privileged mode, seccomp (berth's own RuntimeDefault
//! profile), masked and read-only paths, sysctls, OOM score and cgroup
//! resources, annotations, CDI devices.
//!
//! [`pause_spec`] makes the spec of the pod's pause container from the same
//! parts: one cgroup rule ([`pod_cgroup_parent`] once per pod, then
//! [`cgroups_path`] for the pause and each container), one set of id,
//! sysctl, namespace, seccomp and annotation checks.
//!
//! The pieces are public too, for the RPCs that need one of them:
//! [`linux_resources`] for UpdateContainerResources, [`stop_signal`] for
//! StopContainer, [`resolve_user`], [`anonymous_volumes`], [`cgroups_path`].
//!
//! Nothing here changes the host: the only I/O is reading (the rootfs's
//! /etc/passwd and /etc/group, host paths and devices, /proc/self, seccomp
//! profile files).

mod caps;
mod cdi;
mod devices;
mod error;
mod lsm;
mod mounts;
mod namespaces;
mod passthrough;
mod pause;
mod process;
mod resources;
mod seccomp;
mod signal;
mod sysctls;
mod user;
mod userns;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use cri_api::v1;
use oci_spec::runtime::{
    get_default_maskedpaths, get_default_readonly_paths, Capability, Linux, Process, Root, Spec,
    User,
};

pub use caps::{
    capabilities_from_mask, capability_name, current_capabilities, parse_capability,
    DEFAULT_CAPABILITIES,
};
pub use cdi::{
    apply_cdi_devices, requested_cdi_devices, CDI_ANNOTATION_PREFIX, DEFAULT_CDI_SPEC_DIRS,
};
pub use devices::{device_from_path, host_devices};
pub use error::{Error, ErrorKind};
pub use mounts::{
    anonymous_volumes, clean_path, host_paths_to_create, image_volume_key, AnonymousVolume,
};
pub use pause::{pause_spec, PauseRequest, PAUSE_COMMAND, PAUSE_CPU_SHARES, PAUSE_OOM_SCORE_ADJ};
pub use process::{env_value, merge_env, process_args, process_env, working_dir, DEFAULT_PATH};
pub use resources::{
    cgroups_path, current_oom_score_adj, linux_resources, oom_score_adj, pod_cgroup_parent,
    DEFAULT_CGROUPFS_PARENT, DEFAULT_SYSTEMD_PARENT,
};
pub use seccomp::{
    default_profile as default_seccomp_profile, load_profile as load_seccomp_profile,
    MAX_PROFILE_BYTES as MAX_SECCOMP_PROFILE_BYTES,
};
pub use signal::{cri_signal, cri_signal_number, parse_signal, stop_signal};
pub use user::{resolve_user, ResolvedUser};
pub use userns::{
    check_container_user_namespace, idmapped_mounts, pod_user_namespace, sysfs_bound,
    user_namespace, IdRange, UserNamespace,
};

/// The name of berth's default AppArmor profile (used when loaded).
pub const APPARMOR_DEFAULT: &str = "berth-default";

pub use lsm::{apparmor_profile, check_selinux};

/// Annotation keys berth sets on every container, as containerd does.
pub mod annotations {
    /// `container` for an application container, `sandbox` for the pause.
    pub const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
    /// The pod's log directory, on the pause.
    pub const SANDBOX_LOG_DIRECTORY: &str = "io.kubernetes.cri.sandbox-log-directory";
    pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
    pub const SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
    pub const SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
    pub const SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
    pub const IMAGE_NAME: &str = "io.kubernetes.cri.image-name";
}

/// The parts of the image config a container's spec uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// The image's name for the `image-name` annotation, used when the config
    /// has no `user_specified_image`.
    pub name: String,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    /// `uid`, `uid:gid`, `name` or `name:group`; empty for root.
    pub user: String,
    /// VOLUME paths.
    pub volumes: Vec<String>,
    /// `SIGTERM`, `TERM`, `15`, ...; empty for the default.
    pub stop_signal: String,
}

/// What berth knows of the pod a container joins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxInfo {
    pub id: String,
    /// The pause process, whose IPC, UTS and PID namespaces are joined
    /// through /proc/<pid>/ns/*; 0 for a pod without one.
    pub pid: u32,
    /// The pod's pinned UTS and IPC namespaces (a pod without a pause):
    /// joined by path instead of through the pause.
    pub uts_ns: Option<PathBuf>,
    pub ipc_ns: Option<PathBuf>,
    /// The pod's network namespace; `None` for host network (then the UTS
    /// namespace is the host's too).
    pub netns: Option<PathBuf>,
    /// The pod uses the host's IPC namespace.
    pub host_ipc: bool,
    /// The pod uses the host's PID namespace.
    pub host_pid: bool,
    /// The pod's hostname (for `HOSTNAME` and, with a pod UTS namespace, the
    /// spec's hostname); empty takes the config's, then the host's.
    pub hostname: String,
    /// Files bind-mounted at /etc/hostname, /etc/hosts and
    /// /etc/resolv.conf; one that is empty or missing is not mounted.
    pub hostname_file: PathBuf,
    pub hosts_file: PathBuf,
    pub resolv_conf: PathBuf,
    /// The pod's /dev/shm (or the host's /dev/shm for host IPC); empty or
    /// missing leaves the container a private tmpfs.
    pub shm: PathBuf,
    /// The pod's cgroup parent from [`pod_cgroup_parent`] (a cgroupfs path,
    /// or a systemd slice name); empty means the driver's default.
    pub cgroup_parent: String,
}

/// How berth is set up on this host: what the host supports and the
/// configured policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecOptions {
    /// Cgroups are managed by systemd: paths become `slice:berth:id`, and a
    /// cgroup parent must be a slice.
    pub cgroup_driver_systemd: bool,
    /// The host runs cgroup v2 (unified): `unified` resources work and
    /// containers get a cgroup namespace.
    pub cgroup_v2: bool,
    /// The host accounts swap (memory.memsw / memory.swap.max).
    pub swap_available: bool,
    /// The hugetlb controller is there.
    pub hugetlb_available: bool,
    /// The kernel (and runtime) can make recursive read-only mounts.
    pub rro_supported: bool,
    /// The kernel can filter syscalls.
    pub seccomp_available: bool,
    /// Containers that name no seccomp profile get RuntimeDefault
    /// (otherwise they run unconfined, as containerd's default).
    pub default_seccomp: bool,
    /// The pids limit of every container.
    pub pids_limit: Option<i64>,
    /// The lowest `oomScoreAdj` to ask for; `None` reads this process's own
    /// /proc/self/oom_score_adj when a container asks for one.
    pub oom_score_adj_floor: Option<i32>,
    /// What "ALL" and privileged mean; `None` reads this process's bounding
    /// set when needed.
    pub all_capabilities: Option<Vec<Capability>>,
    /// Pod annotations passed on to the runtime, in the pause's spec and in
    /// every container's, by glob pattern (Go's `path.Match`, as
    /// containerd's per-runtime `pod_annotations`: `io.katacontainers.*`).
    /// Set it from the pod's runtime handler. Empty: none pass — runtimes
    /// act on annotations (crun on `run.oci.*`), so only berth's own reach
    /// them.
    pub pod_annotations: Vec<String>,
    /// Container annotations passed on to the runtime, likewise
    /// (containerd's `container_annotations`).
    pub container_annotations: Vec<String>,
    /// Where CDI spec files are, lowest priority first; read only for a
    /// container that asks for CDI devices.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// The host enforces AppArmor profiles.
    pub apparmor_enabled: bool,
    /// berth's default AppArmor profile, once it is loaded and enforced
    /// (not detected here: the daemon loads it at start and checks the
    /// kernel enforces it).
    pub apparmor_default: Option<String>,
    /// Why berth's default profile is not loaded on an AppArmor host, when
    /// loading it failed: containers that would run under it are refused
    /// with this reason.
    pub apparmor_default_problem: Option<String>,
    /// SELinux is enabled (enforcing or permissive) on the host.
    pub selinux_enabled: bool,
}

impl Default for SpecOptions {
    /// Nothing detected: cgroupfs on v1, no swap or hugetlb accounting, no
    /// recursive read-only mounts, seccomp available, the live OOM floor and
    /// bounding set.
    fn default() -> Self {
        SpecOptions {
            cgroup_driver_systemd: false,
            cgroup_v2: false,
            swap_available: false,
            hugetlb_available: false,
            rro_supported: false,
            seccomp_available: true,
            default_seccomp: false,
            pids_limit: None,
            oom_score_adj_floor: None,
            all_capabilities: None,
            pod_annotations: Vec::new(),
            container_annotations: Vec::new(),
            cdi_spec_dirs: DEFAULT_CDI_SPEC_DIRS.iter().map(PathBuf::from).collect(),
            apparmor_enabled: false,
            apparmor_default: None,
            apparmor_default_problem: None,
            selinux_enabled: false,
        }
    }
}

impl SpecOptions {
    /// Looks at this host (see [`SpecOptions::from_facts`]).
    pub fn detect() -> SpecOptions {
        SpecOptions::from_facts(&berth_host::Facts::detect(&berth_host::RealHost))
    }

    /// What the host's `facts` allow: cgroup version, swap and hugetlb
    /// controllers, recursive read-only mounts (kernel 5.12), seccomp, the
    /// security modules, the bounding set. Policies (driver, pids limit,
    /// default seccomp) stay at their defaults for the caller to set.
    pub fn from_facts(facts: &berth_host::Facts) -> SpecOptions {
        SpecOptions {
            cgroup_v2: facts.cgroup == berth_host::CgroupMode::V2,
            swap_available: facts.swap_available,
            hugetlb_available: facts.hugetlb_available,
            rro_supported: facts.rro_kernel(),
            seccomp_available: facts.seccomp_available,
            all_capabilities: facts.bounding_set.map(caps::capabilities_from_mask),
            apparmor_enabled: facts.apparmor_enabled,
            selinux_enabled: facts.selinux_enabled,
            ..SpecOptions::default()
        }
    }
}

/// Everything one container's spec is made of.
#[derive(Debug, Clone)]
pub struct SpecRequest<'a> {
    /// The container id.
    pub id: &'a str,
    pub config: &'a v1::ContainerConfig,
    pub sandbox_config: &'a v1::PodSandboxConfig,
    pub sandbox: &'a SandboxInfo,
    pub image: &'a ImageInfo,
    /// The container's rootfs, mounted: the spec's `root.path`, and where
    /// users and groups are looked up.
    pub rootfs: &'a Path,
    /// The image's VOLUMEs to mount (see [`anonymous_volumes`]); their
    /// directories must exist before the container starts.
    pub volumes: Vec<AnonymousVolume>,
    /// Image volumes (`Mount.image`): the directory holding each image's
    /// content, by `ImageSpec.image`.
    pub image_mounts: BTreeMap<String, PathBuf>,
    /// The pid of the container named by `namespace_options.target_id`, for
    /// PID namespace mode TARGET.
    pub target_pid: Option<u32>,
    /// Idmapped views of the host paths of the CRI mounts that ask for one
    /// (`uidMappings`), by mount index: see [`idmapped_mounts`].
    pub idmapped: BTreeMap<usize, PathBuf>,
}

impl<'a> SpecRequest<'a> {
    /// A request with no volumes, image volumes or target.
    pub fn new(
        id: &'a str,
        config: &'a v1::ContainerConfig,
        sandbox_config: &'a v1::PodSandboxConfig,
        sandbox: &'a SandboxInfo,
        image: &'a ImageInfo,
        rootfs: &'a Path,
    ) -> Self {
        SpecRequest {
            id,
            config,
            sandbox_config,
            sandbox,
            image,
            rootfs,
            volumes: Vec::new(),
            image_mounts: BTreeMap::new(),
            target_pid: None,
            idmapped: BTreeMap::new(),
        }
    }
}

/// The pod's hostname as configured, if any.
fn pod_hostname(req: &SpecRequest<'_>) -> Option<String> {
    [
        req.sandbox.hostname.as_str(),
        req.sandbox_config.hostname.as_str(),
    ]
    .into_iter()
    .find(|h| !h.is_empty())
    .map(str::to_string)
}

/// The hostname a container sees in `HOSTNAME`: the pod's, else the host's.
fn hostname(req: &SpecRequest<'_>) -> String {
    pod_hostname(req)
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
        })
        .unwrap_or_default()
}

/// The annotations: the pod's and the container's that the runtime handler
/// allows (see [`SpecOptions::pod_annotations`]), then berth's (which win).
fn annotations(req: &SpecRequest<'_>, opts: &SpecOptions) -> HashMap<String, String> {
    let mut out = passthrough::passthrough(&req.sandbox_config.annotations, &opts.pod_annotations);
    out.extend(passthrough::passthrough(
        &req.config.annotations,
        &opts.container_annotations,
    ));
    let meta = req.sandbox_config.metadata.clone().unwrap_or_default();
    let image_name = req
        .config
        .image
        .as_ref()
        .map(|i| i.user_specified_image.as_str())
        .filter(|n| !n.is_empty())
        .or(Some(req.image.name.as_str()).filter(|n| !n.is_empty()))
        .or(req.config.image.as_ref().map(|i| i.image.as_str()))
        .unwrap_or_default();
    let name = req
        .config
        .metadata
        .as_ref()
        .map(|m| m.name.as_str())
        .unwrap_or_default();
    for (k, v) in [
        (annotations::CONTAINER_TYPE, "container"),
        (annotations::SANDBOX_ID, req.sandbox.id.as_str()),
        (annotations::SANDBOX_NAME, meta.name.as_str()),
        (annotations::SANDBOX_NAMESPACE, meta.namespace.as_str()),
        (annotations::SANDBOX_UID, meta.uid.as_str()),
        (annotations::CONTAINER_NAME, name),
        (annotations::IMAGE_NAME, image_name),
    ] {
        out.insert(k.to_string(), v.to_string());
    }
    out
}

/// The runtime's default masked paths: runc's list and
/// /sys/devices/virtual/powercap (as containerd and Docker).
fn default_masked_paths() -> Vec<String> {
    let mut masked = get_default_maskedpaths();
    masked.push("/sys/devices/virtual/powercap".to_string());
    masked
}

/// The masked and read-only paths of a container (`sc` `None` for the
/// pause).
///
/// Privileged: none. Otherwise a list the security context gives is taken
/// as it is, as containerd does (it empties its defaults, then applies the
/// CRI lists when they are set; kubelet sends its default lists for
/// `procMount: Default`, which equal these).
///
/// An empty list is where berth departs from containerd on purpose.
/// containerd takes it as "mask nothing": that is how kubelet asks for
/// `procMount: Unmasked`. But Kubernetes allows `Unmasked` only in a pod
/// with its own user namespace (`hostUsers: false`), so in a pod without
/// one an empty list cannot be a valid Unmasked request — it is a client
/// that did not fill the lists in (crictl, an old kubelet), and taking it
/// literally would leave /proc/kcore, /proc/sysrq-trigger and the rest of
/// /proc and /sys open to the container. berth gives the runtime's defaults
/// instead (CRI-O's outcome for an unset list too). In a pod with its own
/// user namespace (`userns`), the empty list means "none", as in containerd.
pub(crate) fn masked_and_readonly(
    privileged: bool,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    userns: bool,
) -> (Vec<String>, Vec<String>) {
    if privileged {
        return (Vec::new(), Vec::new());
    }
    if userns {
        if let Some(sc) = sc {
            return (sc.masked_paths.clone(), sc.readonly_paths.clone());
        }
    }
    let given = |l: Option<&Vec<String>>, default: fn() -> Vec<String>| match l {
        Some(l) if !l.is_empty() => l.clone(),
        _ => default(),
    };
    (
        given(sc.map(|s| &s.masked_paths), default_masked_paths),
        given(sc.map(|s| &s.readonly_paths), get_default_readonly_paths),
    )
}

/// Builds the OCI runtime spec of a container.
///
/// Errors of kind [`ErrorKind::InvalidArgument`] mean the request cannot be
/// run as asked (bad user, missing host path, unknown capability, signal or
/// seccomp profile, privileged container in an unprivileged pod, ...);
/// [`ErrorKind::Internal`] that reading the host failed.
pub fn container_spec(req: &SpecRequest<'_>, opts: &SpecOptions) -> Result<Spec, Error> {
    let id = req.id;
    let config = req.config;
    let sc = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref());
    let privileged = check_privileged(req, sc)?;
    let readonly_rootfs = sc.is_some_and(|s| s.readonly_rootfs);
    let resources = config
        .linux
        .as_ref()
        .and_then(|l| l.resources.clone())
        .unwrap_or_default();

    let (process, bounding) = container_process(req, opts, sc, &resources)?;
    let userns = pod_user_namespace(id, req.sandbox_config)?;
    let (mounts, rootfs_propagation) = mounts::mounts(&mounts::MountInputs {
        id,
        config,
        sandbox: req.sandbox,
        volumes: &req.volumes,
        image_mounts: &req.image_mounts,
        idmapped: &req.idmapped,
        userns: userns.as_ref(),
        privileged,
        readonly_rootfs,
        rro_supported: opts.rro_supported,
        selinux_enabled: opts.selinux_enabled,
        mountinfo: None,
    })?;
    let mut linux = container_linux(req, opts, sc, &resources, userns.as_ref(), &bounding)?;
    linux.set_rootfs_propagation(rootfs_propagation);

    let mut root = Root::default();
    root.set_path(req.rootfs.to_owned());
    root.set_readonly(Some(readonly_rootfs));

    let mut spec = Spec::default();
    spec.set_process(Some(process));
    spec.set_root(Some(root));
    spec.set_mounts(Some(mounts));
    // Only with the pod's own UTS namespace (joined, where the pause set the
    // same name already); host network keeps the host's.
    spec.set_hostname(req.sandbox.netns.as_ref().and_then(|_| pod_hostname(req)));
    spec.set_annotations(Some(annotations(req, opts)));
    spec.set_linux(Some(linux));
    cdi::apply(id, config, &opts.cdi_spec_dirs, &mut spec)?;
    Ok(spec)
}

/// Whether the container is privileged; refused unless its pod is too.
fn check_privileged(
    req: &SpecRequest<'_>,
    sc: Option<&v1::LinuxContainerSecurityContext>,
) -> Result<bool, Error> {
    let privileged = sc.is_some_and(|s| s.privileged);
    let pod_privileged = req
        .sandbox_config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .is_some_and(|s| s.privileged);
    if privileged && !pod_privileged {
        return Err(error::invalid(
            req.id,
            "linux.security_context.privileged",
            "a privileged container needs a privileged pod",
        ));
    }
    Ok(privileged)
}

/// The container's process: command, environment, user, capabilities and
/// confinement; and its bounding set, which the seccomp profile follows.
fn container_process(
    req: &SpecRequest<'_>,
    opts: &SpecOptions,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    resources: &v1::LinuxContainerResources,
) -> Result<(Process, HashSet<Capability>), Error> {
    let id = req.id;
    let config = req.config;
    let user = resolve_user(id, req.rootfs, sc, &req.image.user)?;
    let all = caps::all_capabilities(id, opts.all_capabilities.as_deref())?;
    let capabilities = caps::capabilities(id, sc, &all)?;
    let bounding: HashSet<Capability> = capabilities.bounding().clone().unwrap_or_default();

    let mut process = Process::default();
    process.set_terminal(Some(config.tty));
    process.set_args(Some(process_args(id, config, req.image)?));
    process.set_env(Some(process_env(id, config, req.image, &hostname(req))?));
    process.set_cwd(PathBuf::from(working_dir(config, req.image)));
    let mut u = User::default();
    u.set_uid(user.uid);
    u.set_gid(user.gid);
    u.set_additional_gids(Some(user.additional_gids));
    process.set_user(u);
    process.set_capabilities(Some(capabilities));
    process.set_no_new_privileges(Some(sc.is_some_and(|s| s.no_new_privs)));
    process.set_rlimits(None);
    process.set_apparmor_profile(container_apparmor_profile(id, sc, opts)?);
    process.set_selinux_label(None);
    process.set_oom_score_adj(oom_score_adj(
        id,
        resources.oom_score_adj,
        opts.oom_score_adj_floor,
    )?);
    Ok((process, bounding))
}

/// The container's AppArmor profile, after checking its SELinux options:
/// none for a privileged container (no LSM confinement, as containerd).
fn container_apparmor_profile(
    id: &str,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    opts: &SpecOptions,
) -> Result<Option<String>, Error> {
    if sc.is_some_and(|s| s.privileged) {
        return Ok(None);
    }
    lsm::check_selinux(id, sc.and_then(|s| s.selinux_options.as_ref()), opts)?;
    lsm::apparmor_profile(
        id,
        sc.and_then(|s| s.apparmor.as_ref()),
        // The deprecated field still comes from older kubelets.
        #[allow(deprecated)]
        sc.map_or("", |s| s.apparmor_profile.as_str()),
        opts,
    )
}

/// The container's Linux section: namespaces, id mappings, cgroup and its
/// resources, devices, seccomp, masked paths and sysctls.
fn container_linux(
    req: &SpecRequest<'_>,
    opts: &SpecOptions,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    resources: &v1::LinuxContainerResources,
    userns: Option<&UserNamespace>,
    bounding: &HashSet<Capability>,
) -> Result<Linux, Error> {
    let id = req.id;
    let privileged = sc.is_some_and(|s| s.privileged);
    let (devices, device_rules) = devices::devices(id, req.config, privileged)?;
    let mut cgroup_resources = linux_resources(id, resources, opts)?;
    cgroup_resources.set_devices(Some(device_rules));

    let (masked, readonly) = masked_and_readonly(privileged, sc, userns.is_some());

    let mut linux = Linux::default();
    linux.set_namespaces(Some(namespaces::namespaces(
        id,
        req.sandbox,
        sc.and_then(|s| s.namespace_options.as_ref()),
        req.target_pid,
        opts.cgroup_v2 && !privileged,
        userns,
    )?));
    if let Some(u) = userns {
        let (uids, gids) = u.oci_mappings();
        linux.set_uid_mappings(Some(uids));
        linux.set_gid_mappings(Some(gids));
    }
    linux.set_resources(Some(cgroup_resources));
    linux.set_cgroups_path(Some(PathBuf::from(cgroups_path(
        &req.sandbox.cgroup_parent,
        id,
        opts.cgroup_driver_systemd,
    )?)));
    linux.set_devices(Some(devices));
    linux.set_seccomp(seccomp::seccomp(
        id,
        sc,
        bounding,
        opts.seccomp_available,
        opts.default_seccomp,
    )?);
    linux.set_masked_paths(Some(masked));
    linux.set_readonly_paths(Some(readonly));
    linux.set_sysctl(sysctls::pod_sysctls(
        id,
        req.sandbox_config,
        req.sandbox.netns.is_none(),
        req.sandbox.host_ipc,
    )?);
    Ok(linux)
}

#[cfg(test)]
mod tests;
