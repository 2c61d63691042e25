//! The CRI v1 server: the state every RPC shares, and thin tonic trait impls
//! that only pass each call (with its client's deadline) through
//! [`instrument::call`] to its handler; `grpc.rs` serves them on the socket.
//! Each RPC's handler lives in its own file beside this one (named after
//! the RPC, e.g. `list_containers.rs`; the stats RPCs under `stats/`);
//! `encode.rs` turns records into CRI messages for all of them.

pub mod admin;
mod attach;
mod container_status;
mod create_container;
mod deadline;
pub mod encode;
pub mod events;
mod exec;
mod exec_sync;
mod get_container_events;
pub mod grpc;
mod ids;
mod image_fs_info;
mod image_status;
pub mod instrument;
mod list_containers;
mod list_images;
mod list_pod_sandbox;
mod list_streams;
mod listing;
pub mod metrics_endpoint;
mod pod_sandbox_status;
mod port_forward;
mod pull_image;
mod relist;
mod remove_container;
mod remove_image;
mod remove_pod_sandbox;
mod reopen_container_log;
mod run_pod_sandbox;
mod runtime_config;
mod start_container;
pub mod stats;
mod status;
mod stop_container;
mod stop_pod_sandbox;
pub mod streaming;
mod update_container_resources;
mod update_pod_sandbox_resources;
mod update_runtime_config;
mod verbose;
mod version;
mod wire_cache;

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use cri_api::v1;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::config::Config;
use crate::core::Core;
use crate::error::Error;
use crate::layout::Layout;
use instrument::{Gate, RequestIds};

/// A stream of replies for the server-streaming RPCs.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// What all RPC handlers share: the lifecycle core, and what only the CRI
/// layer needs (the gate, images, events, stats, streaming).
pub struct Cri {
    core: Arc<Core>,
    /// The configuration (Status shows it) and the paths on disk.
    config: Config,
    layout: Layout,
    /// Closed until start-up has finished.
    gate: Gate,
    /// The pod CIDR kubelet last gave through UpdateRuntimeConfig.
    pod_cidr: Mutex<String>,
    /// Container and sandbox life-cycle events for GetContainerEvents.
    events: Arc<events::Events>,
    /// What the statuses are read from (shared with the events), with
    /// the image store the image RPCs serve.
    statuses: encode::Statuses,
    /// Cgroup mounts and the CPU sampler behind the stats RPCs (the
    /// sampler run by `crate::node`).
    stats: Arc<stats::Collector>,
    /// The exec/attach/port-forward server that Exec, Attach and
    /// PortForward hand out URLs of (served by `crate::node`).
    streaming: Option<berth_streaming::StreamingServer>,
    /// kubelet's relist answers, kept while nothing changes (`relist.rs`).
    kept_lists: relist::KeptLists,
    /// The records' list entries and statuses, encoded (`wire_cache.rs`).
    wire: wire_cache::WireCache,
}

impl Cri {
    /// The CRI layer over `core` (built by `crate::compose`, the one place
    /// that builds the mechanisms and the stores).
    pub fn new(
        core: Arc<Core>,
        config: Config,
        layout: Layout,
        statuses: encode::Statuses,
        events: Arc<events::Events>,
        stats: Arc<stats::Collector>,
        streaming: Option<berth_streaming::StreamingServer>,
    ) -> Arc<Cri> {
        Arc::new(Cri {
            core,
            config,
            layout,
            gate: Gate::default(),
            pod_cidr: Mutex::new(String::new()),
            events,
            statuses,
            stats,
            streaming,
            kept_lists: Default::default(),
            wire: Default::default(),
        })
    }

    /// Opens the gate: RPCs are served from now on (start-up has finished).
    pub fn open_gate(&self) {
        self.gate.open();
    }

    /// The image store: content, metadata and snapshots.
    fn images(&self) -> &Arc<berth_oci_image::ImageStore> {
        &self.statuses.images
    }
}

/// The tonic `RuntimeService`.
#[derive(Clone)]
pub struct RuntimeApi(pub Arc<Cri>);

/// The tonic `ImageService`.
#[derive(Clone)]
pub struct ImageApi(pub Arc<Cri>);

/// Why the checkpoint RPCs (the only ones berth does not serve) answer
/// Unimplemented.
const NO_CHECKPOINTS: &str = "checkpoints need CRIU, which berth does not drive \
     (and which cannot run on the kernels berth is tested on)";

/// The body of one RPC: a handler method on [`Cri`], or `unimplemented`.
macro_rules! rpc_body {
    ($cri:ident, $req:ident, $name:literal, unimplemented) => {{
        let _ = (&$cri, &$req);
        Err::<_, Error>(Error::NotServed {
            rpc: $name,
            why: NO_CHECKPOINTS,
        })
    }};
    ($cri:ident, $req:ident, $name:literal, $handler:ident) => {
        $cri.$handler($req).await
    };
}

