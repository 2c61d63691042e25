//! CDI (Container Device Interface) devices: `ContainerConfig.cdi_devices`
//! and the `cdi.k8s.io/*` annotations name devices as `vendor/class=name`;
//! the CDI spec files of the spec directories (vendors' tools write them,
//! e.g. `nvidia-ctk cdi generate`) say what each one means as edits to the
//! container: device nodes, mounts, environment, hooks, groups. A device
//! that no spec defines is an error, never dropped.
//!
//! Spec files are `*.json` or `*.yaml` in each directory (not recursive);
//! a later directory wins over an earlier one for the same device, and two
//! files of one directory that define the same device make it unusable, as
//! in the CDI reference implementation. A file that cannot be used (not a
//! regular file, too large, malformed) is skipped, and named in the error of
//! a device that is then missing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use cri_api::v1;
use oci_spec::runtime::{Hook, Hooks, LinuxDevice, LinuxDeviceType, Mount, Spec};
use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::devices::{cgroup_rule, device_from_path};
use crate::error::{invalid, invalid_path, Error};

/// Where CDI specs are looked for, lowest priority first (the CDI
/// defaults: static specs in /etc/cdi, generated ones in /var/run/cdi).
pub const DEFAULT_CDI_SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];

/// The prefix of the annotations that request CDI devices (the value: a
/// comma-separated list of qualified names).
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The largest spec file read.
const MAX_SPEC_BYTES: u64 = 4 << 20;

/// The most spec files read from one directory.
const MAX_SPEC_FILES: usize = 1024;

const FIELD: &str = "cdi_devices";

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFile {
    cdi_version: String,
    kind: String,
    #[serde(default)]
    devices: Vec<DeviceSpec>,
    #[serde(default)]
    container_edits: Option<Edits>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceSpec {
    name: String,
    #[serde(default)]
    container_edits: Option<Edits>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Edits {
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    hooks: Vec<HookSpec>,
    #[serde(default)]
    mounts: Vec<MountSpec>,
    #[serde(default)]
    additional_gids: Vec<u32>,
    /// Edits berth cannot make: a device that asks for them is refused.
    #[serde(default)]
    intel_rdt: Option<IgnoredAny>,
    #[serde(default)]
    net_devices: Option<IgnoredAny>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceNode {
    path: String,
    #[serde(default)]
    host_path: Option<String>,
    #[serde(default, rename = "type")]
    typ: Option<String>,
    #[serde(default)]
    major: Option<i64>,
    #[serde(default)]
    minor: Option<i64>,
    #[serde(default)]
    file_mode: Option<u32>,
    #[serde(default)]
    permissions: Option<String>,
    #[serde(default)]
    uid: Option<u32>,
    #[serde(default)]
    gid: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MountSpec {
    host_path: String,
    container_path: String,
    #[serde(default, rename = "type")]
    typ: Option<String>,
    #[serde(default)]
    options: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookSpec {
    hook_name: String,
    path: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    timeout: Option<i64>,
}

/// One device found: the edits of its spec file and its own.
#[derive(Debug, Clone)]
struct Found {
    file: PathBuf,
    spec_edits: Option<Edits>,
    edits: Edits,
}

/// The CDI devices of the spec directories.
#[derive(Debug, Default)]
struct Registry {
    devices: HashMap<String, Found>,
    /// Devices defined twice in one directory.
    conflicts: HashMap<String, Vec<PathBuf>>,
    /// Files that could not be used, with why.
    skipped: Vec<String>,
}

/// Whether `kind` is `vendor/class` as CDI allows.
fn valid_kind(kind: &str) -> bool {
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    let ok = |s: &str, extra: &[char]| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    ok(vendor, &['-', '_', '.']) && ok(class, &['-', '_'])
}

/// Whether `name` is a CDI device name.
fn valid_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// Reads one spec file: a regular file, bounded, opened without blocking.
fn read_spec(path: &Path) -> Result<SpecFile, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| e.to_string())?;
    let md = file.metadata().map_err(|e| e.to_string())?;
    if !md.file_type().is_file() {
        return Err("not a regular file".into());
    }
    let mut text = Vec::new();
    file.take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_SPEC_BYTES {
        return Err(format!("larger than {MAX_SPEC_BYTES} bytes"));
    }
    // YAML is a superset of JSON: one parser reads both.
    let spec: SpecFile = serde_yaml_ng::from_slice(&text).map_err(|e| e.to_string())?;
    if spec.cdi_version.is_empty() {
        return Err("no cdiVersion".into());
    }
    if !valid_kind(&spec.kind) {
        return Err(format!("kind {:?} is not vendor/class", spec.kind));
    }
    if let Some(d) = spec.devices.iter().find(|d| !valid_name(&d.name)) {
        return Err(format!("device name {:?} is not valid", d.name));
    }
    Ok(spec)
}

impl Registry {
    /// Reads the spec files of `dirs`, lowest priority first. A directory
    /// that does not exist has no devices.
    fn load(dirs: &[PathBuf]) -> Registry {
        let mut reg = Registry::default();
        for dir in dirs {
            let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
                Ok(entries) => entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        matches!(
                            p.extension().and_then(|e| e.to_str()),
                            Some("json" | "yaml")
                        )
                    })
                    .take(MAX_SPEC_FILES)
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    reg.skipped.push(format!("{}: {e}", dir.display()));
                    continue;
                }
            };
            files.sort();
            let mut here: HashMap<String, Found> = HashMap::new();
            let mut conflicts: HashMap<String, Vec<PathBuf>> = HashMap::new();
            for file in files {
                let spec = match read_spec(&file) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(file = %file.display(), error = %e, "CDI spec skipped");
                        reg.skipped.push(format!("{}: {e}", file.display()));
                        continue;
                    }
                };
                for d in &spec.devices {
                    let name = format!("{}={}", spec.kind, d.name);
                    let found = Found {
                        file: file.clone(),
                        spec_edits: spec.container_edits.clone(),
                        edits: d.container_edits.clone().unwrap_or_default(),
                    };
                    if let Some(prev) = here.insert(name.clone(), found) {
                        conflicts
                            .entry(name)
                            .or_insert_with(|| vec![prev.file])
                            .push(file.clone());
                    }
                }
            }
            // This directory wins over the earlier ones, device by device.
            for (name, files) in conflicts {
                here.remove(&name);
                reg.devices.remove(&name);
                reg.conflicts.insert(name, files);
            }
            for (name, found) in here {
                reg.conflicts.remove(&name);
                reg.devices.insert(name, found);
            }
        }
        reg
    }
}

