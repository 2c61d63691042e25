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
        let runtime = tokio::task::spawn_blocking(move || runtime_condition(&config))
            .await
            .map_err(|e| Error::Internal(format!("status check failed: {e}")))?;
        let cni = self.cni.clone();
        let ready = tokio::task::spawn_blocking(move || cni.network_ready())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_lookup() {
        assert!(find_executable("sh").is_some());
        assert!(find_executable("/bin/sh").is_some());
        assert!(find_executable("/nonexistent/runc").is_none());
        assert!(find_executable("no-such-binary-berth").is_none());
    }
}
