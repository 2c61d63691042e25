//! Why a containerd key is not carried over: one reason per key berth has
//! no setting for, and whether that matters (berth behaves otherwise, or the
//! value cannot be used) or not (berth already behaves so, or the key has
//! no meaning in berth).

use super::values::is_empty;
use super::{Version, CRI, IMAGES, NRI, RUNTIME};
use toml::Value;

/// Which list of the output a key that is not carried over goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// berth behaves otherwise, or the value cannot be used as it is: the
    /// operator has to decide.
    Check,
    /// berth already behaves so, the setting has no meaning in berth, or the
    /// key belongs to something that is not carried over as a whole.
    Nothing,
}

use Group::{Check, Nothing};

/// The group of a key that is inert at `value` (empty, `false`, `0`) and
/// matters otherwise.
fn unless_empty(value: &Value) -> Group {
    if is_empty(value) {
        Nothing
    } else {
        Check
    }
}

/// `Nothing` when `value` is `expected`, else `Check`.
fn unless(value: &Value, expected: impl Into<Value>) -> Group {
    if *value == expected.into() {
        Nothing
    } else {
        Check
    }
}

/// Why the key at `path` (as written in the file) is not carried over.
pub fn reason(version: Version, path: &[&str], value: &Value) -> (Group, String) {
    match path {
        ["plugins", id, rest @ ..] => plugin_reason(version, id, rest, value),
        ["proxy_plugins", name, ..] => (
            Check,
            format!("berth loads no containerd proxy plugins ({name})"),
        ),
        ["root"] => state_dir("root", "/var/lib/containerd", "/var/lib/berth", value),
        ["state"] => state_dir("state", "/run/containerd", "/run/berth", value),
        ["temp"] => (
            unless_empty(value),
            "berth unpacks into its own root; it has no separate temporary directory".into(),
        ),
        ["plugin_dir"] => (
            unless_empty(value),
            "berth loads no containerd plugins".into(),
        ),
        ["disabled_plugins"] | ["required_plugins"] => (
            unless_empty(value),
            "berth has no containerd plugins to enable or disable (see the notes at the top)"
                .into(),
        ),
        ["oom_score"] => (
            unless_empty(value),
            "berth's own OOM score is set by its systemd unit (OOMScoreAdj=-999 in berth.service)"
                .into(),
        ),
        ["imports"] => (
            unless_empty(value),
            "the imported files are not read: run `berth config import-containerd` on each and \
             install the output as a drop-in in /etc/berth/config.d/"
                .into(),
        ),
        ["grpc", "address"] => (
            Check,
            "berth serves CRI on its own socket (`socket`, /run/berth/berth.sock): point \
             kubelet's --container-runtime-endpoint and crictl there (or set `socket` to this \
             path: only CRI, not containerd's API, is served on it)"
                .into(),
        ),
        ["grpc", "tcp_address"] | ["grpc", "tcp_tls_ca" | "tcp_tls_cert" | "tcp_tls_key"] => (
            unless_empty(value),
            "berth serves CRI on its unix socket only, never on TCP".into(),
        ),
        ["grpc", "uid" | "gid"] => (
            unless_empty(value),
            "berth's socket is root:root, mode 0660".into(),
        ),
        ["grpc", "max_recv_message_size" | "max_send_message_size"] => (
            Nothing,
            "berth's gRPC message limits are its own (16 MiB, as containerd's)".into(),
        ),
        ["ttrpc", ..] => (Nothing, "berth serves no ttrpc".into()),
        ["debug", "address"] => (unless_empty(value), "berth has no debug socket".into()),
        ["debug", "uid" | "gid"] => (Nothing, "berth has no debug socket".into()),
        ["metrics", "grpc_histogram"] => (
            Nothing,
            "berth always exports its gRPC latency histogram \
             (berth_grpc_request_duration_seconds)"
                .into(),
        ),
        ["cgroup", "path"] => (
            unless_empty(value),
            "berth's own cgroup is its systemd unit's (set Slice= in berth.service)".into(),
        ),
        ["timeouts", ..] => (
            Nothing,
            "containerd's internal timeouts; berth's are its own".into(),
        ),
        ["stream_processors", ..] => (
            Nothing,
            "berth runs no stream processors (no image decryption)".into(),
        ),
        _ => (Check, unknown(version)),
    }
}

