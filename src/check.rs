//! `berth check`: the host's prerequisites, each reported as ok, missing
//! (required: the exit code is then non-zero), warn (optional, or degraded)
//! or info, with how to fix what is not there.
//!
//! Every look at the host goes through [`Host`], so the logic is unit-tested
//! against a fake host; [`RealHost`] is the machine berth runs on.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{CgroupDriver, Config};

/// How long `BINARY --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this much of a file or of a command's output is read.
const MAX_READ: u64 = 256 * 1024;

/// What the checks may ask of the host.
pub trait Host {
    /// The contents of a small file (`/proc`, `/sys`, CNI configs), or None.
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Whether `path` is a file with an execute bit.
    fn is_executable(&self, path: &Path) -> bool;
    /// The entries of a directory, sorted; empty when it cannot be read.
    fn list_dir(&self, path: &Path) -> Vec<PathBuf>;
    /// The directories of `PATH`.
    fn path_dirs(&self) -> Vec<PathBuf>;
    /// The first line of `binary --version`, or why it could not be had.
    fn version(&self, binary: &Path) -> Result<String, String>;
    /// The running kernel's release (`uname -r`).
    fn kernel_release(&self) -> String;
    /// The effective user id.
    fn euid(&self) -> u32;
    /// The directory of the running berth binary.
    fn exe_dir(&self) -> Option<PathBuf>;
}

/// How one prerequisite stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Info,
    Warn,
    Missing,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Missing => "missing",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub status: Status,
    /// What was checked, e.g. `runtime runc`.
    pub name: String,
    /// What was found.
    pub detail: String,
    /// How to fix it, when it is not ok.
    pub fix: Option<String>,
}

fn item(status: Status, name: impl Into<String>, detail: impl Into<String>) -> Item {
    Item {
        status,
        name: name.into(),
        detail: detail.into(),
        fix: None,
    }
}

impl Item {
    fn fix(mut self, fix: impl Into<String>) -> Item {
        self.fix = Some(fix.into());
        self
    }
}

/// Runs every check for `config` on `host`.
pub fn run(config: &Config, host: &dyn Host) -> Vec<Item> {
    let mut items = vec![check_root(host)];
    items.extend(check_runtimes(config, host));
    items.push(check_shim(config, host));
    items.extend(check_cgroups(config, host));
    items.push(check_overlay(host));
    items.extend(check_cni(config, host));
    items.extend(check_sysctls(host));
    items.push(check_idmapped_mounts(host));
    items.extend(check_security_modules(host));
    items
}

/// The line for a configuration that does not validate.
pub fn config_item(error: &str) -> Item {
    item(Status::Missing, "config", error.to_string())
        .fix("correct the key in the file named (berth config show prints what is in effect)")
}

/// Whether berth can start: nothing required is missing.
pub fn passed(items: &[Item]) -> bool {
    items.iter().all(|i| i.status != Status::Missing)
}

