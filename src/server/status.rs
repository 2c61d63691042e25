//! RuntimeService.Status: whether the runtime and the network are ready.

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::path::Path;

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use crate::process::find_executable;

const RUNTIME_READY: &str = "RuntimeReady";
const NETWORK_READY: &str = "NetworkReady";

impl Cri {
    pub async fn status(&self, req: v1::StatusRequest) -> Result<v1::StatusResponse, Error> {
        let config = self.config.clone();
        let runtime = tokio::task::spawn_blocking(move || runtime_condition(&config))
            .await
            .map_err(|e| Error::Internal(format!("status check failed: {e}")))?;
        let core = self.core.clone();
        let ready = tokio::task::spawn_blocking(move || core.network_ready())
            .await
            .map_err(|e| Error::Internal(format!("status check failed: {e}")))?;
        let network = match ready {
            Ok(_) => condition(NETWORK_READY, None),
            Err(e) => condition(
                NETWORK_READY,
                Some((
                    "NetworkPluginNotReady",
                    format!("Network plugin returns error: cni plugin not initialized: {e}"),
                )),
            ),
        };

        let mut info = HashMap::new();
        if req.verbose {
            let config = serde_json::to_string(&self.config)
                .map_err(|e| Error::Internal(format!("config to JSON: {e}")))?;
            info.insert("config".to_string(), config);
            info.insert(
                "podCIDR".to_string(),
                serde_json::Value::String(self.pod_cidr()).to_string(),
            );
            // What this host's security modules give containers.
            let o = self.core.spec_options();
            let lsm = serde_json::json!({
                "apparmor": {
                    "enabled": o.apparmor_enabled,
                    "defaultProfile": o.apparmor_default,
                    "problem": o.apparmor_default_problem,
                },
                "selinux": {
                    "enabled": o.selinux_enabled,
                    // Requests with selinux_options are refused where it is on.
                    "labelsApplied": false,
                },
                "seccomp": { "enabled": o.seccomp_available },
            });
            info.insert("lsm".to_string(), lsm.to_string());
        }
        let runtime_handlers =
            runtime_handlers(&self.config, user_namespaces_here(&self.config).await).await;
        // Host-network pods in their own user namespace (KEP-5607) run
        // wherever the default handler runs user namespace pods: the same
        // namespaces and idmapped mounts, with the host's /sys bound.
        let userns_host_network = runtime_handlers
            .first()
            .and_then(|h| h.features.as_ref())
            .is_some_and(|f| f.user_namespaces);
        Ok(v1::StatusResponse {
            status: Some(v1::RuntimeStatus {
                conditions: vec![runtime, network],
            }),
            info,
            runtime_handlers,
            features: Some(v1::RuntimeFeatures {
                supplemental_groups_policy: true,
                user_namespaces_host_network: userns_host_network,
                // Mount.mount_options (nosuid, nodev, noexec) are applied.
                mount_options: true,
            }),
        })
    }
}

/// How long `<runtime> features` may take.
const FEATURES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether each runtime binary makes recursive read-only mounts, once known.
static RRO_SUPPORT: Known = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Whether this host can run pods in their own user namespace the way
/// berth does it, probed once (the first time it is asked) and kept: a
/// user namespace made by a forked holder, an idmapped bind mount of a
/// scratch dir in the state dir and in the root dir (pod files, layers and
/// writable layers live there) showing a root-owned file with the mapped
/// owner, nothing left behind; and the state dir and every dir above it
/// searchable by others (a pod's root, an unmapped host uid to them, must
/// pass them to reach `<state>/userns`).
static USERNS_HOST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// See [`USERNS_HOST`]; blocking (it forks): call off the tokio workers.
pub fn probe_user_namespaces(root: &Path, state: &Path) -> bool {
    *USERNS_HOST.get_or_init(|| {
        if let Err(e) = searchable_by_others(state) {
            tracing::warn!(error = %e, "pods with user namespaces cannot run here");
            return false;
        }
        for dir in [state, root] {
            if let Err(e) = berth_idmap::probe(dir, 65536) {
                tracing::warn!(error = %e, "pods with user namespaces cannot run here");
                return false;
            }
        }
        true
    })
}