fn unknown(version: Version) -> String {
    format!(
        "unknown to berth's importer (not a key of containerd's version {} config that it knows)",
        version.number()
    )
}

fn state_dir(
    key: &str,
    containerd_default: &str,
    berth_default: &str,
    value: &Value,
) -> (Group, String) {
    match value.as_str() {
        Some(dir) if dir == containerd_default => (
            Nothing,
            format!(
                "berth keeps its own {key} ({berth_default}, in its own layout); containerd's is \
                 neither read nor needed"
            ),
        ),
        Some(dir) => {
            let parent = std::path::Path::new(dir)
                .parent()
                .unwrap_or(std::path::Path::new("/"));
            (
                Check,
                format!(
                    "berth keeps its own {key} in its own layout, not containerd's; to keep it on \
                     the same file system, set {key} = \"{}\"",
                    parent.join("berth").display()
                ),
            )
        }
        None => (Check, "not a string".into()),
    }
}

/// The reasons for the keys of `plugins.ID`.
fn plugin_reason(version: Version, id: &str, rest: &[&str], value: &Value) -> (Group, String) {
    let cri_roots: &[&str] = match version {
        Version::V2 => &[CRI],
        Version::V3 => &[CRI, RUNTIME, IMAGES],
    };
    if cri_roots.contains(&id) {
        return cri_reason(version, id, rest, value);
    }
    match (id, rest) {
        (NRI, _) => (Check, unknown(version)),
        ("io.containerd.transfer.v1.local", ["max_concurrent_downloads"]) => (
            unless(value, 3),
            "containerd 2.1+ pulls through its transfer service with this limit; berth's \
             registry.max_concurrent_downloads comes from the CRI images plugin's value"
                .into(),
        ),
        ("io.containerd.transfer.v1.local", ["config_path"]) => (
            unless_empty(value),
            "containerd 2.1+'s transfer service reads hosts.toml files from here; berth's \
             registry.config_path comes from the CRI images plugin's registry.config_path: make \
             them one"
                .into(),
        ),
        ("io.containerd.service.v1.tasks-service", ["rdt_config_file" | "blockio_config_file"]) => (
            unless_empty(value),
            "berth configures no RDT or blockio classes (a container asking for one is refused)"
                .into(),
        ),
        ("io.containerd.runtime.v2.task", ["sched_core"]) => (
            unless_empty(value),
            "berth does not create core-scheduling domains".into(),
        ),
        (other, _) => (
            Nothing,
            format!(
                "berth has no containerd plugin {other}: it does that job its own way, or not at \
                 all"
            ),
        ),
    }
}

/// Which plugin of version 3 reads a CRI key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Runtime,
    Images,
    Server,
    /// `stats_collect_period` is in both runtime and images.
    Either,
    /// Only in version 2's single CRI plugin.
    V2,
}

/// The reasons for the keys of the CRI plugin(s).
fn cri_reason(version: Version, id: &str, rest: &[&str], value: &Value) -> (Group, String) {
    let Some((owner, group, reason)) = cri_key(rest, value) else {
        return (Check, unknown(version));
    };
    if version == Version::V3 {
        let here = match id {
            RUNTIME => Owner::Runtime,
            IMAGES => Owner::Images,
            _ => Owner::Server,
        };
        let read_here = owner == here || (owner == Owner::Either && here != Owner::Server);
        if !read_here {
            return (
                Nothing,
                format!(
                    "containerd 2.x does not read this key in plugin {id} (it is a version 2 key, \
                     or belongs to another plugin), so it was not in effect"
                ),
            );
        }
    }
    (group, reason)
}

