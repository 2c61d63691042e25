//! What the kernel offers: overlayfs, the network sysctls, idmapped mounts
//! and the security modules.

use std::path::Path;

use berth_host::kernel_version;

use super::{item, Host, Item, Status};

pub(super) fn check_overlay(host: &dyn Host) -> Item {
    let listed = host
        .read(Path::new("/proc/filesystems"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"));
    if listed {
        return item(Status::Ok, "overlayfs", "in /proc/filesystems");
    }
    let module = Path::new("/lib/modules")
        .join(host.kernel_release())
        .join("kernel/fs/overlayfs");
    let fix = "modprobe overlay, and list `overlay` in /etc/modules-load.d/ (the systemd unit loads it before start)";
    if host.is_dir(&module) {
        item(
            Status::Missing,
            "overlayfs",
            "not loaded (the module is there)",
        )
        .fix(fix)
    } else {
        item(
            Status::Missing,
            "overlayfs",
            "not in /proc/filesystems and no overlay module for this kernel",
        )
        .fix(fix)
    }
}

pub(super) fn check_sysctls(host: &dyn Host) -> Vec<Item> {
    let read = |p: &str| host.read(Path::new(p)).map(|v| v.trim().to_string());
    let mut items = Vec::new();
    items.push(match read("/proc/sys/net/ipv4/ip_forward").as_deref() {
        Some("1") => item(Status::Ok, "ip_forward", "net.ipv4.ip_forward = 1"),
        value => item(
            Status::Warn,
            "ip_forward",
            format!(
                "net.ipv4.ip_forward = {}: pods cannot reach beyond the node (the bridge plugin turns it on at the first pod)",
                value.unwrap_or("unknown")
            ),
        )
        .fix("echo net.ipv4.ip_forward=1 > /etc/sysctl.d/99-kubernetes.conf && sysctl --system"),
    });
    items.push(
        match read("/proc/sys/net/bridge/bridge-nf-call-iptables").as_deref() {
            Some("1") => item(
                Status::Ok,
                "bridge-nf-call-iptables",
                "net.bridge.bridge-nf-call-iptables = 1",
            ),
            Some(value) => item(
                Status::Warn,
                "bridge-nf-call-iptables",
                format!("net.bridge.bridge-nf-call-iptables = {value}: kube-proxy's Service rules miss pod-to-pod traffic on the bridge"),
            )
            .fix("echo net.bridge.bridge-nf-call-iptables=1 >> /etc/sysctl.d/99-kubernetes.conf && sysctl --system"),
            None => item(
                Status::Warn,
                "bridge-nf-call-iptables",
                "br_netfilter is not loaded: kube-proxy's Service rules miss pod-to-pod traffic on the bridge",
            )
            .fix("modprobe br_netfilter and list it in /etc/modules-load.d/"),
        },
    );
    items
}

pub(super) fn check_idmapped_mounts(host: &dyn Host) -> Item {
    let release = host.kernel_release();
    match kernel_version(&release) {
        Some(v) if v >= (5, 19) => item(
            Status::Ok,
            "idmapped mounts",
            format!("kernel {release} (5.19+: idmapped mounts, on overlayfs too)"),
        ),
        Some(v) if v >= (5, 12) => item(
            Status::Info,
            "idmapped mounts",
            format!("kernel {release}: idmapped mounts, but not on overlayfs (needs 5.19)"),
        ),
        _ => item(
            Status::Info,
            "idmapped mounts",
            format!(
                "kernel {release}: none (needs 5.12); only pods with user namespaces need them"
            ),
        ),
    }
}

pub(super) fn check_security_modules(host: &dyn Host) -> Vec<Item> {
    let apparmor = host
        .read(Path::new("/sys/module/apparmor/parameters/enabled"))
        .map(|v| v.trim() == "Y")
        .unwrap_or(false);
    let selinux = host
        .read(Path::new("/sys/fs/selinux/enforce"))
        .map(|v| v.trim().to_string());
    let name = berth_spec::APPARMOR_DEFAULT;
    let apparmor = if apparmor {
        let list = host
            .read(Path::new(crate::apparmor::PROFILES))
            .unwrap_or_default();
        match crate::apparmor::loaded_mode(&list, name) {
            Some("enforce") => format!("enabled; {name} loaded (enforce)"),
            Some(mode) => format!(
                "enabled; {name} loaded in {mode} mode (berth replaces it, enforced, at start)"
            ),
            None => format!("enabled; {name} not loaded (berth loads it at start)"),
        }
    } else {
        "not present".to_string()
    };
    vec![
        item(Status::Info, "apparmor", apparmor),
        item(
            Status::Info,
            "selinux",
            match selinux.as_deref() {
                Some("1") => "enforcing (berth sets no SELinux labels yet)",
                Some(_) => "permissive (berth sets no SELinux labels yet)",
                None => "not present",
            },
        ),
    ]
}