/// The report as printed by `berth check`.
pub fn render(items: &[Item]) -> String {
    let width = items.iter().map(|i| i.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for i in items {
        out.push_str(&format!(
            "{:<8} {:<width$}  {}\n",
            i.status.label(),
            i.name,
            i.detail
        ));
        if let Some(fix) = &i.fix {
            out.push_str(&format!("{:<8} {:<width$}  fix: {fix}\n", "", ""));
        }
    }
    let count = |s| items.iter().filter(|i| i.status == s).count();
    out.push_str(&format!(
        "{} ok, {} info, {} warnings, {} missing\n",
        count(Status::Ok),
        count(Status::Info),
        count(Status::Warn),
        count(Status::Missing)
    ));
    out
}

fn check_root(host: &dyn Host) -> Item {
    match host.euid() {
        0 => item(Status::Ok, "root", "running as root"),
        uid => item(
            Status::Missing,
            "root",
            format!("running as uid {uid}: berth mounts, makes namespaces and cgroups"),
        )
        .fix("run berth (and berth check) as root"),
    }
}

/// A binary named by an absolute path, or looked up in `PATH`.
fn resolve(host: &dyn Host, binary: &str) -> Option<PathBuf> {
    if binary.contains('/') {
        let path = PathBuf::from(binary);
        return host.is_executable(&path).then_some(path);
    }
    host.path_dirs()
        .into_iter()
        .map(|dir| dir.join(binary))
        .find(|p| host.is_executable(p))
}

fn check_runtimes(config: &Config, host: &dyn Host) -> Vec<Item> {
    let mut items = Vec::new();
    // The default handler first: it is the one every pod without a handler uses.
    let mut handlers: Vec<_> = config.runtime.handlers.iter().collect();
    handlers.sort_by_key(|(name, _)| **name != config.runtime.default_handler);
    for (name, handler) in handlers {
        let default = *name == config.runtime.default_handler;
        let role = if default { " (default handler)" } else { "" };
        let label = format!("runtime {name}");
        // A handler other than the default is only needed by pods that ask for it.
        let absent = if default {
            Status::Missing
        } else {
            Status::Warn
        };
        let install = format!(
            "install it (apt-get install {}) or set runtime.handlers.{name}.binary",
            handler.binary.rsplit('/').next().unwrap_or(&handler.binary)
        );
        let Some(path) = resolve(host, &handler.binary) else {
            items.push(
                item(
                    absent,
                    label,
                    format!("{:?} not found in PATH{role}", handler.binary),
                )
                .fix(install),
            );
            continue;
        };
        match host.version(&path) {
            Ok(version) => items.push(item(
                Status::Ok,
                label,
                format!("{}: {version}{role}", path.display()),
            )),
            Err(e) => items.push(
                item(
                    absent,
                    label,
                    format!("{} does not run: {e}{role}", path.display()),
                )
                .fix(install),
            ),
        }
    }
    items
}

fn check_shim(config: &Config, host: &dyn Host) -> Item {
    // As the daemon looks for it: the configured path, else next to berth, else PATH.
    let found = if !config.runtime.shim_binary.is_empty() {
        resolve(host, &config.runtime.shim_binary)
    } else {
        host.exe_dir()
            .map(|dir| dir.join("berth-shim"))
            .filter(|p| host.is_executable(p))
            .or_else(|| resolve(host, "berth-shim"))
    };
    match found {
        Some(path) => item(Status::Ok, "berth-shim", path.display().to_string()),
        None => item(
            Status::Missing,
            "berth-shim",
            "not found next to berth nor in PATH",
        )
        .fix("install berth-shim beside berth (the package does), or set runtime.shim_binary"),
    }
}

/// Which cgroup hierarchies are mounted, from mountinfo.
#[derive(Debug, PartialEq, Eq)]
enum CgroupMode {
    V1,
    Hybrid,
    V2,
    None,
}

fn cgroup_mode(mountinfo: &str) -> CgroupMode {
    let mut v1 = false;
    let mut v2_root = false;
    let mut v2_elsewhere = false;
    for mount in berth_mountinfo::mounts(mountinfo) {
        match mount.fs_type.as_str() {
            "cgroup" => v1 = true,
            "cgroup2" if mount.mount_point == Path::new("/sys/fs/cgroup") => v2_root = true,
            "cgroup2" => v2_elsewhere = true,
            _ => {}
        }
    }
    match (v1, v2_root, v2_elsewhere) {
        (_, true, _) => CgroupMode::V2,
        (true, _, true) => CgroupMode::Hybrid,
        (true, _, false) => CgroupMode::V1,
        _ => CgroupMode::None,
    }
}

fn check_cgroups(config: &Config, host: &dyn Host) -> Vec<Item> {
    let mut items = Vec::new();
    let mountinfo = host
        .read(Path::new("/proc/self/mountinfo"))
        .unwrap_or_default();
    let mode = cgroup_mode(&mountinfo);
    let (mode_text, required, available): (&str, &[&str], Vec<String>) = match mode {
        CgroupMode::V2 => (
            "v2 (unified)",
            &["cpu", "memory", "pids"],
            host.read(Path::new("/sys/fs/cgroup/cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        ),
        CgroupMode::V1 | CgroupMode::Hybrid => (
            if mode == CgroupMode::V1 {
                "v1"
            } else {
                "v1 (hybrid: v2 mounted beside, not used for containers)"
            },
            &["cpu", "cpuacct", "memory", "pids", "devices"],
            enabled_v1_controllers(&host.read(Path::new("/proc/cgroups")).unwrap_or_default()),
        ),
        CgroupMode::None => {
            items.push(
                item(
                    Status::Missing,
                    "cgroups",
                    "no cgroup filesystem is mounted",
                )
                .fix("mount cgroup2 on /sys/fs/cgroup (or boot with systemd, which does)"),
            );
            return items;
        }
    };
    items.push(item(Status::Ok, "cgroup mode", mode_text));
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|c| !available.iter().any(|a| a == c))
        .collect();
    if missing.is_empty() {
        items.push(item(Status::Ok, "cgroup controllers", available.join(" ")));
    } else {
        items.push(
            item(
                Status::Missing,
                "cgroup controllers",
                format!("{} not enabled (have: {})", missing.join(", "), available.join(" ")),
            )
            .fix("enable them on the kernel command line (e.g. cgroup_enable=memory) or, on v2, in cgroup.subtree_control"),
        );
    }
    let systemd = host.is_dir(Path::new("/run/systemd/system"));
    match config.runtime.cgroup_driver {
        CgroupDriver::Systemd if systemd => items.push(item(
            Status::Ok,
            "cgroup driver",
            "systemd (systemd is init)",
        )),
        CgroupDriver::Systemd => items.push(
            item(
                Status::Missing,
                "cgroup driver",
                "systemd chosen, but systemd is not init here (no /run/systemd/system)",
            )
            .fix("set runtime.cgroup_driver = \"cgroupfs\" (and kubelet's cgroupDriver to match)"),
        ),
        CgroupDriver::Cgroupfs => items.push(item(
            Status::Info,
            "cgroup driver",
            if systemd {
                "cgroupfs; systemd is init: kubeadm's default is the systemd driver, and kubelet's cgroupDriver must match berth's"
            } else {
                "cgroupfs (systemd is not init; kubelet's cgroupDriver must be cgroupfs too)"
            },
        )),
    }
    items
}

/// The controllers `/proc/cgroups` lists as enabled.
fn enabled_v1_controllers(proc_cgroups: &str) -> Vec<String> {
    proc_cgroups
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.len() >= 4 && fields[3] == "1").then(|| fields[0].to_string())
        })
        .collect()
}