/// A tonic service trait whose every method goes through the instrument layer.
macro_rules! delegate {
    (
        impl $service:path, for $api:ident {
            $( $name:literal $method:ident($req:ident) -> $resp:ident => $handler:ident; )*
        }
        streams {
            $( $sname:literal $smethod:ident($sreq:ident) -> $stream:ident<$item:ident> => $shandler:ident; )*
        }
    ) => {
        #[tonic::async_trait]
        impl $service for $api {
            $(
                async fn $method(&self, request: Request<v1::$req>) -> Result<Response<v1::$resp>, Status> {
                    let deadline = deadline::of(&request);
                    let req = request.into_inner();
                    let cri = self.0.clone();
                    instrument::call(&self.0.gate, $name, req.ids(), deadline, async move {
                        rpc_body!(cri, req, $name, $handler)
                    })
                    .await
                }
            )*
            $(
                type $stream = BoxStream<v1::$item>;

                async fn $smethod(&self, request: Request<v1::$sreq>) -> Result<Response<Self::$stream>, Status> {
                    // The deadline bounds the handler here, and the whole
                    // stream in `deadline::Deadlines`.
                    let deadline = deadline::of(&request);
                    let req = request.into_inner();
                    let cri = self.0.clone();
                    instrument::call(&self.0.gate, $sname, req.ids(), deadline, async move {
                        rpc_body!(cri, req, $sname, $shandler)
                    })
                    .await
                }
            )*
        }
    };
}

delegate! {
    impl v1::runtime_service_server::RuntimeService, for RuntimeApi {
        "Version" version(VersionRequest) -> VersionResponse => version;
        "RunPodSandbox" run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse => run_pod_sandbox;
        "StopPodSandbox" stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse => stop_pod_sandbox;
        "RemovePodSandbox" remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse => remove_pod_sandbox;
        "PodSandboxStatus" pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse => pod_sandbox_status;
        "ListPodSandbox" list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse => list_pod_sandbox;
        "CreateContainer" create_container(CreateContainerRequest) -> CreateContainerResponse => create_container;
        "StartContainer" start_container(StartContainerRequest) -> StartContainerResponse => start_container;
        "StopContainer" stop_container(StopContainerRequest) -> StopContainerResponse => stop_container;
        "RemoveContainer" remove_container(RemoveContainerRequest) -> RemoveContainerResponse => remove_container;
        "ListContainers" list_containers(ListContainersRequest) -> ListContainersResponse => list_containers;
        "ContainerStatus" container_status(ContainerStatusRequest) -> ContainerStatusResponse => container_status;
        "UpdateContainerResources" update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse => update_container_resources;
        "ReopenContainerLog" reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse => reopen_container_log;
        "ExecSync" exec_sync(ExecSyncRequest) -> ExecSyncResponse => exec_sync;
        "Exec" exec(ExecRequest) -> ExecResponse => exec;
        "Attach" attach(AttachRequest) -> AttachResponse => attach;
        "PortForward" port_forward(PortForwardRequest) -> PortForwardResponse => port_forward;
        "ContainerStats" container_stats(ContainerStatsRequest) -> ContainerStatsResponse => container_stats;
        "ListContainerStats" list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse => list_container_stats;
        "PodSandboxStats" pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse => pod_sandbox_stats;
        "ListPodSandboxStats" list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse => list_pod_sandbox_stats;
        "UpdateRuntimeConfig" update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse => update_runtime_config;
        "Status" status(StatusRequest) -> StatusResponse => status;
        "CheckpointContainer" checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse => unimplemented;
        "CheckpointPod" checkpoint_pod(CheckpointPodRequest) -> CheckpointPodResponse => unimplemented;
        "RestorePod" restore_pod(RestorePodRequest) -> RestorePodResponse => unimplemented;
        "ListMetricDescriptors" list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse => list_metric_descriptors;
        "ListPodSandboxMetrics" list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse => list_pod_sandbox_metrics;
        "RuntimeConfig" runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse => runtime_config;
        "UpdatePodSandboxResources" update_pod_sandbox_resources(UpdatePodSandboxResourcesRequest) -> UpdatePodSandboxResourcesResponse => update_pod_sandbox_resources;
    }
    streams {
        "StreamPodSandboxes" stream_pod_sandboxes(StreamPodSandboxesRequest) -> StreamPodSandboxesStream<StreamPodSandboxesResponse> => stream_pod_sandboxes;
        "StreamContainers" stream_containers(StreamContainersRequest) -> StreamContainersStream<StreamContainersResponse> => stream_containers;
        "StreamContainerStats" stream_container_stats(StreamContainerStatsRequest) -> StreamContainerStatsStream<StreamContainerStatsResponse> => stream_container_stats;
        "StreamPodSandboxStats" stream_pod_sandbox_stats(StreamPodSandboxStatsRequest) -> StreamPodSandboxStatsStream<StreamPodSandboxStatsResponse> => stream_pod_sandbox_stats;
        "GetContainerEvents" get_container_events(GetEventsRequest) -> GetContainerEventsStream<ContainerEventResponse> => get_container_events;
        "StreamPodSandboxMetrics" stream_pod_sandbox_metrics(StreamPodSandboxMetricsRequest) -> StreamPodSandboxMetricsStream<StreamPodSandboxMetricsResponse> => stream_pod_sandbox_metrics;
    }
}

delegate! {
    impl v1::image_service_server::ImageService, for ImageApi {
        "ListImages" list_images(ListImagesRequest) -> ListImagesResponse => list_images;
        "ImageStatus" image_status(ImageStatusRequest) -> ImageStatusResponse => image_status;
        "PullImage" pull_image(PullImageRequest) -> PullImageResponse => pull_image;
        "RemoveImage" remove_image(RemoveImageRequest) -> RemoveImageResponse => remove_image;
        "ImageFsInfo" image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse => image_fs_info;
    }
    streams {
        "StreamImages" stream_images(StreamImagesRequest) -> StreamImagesStream<StreamImagesResponse> => stream_images;
    }
}
