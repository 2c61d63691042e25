//! The tables of containerd keys berth has no setting for: a row per key
//! (or family of keys), the values at which it does nothing worth checking,
//! and why it is not carried over.
//!
//! A key pattern is dotted below its table (`containerd.no_pivot`); a
//! segment may list alternatives (`uid|gid`), and a last `**` matches any
//! rest of the path, none included. The first row that matches is taken.

use super::reasons::Inert::{self, Always, Bool, Empty, Int, Never, Str};

/// A key of a table: its pattern, when it is inert, and the reason.
pub(crate) type Row = (&'static str, Inert, &'static str);

/// Which plugin of version 3 reads a CRI key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Runtime,
    Images,
    Server,
    /// `stats_collect_period` is in both runtime and images.
    Either,
    /// Only in version 2's single CRI plugin.
    V2,
}

use Owner::{Either, Images, Runtime, Server, V2};

/// Top-level keys (those outside `plugins`, `proxy_plugins`, `root` and
/// `state`, which `reasons` words itself).
pub(crate) const TOP: &[Row] = &[
    (
        "temp",
        Empty,
        "berth unpacks into its own root; it has no separate temporary directory",
    ),
    ("plugin_dir", Empty, "berth loads no containerd plugins"),
    (
        "disabled_plugins|required_plugins",
        Empty,
        "berth has no containerd plugins to enable or disable (see the notes at the top)",
    ),
    (
        "oom_score",
        Empty,
        "berth's own OOM score is set by its systemd unit (OOMScoreAdj=-999 in berth.service)",
    ),
    (
        "imports",
        Empty,
        "the imported files are not read: run `berth config import-containerd` on each and \
         install the output as a drop-in in /etc/berth/config.d/",
    ),
    (
        "grpc.address",
        Never,
        "berth serves CRI on its own socket (`socket`, /run/berth/berth.sock): point \
         kubelet's --container-runtime-endpoint and crictl there (or set `socket` to this \
         path: only CRI, not containerd's API, is served on it)",
    ),
    (
        "grpc.tcp_address|tcp_tls_ca|tcp_tls_cert|tcp_tls_key|tcp_tls_common_name",
        Empty,
        "berth serves CRI on its unix socket only, never on TCP",
    ),
    (
        "grpc.uid|gid",
        Empty,
        "berth's socket is root:root, mode 0660",
    ),
    (
        "grpc.max_recv_message_size|max_send_message_size",
        Always,
        "berth's gRPC message limits are its own (16 MiB, as containerd's)",
    ),
    ("ttrpc.**", Always, "berth serves no ttrpc"),
    (
        "debug.log_trace_id",
        Bool(false),
        "berth exports no OpenTelemetry traces, so its log lines carry no trace ids",
    ),
    ("debug.address", Empty, "berth has no debug socket"),
    ("debug.uid|gid", Always, "berth has no debug socket"),
    (
        "metrics.grpc_histogram",
        Always,
        "berth always exports its gRPC latency histogram \
         (berth_grpc_request_duration_seconds)",
    ),
    (
        "cgroup.path",
        Empty,
        "berth's own cgroup is its systemd unit's (set Slice= in berth.service)",
    ),
    (
        "timeouts.**",
        Always,
        "containerd's internal timeouts; berth's are its own",
    ),
    (
        "stream_processors.**",
        Always,
        "berth runs no stream processors (no image decryption)",
    ),
];