fn check_overlay(host: &dyn Host) -> Item {
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

fn check_cni(config: &Config, host: &dyn Host) -> Vec<Item> {
    let cni = &config.cni;
    let mut items = Vec::new();
    let mut networks = Vec::new();
    for path in host.list_dir(&cni.conf_dir) {
        let is_config = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| berth_cni::CONFIG_EXTENSIONS.contains(&e));
        if !is_config {
            continue;
        }
        let Some(text) = host.read(&path) else {
            continue;
        };
        match berth_cni::NetworkConfigList::from_bytes(text.as_bytes(), Some(&path)) {
            Ok(net) => networks.push(net),
            Err(e) => items.push(
                item(Status::Warn, "cni config", format!("{e}"))
                    .fix("fix or remove the file: berth skips it"),
            ),
        }
    }
    let chosen = if cni.network_name.is_empty() {
        networks.first()
    } else {
        networks.iter().find(|n| n.name == cni.network_name)
    };
    let plugins: Vec<String> = match chosen {
        Some(net) => {
            items.push(item(
                Status::Ok,
                "cni network",
                format!(
                    "{:?} from {}",
                    net.name,
                    net.source
                        .as_deref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                ),
            ));
            net.plugins
                .iter()
                .flat_map(|p| std::iter::once(p.plugin_type.clone()).chain(p.ipam_type.clone()))
                .collect()
        }
        None if !cni.network_name.is_empty() => {
            items.push(
                item(
                    Status::Missing,
                    "cni network",
                    format!(
                        "no network named {:?} in {}",
                        cni.network_name,
                        cni.conf_dir.display()
                    ),
                )
                .fix(
                    "write that network's .conflist into cni.conf_dir, or change cni.network_name",
                ),
            );
            Vec::new()
        }
        None if cni.write_default_network => {
            items.push(item(
                Status::Ok,
                "cni network",
                format!(
                    "none in {} yet: berth writes its default network ({}, bridge {}) at start",
                    cni.conf_dir.display(),
                    cni.default_subnet,
                    cni.default_bridge
                ),
            ));
            ["bridge", "host-local", "portmap"]
                .map(String::from)
                .to_vec()
        }
        None => {
            items.push(
                item(
                    Status::Missing,
                    "cni network",
                    format!("no network configuration in {}", cni.conf_dir.display()),
                )
                .fix("install your CNI's configuration, or set cni.write_default_network = true"),
            );
            Vec::new()
        }
    };
    let mut seen = BTreeMap::new();
    for plugin in plugins {
        if seen.insert(plugin.clone(), ()).is_some() {
            continue;
        }
        let found = cni
            .bin_dirs
            .iter()
            .map(|d| d.join(&plugin))
            .find(|p| host.is_executable(p));
        let dirs = cni
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        items.push(match found {
            Some(path) => item(
                Status::Ok,
                format!("cni plugin {plugin}"),
                path.display().to_string(),
            ),
            None => item(
                Status::Missing,
                format!("cni plugin {plugin}"),
                format!("not in {dirs}"),
            )
            .fix(
                "apt-get install containernetworking-plugins, or add its directory to cni.bin_dirs",
            ),
        });
    }
    items
}