/// The CDI devices a container asks for, qualified names in order, without
/// repeats: `cdi_devices` first, then the `cdi.k8s.io/*` annotations
/// (sorted by key).
pub fn requested_cdi_devices(id: &str, config: &v1::ContainerConfig) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |name: &str, field: String| -> Result<(), Error> {
        let name = name.trim();
        let qualified = name
            .split_once('=')
            .is_some_and(|(kind, dev)| valid_kind(kind) && valid_name(dev));
        if !qualified {
            return Err(invalid(
                id,
                field,
                format!("{name:?} is not a qualified CDI device name (vendor.com/class=name)"),
            ));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        Ok(())
    };
    for (i, d) in config.cdi_devices.iter().enumerate() {
        push(&d.name, format!("{FIELD}[{i}].name"))?;
    }
    let keys: BTreeMap<&String, &String> = config
        .annotations
        .iter()
        .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX))
        .collect();
    for (k, v) in keys {
        for name in v.split(',').filter(|n| !n.trim().is_empty()) {
            push(name, format!("annotations[{k:?}]"))?;
        }
    }
    Ok(out)
}

/// Resolves the CDI devices the container asks for in `dirs` and applies
/// their edits to `spec`. Nothing asked: nothing read.
pub(crate) fn apply(
    id: &str,
    config: &v1::ContainerConfig,
    dirs: &[PathBuf],
    spec: &mut Spec,
) -> Result<(), Error> {
    let names = requested_cdi_devices(id, config)?;
    apply_cdi_devices(id, &names, dirs, spec)
}

