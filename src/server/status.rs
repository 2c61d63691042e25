//! RuntimeService.Status: whether the runtime and the network are ready.

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::path::Path;

use cri_api::v1;

use super::Cri;
use crate::error::Error;
use berth_host::process::find_executable;

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

/// Whether each runtime binary makes recursive read-only mounts, once known.
static RRO_SUPPORT: Known = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Whether this host can run pods in their own user namespace the way
/// berth does it ([`berth_host::userns::probe`]), probed once (the first
/// time it is asked) and kept.
static USERNS_HOST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// See [`USERNS_HOST`]; blocking (it forks): call off the tokio workers.
pub fn probe_user_namespaces(root: &Path, state: &Path) -> bool {
    *USERNS_HOST.get_or_init(|| match berth_host::userns::probe(root, state) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "pods with user namespaces cannot run here");
            false
        }
    })
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
        let binary = handler.binary.clone();
        let runs = ask(&RUNS_HERE, &binary, runs_here).await;
        handlers.push(v1::RuntimeHandler {
            name: name.to_string(),
            features: Some(v1::RuntimeHandlerFeatures {
                recursive_read_only_mounts: runs
                    && ask(&RRO_SUPPORT, &binary, recursive_read_only).await,
                user_namespaces: runs && userns_host && find_executable(&handler.binary).is_some(),
            }),
        });
    }
    handlers
}

/// Answers about runtime binaries, kept once known.
type Known = std::sync::Mutex<std::collections::BTreeMap<String, bool>>;

/// What `cache` knows about `binary`, else what `probe` answers off the
/// tokio workers (kept unless it could not tell: false then, asked again
/// next time).
async fn ask(cache: &'static Known, binary: &str, probe: fn(&str) -> Result<bool, String>) -> bool {
    if let Some(known) = cache.lock_unpoisoned().get(binary).copied() {
        return known;
    }
    let owned = binary.to_string();
    match tokio::task::spawn_blocking(move || probe(&owned)).await {
        Ok(Ok(answer)) => {
            cache.lock_unpoisoned().insert(binary.to_string(), answer);
            answer
        }
        Ok(Err(e)) => {
            tracing::debug!(%binary, error = %e, "runtime handler not known yet");
            false
        }
        Err(_) => false,
    }
}

/// Whether each runtime binary can run containers on this host, once known.
static RUNS_HERE: Known = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Whether runtime `binary` can run a container on this host at all
/// ([`berth_host::runtime::refusal`]); Err while it cannot be asked.
fn runs_here(binary: &str) -> Result<bool, String> {
    let host = berth_host::RealHost;
    let path = find_executable(binary).ok_or_else(|| format!("{binary} not found"))?;
    let refusal = berth_host::runtime::refusal(&host, &path)?;
    if let Some(reason) = &refusal {
        tracing::warn!(%binary, %reason, "runtime handler cannot run containers on this host");
    }
    Ok(refusal.is_none())
}

/// Recursive read-only mounts need kernel 5.12 (mount_setattr) and a
/// runtime whose `features` lists the `rro` mount option.
fn recursive_read_only(binary: &str) -> Result<bool, String> {
    let host = berth_host::RealHost;
    let facts = berth_host::Facts::detect(&host);
    berth_host::runtime::recursive_read_only(&host, &facts, Path::new(binary))
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