/// The server settings version 4 (containerd 2.4) moved from top-level
/// tables into plugins: the plugin's id, the key below it, and the top-level
/// key it was in versions 2 and 3. containerd reads each in one place only:
/// the plugin key in a version 4 file, the top-level key before. The moved
/// key is carried over or noted as the key it was.
pub(crate) const MOVED_V4: &[(&str, &str, &str)] = &[
    (GRPC, "address", "grpc.address"),
    (GRPC, "uid", "grpc.uid"),
    (GRPC, "gid", "grpc.gid"),
    (GRPC, "max_recv_message_size", "grpc.max_recv_message_size"),
    (GRPC, "max_send_message_size", "grpc.max_send_message_size"),
    (GRPC_TCP, "address", "grpc.tcp_address"),
    (GRPC_TCP, "tls_ca", "grpc.tcp_tls_ca"),
    (GRPC_TCP, "tls_cert", "grpc.tcp_tls_cert"),
    (GRPC_TCP, "tls_key", "grpc.tcp_tls_key"),
    (GRPC_TCP, "tls_common_name", "grpc.tcp_tls_common_name"),
    (
        GRPC_TCP,
        "max_recv_message_size",
        "grpc.max_recv_message_size",
    ),
    (
        GRPC_TCP,
        "max_send_message_size",
        "grpc.max_send_message_size",
    ),
    ("io.containerd.server.v1.ttrpc", "address", "ttrpc.address"),
    ("io.containerd.server.v1.ttrpc", "uid", "ttrpc.uid"),
    ("io.containerd.server.v1.ttrpc", "gid", "ttrpc.gid"),
    ("io.containerd.server.v1.debug", "address", "debug.address"),
    ("io.containerd.server.v1.debug", "uid", "debug.uid"),
    ("io.containerd.server.v1.debug", "gid", "debug.gid"),
    (METRICS, "address", "metrics.address"),
    (
        "io.containerd.metrics.v1.grpc-prometheus",
        "grpc_histogram",
        "metrics.grpc_histogram",
    ),
];

const GRPC: &str = "io.containerd.server.v1.grpc";
const GRPC_TCP: &str = "io.containerd.server.v1.grpc-tcp";
/// The metrics server plugin, whose `address` berth carries over.
pub(crate) const METRICS: &str = "io.containerd.server.v1.metrics";

/// The top-level key that plugin `id`'s key `rest` was before version 4.
pub(crate) fn moved_from(id: &str, rest: &[&str]) -> Option<&'static str> {
    let [key] = rest else { return None };
    MOVED_V4
        .iter()
        .find(|(plugin, k, _)| *plugin == id && k == key)
        .map(|(_, _, old)| *old)
}

/// Where version 4 has top-level key `path` (of versions 2 and 3).
pub(crate) fn moved_to(path: &[&str]) -> Option<(&'static str, &'static str)> {
    let old = path.join(".");
    MOVED_V4
        .iter()
        .find(|(_, _, o)| *o == old)
        .map(|(plugin, key, _)| (*plugin, *key))
}

/// Keys of plugins other than CRI's and NRI's: the plugin's id, then the
/// row of the key below it.
pub(crate) const PLUGINS: &[(&str, Row)] = &[
    (
        "io.containerd.transfer.v1.local",
        (
            "max_concurrent_downloads",
            Int(3),
            "containerd 2.1+ pulls through its transfer service with this limit; berth's \
             registry.max_concurrent_downloads comes from the CRI images plugin's value",
        ),
    ),
    (
        "io.containerd.transfer.v1.local",
        (
            "config_path",
            Empty,
            "containerd 2.1+'s transfer service reads hosts.toml files from here; berth's \
             registry.config_path comes from the CRI images plugin's registry.config_path: make \
             them one",
        ),
    ),
    (
        "io.containerd.service.v1.tasks-service",
        (
            "rdt_config_file|blockio_config_file",
            Empty,
            "berth configures no RDT or blockio classes (a container asking for one is refused)",
        ),
    ),
    (
        "io.containerd.runtime.v2.task",
        (
            "sched_core",
            Empty,
            "berth does not create core-scheduling domains",
        ),
    ),
];

const PAUSE: &str = "berth pulls no pause image: its pause is a program built into berth-shim, \
                     and pods that need none get none";
const SNAPSHOTTER: &str =
    "berth unpacks images into its own overlay snapshots; it has no other snapshotters";
const SNAPSHOT_ANNOTATIONS: &str =
    "berth has no remote snapshotters that would read snapshot annotations";
