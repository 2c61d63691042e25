//! The CRI v1 server: the state every RPC shares, and thin tonic trait impls
//! that only pass each call through [`instrument::call`] to its handler.
//! Handlers live one file per RPC family beside this one.

mod ids;
pub mod instrument;
mod runtime_config;
mod status;
mod version;

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use cri_api::v1;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::config::Config;
use crate::error::Error;
use instrument::{Gate, RequestIds};

/// A stream of replies for the server-streaming RPCs.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// What all RPC handlers share.
#[derive(Debug)]
pub struct Cri {
    pub config: Config,
    /// Closed until start-up has finished.
    pub gate: Gate,
    /// The pod CIDR kubelet last gave through UpdateRuntimeConfig.
    pod_cidr: Mutex<String>,
}

impl Cri {
    pub fn new(config: Config) -> Arc<Cri> {
        Arc::new(Cri {
            config,
            gate: Gate::default(),
            pod_cidr: Mutex::new(String::new()),
        })
    }
}

/// The tonic `RuntimeService`.
#[derive(Debug, Clone)]
pub struct RuntimeApi(pub Arc<Cri>);

/// The tonic `ImageService`.
#[derive(Debug, Clone)]
pub struct ImageApi(pub Arc<Cri>);

/// The body of one RPC: a handler method on [`Cri`], or `unimplemented`.
macro_rules! rpc_body {
    ($cri:ident, $req:ident, $name:literal, unimplemented) => {{
        let _ = (&$cri, &$req);
        Err::<_, Error>(Error::Unimplemented($name))
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
                    let req = request.into_inner();
                    let cri = self.0.clone();
                    instrument::call(&self.0.gate, $name, req.ids(), async move {
                        rpc_body!(cri, req, $name, $handler)
                    })
                    .await
                }
            )*
            $(
                type $stream = BoxStream<v1::$item>;

                async fn $smethod(&self, request: Request<v1::$sreq>) -> Result<Response<Self::$stream>, Status> {
                    let req = request.into_inner();
                    let cri = self.0.clone();
                    instrument::call(&self.0.gate, $sname, req.ids(), async move {
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
        "RunPodSandbox" run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse => unimplemented;
        "StopPodSandbox" stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse => unimplemented;
        "RemovePodSandbox" remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse => unimplemented;
        "PodSandboxStatus" pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse => unimplemented;
        "ListPodSandbox" list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse => unimplemented;
        "CreateContainer" create_container(CreateContainerRequest) -> CreateContainerResponse => unimplemented;
        "StartContainer" start_container(StartContainerRequest) -> StartContainerResponse => unimplemented;
        "StopContainer" stop_container(StopContainerRequest) -> StopContainerResponse => unimplemented;
        "RemoveContainer" remove_container(RemoveContainerRequest) -> RemoveContainerResponse => unimplemented;
        "ListContainers" list_containers(ListContainersRequest) -> ListContainersResponse => unimplemented;
        "ContainerStatus" container_status(ContainerStatusRequest) -> ContainerStatusResponse => unimplemented;
        "UpdateContainerResources" update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse => unimplemented;
        "ReopenContainerLog" reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse => unimplemented;
        "ExecSync" exec_sync(ExecSyncRequest) -> ExecSyncResponse => unimplemented;
        "Exec" exec(ExecRequest) -> ExecResponse => unimplemented;
        "Attach" attach(AttachRequest) -> AttachResponse => unimplemented;
        "PortForward" port_forward(PortForwardRequest) -> PortForwardResponse => unimplemented;
        "ContainerStats" container_stats(ContainerStatsRequest) -> ContainerStatsResponse => unimplemented;
        "ListContainerStats" list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse => unimplemented;
        "PodSandboxStats" pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse => unimplemented;
        "ListPodSandboxStats" list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse => unimplemented;
        "UpdateRuntimeConfig" update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse => update_runtime_config;
        "Status" status(StatusRequest) -> StatusResponse => status;
        "CheckpointContainer" checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse => unimplemented;
        "ListMetricDescriptors" list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse => unimplemented;
        "ListPodSandboxMetrics" list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse => unimplemented;
        "RuntimeConfig" runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse => runtime_config;
        "UpdatePodSandboxResources" update_pod_sandbox_resources(UpdatePodSandboxResourcesRequest) -> UpdatePodSandboxResourcesResponse => unimplemented;
    }
    streams {
        "StreamPodSandboxes" stream_pod_sandboxes(StreamPodSandboxesRequest) -> StreamPodSandboxesStream<StreamPodSandboxesResponse> => unimplemented;
        "StreamContainers" stream_containers(StreamContainersRequest) -> StreamContainersStream<StreamContainersResponse> => unimplemented;
        "StreamContainerStats" stream_container_stats(StreamContainerStatsRequest) -> StreamContainerStatsStream<StreamContainerStatsResponse> => unimplemented;
        "StreamPodSandboxStats" stream_pod_sandbox_stats(StreamPodSandboxStatsRequest) -> StreamPodSandboxStatsStream<StreamPodSandboxStatsResponse> => unimplemented;
        "GetContainerEvents" get_container_events(GetEventsRequest) -> GetContainerEventsStream<ContainerEventResponse> => unimplemented;
        "StreamPodSandboxMetrics" stream_pod_sandbox_metrics(StreamPodSandboxMetricsRequest) -> StreamPodSandboxMetricsStream<StreamPodSandboxMetricsResponse> => unimplemented;
    }
}

delegate! {
    impl v1::image_service_server::ImageService, for ImageApi {
        "ListImages" list_images(ListImagesRequest) -> ListImagesResponse => unimplemented;
        "ImageStatus" image_status(ImageStatusRequest) -> ImageStatusResponse => unimplemented;
        "PullImage" pull_image(PullImageRequest) -> PullImageResponse => unimplemented;
        "RemoveImage" remove_image(RemoveImageRequest) -> RemoveImageResponse => unimplemented;
        "ImageFsInfo" image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse => unimplemented;
    }
    streams {
        "StreamImages" stream_images(StreamImagesRequest) -> StreamImagesStream<StreamImagesResponse> => unimplemented;
    }
}