/// A CRI key's owner, group and reason; `None` when unknown.
fn cri_key(rest: &[&str], value: &Value) -> Option<(Owner, Group, String)> {
    use Owner::*;
    let s = |text: &str| text.to_string();
    Some(match rest {
        // Images.
        ["sandbox_image"] => (
            V2,
            Nothing,
            s("berth pulls no pause image: its pause is a program built into berth-shim, and pods \
               that need none get none"),
        ),
        ["pinned_images", "sandbox"] => (
            Images,
            Nothing,
            s("berth pulls no pause image: its pause is a program built into berth-shim, and pods \
               that need none get none"),
        ),
        ["pinned_images", ..] => (
            Images,
            Check,
            s("berth pins no images: kubelet's image garbage collection may remove it"),
        ),
        ["snapshotter"] | ["containerd", "snapshotter"] => (
            if rest.len() == 1 { Images } else { V2 },
            unless(value, "overlayfs"),
            s("berth unpacks images into its own overlay snapshots; it has no other snapshotters"),
        ),
        ["disable_snapshot_annotations"] | ["containerd", "disable_snapshot_annotations"] => (
            if rest.len() == 1 { Images } else { V2 },
            unless(value, true),
            s("berth has no remote snapshotters that would read snapshot annotations"),
        ),
        ["discard_unpacked_layers"] | ["containerd", "discard_unpacked_layers"] => (
            if rest.len() == 1 { Images } else { V2 },
            Nothing,
            s("berth's image store has its own layout (no containerd content store)"),
        ),
        ["image_pull_with_sync_fs"] => (
            Images,
            Nothing,
            s("berth's image store syncs what it writes itself"),
        ),
        ["use_local_image_pull"] | ["concurrent_layer_fetch_buffer"] => (
            Images,
            Nothing,
            s("berth has one pull of its own, configured under [registry]"),
        ),
        ["stats_collect_period"] => (
            Either,
            Nothing,
            s("berth collects usage when kubelet asks for it (no collection period)"),
        ),
        ["runtime_platforms", ..] => (
            Images,
            unless_empty(value),
            s("berth pulls for the node's own platform only"),
        ),
        ["image_decryption", "key_model"] => (
            Images,
            if value.as_str().is_some_and(|m| m.is_empty() || m == "node") {
                Nothing
            } else {
                Check
            },
            s("berth does not decrypt images (an encrypted layer fails the pull)"),
        ),
        ["registry", "headers", ..] => (
            Images,
            Check,
            s("berth sends extra headers per host only, from `header` in that host's hosts.toml \
               under registry.config_path"),
        ),
        // Runtime.
        ["systemd_cgroup"] => (
            V2,
            unless_empty(value),
            s("the io.containerd.runtime.v1.linux shim's setting; berth's cgroup driver is \
               runtime.cgroup_driver, taken from the runc handlers' SystemdCgroup"),
        ),
        ["containerd", "no_pivot"] => (
            V2,
            unless_empty(value),
            s("berth always has the runtime use pivot_root"),
        ),
        ["containerd", "default_runtime" | "untrusted_workload_runtime", ..] => (
            V2,
            unless_empty(value),
            s("deprecated containerd runtime; berth's handlers come from containerd.runtimes only \
               (add it as runtime.handlers.NAME by hand)"),
        ),
        ["containerd", "ignore_rdt_not_enabled_errors" | "ignore_blockio_not_enabled_errors"] => (
            Runtime,
            unless_empty(value),
            s("berth configures no RDT or blockio classes: a container asking for one is refused"),
        ),
        ["cni", "conf_template"] => (
            Runtime,
            unless_empty(value),
            s("berth renders no CNI templates: put the network configuration into cni.conf_dir"),
        ),
        ["cni", "ip_pref"] => (
            Runtime,
            if value.as_str().is_some_and(|p| p.is_empty() || p == "ipv4") {
                Nothing
            } else {
                Check
            },
            s("berth reports a pod's IPv4 address first, then the others in CNI's order"),
        ),
        ["cni", "setup_serially"] => (
            Runtime,
            Nothing,
            s("berth attaches a pod to one network; its plugins run in order, as CNI specifies"),
        ),
        ["cni", "use_internal_loopback"] => (
            Runtime,
            Nothing,
            s("berth always brings `lo` up itself (no loopback plugin), as containerd with true"),
        ),
        ["enable_selinux"] => (
            Runtime,
            unless_empty(value),
            s("berth applies no SELinux labels (on an SELinux host a request with selinux_options \
               is refused)"),
        ),
        ["selinux_category_range"] => (Runtime, Nothing, s("berth applies no SELinux labels")),
        ["max_container_log_line_size"] => (
            Runtime,
            unless(value, 16384),
            s("berth splits container log lines at 16384 bytes (containerd's default), fixed"),
        ),
        ["disable_cgroup"] => (
            Runtime,
            unless_empty(value),
            s("berth always puts containers in cgroups"),
        ),
        ["disable_apparmor"] => (
            Runtime,
            unless_empty(value),
            s("berth applies AppArmor wherever the host has it"),
        ),
        ["restrict_oom_score_adj"] => (
            Runtime,
            unless(value, true),
            s("berth never gives a container an oom_score_adj below its own, as containerd with \
               true"),
        ),
        ["disable_proc_mount"] => (
            Runtime,
            unless_empty(value),
            s("berth honours procMount (Unmasked) where the pod has its own user namespace"),
        ),
        ["unset_seccomp_profile"] => (
            Runtime,
            unless_empty(value),
            s("a container that names no seccomp profile runs unconfined in berth, as in \
               containerd with this empty (kubelet's seccompDefault asks for RuntimeDefault)"),
        ),
        ["tolerate_missing_hugetlb_controller"] => (
            Runtime,
            unless(value, true),
            s("berth drops hugepage limits where the hugetlb controller is missing, as containerd \
               with true"),
        ),
        ["disable_hugetlb_controller"] => (
            Runtime,
            Nothing,
            s("berth sets hugepage limits wherever the hugetlb controller is there"),
        ),
        ["device_ownership_from_security_context"] => (
            Runtime,
            unless_empty(value),
            s("berth gives devices their owner on the host, as containerd with false"),
        ),
        ["ignore_image_defined_volumes"] => (
            Runtime,
            unless_empty(value),
            s("berth always mounts the volumes an image defines"),
        ),
        ["netns_mounts_under_state_dir"] => (
            Runtime,
            Nothing,
            s("berth always mounts network namespaces under its own state dir (<state>/netns)"),
        ),
        ["enable_unprivileged_ports"] => (
            Runtime,
            unless_empty(value),
            s("berth sets no sysctls of its own: a pod that needs \
               net.ipv4.ip_unprivileged_port_start=0 sets it in its securityContext.sysctls"),
        ),
        ["enable_unprivileged_icmp"] => (
            Runtime,
            unless_empty(value),
            s("berth sets no sysctls of its own: a pod that needs net.ipv4.ping_group_range sets \
               it in its securityContext.sysctls"),
        ),
        ["enable_cdi"] => (
            Runtime,
            unless(value, true),
            s("berth always resolves CDI devices (runtime.cdi_spec_dirs)"),
        ),
        ["drain_exec_sync_io_timeout"] => (
            Runtime,
            if value.as_str().is_some_and(|t| t.is_empty() || t == "0s" || t == "0") {
                Nothing
            } else {
                Check
            },
            s("berth reads an exec's output for a fixed 1 s after the process exits, then answers \
               ExecSync (containerd with 0s waits until the pipes close)"),
        ),
        ["ignore_deprecation_warnings"] => (Runtime, Nothing, s("berth has no such warnings")),
        ["stats_retention_period"] => (
            Runtime,
            Nothing,
            s("berth reads container stats when kubelet asks for them"),
        ),
        ["enable_criu"] => (
            Runtime,
            Nothing,
            s("berth does not checkpoint (CheckpointContainer answers Unimplemented)"),
        ),
        // Server.
        ["disable_tcp_service"] => (
            Server,
            unless(value, true),
            s("berth serves CRI on its unix socket only, never on TCP"),
        ),
        _ => return None,
    })
}