const DISCARD_LAYERS: &str = "berth's image store has its own layout (no containerd content store)";
const NO_CHECKPOINT: &str = "berth does not checkpoint (CheckpointContainer answers Unimplemented)";
const NO_PIVOT: &str = "berth always has the runtime use pivot_root";

/// Keys of the CRI plugin(s), below the plugin's table, with the plugin of
/// version 3 that reads each.
pub(crate) const CRI: &[(Owner, Row)] = &[
    // Images.
    (V2, ("sandbox_image", Always, PAUSE)),
    (Images, ("pinned_images.sandbox", Always, PAUSE)),
    (
        Images,
        (
            "pinned_images.**",
            Never,
            "berth pins no images: kubelet's image garbage collection may remove it",
        ),
    ),
    (Images, ("snapshotter", Str(&["overlayfs"]), SNAPSHOTTER)),
    (
        V2,
        ("containerd.snapshotter", Str(&["overlayfs"]), SNAPSHOTTER),
    ),
    (
        Images,
        (
            "disable_snapshot_annotations",
            Bool(true),
            SNAPSHOT_ANNOTATIONS,
        ),
    ),
    (
        V2,
        (
            "containerd.disable_snapshot_annotations",
            Bool(true),
            SNAPSHOT_ANNOTATIONS,
        ),
    ),
    (Images, ("discard_unpacked_layers", Always, DISCARD_LAYERS)),
    (
        V2,
        ("containerd.discard_unpacked_layers", Always, DISCARD_LAYERS),
    ),
    (
        Images,
        (
            "image_pull_with_sync_fs",
            Always,
            "berth's image store syncs what it writes itself",
        ),
    ),
    (
        Images,
        (
            "use_local_image_pull|concurrent_layer_fetch_buffer",
            Always,
            "berth has one pull of its own, configured under [registry]",
        ),
    ),
    (
        Either,
        (
            "stats_collect_period",
            Always,
            "berth collects usage when kubelet asks for it (no collection period)",
        ),
    ),
    (
        Images,
        (
            "runtime_platforms.**",
            Empty,
            "berth pulls for the node's own platform only",
        ),
    ),
    (
        Images,
        (
            "image_decryption.key_model",
            Str(&["", "node"]),
            "berth does not decrypt images (an encrypted layer fails the pull)",
        ),
    ),
    (
        Images,
        (
            "registry.headers.**",
            Never,
            "berth sends extra headers per host only, from `header` in that host's hosts.toml \
             under registry.config_path",
        ),
    ),
    // Runtime.
    (
        V2,
        (
            "systemd_cgroup",
            Empty,
            "the io.containerd.runtime.v1.linux shim's setting; berth's cgroup driver is \
             runtime.cgroup_driver, taken from the runc handlers' SystemdCgroup",
        ),
    ),
    (V2, ("containerd.no_pivot", Empty, NO_PIVOT)),
    (
        V2,
        (
            "containerd.default_runtime|untrusted_workload_runtime.**",
            Empty,
            "deprecated containerd runtime; berth's handlers come from containerd.runtimes only \
             (add it as runtime.handlers.NAME by hand)",
        ),
    ),
    (
        Runtime,
        (
            "containerd.ignore_rdt_not_enabled_errors|ignore_blockio_not_enabled_errors",
            Empty,
            "berth configures no RDT or blockio classes: a container asking for one is refused",
        ),
    ),
    (
        Runtime,
        (
            "cni.conf_template",
            Empty,
            "berth renders no CNI templates: put the network configuration into cni.conf_dir",
        ),
    ),
    (
        Runtime,
        (
            "cni.ip_pref",
            Str(&["", "ipv4"]),
            "berth reports a pod's IPv4 address first, then the others in CNI's order",
        ),
    ),
    (
        Runtime,
        (
            "cni.setup_serially",
            Always,
            "berth attaches a pod to one network; its plugins run in order, as CNI specifies",
        ),
    ),
    (
        Runtime,
        (
            "cni.use_internal_loopback",
            Always,
            "berth always brings `lo` up itself (no loopback plugin), as containerd with true",
        ),
    ),
    (
        Runtime,
        (
            "enable_selinux",
            Empty,
            "berth applies no SELinux labels (on an SELinux host a request with selinux_options \
             is refused)",
        ),
    ),
    (
        Runtime,
        (
            "selinux_category_range",
            Always,
            "berth applies no SELinux labels",
        ),
    ),
    (
        Runtime,
        (
            "max_container_log_line_size",
            Int(16384),
            "berth splits container log lines at 16384 bytes (containerd's default), fixed",
        ),
    ),
    (
        Runtime,
        (
            "disable_cgroup",
            Empty,
            "berth always puts containers in cgroups",
        ),
    ),
    (
        Runtime,
        (
            "disable_apparmor",
            Empty,
            "berth applies AppArmor wherever the host has it",
        ),
    ),
    (
        Runtime,
        (
            "restrict_oom_score_adj",
            Bool(true),
            "berth never gives a container an oom_score_adj below its own, as containerd with \
             true",
        ),
    ),
    (
        Runtime,
        (
            "disable_proc_mount",
            Empty,
            "berth honours procMount (Unmasked) where the pod has its own user namespace",
        ),
    ),
    (
        Runtime,
        (
            "unset_seccomp_profile",
            Empty,
            "a container that names no seccomp profile runs unconfined in berth, as in \
             containerd with this empty (kubelet's seccompDefault asks for RuntimeDefault)",
        ),
    ),
    (
        Runtime,
        (
            "tolerate_missing_hugetlb_controller",
            Bool(true),
            "berth drops hugepage limits where the hugetlb controller is missing, as containerd \
             with true",
        ),
    ),
    (
        Runtime,
        (
            "disable_hugetlb_controller",
            Always,
            "berth sets hugepage limits wherever the hugetlb controller is there",
        ),
    ),
    (
        Runtime,
        (
            "device_ownership_from_security_context",
            Empty,
            "berth gives devices their owner on the host, as containerd with false",
        ),
    ),
    (
        Runtime,
        (
            "ignore_image_defined_volumes",
            Empty,
            "berth always mounts the volumes an image defines",
        ),
    ),
    (
        Runtime,
        (
            "netns_mounts_under_state_dir",
            Always,
            "berth always mounts network namespaces under its own state dir (<state>/netns)",
        ),
    ),
    (
        Runtime,
        (
            "enable_unprivileged_ports",
            Empty,
            "berth sets no sysctls of its own: a pod that needs \
             net.ipv4.ip_unprivileged_port_start=0 sets it in its securityContext.sysctls",
        ),
    ),
    (
        Runtime,
        (
            "enable_unprivileged_icmp",
            Empty,
            "berth sets no sysctls of its own: a pod that needs net.ipv4.ping_group_range sets \
             it in its securityContext.sysctls",
        ),
    ),
    (
        Runtime,
        (
            "enable_cdi",
            Bool(true),
            "berth always resolves CDI devices (runtime.cdi_spec_dirs)",
        ),
    ),
    (
        Runtime,
        (
            "drain_exec_sync_io_timeout",
            Str(&["", "0s", "0"]),
            "berth reads an exec's output for a fixed 1 s after the process exits, then answers \
             ExecSync (containerd with 0s waits until the pipes close)",
        ),
    ),
    (
        Runtime,
        (
            "ignore_deprecation_warnings",
            Always,
            "berth has no such warnings",
        ),
    ),
    (
        Runtime,
        (
            "stats_retention_period",
            Always,
            "berth reads container stats when kubelet asks for them",
        ),
    ),
    (Runtime, ("enable_criu", Always, NO_CHECKPOINT)),
    // Server.
    (
        Server,
        (
            "disable_tcp_service",
            Bool(true),
            "berth serves CRI on its unix socket only, never on TCP",
        ),
    ),
];

