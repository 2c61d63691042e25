//! The OCI runtime through one berth-shim per container (or pause).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_shim::{
    ExitInfo, LaunchNotice, ShimClient, ShimLauncher, ShimOptions, ShimPaths, ShimState,
};
use tonic::async_trait;

use super::cgroup_warmup::CgroupWarmup;
use crate::core::mechanisms::{Runtime, Task};
use crate::error::Error;
use crate::layout::Layout;

/// One shim.
pub struct Shim(pub ShimClient);

#[async_trait]
impl Task for Shim {
    async fn start(&self) -> Result<u32, Error> {
        self.0
            .start()
            .await
            .map_err(Error::runtime(self.0.id(), "starting"))
    }
    async fn wait(&self) -> Result<ExitInfo, Error> {
        match self.0.wait().await {
            Ok(info) => Ok(info),
            // The shim went away: the exit file tells how it ended, if it did.
            Err(e) => berth_shim::read_exit_file(self.0.exit_file())
                .ok()
                .flatten()
                .ok_or_else(|| Error::runtime(self.0.id(), "waiting for the exit")(e)),
        }
    }
    async fn kill(&self, signal: i32, all: bool) -> Result<(), Error> {
        self.0
            .kill(signal, all)
            .await
            .map_err(Error::runtime(self.0.id(), "signalling"))
    }
    async fn state(&self) -> Result<ShimState, Error> {
        self.0
            .state()
            .await
            .map_err(Error::runtime(self.0.id(), "reading the state"))
    }
    async fn delete(&self, force: bool) -> Result<(), Error> {
        self.0
            .delete(force)
            .await
            .map_err(Error::runtime(self.0.id(), "deleting"))
    }
    async fn exec_sync(
        &self,
        process: &oci_spec::runtime::Process,
        timeout: Option<std::time::Duration>,
    ) -> Result<berth_shim::ExecOutput, Error> {
        self.0
            .exec_sync(process, timeout)
            .await
            .map_err(Error::runtime(self.0.id(), "exec"))
    }
    async fn exec(&self, opts: &berth_shim::ExecOptions) -> Result<berth_shim::IoStream, Error> {
        self.0
            .exec(opts)
            .await
            .map_err(Error::runtime(self.0.id(), "exec"))
    }
    async fn attach(&self, opts: berth_shim::AttachOptions) -> Result<berth_shim::IoStream, Error> {
        self.0
            .attach(opts)
            .await
            .map_err(Error::runtime(self.0.id(), "attach"))
    }
    async fn update(&self, resources: &oci_spec::runtime::LinuxResources) -> Result<(), Error> {
        self.0
            .update(resources)
            .await
            .map_err(Error::runtime(self.0.id(), "update"))
    }
    async fn set_oom_score_adj(&self, value: i32) -> Result<(), Error> {
        let (id, pid) = (self.0.id().to_string(), self.0.pid());
        tokio::task::spawn_blocking(move || set_oom_score_adj(&id, pid, value))
            .await
            .map_err(Error::join)?
    }
    async fn reopen_log(&self) -> Result<(), Error> {
        self.0
            .reopen_log()
            .await
            .map_err(Error::runtime(self.0.id(), "reopening its log"))
    }
}

/// Shims and the OCI runtime.
pub struct Shims {
    pub layout: Layout,
    /// Starts the shims: with `standby`, from a spare started ahead (in the
    /// background once a create is done: the first create's shim is
    /// started afresh, the next ones are the spare then ready).
    launcher: ShimLauncher,
    /// The cgroup lock warm-up, where the host has one and it is on.
    warmup: Option<CgroupWarmup>,
}

impl Shims {
    /// Shims of `shim_binary`, their state dirs in `layout`'s; `warmup`
    /// started before the runtime runs (see [`Runtime::warm_up`]).
    pub fn new(
        layout: Layout,
        shim_binary: PathBuf,
        standby: bool,
        warmup: Option<CgroupWarmup>,
    ) -> Shims {
        let launcher = ShimLauncher::new(shim_binary, layout.shim_dirs())
            .with_standby(standby)
            .with_notify(|notice| match notice {
                LaunchNotice::SpareFailed(_) => tracing::warn!("{notice}"),
                LaunchNotice::SpareLost(_) => tracing::info!("{notice}"),
            });
        Shims {
            layout,
            launcher,
            warmup,
        }
    }
}

