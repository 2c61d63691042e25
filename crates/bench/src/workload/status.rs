//! The status job: the calls kubelet makes most, answered from memory,
//! timed from the client and (from berth's RPC histogram) on the server;
//! and the CRI clients of its own that it makes them with.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cri_api::v1;

use super::metrics::{rpc_buckets, scrape};
use super::{order, stat_ms, Settings, Workload};
use crate::report::{histogram_quantile, Report};
use crate::target::Target;

/// The status calls the `status` group times, by their gRPC method names;
/// Version, answered from constants, is the floor of a CRI call (the two
/// gRPC stacks and the socket).
const STATUS_CALLS: [&str; 7] = [
    "Version",
    "ContainerStatus",
    "PodSandboxStatus",
    "ListContainers",
    "ListPodSandbox",
    "ImageStatus",
    "ListImages",
];
/// Untimed calls of each kind before the timed ones.
const STATUS_WARMUP: usize = 5;
/// Time limit of one status call, and of one metrics scrape.
pub(super) const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

impl Workload {
    /// The six calls kubelet makes most, answered from memory (and Version,
    /// the floor of any call): each timed
    /// from the client, and (where the runtime exposes berth's histogram)
    /// its server-side median, from the histogram scraped before and after
    /// the timed calls. One pod with a running container on each runtime.
    pub async fn status(self: &Arc<Self>, targets: &[Target], s: &Settings, report: &mut Report) {
        let n = targets.len();
        let mut setups = Vec::new();
        for t in targets {
            let setup = async {
                let clients = Clients::connect(&t.spec.socket).await?;
                let config = self.pod_config(t, "status", "status")?;
                let (pod, _) = self.pod_with_container(t, config, "status").await?;
                let container = clients.container_of(&pod).await?;
                anyhow::Ok((clients, pod, container))
            }
            .await;
            setups.push(match setup {
                Ok(s) => Some(s),
                Err(e) => {
                    report.error(t.name(), "status setup", &e);
                    None
                }
            });
        }
        let calls = STATUS_CALLS.len();
        let mut client = vec![vec![Vec::new(); n]; calls];
        let mut server: Vec<Vec<Option<f64>>> = vec![vec![None; n]; calls];
        for (k, call) in STATUS_CALLS.iter().enumerate() {
            for ti in order(k, n) {
                let (t, Some((clients, pod, container))) = (&targets[ti], &setups[ti]) else {
                    continue;
                };
                let metrics = self.metrics.get(t.name());
                let measured = async {
                    for _ in 0..STATUS_WARMUP {
                        clients.call(call, pod, container, &self.image).await?;
                    }
                    let before = match metrics {
                        Some(addr) => Some(rpc_buckets(&scrape(addr).await?, call)),
                        None => None,
                    };
                    let mut samples = Vec::with_capacity(s.list_iterations);
                    for _ in 0..s.list_iterations {
                        let start = Instant::now();
                        clients.call(call, pod, container, &self.image).await?;
                        samples.push(start.elapsed());
                    }
                    let server = match (metrics, before) {
                        (Some(addr), Some(before)) => {
                            let after = rpc_buckets(&scrape(addr).await?, call);
                            histogram_quantile(&before, &after, 0.5)
                        }
                        _ => None,
                    };
                    anyhow::Ok((samples, server))
                }
                .await;
                match measured {
                    Ok((samples, median)) => {
                        client[k][ti] = samples;
                        server[k][ti] = median;
                    }
                    Err(e) => report.error(t.name(), call, &e),
                }
            }
        }
        for (k, call) in STATUS_CALLS.iter().enumerate() {
            for (stat, p) in [("median", 50.0), ("p99", 99.0)] {
                let values = client[k].iter().map(|v| stat_ms(v, p)).collect();
                report.add("status", &format!("{call} {stat}"), "ms", values);
            }
            report.add_partial(
                "status",
                &format!("{call} server-side median (metrics histogram)"),
                "µs",
                server[k].iter().map(|v| v.map(|secs| secs * 1e6)).collect(),
            );
        }
        for t in targets {
            if let Err(e) = self.teardown(t, Some("status")).await {
                report.error(t.name(), "status teardown", &e);
            }
        }
        eprintln!("status: done");
    }
}

