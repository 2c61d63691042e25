//! RuntimeService.Status: whether the runtime and the network are ready.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cri_api::v1;

use super::Cri;
use crate::error::Error;

const RUNTIME_READY: &str = "RuntimeReady";
const NETWORK_READY: &str = "NetworkReady";

impl Cri {
    pub async fn status(&self, req: v1::StatusRequest) -> Result<v1::StatusResponse, Error> {
        let config = self.config.clone();
        let (runtime, network) = tokio::task::spawn_blocking(move || {
            (
                runtime_condition(&config),
                network_condition(&config.cni.conf_dir),
            )
        })
        .await
        .map_err(|e| Error::Internal(format!("status check failed: {e}")))?;

        let mut info = HashMap::new();
        if req.verbose {
            let config = serde_json::to_string(&self.config)
                .map_err(|e| Error::Internal(format!("config to JSON: {e}")))?;
            info.insert("config".to_string(), config);
            info.insert(
                "podCIDR".to_string(),
                serde_json::Value::String(self.pod_cidr()).to_string(),
            );
        }
        Ok(v1::StatusResponse {
            status: Some(v1::RuntimeStatus {
                conditions: vec![runtime, network],
            }),
            info,
            ..Default::default()
        })
    }
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

/// Ready when the CNI config dir holds at least one network configuration.
fn network_condition(conf_dir: &Path) -> v1::RuntimeCondition {
    match first_network_config(conf_dir) {
        Some(_) => condition(NETWORK_READY, None),
        None => condition(
            NETWORK_READY,
            Some((
                "NetworkPluginNotReady",
                format!(
                    "Network plugin returns error: cni plugin not initialized: no network config found in {}",
                    conf_dir.display()
                ),
            )),
        ),
    }
}

/// An absolute path, or a name looked up in `PATH`, that is an executable file.
pub fn find_executable(binary: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if binary.contains('/') {
        let p = PathBuf::from(binary);
        return is_exec(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|p| is_exec(p))
}

fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".berth-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// The first (in lexical order) parseable network configuration in `dir`.
fn first_network_config(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("conf" | "conflist" | "json")
            )
        })
        .collect();
    files.sort();
    files.into_iter().find(|p| {
        let Ok(text) = std::fs::read_to_string(p) else {
            return false;
        };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
            return false;
        };
        let has_plugins = value
            .get("plugins")
            .and_then(|p| p.as_array())
            .is_some_and(|a| !a.is_empty());
        has_plugins || value.get("type").is_some_and(|t| t.is_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_config_detection() {
        let dir = std::env::temp_dir().join(format!("berth-status-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(first_network_config(&dir).is_none());
        std::fs::write(dir.join("00-broken.conflist"), "{not json").unwrap();
        std::fs::write(dir.join("README"), "{}").unwrap();
        assert!(first_network_config(&dir).is_none());
        std::fs::write(
            dir.join("10-net.conflist"),
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        assert_eq!(
            first_network_config(&dir),
            Some(dir.join("10-net.conflist"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn executable_lookup() {
        assert!(find_executable("sh").is_some());
        assert!(find_executable("/bin/sh").is_some());
        assert!(find_executable("/nonexistent/runc").is_none());
        assert!(find_executable("no-such-binary-berth").is_none());
    }
}
