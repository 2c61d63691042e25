//! What runs through a running container's shim besides its own life
//! cycle: ExecSync, the streaming server's exec and attach, and
//! ReopenContainerLog. Every call goes through the [`Task`] of the
//! container's shim, whose errors keep their kind (a timed-out exec is
//! DeadlineExceeded, a shim that is gone FailedPrecondition).

use std::sync::Arc;
use std::time::Duration;

use berth_shim::{AttachOptions, ExecOptions, IoStream};

use super::mechanisms::Task;
use super::Core;
use crate::container::{Container, ContainerState};
use crate::error::Error;
use crate::objects::StoreExt;

/// The answer must fit kubelet's 16 MiB gRPC message limit.
const MAX_EXEC_SYNC_OUTPUT: usize = 16 * 1024 * 1024 - 64 * 1024;

/// What an ExecSync gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSyncOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

impl Core {
    /// Container `id` (or a unique prefix), if it is running.
    pub fn running_container(&self, id: &str) -> Result<Arc<Container>, Error> {
        let container = self.containers.lookup(id)?;
        let state = container.status().state;
        if state != ContainerState::Running {
            return Err(Error::ContainerState {
                id: container.meta.id.clone(),
                state: format!("{state:?}"),
                why: "it is not running",
            });
        }
        Ok(container)
    }

    /// A running container and its shim.
    async fn running_task(&self, id: &str) -> Result<(Arc<Container>, Arc<dyn Task>), Error> {
        let container = self.running_container(id)?;
        let task = self.shim_of(&container.meta.id).await?;
        Ok((container, task))
    }

    /// The container's own process, running `cmd`: an exec runs with the
    /// container's user, environment and working directory.
    async fn exec_process(
        &self,
        container: &Container,
        cmd: Vec<String>,
        tty: bool,
    ) -> Result<oci_spec::runtime::Process, Error> {
        let id = &container.meta.id;
        let spec = self
            .mech
            .files
            .read_spec(id, &self.layout.container_dirs(id).spec())
            .await?;
        let mut process = spec.process().clone().unwrap_or_default();
        process.set_args(Some(cmd));
        process.set_terminal(Some(tty));
        Ok(process)
    }

    /// ExecSync: runs `cmd` in running container `id` and collects its
    /// output; `timeout` seconds (0: none) then it is killed and the call is
    /// DeadlineExceeded; more output than a CRI answer can carry is
    /// ResourceExhausted.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: i64,
    ) -> Result<ExecSyncOutput, Error> {
        self.containers.lookup(id)?;
        if cmd.is_empty() {
            return Err(Error::BadField {
                field: "cmd".into(),
                why: "ExecSync needs a command".into(),
            });
        }
        let (container, task) = self.running_task(id).await?;
        let id = &container.meta.id;
        // On cgroup v1 the runtime moves the exec'd process into the
        // container's cgroups.
        self.mech.runtime.warm_up(id);
        let process = self.exec_process(&container, cmd.clone(), false).await?;
        let limit = (timeout > 0).then(|| Duration::from_secs(timeout as u64));
        let out = task.exec_sync(&process, limit).await?;
        if out.timed_out {
            return Err(Error::DeadlineExceeded(format!(
                "command {cmd:?} in container {id} timed out after {timeout}s"
            )));
        }
        if out.truncated || out.stdout.len() + out.stderr.len() > MAX_EXEC_SYNC_OUTPUT {
            return Err(Error::ResourceExhausted(format!(
                "output of {cmd:?} in container {id} exceeds the 16 MiB ExecSync limit"
            )));
        }
        Ok(ExecSyncOutput {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        })
    }

    /// Starts `cmd` in running container `id` with its stdio streamed (the
    /// streaming server's exec).
    pub async fn exec_stream(
        &self,
        id: &str,
        cmd: Vec<String>,
        tty: bool,
        stdin: bool,
    ) -> Result<IoStream, Error> {
        let (container, task) = self.running_task(id).await?;
        self.mech.runtime.warm_up(&container.meta.id);
        let process = self.exec_process(&container, cmd, tty).await?;
        let opts = ExecOptions {
            exec_id: berth_shim::new_exec_id("stream"),
            process,
            tty,
            stdin,
            timeout: None,
        };
        // On its own task: a client that goes away while the process starts
        // must not cut the shim off before it answered (the shim would not
        // know to kill the process); once answered, dropping the stream does.
        tokio::spawn(async move { task.exec(&opts).await })
            .await
            .map_err(Error::join)?
    }

    /// The stdio of running container `id` (the streaming server's
    /// attach), and whether its output is to be followed after the
    /// client's stdin ends: a container made `stdin_once` without a tty
    /// gets its stdin closed then, and its answer to that input must still
    /// reach the client (as containerd's attach does); any other detaches.
    pub async fn attach(&self, id: &str, opts: AttachOptions) -> Result<(IoStream, bool), Error> {
        let (container, task) = self.running_task(id).await?;
        let config = container.meta.config();
        let follow = opts.stdin && config.stdin_once && !config.tty;
        Ok((task.attach(opts).await?, follow))
    }

    /// ReopenContainerLog: the shim of running container `id` reopens the
    /// CRI log file.
    pub async fn reopen_log(&self, id: &str) -> Result<(), Error> {
        let (_, task) = self.running_task(id).await?;
        task.reopen_log().await
    }
}