/// CRI clients of one runtime of its own (the status group calls more
/// kinds of RPC than [`Target`] offers).
pub(super) struct Clients {
    runtime: v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    images: v1::image_service_client::ImageServiceClient<tonic::transport::Channel>,
}

impl Clients {
    pub(super) async fn connect(socket: &std::path::Path) -> Result<Clients> {
        let path = socket.to_path_buf();
        let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")?
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .with_context(|| format!("connecting to {}", socket.display()))?;
        Ok(Clients {
            runtime: v1::runtime_service_client::RuntimeServiceClient::new(channel.clone()),
            images: v1::image_service_client::ImageServiceClient::new(channel),
        })
    }

    /// The id of the (one) container of pod `pod`.
    async fn container_of(&self, pod: &str) -> Result<String> {
        let filter = v1::ContainerFilter {
            pod_sandbox_id: pod.to_string(),
            ..Default::default()
        };
        let req = v1::ListContainersRequest {
            filter: Some(filter),
        };
        let r = bounded(self.runtime.clone().list_containers(req)).await?;
        r.containers
            .into_iter()
            .next()
            .map(|c| c.id)
            .ok_or_else(|| anyhow!("pod {pod} has no container"))
    }

    /// One `call` (of [`STATUS_CALLS`]) about `pod`, `container`, `image`,
    /// unfiltered for the lists, not verbose; checks that it found its object.
    async fn call(&self, call: &str, pod: &str, container: &str, image: &str) -> Result<()> {
        let found = match call {
            "Version" => {
                let req = v1::VersionRequest {
                    version: "v1".into(),
                };
                let r = bounded(self.runtime.clone().version(req)).await?;
                !r.runtime_name.is_empty()
            }
            "ContainerStatus" => {
                let req = v1::ContainerStatusRequest {
                    container_id: container.to_string(),
                    verbose: false,
                };
                let r = bounded(self.runtime.clone().container_status(req)).await?;
                r.status.is_some()
            }
            "PodSandboxStatus" => {
                let req = v1::PodSandboxStatusRequest {
                    pod_sandbox_id: pod.to_string(),
                    verbose: false,
                };
                let r = bounded(self.runtime.clone().pod_sandbox_status(req)).await?;
                r.status.is_some()
            }
            "ListContainers" => {
                let req = v1::ListContainersRequest { filter: None };
                let r = bounded(self.runtime.clone().list_containers(req)).await?;
                !r.containers.is_empty()
            }
            "ListPodSandbox" => {
                let req = v1::ListPodSandboxRequest { filter: None };
                let r = bounded(self.runtime.clone().list_pod_sandbox(req)).await?;
                !r.items.is_empty()
            }
            "ImageStatus" => {
                let req = v1::ImageStatusRequest {
                    image: Some(v1::ImageSpec {
                        image: image.to_string(),
                        ..Default::default()
                    }),
                    verbose: false,
                };
                let r = bounded(self.images.clone().image_status(req)).await?;
                r.image.is_some()
            }
            "ListImages" => {
                let req = v1::ListImagesRequest { filter: None };
                let r = bounded(self.images.clone().list_images(req)).await?;
                !r.images.is_empty()
            }
            other => return Err(anyhow!("no status call {other}")),
        };
        if !found {
            return Err(anyhow!("{call}: empty answer"));
        }
        Ok(())
    }

    /// One unfiltered ListPodSandbox and ListContainers answer.
    pub(super) async fn relist(
        &self,
    ) -> Result<(v1::ListPodSandboxResponse, v1::ListContainersResponse)> {
        let pods = bounded(
            self.runtime
                .clone()
                .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None }),
        )
        .await?;
        let containers = bounded(
            self.runtime
                .clone()
                .list_containers(v1::ListContainersRequest { filter: None }),
        )
        .await?;
        Ok((pods, containers))
    }
}

/// Bounds a status call by [`STATUS_TIMEOUT`].
async fn bounded<T>(
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(STATUS_TIMEOUT, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(anyhow!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err(anyhow!("no answer in {STATUS_TIMEOUT:?}")),
    }
}