/// Resolves the CDI devices `names` (qualified) in `dirs` and applies
/// their edits to `spec` (the devices an NRI plugin asks for, too).
pub fn apply_cdi_devices(
    id: &str,
    names: &[String],
    dirs: &[PathBuf],
    spec: &mut Spec,
) -> Result<(), Error> {
    if names.is_empty() {
        return Ok(());
    }
    let reg = Registry::load(dirs);
    let mut found = Vec::new();
    for name in names {
        match reg.devices.get(name) {
            Some(f) => found.push((name, f)),
            None => {
                let why = match reg.conflicts.get(name) {
                    Some(files) => format!(
                        "is defined more than once: {}",
                        files
                            .iter()
                            .map(|f| f.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None if reg.skipped.is_empty() => format!(
                        "is not defined by any CDI spec in {}",
                        dirs.iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None => format!(
                        "is not defined by any CDI spec usable here (skipped: {})",
                        reg.skipped.join("; ")
                    ),
                };
                return Err(invalid(id, FIELD, format!("CDI device {name:?} {why}")));
            }
        }
    }
    // Each spec file's own edits once, then each device's.
    let mut files_done: HashSet<&Path> = HashSet::new();
    for (name, f) in found {
        if files_done.insert(&f.file) {
            if let Some(e) = &f.spec_edits {
                edit(id, name, &f.file, e, spec)?;
            }
        }
        edit(id, name, &f.file, &f.edits, spec)?;
    }
    sort_mounts(spec);
    Ok(())
}

/// Mounts by depth of destination (parents first), keeping order otherwise.
fn sort_mounts(spec: &mut Spec) {
    if let Some(mounts) = spec.mounts_mut() {
        mounts.sort_by_key(|m| {
            let d = m.destination().to_string_lossy().to_string();
            crate::mounts::clean_path(&d).matches('/').count() - usize::from(d == "/")
        });
    }
}

/// The OCI device of a CDI device node: what the spec says, the rest from
/// the host's node.
fn device_node(id: &str, field: &str, n: &DeviceNode) -> Result<(LinuxDevice, String), Error> {
    let path = Path::new(&n.path);
    if !path.is_absolute() {
        return Err(invalid_path(id, field, path, "is not an absolute path"));
    }
    let host = Path::new(n.host_path.as_deref().unwrap_or(&n.path));
    let typ = match n.typ.as_deref() {
        None | Some("") => None,
        Some("b") => Some(LinuxDeviceType::B),
        Some("c") | Some("u") => Some(LinuxDeviceType::C),
        Some("p") => Some(LinuxDeviceType::P),
        Some(t) => return Err(invalid(id, field, format!("unknown device type {t:?}"))),
    };
    let need_host = typ.is_none()
        || (typ != Some(LinuxDeviceType::P) && (n.major.is_none() || n.minor.is_none()));
    let from_host = if need_host {
        Some(
            device_from_path(host)
                .map_err(|e| invalid_path(id, field, host, format!("cannot be read: {e}")))?
                .ok_or_else(|| invalid_path(id, field, host, "is not a device node"))?,
        )
    } else {
        None
    };
    let mut d = from_host.clone().unwrap_or_default();
    d.set_path(path.to_owned());
    if let Some(t) = typ {
        d.set_typ(t);
    }
    if let Some(m) = n.major {
        d.set_major(m);
    }
    if let Some(m) = n.minor {
        d.set_minor(m);
    }
    if n.file_mode.is_some() {
        d.set_file_mode(n.file_mode);
    }
    if n.uid.is_some() {
        d.set_uid(n.uid);
    }
    if n.gid.is_some() {
        d.set_gid(n.gid);
    }
    let access = n.permissions.clone().unwrap_or_else(|| "rwm".into());
    if access.is_empty() || !access.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        return Err(invalid(
            id,
            field,
            format!("invalid permissions {access:?}"),
        ));
    }
    Ok((d, access))
}

/// Applies one set of edits.
fn edit(id: &str, device: &str, file: &Path, e: &Edits, spec: &mut Spec) -> Result<(), Error> {
    let field = format!("{FIELD}[{device:?}] ({})", file.display());
    if e.intel_rdt.is_some() || e.net_devices.is_some() {
        return Err(invalid(
            id,
            field,
            "asks for intelRdt or netDevices edits, which berth does not make",
        ));
    }
    if !e.env.is_empty() {
        edit_env(id, &field, &e.env, spec)?;
    }
    if !e.additional_gids.is_empty() {
        edit_gids(id, &field, &e.additional_gids, spec)?;
    }
    for n in &e.device_nodes {
        add_device_node(id, &field, n, spec)?;
    }
    for m in &e.mounts {
        add_mount(id, &field, m, spec)?;
    }
    for h in &e.hooks {
        add_hook(id, &field, h, spec)?;
    }
    Ok(())
}

/// Adds environment variables: one of the same name is replaced.
fn edit_env(id: &str, field: &str, vars: &[String], spec: &mut Spec) -> Result<(), Error> {
    let process = spec.process_mut().get_or_insert_with(Default::default);
    let mut env = process.env().clone().unwrap_or_default();
    for var in vars {
        let Some((key, _)) = var.split_once('=') else {
            return Err(invalid(id, field, format!("env {var:?} is not KEY=VALUE")));
        };
        env.retain(|v| v.split_once('=').map_or(v.as_str(), |(k, _)| k) != key);
        env.push(var.clone());
    }
    process.set_env(Some(env));
    Ok(())
}

/// Adds supplementary groups the process does not have yet.
fn edit_gids(id: &str, field: &str, add: &[u32], spec: &mut Spec) -> Result<(), Error> {
    let process = spec.process_mut().get_or_insert_with(Default::default);
    let mut user = process.user().clone();
    let mut gids = user.additional_gids().clone().unwrap_or_default();
    for g in add {
        if *g == 0 || *g > i32::MAX as u32 {
            return Err(invalid(
                id,
                field,
                format!("additional gid {g} is not usable"),
            ));
        }
        if !gids.contains(g) {
            gids.push(*g);
        }
    }
    user.set_additional_gids(Some(gids));
    process.set_user(user);
    Ok(())
}

/// Adds a device node: made in the container (replacing one at the same
/// path) and allowed in its device cgroup.
fn add_device_node(id: &str, field: &str, n: &DeviceNode, spec: &mut Spec) -> Result<(), Error> {
    let (dev, access) = device_node(id, field, n)?;
    let linux = spec.linux_mut().get_or_insert_with(Default::default);
    let mut devices = linux.devices().clone().unwrap_or_default();
    devices.retain(|d| d.path() != dev.path());
    let rule = (dev.typ() != LinuxDeviceType::P).then(|| {
        cgroup_rule(
            true,
            Some(dev.typ()),
            Some(dev.major()),
            Some(dev.minor()),
            &access,
        )
    });
    devices.push(dev);
    linux.set_devices(Some(devices));
    if let Some(rule) = rule {
        let resources = linux.resources_mut().get_or_insert_with(Default::default);
        let mut rules = resources.devices().clone().unwrap_or_default();
        rules.push(rule);
        resources.set_devices(Some(rules));
    }
    Ok(())
}

/// Adds a mount: one at the same destination is replaced.
fn add_mount(id: &str, field: &str, m: &MountSpec, spec: &mut Spec) -> Result<(), Error> {
    for (p, what) in [
        (&m.host_path, "hostPath"),
        (&m.container_path, "containerPath"),
    ] {
        if !Path::new(p).is_absolute() {
            return Err(invalid(
                id,
                field,
                format!("mount {what} {p:?} is not absolute"),
            ));
        }
    }
    let mut mount = Mount::default();
    let dest = crate::mounts::clean_path(&m.container_path);
    mount.set_destination(PathBuf::from(&dest));
    mount.set_source(Some(PathBuf::from(&m.host_path)));
    let bind = m.options.iter().any(|o| o == "bind" || o == "rbind");
    let typ = match m.typ.as_deref() {
        Some(t) if !t.is_empty() => Some(t.to_string()),
        _ if bind => Some("bind".to_string()),
        _ => None,
    };
    mount.set_typ(typ);
    mount.set_options(Some(m.options.clone()));
    let mounts = spec.mounts_mut().get_or_insert_with(Vec::new);
    mounts.retain(|x| x.destination() != Path::new(&dest));
    mounts.push(mount);
    Ok(())
}

/// Adds a hook to the stage it names.
fn add_hook(id: &str, field: &str, h: &HookSpec, spec: &mut Spec) -> Result<(), Error> {
    if !Path::new(&h.path).is_absolute() {
        return Err(invalid(
            id,
            field,
            format!("hook path {:?} is not absolute", h.path),
        ));
    }
    let mut hook = Hook::default();
    hook.set_path(PathBuf::from(&h.path));
    hook.set_args((!h.args.is_empty()).then(|| h.args.clone()));
    hook.set_env((!h.env.is_empty()).then(|| h.env.clone()));
    hook.set_timeout(h.timeout);
    let hooks = spec.hooks_mut().get_or_insert_with(Hooks::default);
    let stage = match h.hook_name.as_str() {
        #[allow(deprecated)]
        "prestart" => hooks.prestart_mut(),
        "createRuntime" => hooks.create_runtime_mut(),
        "createContainer" => hooks.create_container_mut(),
        "startContainer" => hooks.start_container_mut(),
        "poststart" => hooks.poststart_mut(),
        "poststop" => hooks.poststop_mut(),
        other => {
            return Err(invalid(id, field, format!("unknown hook {other:?}")));
        }
    };
    stage.get_or_insert_with(Vec::new).push(hook);
    Ok(())
}

#[cfg(test)]
mod tests;
