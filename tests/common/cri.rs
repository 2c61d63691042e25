//! CRI calls the stats and events tests make over and over: pulling the
//! test image, pods with a cgroup of their own, containers, their status,
//! exec, teardown.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cri_api::v1;

use super::{registry, Daemon};

/// Pulls `image` and returns its id.
pub async fn pull(daemon: &Daemon, image: &str) -> String {
    daemon
        .images()
        .await
        .pull_image(v1::PullImageRequest {
            image: Some(v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("PullImage")
        .into_inner()
        .image_ref
}

/// A busybox container running `command`, labelled `name=<name>`.
pub fn container(name: &str, command: &[&str]) -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: registry().busybox(),
            ..Default::default()
        }),
        command: command.iter().map(|s| s.to_string()).collect(),
        labels: [("name".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

/// `config` with the namespace options kubelet gives a container of a pod
/// with `pod_config` (the pod's own) when it names none.
pub fn as_kubelet_sends(
    pod_config: &v1::PodSandboxConfig,
    mut config: v1::ContainerConfig,
) -> v1::ContainerConfig {
    let pod_ns = pod_config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone());
    if let Some(pod_ns) = pod_ns {
        let linux = config.linux.get_or_insert_with(Default::default);
        let sc = linux.security_context.get_or_insert_with(Default::default);
        if sc.namespace_options.is_none() {
            sc.namespace_options = Some(v1::NamespaceOption {
                userns_options: None,
                ..pod_ns
            });
        }
    }
    config
}

pub async fn create(
    daemon: &Daemon,
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    config: v1::ContainerConfig,
) -> Result<String, tonic::Status> {
    let config = as_kubelet_sends(pod_config, config);
    daemon
        .runtime()
        .await
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(config),
            sandbox_config: Some(pod_config.clone()),
        })
        .await
        .map(|r| r.into_inner().container_id)
}

pub async fn start(daemon: &Daemon, id: &str) {
    daemon
        .runtime()
        .await
        .start_container(v1::StartContainerRequest {
            container_id: id.into(),
        })
        .await
        .expect("StartContainer");
}

/// Creates and starts a container; returns its id.
pub async fn run_container(
    daemon: &Daemon,
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    config: v1::ContainerConfig,
) -> String {
    let id = create(daemon, pod, pod_config, config)
        .await
        .expect("CreateContainer");
    start(daemon, &id).await;
    id
}

pub async fn container_status(daemon: &Daemon, id: &str) -> v1::ContainerStatus {
    daemon
        .runtime()
        .await
        .container_status(v1::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("a status")
}

/// Waits up to `timeout` for the container to exit.
pub async fn wait_exited(daemon: &Daemon, id: &str, timeout: Duration) -> v1::ContainerStatus {
    let deadline = Instant::now() + timeout;
    loop {
        let st = container_status(daemon, id).await;
        if st.state == v1::ContainerState::ContainerExited as i32 {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "container {id} did not exit in {timeout:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// ExecSync with a `timeout` in seconds, as the daemon answered it.
pub async fn exec_sync(
    daemon: &Daemon,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<v1::ExecSyncResponse, tonic::Status> {
    daemon
        .runtime()
        .await
        .exec_sync(v1::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        })
        .await
        .map(|r| r.into_inner())
}

/// ExecSync that must succeed with exit code 0.
pub async fn exec(daemon: &Daemon, id: &str, cmd: &[&str]) -> v1::ExecSyncResponse {
    let resp = exec_sync(daemon, id, cmd, 30).await.expect("ExecSync");
    assert_eq!(
        resp.exit_code,
        0,
        "{cmd:?}: {}",
        String::from_utf8_lossy(&resp.stderr)
    );
    resp
}

/// PodSandboxStatus with `verbose` (its `info` holds berth's JSON).
pub async fn pod_status_verbose(
    daemon: &Daemon,
    id: &str,
) -> Result<v1::PodSandboxStatusResponse, tonic::Status> {
    daemon
        .runtime()
        .await
        .pod_sandbox_status(v1::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        })
        .await
        .map(|r| r.into_inner())
}

pub async fn pod_status(daemon: &Daemon, id: &str) -> v1::PodSandboxStatus {
    daemon
        .runtime()
        .await
        .pod_sandbox_status(v1::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        })
        .await
        .expect("PodSandboxStatus")
        .into_inner()
        .status
        .expect("a status")
}

/// Stops and removes a pod.
pub async fn remove_pod(daemon: &Daemon, id: &str) {
    let mut rt = daemon.runtime().await;
    rt.stop_pod_sandbox(v1::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .expect("StopPodSandbox");
    rt.remove_pod_sandbox(v1::RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .expect("RemovePodSandbox");
}

/// A pod cgroup of the test's own (`/berth-test/<name>-<pid>`), as kubelet
/// gives every pod; its directories are removed on drop.
pub struct PodCgroup {
    pub parent: String,
}

impl PodCgroup {
    pub fn new(name: &str) -> PodCgroup {
        PodCgroup {
            parent: format!("/berth-test/{name}-{}", std::process::id()),
        }
    }

    /// `pods::pod_config(name)` with this cgroup parent.
    pub fn pod_config(&self, name: &str) -> v1::PodSandboxConfig {
        let mut config = super::pods::pod_config(name);
        if let Some(linux) = config.linux.as_mut() {
            linux.cgroup_parent = self.parent.clone();
        }
        config
    }

    /// This cgroup's directory in every mounted hierarchy.
    fn dirs(&self) -> Vec<PathBuf> {
        let rel = self.parent.trim_start_matches('/');
        let mut dirs = vec![PathBuf::from("/sys/fs/cgroup").join(rel)];
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            dirs.extend(entries.flatten().map(|e| e.path().join(rel)));
        }
        dirs
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for dir in self.dirs() {
            // Empty cgroups only: rmdir fails on one still in use, as it should.
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// What of a container runc, its shim and its rootfs mount hold, in the
/// daemon's state dir.
pub struct ContainerPaths {
    pub runtime_state: PathBuf,
    pub shim_socket: PathBuf,
    pub rootfs: PathBuf,
}

impl ContainerPaths {
    pub fn new(daemon: &Daemon, id: &str) -> ContainerPaths {
        let state = daemon.sandbox.path("state");
        ContainerPaths {
            runtime_state: state.join("runtime").join(id),
            shim_socket: state.join("s").join(&id[..24]).join("shim.sock"),
            rootfs: state.join("containers").join(id).join("rootfs"),
        }
    }

    pub fn rootfs_mounted(&self) -> bool {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(self.rootfs.to_str().unwrap())
    }

    /// Whether runc, the shim and the rootfs mount have all let go.
    pub fn released(&self) -> bool {
        !self.runtime_state.exists() && !self.shim_socket.exists() && !self.rootfs_mounted()
    }
}