fn check_sysctls(host: &dyn Host) -> Vec<Item> {
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

/// `major.minor` of a kernel release such as `6.1.0-18-amd64`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn check_idmapped_mounts(host: &dyn Host) -> Item {
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

fn check_security_modules(host: &dyn Host) -> Vec<Item> {
    let apparmor = host
        .read(Path::new("/sys/module/apparmor/parameters/enabled"))
        .map(|v| v.trim() == "Y")
        .unwrap_or(false);
    let selinux = host
        .read(Path::new("/sys/fs/selinux/enforce"))
        .map(|v| v.trim().to_string());
    vec![
        item(
            Status::Info,
            "apparmor",
            if apparmor {
                "enabled (berth applies no AppArmor profiles yet)"
            } else {
                "not present"
            },
        ),
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

/// The machine berth runs on.
pub struct RealHost;

impl Host for RealHost {
    fn read(&self, path: &Path) -> Option<String> {
        let file = std::fs::File::open(path).ok()?;
        let mut text = String::new();
        file.take(MAX_READ).read_to_string(&mut text).ok()?;
        Some(text)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn is_executable(&self, path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    fn list_dir(&self, path: &Path) -> Vec<PathBuf> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        entries.sort();
        entries
    }
    fn path_dirs(&self) -> Vec<PathBuf> {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default()
    }
    fn version(&self, binary: &Path) -> Result<String, String> {
        run_version(binary)
    }
    fn kernel_release(&self) -> String {
        nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default()
    }
    fn euid(&self) -> u32 {
        nix::unistd::geteuid().as_raw()
    }
    fn exe_dir(&self) -> Option<PathBuf> {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    }
}

/// Runs `binary --version` with a time limit and returns its first line.
fn run_version(binary: &Path) -> Result<String, String> {
    let mut child = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let status = crate::process::wait_or_kill(&mut child, VERSION_TIMEOUT)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "`--version` did not answer in {}s",
                VERSION_TIMEOUT.as_secs()
            )
        })?;
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(MAX_READ).read_to_string(&mut out);
    }
    if !status.success() {
        return Err(format!("`--version` exited with {status}"));
    }
    Ok(out.lines().next().unwrap_or("").trim().to_string())
}

#[cfg(test)]
mod tests;
