//! The tests' CRI client, [`Cri`]: one method per call, each returning the
//! daemon's answer (`Result<_, tonic::Status>`), with an optional client
//! deadline; and the panicking conveniences the tests use over and over,
//! built on it: pulling the test image, containers, their status, exec,
//! teardown.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cri_api::v1;
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;
use tonic::{Response, Status};

use super::{registry, Daemon};

/// The CRI services of one daemon (one connection, cheap to clone). Each
/// method makes one call and returns what the daemon answered; with a
/// deadline ([`Cri::with_deadline`]) the call also carries it (as kubelet's
/// do) and the client gives up once it passed (`DeadlineExceeded`, "the
/// test's client gave up"). [`Cri::runtime`] and [`Cri::images`] are the
/// raw clients, for requests made wrong on purpose and streams.
#[derive(Clone)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    deadline: Option<Duration>,
}

/// Which streams an Exec or Attach asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Cri {
    /// Connects to the daemon's socket.
    pub async fn connect(socket: &Path) -> Result<Cri, tonic::transport::Error> {
        let channel = super::channel(socket).await?;
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
            deadline: None,
        })
    }

    /// This client, its calls with a deadline of `deadline`.
    pub fn with_deadline(&self, deadline: Duration) -> Cri {
        Cri {
            deadline: Some(deadline),
            ..self.clone()
        }
    }

    /// The raw RuntimeService client.
    pub fn runtime(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }

    /// The raw ImageService client.
    pub fn images(&self) -> ImageServiceClient<Channel> {
        self.images.clone()
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        if let Some(deadline) = self.deadline {
            req.set_timeout(deadline);
        }
        req
    }

    async fn answer<T>(
        &self,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, Status> {
        let answer = match self.deadline {
            None => call.await,
            Some(deadline) => tokio::time::timeout(deadline, call)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("the test's client gave up"))),
        };
        answer.map(Response::into_inner)
    }

    pub async fn version(&self) -> Result<v1::VersionResponse, Status> {
        let req = self.request(v1::VersionRequest::default());
        self.answer(self.runtime().version(req)).await
    }

    pub async fn status(&self, verbose: bool) -> Result<v1::StatusResponse, Status> {
        let req = self.request(v1::StatusRequest { verbose });
        self.answer(self.runtime().status(req)).await
    }

    /// RunPodSandbox with the default runtime handler: the pod's id.
    pub async fn run_pod(&self, config: &v1::PodSandboxConfig) -> Result<String, Status> {
        self.run_pod_on(config, "").await
    }

    /// RunPodSandbox with `handler`: the pod's id.
    pub async fn run_pod_on(
        &self,
        config: &v1::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, Status> {
        let req = self.request(v1::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.into(),
        });
        let resp = self.answer(self.runtime().run_pod_sandbox(req)).await?;
        Ok(resp.pod_sandbox_id)
    }

    pub async fn stop_pod(&self, id: &str) -> Result<(), Status> {
        let req = self.request(v1::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        });
        self.answer(self.runtime().stop_pod_sandbox(req)).await?;
        Ok(())
    }

    pub async fn remove_pod(&self, id: &str) -> Result<(), Status> {
        let req = self.request(v1::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        });
        self.answer(self.runtime().remove_pod_sandbox(req)).await?;
        Ok(())
    }

    /// PodSandboxStatus; with `verbose`, its `info` holds berth's JSON.
    pub async fn pod_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<v1::PodSandboxStatusResponse, Status> {
        let req = self.request(v1::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose,
        });
        self.answer(self.runtime().pod_sandbox_status(req)).await
    }

    pub async fn list_pods(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Result<Vec<v1::PodSandbox>, Status> {
        let req = self.request(v1::ListPodSandboxRequest { filter });
        Ok(self
            .answer(self.runtime().list_pod_sandbox(req))
            .await?
            .items)
    }

    /// UpdatePodSandboxResources with `resources` and the pod's `overhead`.
    pub async fn update_pod_resources(
        &self,
        id: &str,
        overhead: Option<v1::LinuxContainerResources>,
        resources: Option<v1::LinuxContainerResources>,
    ) -> Result<(), Status> {
        let req = self.request(v1::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: id.into(),
            overhead,
            resources,
        });
        self.answer(self.runtime().update_pod_sandbox_resources(req))
            .await?;
        Ok(())
    }

    pub async fn pod_stats(&self, id: &str) -> Result<v1::PodSandboxStatsResponse, Status> {
        let req = self.request(v1::PodSandboxStatsRequest {
            pod_sandbox_id: id.into(),
        });
        self.answer(self.runtime().pod_sandbox_stats(req)).await
    }

    pub async fn list_pod_stats(
        &self,
        filter: Option<v1::PodSandboxStatsFilter>,
    ) -> Result<Vec<v1::PodSandboxStats>, Status> {
        let req = self.request(v1::ListPodSandboxStatsRequest { filter });
        Ok(self
            .answer(self.runtime().list_pod_sandbox_stats(req))
            .await?
            .stats)
    }

    pub async fn list_metric_descriptors(&self) -> Result<Vec<v1::MetricDescriptor>, Status> {
        let req = self.request(v1::ListMetricDescriptorsRequest {});
        let resp = self
            .answer(self.runtime().list_metric_descriptors(req))
            .await;
        Ok(resp?.descriptors)
    }

    pub async fn list_pod_metrics(&self) -> Result<Vec<v1::PodSandboxMetrics>, Status> {
        let req = self.request(v1::ListPodSandboxMetricsRequest {});
        let resp = self
            .answer(self.runtime().list_pod_sandbox_metrics(req))
            .await;
        Ok(resp?.pod_metrics)
    }

    /// CreateContainer of `config`, with the namespace options kubelet
    /// gives it ([`as_kubelet_sends`]): the container's id.
    pub async fn create_container(
        &self,
        pod: &str,
        pod_config: &v1::PodSandboxConfig,
        config: v1::ContainerConfig,
    ) -> Result<String, Status> {
        let req = self.request(v1::CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(as_kubelet_sends(pod_config, config)),
            sandbox_config: Some(pod_config.clone()),
        });
        let resp = self.answer(self.runtime().create_container(req)).await?;
        Ok(resp.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), Status> {
        let req = self.request(v1::StartContainerRequest {
            container_id: id.into(),
        });
        self.answer(self.runtime().start_container(req)).await?;
        Ok(())
    }

    /// StopContainer with a grace period of `timeout` seconds.
    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Status> {
        let req = self.request(v1::StopContainerRequest {
            container_id: id.into(),
            timeout,
        });
        self.answer(self.runtime().stop_container(req)).await?;
        Ok(())
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), Status> {
        let req = self.request(v1::RemoveContainerRequest {
            container_id: id.into(),
        });
        self.answer(self.runtime().remove_container(req)).await?;
        Ok(())
    }

    pub async fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<v1::ContainerStatusResponse, Status> {
        let req = self.request(v1::ContainerStatusRequest {
            container_id: id.into(),
            verbose,
        });
        self.answer(self.runtime().container_status(req)).await
    }

    pub async fn list_containers(
        &self,
        filter: Option<v1::ContainerFilter>,
    ) -> Result<Vec<v1::Container>, Status> {
        let req = self.request(v1::ListContainersRequest { filter });
        Ok(self
            .answer(self.runtime().list_containers(req))
            .await?
            .containers)
    }

    /// ExecSync of `cmd` with a timeout of `timeout` seconds.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: &[&str],
        timeout: i64,
    ) -> Result<v1::ExecSyncResponse, Status> {
        let req = self.request(v1::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        });
        self.answer(self.runtime().exec_sync(req)).await
    }

    pub async fn reopen_container_log(&self, id: &str) -> Result<(), Status> {
        let req = self.request(v1::ReopenContainerLogRequest {
            container_id: id.into(),
        });
        self.answer(self.runtime().reopen_container_log(req))
            .await?;
        Ok(())
    }

    /// UpdateContainerResources with `linux` resources.
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: v1::LinuxContainerResources,
    ) -> Result<(), Status> {
        let req = self.request(v1::UpdateContainerResourcesRequest {
            container_id: id.into(),
            linux: Some(linux),
            ..Default::default()
        });
        self.answer(self.runtime().update_container_resources(req))
            .await?;
        Ok(())
    }

    pub async fn container_stats(&self, id: &str) -> Result<v1::ContainerStatsResponse, Status> {
        let req = self.request(v1::ContainerStatsRequest {
            container_id: id.into(),
        });
        self.answer(self.runtime().container_stats(req)).await
    }

    pub async fn list_container_stats(
        &self,
        filter: Option<v1::ContainerStatsFilter>,
    ) -> Result<Vec<v1::ContainerStats>, Status> {
        let req = self.request(v1::ListContainerStatsRequest { filter });
        Ok(self
            .answer(self.runtime().list_container_stats(req))
            .await?
            .stats)
    }

    /// The Exec RPC: the streaming URL.
    pub async fn exec(&self, id: &str, cmd: &[&str], s: Streams) -> Result<String, Status> {
        let req = self.request(v1::ExecRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            tty: s.tty,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        });
        Ok(self.answer(self.runtime().exec(req)).await?.url)
    }

    /// The Attach RPC: the streaming URL.
    pub async fn attach(&self, id: &str, s: Streams) -> Result<String, Status> {
        let req = self.request(v1::AttachRequest {
            container_id: id.into(),
            tty: s.tty,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        });
        Ok(self.answer(self.runtime().attach(req)).await?.url)
    }

    /// The PortForward RPC: the streaming URL.
    pub async fn port_forward(&self, pod: &str, ports: &[i32]) -> Result<String, Status> {
        let req = self.request(v1::PortForwardRequest {
            pod_sandbox_id: pod.into(),
            port: ports.to_vec(),
        });
        Ok(self.answer(self.runtime().port_forward(req)).await?.url)
    }

    /// PullImage: the image's id (its `image_ref`).
    pub async fn pull(&self, image: &str) -> Result<String, Status> {
        let req = self.request(v1::PullImageRequest {
            image: Some(v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        Ok(self.answer(self.images().pull_image(req)).await?.image_ref)
    }

    /// ImageStatus: the image, None if the daemon has none of that name.
    pub async fn image_status(&self, image: &str) -> Result<Option<v1::Image>, Status> {
        Ok(self.image_status_of(image, false).await?.image)
    }

    /// Verbose ImageStatus: its `info` (JSON), null when there is none.
    pub async fn image_info(&self, image: &str) -> Result<serde_json::Value, Status> {
        let resp = self.image_status_of(image, true).await?;
        let info = resp.info.get("info").map(String::as_str).unwrap_or("null");
        Ok(serde_json::from_str(info).expect("verbose info is JSON"))
    }

    async fn image_status_of(
        &self,
        image: &str,
        verbose: bool,
    ) -> Result<v1::ImageStatusResponse, Status> {
        let req = self.request(v1::ImageStatusRequest {
            image: Some(v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            verbose,
        });
        self.answer(self.images().image_status(req)).await
    }

    pub async fn list_images(
        &self,
        filter: Option<v1::ImageFilter>,
    ) -> Result<Vec<v1::Image>, Status> {
        let req = self.request(v1::ListImagesRequest { filter });
        Ok(self.answer(self.images().list_images(req)).await?.images)
    }

    pub async fn remove_image(&self, image: &str) -> Result<(), Status> {
        let req = self.request(v1::RemoveImageRequest {
            image: Some(v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
        });
        self.answer(self.images().remove_image(req)).await?;
        Ok(())
    }

    pub async fn image_fs_info(&self) -> Result<v1::ImageFsInfoResponse, Status> {
        let req = self.request(v1::ImageFsInfoRequest {});
        self.answer(self.images().image_fs_info(req)).await
    }
}

/// Pulls `image` and returns its id.
pub async fn pull(daemon: &Daemon, image: &str) -> String {
    daemon.cri().await.pull(image).await.expect("PullImage")
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

/// Creates and starts a container; returns its id.
pub async fn run_container(
    daemon: &Daemon,
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    config: v1::ContainerConfig,
) -> String {
    let cri = daemon.cri().await;
    let id = cri
        .create_container(pod, pod_config, config)
        .await
        .expect("CreateContainer");
    cri.start_container(&id).await.expect("StartContainer");
    id
}

pub async fn start(daemon: &Daemon, id: &str) {
    daemon
        .cri()
        .await
        .start_container(id)
        .await
        .expect("StartContainer");
}

pub async fn container_status(daemon: &Daemon, id: &str) -> v1::ContainerStatus {
    daemon
        .cri()
        .await
        .container_status(id, false)
        .await
        .expect("ContainerStatus")
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

/// ExecSync that must succeed with exit code 0.
pub async fn exec(daemon: &Daemon, id: &str, cmd: &[&str]) -> v1::ExecSyncResponse {
    let resp = daemon
        .cri()
        .await
        .exec_sync(id, cmd, 30)
        .await
        .expect("ExecSync");
    assert_eq!(
        resp.exit_code,
        0,
        "{cmd:?}: {}",
        String::from_utf8_lossy(&resp.stderr)
    );
    resp
}

pub async fn pod_status(daemon: &Daemon, id: &str) -> v1::PodSandboxStatus {
    daemon
        .cri()
        .await
        .pod_status(id, false)
        .await
        .expect("PodSandboxStatus")
        .status
        .expect("a status")
}

/// Stops and removes a pod.
pub async fn remove_pod(daemon: &Daemon, id: &str) {
    let cri = daemon.cri().await;
    cri.stop_pod(id).await.expect("StopPodSandbox");
    cri.remove_pod(id).await.expect("RemovePodSandbox");
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

    /// The cgroups below this one, in any hierarchy (a container's, a
    /// pause's): what a removed pod must not leave.
    pub fn children(&self) -> Vec<PathBuf> {
        let subdirs = |d: PathBuf| std::fs::read_dir(d).into_iter().flatten().flatten();
        self.dirs()
            .into_iter()
            .flat_map(subdirs)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect()
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