/// Keys of a runc runtime handler (carried over), below
/// `containerd.runtimes.NAME`.
pub(crate) const HANDLER: &[Row] = &[
    (
        "runtime_path",
        Empty,
        "names a containerd shim; berth runs its own berth-shim (runtime.shim_binary) for \
         every handler",
    ),
    (
        "runtime_engine|runtime_root",
        Empty,
        "a setting of the io.containerd.runtime.v1.linux shim, not of runc.v2",
    ),
    (
        "privileged_without_host_devices|privileged_without_host_devices_all_devices_allowed",
        Empty,
        "berth gives privileged containers every host device",
    ),
    (
        "cgroup_writable",
        Empty,
        "berth mounts /sys/fs/cgroup read-only in unprivileged containers",
    ),
    (
        "base_runtime_spec",
        Empty,
        "berth builds every OCI spec itself; it reads no base spec file",
    ),
    (
        "cni_conf_dir|cni_max_conf_num",
        Empty,
        "berth has one CNI configuration for every handler (cni.conf_dir)",
    ),
    (
        "snapshotter",
        Empty,
        "berth has only its own overlay snapshots",
    ),
    (
        "sandboxer|sandbox_mode",
        Str(&["", "podsandbox"]),
        "berth has no sandbox controllers: its pods are runc containers (or pinned namespaces)",
    ),
    (
        "disable_pause_image_pull",
        Always,
        "berth pulls no pause image",
    ),
    (
        "io_type",
        Str(&["", "fifo"]),
        "berth's shim carries container I/O itself",
    ),
    (
        "options.Root",
        Empty,
        "berth keeps every handler's runtime state under <state>/runtime",
    ),
    ("options.NoPivotRoot", Empty, NO_PIVOT),
    (
        "options.NoNewKeyring",
        Empty,
        "berth lets the runtime make a session keyring per container (its default)",
    ),
    (
        "options.ShimCgroup",
        Empty,
        "berth has no setting for its shims' cgroup",
    ),
    (
        "options.IoUid|IoGid",
        Empty,
        "berth has no setting for the owner of container I/O",
    ),
    (
        "options.CriuPath|CriuImagePath|CriuWorkPath",
        Empty,
        NO_CHECKPOINT,
    ),
    ("options.**", Never, "unknown runc option"),
];

