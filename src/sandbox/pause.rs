//! The pause container of a pod, run through its own berth-shim.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_shim::{ShimClient, ShimOptions, SpawnOptions};
use oci_spec::runtime::Spec;

use crate::error::Error;

/// How long a killed pause may take to go.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where one pause container's files are.
#[derive(Debug, Clone)]
pub struct PausePaths {
    /// The sandbox id, also the runtime's container id.
    pub id: String,
    /// OCI bundle: `config.json` and `rootfs/`.
    pub bundle: PathBuf,
    /// The shim's state dir (socket, exit file, its log).
    pub shim_dir: PathBuf,
    /// The OCI runtime's `--root`.
    pub runtime_root: PathBuf,
    /// The berth-shim executable.
    pub shim_binary: PathBuf,
}

impl PausePaths {
    pub fn socket(&self) -> PathBuf {
        berth_shim::ShimPaths::new(&self.shim_dir).socket()
    }
}

/// A started pause.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub pid: u32,
}

fn shim_error(id: &str, what: &str) -> impl Fn(berth_shim::Error) -> Error {
    let prefix = format!("sandbox {id}: {what}");
    move |e| Error::Internal(format!("{prefix}: {e}"))
}

/// Lays out the bundle and starts the pause under a new shim.
pub async fn start(paths: &PausePaths, runtime: &str, spec: &Spec) -> Result<Started, Error> {
    let id = paths.id.clone();
    {
        let bundle = paths.bundle.clone();
        let spec = spec.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || -> Result<(), Error> {
            let fail = |what: &str, e: &dyn std::fmt::Display| {
                Error::Internal(format!("sandbox {id}: {what} {}: {e}", bundle.display()))
            };
            berth_shim::write_pause_rootfs(&bundle.join("rootfs"))
                .map_err(|e| fail("laying out the pause rootfs in", &e))?;
            spec.save(bundle.join("config.json"))
                .map_err(|e| fail("writing the pause spec in", &e))
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    }
    let mut opts = ShimOptions::new(&id, &paths.bundle, &paths.shim_dir);
    opts.runtime = PathBuf::from(runtime);
    opts.runtime_root = paths.runtime_root.clone();
    let client = ShimClient::spawn(&SpawnOptions::new(&paths.shim_binary, opts))
        .await
        .map_err(shim_error(&id, "creating the pause container"))?;
    let pid = client
        .start()
        .await
        .map_err(shim_error(&id, "starting the pause container"))?;
    Ok(Started { pid })
}

/// Kills and deletes the pause and its shim, and removes their files.
/// Idempotent: whatever is already gone is skipped.
pub async fn destroy(paths: &PausePaths, runtime: &str) -> Result<(), Error> {
    let id = &paths.id;
    let socket = paths.socket();
    if socket.exists() {
        match ShimClient::connect(&socket).await {
            Ok(client) => {
                if let Err(e) = client.kill(libc::SIGKILL, true).await {
                    tracing::debug!(pod = %id, error = %e, "killing the pause (may have exited)");
                }
                if tokio::time::timeout(EXIT_TIMEOUT, client.wait())
                    .await
                    .is_err()
                {
                    tracing::warn!(pod = %id, "the pause did not exit in {EXIT_TIMEOUT:?}");
                }
            }
            Err(e) => tracing::warn!(pod = %id, error = %e, "the pause's shim does not answer"),
        }
    }
    let runtime = berth_shim::runc::Runtime::new(runtime, &paths.runtime_root);
    berth_shim::delete_container(&paths.shim_dir, &runtime, id)
        .await
        .map_err(shim_error(id, "deleting the pause container"))?;
    let dirs = [paths.shim_dir.clone(), paths.bundle.clone()];
    tokio::task::spawn_blocking(move || remove_dirs(&dirs))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
}

fn remove_dirs(dirs: &[PathBuf]) -> Result<(), Error> {
    for dir in dirs {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Internal(format!(
                    "removing {}: {e}",
                    Path::new(dir).display()
                )))
            }
        }
    }
    Ok(())
}
