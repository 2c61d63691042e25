//! One runtime under test: its CRI endpoint (a unix socket), the daemon's pid
//! (asked of the socket itself with SO_PEERCRED), how to recognise its shims,
//! and the CRI calls the workload makes, each bounded by a timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use cri_api::v1;
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Time limit of one CRI call (a pull has its own, [`PULL_TIMEOUT`]).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a daemon may take to answer its first call.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Time limit of one image pull.
const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// What `--target` says about one runtime:
/// `NAME=SOCKET[,shim=EXE][,match=TEXT][,pid=PID]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// Name in the report (`berth`, `containerd`).
    pub name: String,
    /// The CRI unix socket.
    pub socket: PathBuf,
    /// File name of the shim executable (`berth-shim`, `containerd-shim-runc-v2`).
    pub shim_exe: Option<String>,
    /// Text a shim's command line must contain to count as this runtime's
    /// (its state dir or socket), so that other instances' shims are left out.
    pub shim_match: Option<String>,
    /// The daemon's pid; found through the socket when absent.
    pub pid: Option<i32>,
}

impl std::str::FromStr for TargetSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split(',');
        let head = parts.next().unwrap_or_default();
        let (name, socket) = head
            .split_once('=')
            .ok_or_else(|| format!("target {s:?}: want NAME=SOCKET[,shim=EXE][,match=TEXT]"))?;
        if name.is_empty() || socket.is_empty() {
            return Err(format!("target {s:?}: empty name or socket"));
        }
        let mut spec = TargetSpec {
            name: name.to_string(),
            socket: PathBuf::from(socket.trim_start_matches("unix://")),
            shim_exe: None,
            shim_match: None,
            pid: None,
        };
        for part in parts {
            match part.split_once('=') {
                Some(("shim", v)) => spec.shim_exe = Some(v.to_string()),
                Some(("match", v)) => spec.shim_match = Some(v.to_string()),
                Some(("pid", v)) => {
                    spec.pid = Some(
                        v.parse()
                            .map_err(|_| format!("target {s:?}: bad pid {v:?}"))?,
                    )
                }
                _ => return Err(format!("target {s:?}: unknown option {part:?}")),
            }
        }
        Ok(spec)
    }
}

/// A connected runtime. Cheap to clone (the gRPC channel is shared).
#[derive(Clone)]
pub struct Target {
    pub spec: TargetSpec,
    /// The daemon's pid.
    pub pid: i32,
    /// `runtime_name runtime_version` from the Version call.
    pub version: String,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    channel: Channel,
}

/// A request encoded by prost, the answer kept as the bytes it came in
/// ([`Target::relist_split`]: the transport timed without the decode).
#[derive(Default)]
struct RawAnswer<Req>(std::marker::PhantomData<Req>);

impl<Req: prost::Message + Send + 'static> tonic::codec::Codec for RawAnswer<Req> {
    type Encode = Req;
    type Decode = tonic::codegen::Bytes;
    type Encoder = RawAnswer<Req>;
    type Decoder = RawAnswer<Req>;
    fn encoder(&mut self) -> Self::Encoder {
        RawAnswer(std::marker::PhantomData)
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawAnswer(std::marker::PhantomData)
    }
}