/// Whether `dir` and each dir above it has the search bit for others.
fn searchable_by_others(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for d in dir.ancestors() {
        let mode = std::fs::metadata(d)
            .map_err(|e| format!("{}: {e}", d.display()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "{} (mode {:o}) cannot be passed by a pod's root",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

async fn user_namespaces_here(config: &crate::config::Config) -> bool {
    if let Some(known) = USERNS_HOST.get() {
        return *known;
    }
    let (root, state) = (config.root.clone(), config.state.clone());
    tokio::task::spawn_blocking(move || probe_user_namespaces(&root, &state))
        .await
        .unwrap_or(false)
}

/// The default handler (named "") and every configured one, with features.
/// `userns_host`: what [`probe_user_namespaces`] found; a handler has user
/// namespaces when it is found too (berth makes the namespaces and the
/// idmapped mounts itself, so the runtime only joins them by path, which
/// runc 1.1 and crun 1.8 do).
async fn runtime_handlers(
    config: &crate::config::Config,
    userns_host: bool,
) -> Vec<v1::RuntimeHandler> {
    let default = ("", config.default_runtime_handler());
    let mut handlers = Vec::new();
    for (name, handler) in
        std::iter::once(default).chain(config.runtime.handlers.iter().map(|(n, h)| (n.as_str(), h)))
    {
        // A handler that cannot run any container here claims no feature.
        let runs = runs_here(&handler.binary).await;
        handlers.push(v1::RuntimeHandler {
            name: name.to_string(),
            features: Some(v1::RuntimeHandlerFeatures {
                recursive_read_only_mounts: runs && recursive_read_only(&handler.binary).await,
                user_namespaces: runs && userns_host && find_executable(&handler.binary).is_some(),
            }),
        });
    }
    handlers
}

/// Answers about runtime binaries, kept once known.
type Known = std::sync::Mutex<std::collections::BTreeMap<String, bool>>;

/// What `cache` knows about `binary`.
fn known(cache: &Known, binary: &str) -> Option<bool> {
    cache.lock_unpoisoned().get(binary).copied()
}

/// Whether each runtime binary can run containers on this host, once known.
static RUNS_HERE: Known = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Whether runtime `binary` can run a container on this host at all: crun
/// refuses every container on a cgroup v1 "hybrid" host whose cgroup2
/// mount has controllers ("cgroups in hybrid mode not supported, drop all
/// controllers from cgroupv2"), so such a handler must not claim user
/// namespaces or recursive read-only mounts. Asked once per binary.
async fn runs_here(binary: &str) -> bool {
    if let Some(known) = known(&RUNS_HERE, binary) {
        return known;
    }
    let mut command = tokio::process::Command::new(binary);
    command
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let version = match tokio::time::timeout(FEATURES_TIMEOUT, command.output()).await {
        Ok(Ok(out)) if out.status.success() => out.stdout,
        // Not found or failing: whatever it is, it runs nothing.
        Ok(_) => return false,
        // Slow this time: ask again next time, claim nothing now.
        Err(_) => return false,
    };
    let host = tokio::task::spawn_blocking(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let controllers = hybrid_v2_mount(&mountinfo)
            .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok());
        (mountinfo, controllers)
    })
    .await;
    let (mountinfo, controllers) = host.unwrap_or_default();
    let refusal = refuses_this_host(&version, &mountinfo, controllers.as_deref());
    if let Some(reason) = &refusal {
        tracing::warn!(%binary, %reason, "runtime handler cannot run containers on this host");
    }
    RUNS_HERE
        .lock_unpoisoned()
        .insert(binary.to_string(), refusal.is_none());
    refusal.is_none()
}

/// The cgroup2 mount of a hybrid host (v1 hierarchies, and cgroup2
/// somewhere other than `/sys/fs/cgroup`).
fn hybrid_v2_mount(mountinfo: &str) -> Option<std::path::PathBuf> {
    let mounts: Vec<_> = berth_mountinfo::mounts(mountinfo).collect();
    let v1 = mounts.iter().any(|m| m.fs_type == "cgroup");
    let v2 = mounts.iter().find(|m| m.fs_type == "cgroup2")?;
    (v1 && v2.mount_point != Path::new("/sys/fs/cgroup")).then(|| v2.mount_point.clone())
}

/// Why a runtime whose `--version` printed `version` refuses every
/// container on a host with `mountinfo` (and, on a hybrid host, cgroup2
/// `controllers`), if it does.
fn refuses_this_host(version: &[u8], mountinfo: &str, controllers: Option<&str>) -> Option<String> {
    let crun = String::from_utf8_lossy(version)
        .lines()
        .next()
        .is_some_and(|l| l.starts_with("crun "));
    let hybrid = hybrid_v2_mount(mountinfo).is_some();
    let has_controllers = controllers.is_some_and(|c| !c.trim().is_empty());
    (crun && hybrid && has_controllers).then(|| {
        "crun refuses cgroup v1 hybrid hosts whose cgroup2 mount has controllers".to_string()
    })
}

/// Recursive read-only mounts need kernel 5.12 (mount_setattr) and a
/// runtime whose `features` lists the `rro` mount option. Known answers
/// are kept; a runtime that times out is asked again next time.
async fn recursive_read_only(binary: &str) -> bool {
    if let Some(known) = known(&RRO_SUPPORT, binary) {
        return known;
    }
    let kernel = tokio::task::spawn_blocking(|| berth_spec::SpecOptions::detect().rro_supported)
        .await
        .unwrap_or(false);
    let supported = if kernel {
        let mut command = tokio::process::Command::new(binary);
        command
            .arg("features")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        match tokio::time::timeout(FEATURES_TIMEOUT, command.output()).await {
            Ok(Ok(out)) => out.status.success() && lists_rro(&out.stdout),
            // Not found, not executable: it cannot.
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(%binary, "`{binary} features` timed out after {FEATURES_TIMEOUT:?}");
                return false;
            }
        }
    } else {
        false
    };
    RRO_SUPPORT
        .lock_unpoisoned()
        .insert(binary.to_string(), supported);
    supported
}

/// Whether an OCI runtime `features` document lists the `rro` mount option.
fn lists_rro(features_json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(features_json)
        .ok()
        .and_then(|v| {
            v.get("mountOptions")?
                .as_array()
                .map(|opts| opts.iter().any(|o| o == "rro"))
        })
        .unwrap_or(false)
}

fn condition(kind: &str, problem: Option<(&str, String)>) -> v1::RuntimeCondition {
    match problem {
        None => v1::RuntimeCondition {
            r#type: kind.into(),
            status: true,
            ..Default::default()
        },
        Some((reason, message)) => v1::RuntimeCondition {
            r#type: kind.into(),
            status: false,
            reason: reason.into(),
            message,
        },
    }
}

/// Ready when the default handler's binary is found and the state dirs are writable.
fn runtime_condition(config: &crate::config::Config) -> v1::RuntimeCondition {
    let binary = &config.default_runtime_handler().binary;
    if find_executable(binary).is_none() {
        return condition(
            RUNTIME_READY,
            Some((
                "RuntimeBinaryNotFound",
                format!(
                    "runtime binary {binary:?} of handler {:?} not found or not executable",
                    config.runtime.default_handler
                ),
            )),
        );
    }
    for dir in [&config.root, &config.state] {
        if let Err(e) = probe_writable(dir) {
            return condition(
                RUNTIME_READY,
                Some((
                    "StateDirNotWritable",
                    format!("{} is not writable: {e}", dir.display()),
                )),
            );
        }
    }
    condition(RUNTIME_READY, None)
}

fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".berth-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crun_on_a_hybrid_host_with_v2_controllers_runs_nothing() {
        let hybrid = "30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro\n\
            31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
            32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let crun = b"crun version 1.8.1\ncommit: x\n";
        let runc = b"runc version 1.1.5\ncommit: x\n";
        assert_eq!(
            hybrid_v2_mount(hybrid).as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert!(refuses_this_host(crun, hybrid, Some("memory pids\n")).is_some());
        // runc runs there; crun too without v2 controllers, or on v2.
        assert!(refuses_this_host(runc, hybrid, Some("memory pids\n")).is_none());
        assert!(refuses_this_host(crun, hybrid, Some("\n")).is_none());
        assert!(hybrid_v2_mount(v2).is_none());
        assert!(refuses_this_host(crun, v2, Some("cpu memory")).is_none());
    }

    #[test]
    fn rro_in_runtime_features() {
        assert!(lists_rro(
            br#"{"ociVersionMin":"1.0.0","mountOptions":["ro","rro","rbind"]}"#
        ));
        assert!(!lists_rro(br#"{"mountOptions":["ro","rbind"]}"#));
        assert!(!lists_rro(b"unknown command features"));
        assert!(!lists_rro(b"{}"));
    }

    #[test]
    fn executable_lookup() {
        assert!(find_executable("sh").is_some());
        assert!(find_executable("/bin/sh").is_some());
        assert!(find_executable("/nonexistent/runc").is_none());
        assert!(find_executable("no-such-binary-berth").is_none());
    }
}