#[async_trait]
impl Runtime for Shims {
    async fn create(&self, opts: ShimOptions) -> Result<Arc<dyn Task>, Error> {
        let id = opts.id.clone();
        let client = self
            .launcher
            .spawn(opts)
            .await
            .map_err(Error::runtime(&id, "creating"))?;
        Ok(Arc::new(Shim(client)))
    }

    async fn connect(&self, id: &str, shim_dir: &Path) -> Result<Arc<dyn Task>, Error> {
        let socket = ShimPaths::new(shim_dir).socket();
        let client = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            ShimClient::connect(&socket),
        )
        .await
        .map_err(|_| Error::DeadlineExceeded(format!("{id}: its shim did not answer in 5s")))?
        .map_err(Error::runtime(id, "connecting to the shim"))?;
        Ok(Arc::new(Shim(client)))
    }

    async fn delete(&self, id: &str, shim_dir: &Path, runtime: &str) -> Result<(), Error> {
        let runtime = berth_shim::runc::Runtime::new(runtime, self.layout.runtime_root());
        berth_shim::delete_container(shim_dir, &runtime, id)
            .await
            .map_err(Error::runtime(id, "deleting from the runtime"))
    }

    fn exit_file(&self, shim_dir: &Path) -> Option<ExitInfo> {
        berth_shim::read_exit_file(&ShimPaths::new(shim_dir).exit_file())
            .ok()
            .flatten()
    }

    fn warm_up(&self, id: &str) {
        if let Some(w) = &self.warmup {
            w.start(id);
        }
    }

    fn check(&self, id: &str, runtime: &str) -> Result<(), Error> {
        match berth_host::process::find_executable(runtime) {
            Some(_) => Ok(()),
            None => Err(Error::RuntimeMissing {
                id: id.to_string(),
                runtime: runtime.to_string(),
            }),
        }
    }
}

/// Writes `value` as the OOM score adjustment of every process in the
/// cgroup tree of container `id`'s init (`pid`); a process that exits
/// meanwhile is skipped. Lowering a score needs CAP_SYS_RESOURCE: without
/// it the kernel refuses, and so does this (FailedPrecondition).
fn set_oom_score_adj(id: &str, pid: u32, value: i32) -> Result<(), Error> {
    let gone =
        |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT));
    let mounts = berth_cgroup_stats::Mounts::read()
        .map_err(|e| Error::Internal(format!("{id}: reading the cgroup mounts: {e}")))?;
    let cgroup = berth_cgroup_stats::Cgroup::for_pid(&mounts, pid).map_err(|e| Error::Cgroup {
        id: id.to_string(),
        why: format!("the cgroup of pid {pid}: {e}"),
    })?;
    let dir = cgroup
        .dir("memory")
        .or_else(|| cgroup.dir("pids"))
        .ok_or_else(|| Error::Cgroup {
            id: id.to_string(),
            why: format!("no cgroup directory for pid {pid}"),
        })?;
    let mut pids = berth_cgroup_stats::pids_below(&dir).unwrap_or_default();
    if !pids.contains(&pid) {
        pids.push(pid);
    }
    for p in pids {
        let path = PathBuf::from(format!("/proc/{p}/oom_score_adj"));
        match std::fs::write(&path, value.to_string()) {
            Ok(()) => {}
            Err(e) if gone(&e) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Error::Cgroup {
                    id: id.to_string(),
                    why: format!(
                        "setting oom_score_adj {value} on pid {p}: {e} \
                         (lowering it needs CAP_SYS_RESOURCE, which berth lacks here)"
                    ),
                })
            }
            Err(e) => return Err(Error::io(id, "writing", &path)(e)),
        }
    }
    Ok(())
}