impl<Req: prost::Message> tonic::codec::Encoder for RawAnswer<Req> {
    type Item = Req;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Req,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl<Req> tonic::codec::Decoder for RawAnswer<Req> {
    type Item = tonic::codegen::Bytes;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<tonic::codegen::Bytes>, tonic::Status> {
        use prost::bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A gRPC channel over the unix socket at `path`.
async fn channel(path: &Path) -> Result<Channel> {
    let path = path.to_path_buf();
    let channel = Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(channel)
}

/// The pid of the process that serves the unix socket at `path`.
fn server_pid(path: &Path) -> Result<i32> {
    let stream = std::os::unix::net::UnixStream::connect(path)
        .with_context(|| format!("connecting to {}", path.display()))?;
    let cred = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .with_context(|| format!("SO_PEERCRED on {}", path.display()))?;
    Ok(cred.pid())
}

/// Bounds `fut` by `limit`, naming the call in the error.
async fn bounded<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(anyhow!("{what}: {:?}: {}", status.code(), status.message())),
        Err(_) => Err(anyhow!("{what}: no answer in {limit:?}")),
    }
}

impl Target {
    /// Connects to the runtime and asks its version and pid.
    pub async fn connect(spec: TargetSpec) -> Result<Target> {
        let channel = channel(&spec.socket)
            .await
            .with_context(|| format!("{}: connecting to {}", spec.name, spec.socket.display()))?;
        let pid = match spec.pid {
            Some(pid) => pid,
            None => server_pid(&spec.socket)?,
        };
        let mut target = Target {
            pid,
            version: String::new(),
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel.clone()),
            channel,
            spec,
        };
        // A daemon may open its socket before it answers (containerd's CRI
        // plugin starts after its gRPC server): ask until it does.
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        loop {
            let v = bounded(
                "Version",
                CALL_TIMEOUT,
                target
                    .runtime
                    .clone()
                    .version(v1::VersionRequest::default()),
            )
            .await;
            match v {
                Ok(v) => {
                    target.version = format!("{} {}", v.runtime_name, v.runtime_version);
                    return Ok(target);
                }
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(e.context(target.spec.name.clone()))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// The report name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub async fn run_pod(&self, config: &v1::PodSandboxConfig) -> Result<String> {
        let req = v1::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let r = bounded(
            "RunPodSandbox",
            CALL_TIMEOUT,
            self.runtime.clone().run_pod_sandbox(req),
        )
        .await?;
        Ok(r.pod_sandbox_id)
    }

    pub async fn create_container(
        &self,
        pod_id: &str,
        config: &v1::ContainerConfig,
        pod_config: &v1::PodSandboxConfig,
    ) -> Result<String> {
        let req = v1::CreateContainerRequest {
            pod_sandbox_id: pod_id.to_string(),
            config: Some(config.clone()),
            sandbox_config: Some(pod_config.clone()),
        };
        let r = bounded(
            "CreateContainer",
            CALL_TIMEOUT,
            self.runtime.clone().create_container(req),
        )
        .await?;
        Ok(r.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<()> {
        let req = v1::StartContainerRequest {
            container_id: id.to_string(),
        };
        bounded(
            "StartContainer",
            CALL_TIMEOUT,
            self.runtime.clone().start_container(req),
        )
        .await?;
        Ok(())
    }

    /// The container's state (a `v1::ContainerState` value).
    pub async fn container_state(&self, id: &str) -> Result<i32> {
        let req = v1::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let r = bounded(
            "ContainerStatus",
            CALL_TIMEOUT,
            self.runtime.clone().container_status(req),
        )
        .await?;
        r.status
            .map(|s| s.state)
            .ok_or_else(|| anyhow!("ContainerStatus of {id}: no status"))
    }

    /// Lists containers (all, or those with the given labels and state);
    /// returns how many.
    pub async fn list_containers(
        &self,
        labels: &[(&str, &str)],
        state: Option<v1::ContainerState>,
    ) -> Result<usize> {
        let filter = (!labels.is_empty() || state.is_some()).then(|| v1::ContainerFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            state: state.map(|s| v1::ContainerStateValue { state: s as i32 }),
            ..Default::default()
        });
        let r = bounded(
            "ListContainers",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .list_containers(v1::ListContainersRequest { filter }),
        )
        .await?;
        Ok(r.containers.len())
    }

    /// Lists pods (all, or those with the given labels).
    /// kubelet's relist: ListPodSandbox then ListContainers, unfiltered;
    /// the encoded size of each answer, in bytes.
    pub async fn relist(&self) -> Result<(usize, usize)> {
        use prost::Message;
        let pods = bounded(
            "ListPodSandbox",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None }),
        )
        .await?;
        let containers = bounded(
            "ListContainers",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .list_containers(v1::ListContainersRequest { filter: None }),
        )
        .await?;
        Ok((pods.encoded_len(), containers.encoded_len()))
    }