/// Why a key of runtime handler `name` (a runc one, carried over) is not
/// itself carried over; `rest` is below `containerd.runtimes.NAME`.
pub fn handler_reason(rest: &[&str], value: &Value) -> (Group, String) {
    let s = |text: &str| text.to_string();
    match rest {
        ["runtime_path"] => (
            unless_empty(value),
            s(
                "names a containerd shim; berth runs its own berth-shim (runtime.shim_binary) for \
               every handler",
            ),
        ),
        ["runtime_engine" | "runtime_root"] => (
            unless_empty(value),
            s("a setting of the io.containerd.runtime.v1.linux shim, not of runc.v2"),
        ),
        ["privileged_without_host_devices"] => (
            unless_empty(value),
            s("berth gives privileged containers every host device"),
        ),
        ["privileged_without_host_devices_all_devices_allowed"] => (
            unless_empty(value),
            s("berth gives privileged containers every host device"),
        ),
        ["cgroup_writable"] => (
            unless_empty(value),
            s("berth mounts /sys/fs/cgroup read-only in unprivileged containers"),
        ),
        ["base_runtime_spec"] => (
            unless_empty(value),
            s("berth builds every OCI spec itself; it reads no base spec file"),
        ),
        ["cni_conf_dir"] | ["cni_max_conf_num"] => (
            unless_empty(value),
            s("berth has one CNI configuration for every handler (cni.conf_dir)"),
        ),
        ["snapshotter"] => (
            unless_empty(value),
            s("berth has only its own overlay snapshots"),
        ),
        ["sandboxer" | "sandbox_mode"] => (
            if value
                .as_str()
                .is_some_and(|m| m.is_empty() || m == "podsandbox")
            {
                Nothing
            } else {
                Check
            },
            s(
                "berth has no sandbox controllers: its pods are runc containers (or pinned \
               namespaces)",
            ),
        ),
        ["disable_pause_image_pull"] => (Nothing, s("berth pulls no pause image")),
        ["io_type"] => (
            if value.as_str().is_some_and(|t| t.is_empty() || t == "fifo") {
                Nothing
            } else {
                Check
            },
            s("berth's shim carries container I/O itself"),
        ),
        ["options", "Root"] => (
            unless_empty(value),
            s("berth keeps every handler's runtime state under <state>/runtime"),
        ),
        ["options", "NoPivotRoot"] => (
            unless_empty(value),
            s("berth always has the runtime use pivot_root"),
        ),
        ["options", "NoNewKeyring"] => (
            unless_empty(value),
            s("berth lets the runtime make a session keyring per container (its default)"),
        ),
        ["options", "ShimCgroup"] => (
            unless_empty(value),
            s("berth has no setting for its shims' cgroup"),
        ),
        ["options", "IoUid" | "IoGid"] => (
            unless_empty(value),
            s("berth has no setting for the owner of container I/O"),
        ),
        ["options", "CriuPath" | "CriuImagePath" | "CriuWorkPath"] => (
            unless_empty(value),
            s("berth does not checkpoint (CheckpointContainer answers Unimplemented)"),
        ),
        ["options", ..] => (Check, s("unknown runc option")),
        _ => (
            Check,
            s("unknown to berth's importer (not a runtime key that it knows)"),
        ),
    }
}
