//! The fake runtime and its fake shims, over the runtime containers of
//! the fake's world.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_shim::{ContainerStatus, ExitInfo, ShimOptions, ShimState};
use tokio::sync::watch;
use tonic::async_trait;

use super::{Fake, FakeContainer};
use crate::core::mechanisms::{Runtime, Task};
use crate::error::Error;

/// Ids of runtime containers are the sandbox or container id.
fn shim_id(shim_dir: &Path) -> String {
    shim_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A fake shim holding one fake runtime container.
pub struct FakeTask {
    id: String,
    fake: Arc<Fake>,
}

impl FakeTask {
    fn container(&self) -> Result<FakeContainer, Error> {
        self.fake
            .world
            .lock()
            .unwrap()
            .runtime
            .get(&self.id)
            .cloned()
            .ok_or_else(|| Error::FailedPrecondition(format!("{}: no such container", self.id)))
    }
}

#[async_trait]
impl Task for FakeTask {
    async fn start(&self) -> Result<u32, Error> {
        self.fake.call("task.start", &self.id).await?;
        if let Some(c) = self.fake.world.lock().unwrap().runtime.get_mut(&self.id) {
            c.started = true;
            c.started_at_ns = Some(super::FAKE_STARTED_AT);
        }
        Ok(42)
    }
    async fn wait(&self) -> Result<ExitInfo, Error> {
        let mut rx = self.container()?.exit.subscribe();
        loop {
            if let Some(info) = *rx.borrow_and_update() {
                return Ok(info);
            }
            if !self.container()?.shim_alive {
                return Err(Error::FailedPrecondition(format!(
                    "{}: the shim is gone",
                    self.id
                )));
            }
            // The fake shim also "dies" while waiting: poll for it.
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    return Err(Error::FailedPrecondition(format!("{}: the shim is gone", self.id)));
                },
                _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
            }
        }
    }
    async fn kill(&self, signal: i32, _all: bool) -> Result<(), Error> {
        self.fake.call("task.kill", &self.id).await?;
        if signal == libc::SIGKILL {
            self.fake.exit(&self.id, 137);
        }
        Ok(())
    }
    async fn state(&self) -> Result<ShimState, Error> {
        let c = self.container()?;
        let exit = *c.exit.borrow();
        Ok(ShimState {
            id: self.id.clone(),
            pid: 42,
            shim_pid: 41,
            status: if c.started {
                ContainerStatus::Running
            } else {
                ContainerStatus::Created
            },
            exit,
            exit_file: PathBuf::new(),
            started_at_ns: c.started_at_ns,
        })
    }
    async fn delete(&self, _force: bool) -> Result<(), Error> {
        self.fake.call("task.delete", &self.id).await?;
        self.fake.world.lock().unwrap().runtime.remove(&self.id);
        Ok(())
    }
    async fn exec_sync(
        &self,
        _process: &oci_spec::runtime::Process,
        _timeout: Option<std::time::Duration>,
    ) -> Result<berth_shim::ExecOutput, Error> {
        self.fake.call("task.exec_sync", &self.id).await?;
        Ok(self.fake.world.lock().unwrap().exec_output.clone())
    }
    async fn exec(&self, _opts: &berth_shim::ExecOptions) -> Result<berth_shim::IoStream, Error> {
        self.fake.call("task.exec", &self.id).await?;
        Err(Error::Unimplemented("a stream from the fake shim"))
    }
    async fn attach(
        &self,
        _opts: berth_shim::AttachOptions,
    ) -> Result<berth_shim::IoStream, Error> {
        self.fake.call("task.attach", &self.id).await?;
        Err(Error::Unimplemented("a stream from the fake shim"))
    }
    async fn update(&self, resources: &oci_spec::runtime::LinuxResources) -> Result<(), Error> {
        self.fake.call("task.update", &self.id).await?;
        let mut world = self.fake.world.lock().unwrap();
        world.updates.push((self.id.clone(), resources.clone()));
        Ok(())
    }
    async fn set_oom_score_adj(&self, value: i32) -> Result<(), Error> {
        self.fake.call("task.oom_score_adj", &self.id).await?;
        let mut world = self.fake.world.lock().unwrap();
        world.oom_score_adj.insert(self.id.clone(), value);
        Ok(())
    }
    async fn reopen_log(&self) -> Result<(), Error> {
        self.fake.call("task.reopen_log", &self.id).await
    }
}

#[async_trait]
impl Runtime for Arc<Fake> {
    async fn create(&self, opts: ShimOptions) -> Result<Arc<dyn Task>, Error> {
        self.call("runtime.create", &opts.id).await?;
        let (exit, _) = watch::channel(None);
        self.world.lock().unwrap().runtime.insert(
            opts.id.clone(),
            FakeContainer {
                started: false,
                started_at_ns: None,
                exit,
                shim_alive: true,
            },
        );
        Ok(Arc::new(FakeTask {
            id: opts.id,
            fake: self.clone(),
        }))
    }
    async fn connect(&self, id: &str, _shim_dir: &Path) -> Result<Arc<dyn Task>, Error> {
        let alive = self
            .world
            .lock()
            .unwrap()
            .runtime
            .get(id)
            .is_some_and(|c| c.shim_alive);
        if !alive {
            return Err(Error::FailedPrecondition(format!("{id}: no shim")));
        }
        Ok(Arc::new(FakeTask {
            id: id.to_string(),
            fake: self.clone(),
        }))
    }
    async fn delete(&self, id: &str, shim_dir: &Path, _runtime: &str) -> Result<(), Error> {
        self.call("runtime.delete", id).await?;
        let _ = shim_id(shim_dir);
        let mut world = self.world.lock().unwrap();
        if let Some(c) = world.runtime.remove(id) {
            // Deleting kills what runs.
            if c.exit.borrow().is_none() {
                c.exit.send_replace(Some(ExitInfo {
                    pid: 42,
                    exit_code: 137,
                    exited_at_ns: 1,
                    oom_killed: false,
                }));
            }
        }
        Ok(())
    }
    fn exit_file(&self, _shim_dir: &Path) -> Option<ExitInfo> {
        None
    }
    fn check(&self, _id: &str, _runtime: &str) -> Result<(), Error> {
        Ok(())
    }
    fn warm_up(&self, id: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("runtime.warm_up {id}"));
    }
}