/// Whether `pattern` (see the top of this file) matches `path`.
pub(crate) fn matches(pattern: &str, path: &[&str]) -> bool {
    let mut rest = path;
    for segment in pattern.split('.') {
        if segment == "**" {
            return true;
        }
        match rest.split_first() {
            Some((key, tail)) if segment.split('|').any(|alt| alt == *key) => rest = tail,
            _ => return false,
        }
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_keys_alternatives_and_any_rest() {
        assert!(matches("grpc.uid|gid", &["grpc", "gid"]));
        assert!(!matches("grpc.uid|gid", &["grpc", "gid", "x"]));
        assert!(!matches("grpc.uid|gid", &["grpc"]));
        assert!(matches("ttrpc.**", &["ttrpc"]));
        assert!(matches("ttrpc.**", &["ttrpc", "address"]));
        assert!(!matches("ttrpc.**", &["grpc", "address"]));
    }

    /// A row after one that matches all its keys would never be taken.
    #[test]
    fn no_row_is_shadowed_by_an_earlier_one() {
        let tables: [Vec<&str>; 3] = [
            TOP.iter().map(|r| r.0).collect(),
            CRI.iter().map(|(_, r)| r.0).collect(),
            HANDLER.iter().map(|r| r.0).collect(),
        ];
        for patterns in tables {
            for (n, later) in patterns.iter().enumerate() {
                // The first spelling of the later row's keys.
                let key: Vec<&str> = later
                    .split('.')
                    .map(|s| s.split('|').next().unwrap_or(s))
                    .filter(|s| *s != "**")
                    .collect();
                let earlier = patterns[..n].iter().find(|p| matches(p, &key));
                assert!(earlier.is_none(), "{later} is shadowed by {earlier:?}");
            }
        }
    }
}