    /// The relist again, its answers taken as bytes: how long they took
    /// to come (both calls), and how long decoding them then takes.
    pub async fn relist_split(&self) -> Result<(Duration, Duration)> {
        use prost::Message;
        let start = std::time::Instant::now();
        let pods = self
            .raw(
                "/runtime.v1.RuntimeService/ListPodSandbox",
                v1::ListPodSandboxRequest { filter: None },
            )
            .await?;
        let containers = self
            .raw(
                "/runtime.v1.RuntimeService/ListContainers",
                v1::ListContainersRequest { filter: None },
            )
            .await?;
        let transport = start.elapsed();
        let start = std::time::Instant::now();
        v1::ListPodSandboxResponse::decode(pods)?;
        v1::ListContainersResponse::decode(containers)?;
        Ok((transport, start.elapsed()))
    }

    /// One unary call of `path`, its answer as the bytes it came in.
    async fn raw<Req: prost::Message + Send + Default + 'static>(
        &self,
        path: &'static str,
        req: Req,
    ) -> Result<tonic::codegen::Bytes> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let call = async {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
            grpc.unary(tonic::Request::new(req), path, RawAnswer::<Req>::default())
                .await
        };
        bounded(path, CALL_TIMEOUT, call).await
    }

    pub async fn list_pods(&self, labels: &[(&str, &str)]) -> Result<Vec<v1::PodSandbox>> {
        let filter = (!labels.is_empty()).then(|| v1::PodSandboxFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        });
        let r = bounded(
            "ListPodSandbox",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .list_pod_sandbox(v1::ListPodSandboxRequest { filter }),
        )
        .await?;
        Ok(r.items)
    }

    /// Runs `cmd` in the container; fails unless it exits 0.
    pub async fn exec_sync(&self, id: &str, cmd: &[&str]) -> Result<()> {
        let req = v1::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 30,
        };
        let r = bounded(
            "ExecSync",
            CALL_TIMEOUT,
            self.runtime.clone().exec_sync(req),
        )
        .await?;
        if r.exit_code != 0 {
            bail!(
                "ExecSync {cmd:?} in {id}: exit code {}: {}",
                r.exit_code,
                String::from_utf8_lossy(&r.stderr)
            );
        }
        Ok(())
    }

    pub async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        let req = v1::StopContainerRequest {
            container_id: id.to_string(),
            timeout: timeout_secs,
        };
        bounded(
            "StopContainer",
            CALL_TIMEOUT,
            self.runtime.clone().stop_container(req),
        )
        .await?;
        Ok(())
    }

    pub async fn remove_container(&self, id: &str) -> Result<()> {
        let req = v1::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        bounded(
            "RemoveContainer",
            CALL_TIMEOUT,
            self.runtime.clone().remove_container(req),
        )
        .await?;
        Ok(())
    }

    pub async fn stop_pod(&self, id: &str) -> Result<()> {
        let req = v1::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        bounded(
            "StopPodSandbox",
            CALL_TIMEOUT,
            self.runtime.clone().stop_pod_sandbox(req),
        )
        .await?;
        Ok(())
    }

    pub async fn remove_pod(&self, id: &str) -> Result<()> {
        let req = v1::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        bounded(
            "RemovePodSandbox",
            CALL_TIMEOUT,
            self.runtime.clone().remove_pod_sandbox(req),
        )
        .await?;
        Ok(())
    }

    /// The pod's state (a `v1::PodSandboxState` value).
    pub async fn pod_state(&self, id: &str) -> Result<i32> {
        let req = v1::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        let r = bounded(
            "PodSandboxStatus",
            CALL_TIMEOUT,
            self.runtime.clone().pod_sandbox_status(req),
        )
        .await?;
        r.status
            .map(|s| s.state)
            .ok_or_else(|| anyhow!("PodSandboxStatus of {id}: no status"))
    }

    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let req = v1::ReopenContainerLogRequest {
            container_id: id.to_string(),
        };
        bounded(
            "ReopenContainerLog",
            CALL_TIMEOUT,
            self.runtime.clone().reopen_container_log(req),
        )
        .await?;
        Ok(())
    }

    /// The Exec call (stdout and stderr, no stdin, no terminal): the
    /// streaming URL.
    pub async fn exec_url(&self, id: &str, cmd: &[&str]) -> Result<String> {
        let req = v1::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty: false,
            stdin: false,
            stdout: true,
            stderr: true,
        };
        let r = bounded("Exec", CALL_TIMEOUT, self.runtime.clone().exec(req)).await?;
        Ok(r.url)
    }

    /// The PortForward call: the streaming URL.
    pub async fn port_forward_url(&self, pod_id: &str, ports: &[i32]) -> Result<String> {
        let req = v1::PortForwardRequest {
            pod_sandbox_id: pod_id.to_string(),
            port: ports.to_vec(),
        };
        let r = bounded(
            "PortForward",
            CALL_TIMEOUT,
            self.runtime.clone().port_forward(req),
        )
        .await?;
        Ok(r.url)
    }

    /// kubelet's stats: ListPodSandboxStats and ListContainerStats,
    /// unfiltered; how many of each.
    pub async fn list_stats(&self) -> Result<(usize, usize)> {
        let pods = bounded(
            "ListPodSandboxStats",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .list_pod_sandbox_stats(v1::ListPodSandboxStatsRequest { filter: None }),
        )
        .await?;
        let containers = bounded(
            "ListContainerStats",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .list_container_stats(v1::ListContainerStatsRequest { filter: None }),
        )
        .await?;
        Ok((pods.stats.len(), containers.stats.len()))
    }

    /// kubelet's health calls: Status (verbose off) and ImageFsInfo.
    pub async fn health(&self) -> Result<()> {
        bounded(
            "Status",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .status(v1::StatusRequest { verbose: false }),
        )
        .await?;
        bounded(
            "ImageFsInfo",
            CALL_TIMEOUT,
            self.images.clone().image_fs_info(v1::ImageFsInfoRequest {}),
        )
        .await?;
        Ok(())
    }

    /// GetContainerEvents: the stream of events (kubelet's evented PLEG).
    pub async fn container_events(&self) -> Result<tonic::Streaming<v1::ContainerEventResponse>> {
        bounded(
            "GetContainerEvents",
            CALL_TIMEOUT,
            self.runtime
                .clone()
                .get_container_events(v1::GetEventsRequest {}),
        )
        .await
    }

    /// Pulls `image`; returns its image ref.
    pub async fn pull(&self, image: &str) -> Result<String> {
        let req = v1::PullImageRequest {
            image: Some(image_spec(image)),
            ..Default::default()
        };
        let r = bounded(
            "PullImage",
            PULL_TIMEOUT,
            self.images.clone().pull_image(req),
        )
        .await
        .with_context(|| format!("pulling {image}"))?;
        Ok(r.image_ref)
    }

    /// Whether the runtime has `image`.
    pub async fn has_image(&self, image: &str) -> Result<bool> {
        let req = v1::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        let r = bounded(
            "ImageStatus",
            CALL_TIMEOUT,
            self.images.clone().image_status(req),
        )
        .await?;
        Ok(r.image.is_some())
    }

    /// Removes `image` (an absent image is no error).
    pub async fn remove_image(&self, image: &str) -> Result<()> {
        if !self.has_image(image).await? {
            return Ok(());
        }
        let req = v1::RemoveImageRequest {
            image: Some(image_spec(image)),
        };
        bounded(
            "RemoveImage",
            CALL_TIMEOUT,
            self.images.clone().remove_image(req),
        )
        .await
        .with_context(|| format!("removing {image}"))?;
        Ok(())
    }
}

fn image_spec(image: &str) -> v1::ImageSpec {
    v1::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_target_specs() {
        let t: TargetSpec = "berth=/tmp/b.sock,shim=berth-shim,match=/tmp/b/,pid=42"
            .parse()
            .unwrap();
        assert_eq!(t.name, "berth");
        assert_eq!(t.socket, PathBuf::from("/tmp/b.sock"));
        assert_eq!(t.shim_exe.as_deref(), Some("berth-shim"));
        assert_eq!(t.shim_match.as_deref(), Some("/tmp/b/"));
        assert_eq!(t.pid, Some(42));
        let t: TargetSpec = "c=unix:///run/c.sock".parse().unwrap();
        assert_eq!(t.socket, PathBuf::from("/run/c.sock"));
        assert!("nosocket".parse::<TargetSpec>().is_err());
        assert!("a=/s,bogus=1".parse::<TargetSpec>().is_err());
        assert!("a=/s,pid=x".parse::<TargetSpec>().is_err());
    }
}
