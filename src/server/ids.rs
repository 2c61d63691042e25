//! Which ids each CRI request touches, for the RPC's log span.

use cri_api::v1;

use super::instrument::{Ids, RequestIds};

macro_rules! ids {
    (none: [$($none:ident),* $(,)?]
     pod: [$($pod:ident),* $(,)?]
     container: [$($ctr:ident),* $(,)?]
     image: [$($img:ident),* $(,)?]) => {
        $(impl RequestIds for v1::$none {})*
        $(impl RequestIds for v1::$pod {
            fn ids(&self) -> Ids {
                Ids { pod: Some(self.pod_sandbox_id.clone()), ..Ids::default() }
            }
        })*
        $(impl RequestIds for v1::$ctr {
            fn ids(&self) -> Ids {
                Ids { container: Some(self.container_id.clone()), ..Ids::default() }
            }
        })*
        $(impl RequestIds for v1::$img {
            fn ids(&self) -> Ids {
                Ids { image: self.image.as_ref().map(|i| i.image.clone()), ..Ids::default() }
            }
        })*
    };
}

ids! {
    none: [
        VersionRequest, RunPodSandboxRequest, ListPodSandboxRequest, StreamPodSandboxesRequest,
        ListContainersRequest, StreamContainersRequest, ListContainerStatsRequest,
        StreamContainerStatsRequest, ListPodSandboxStatsRequest, StreamPodSandboxStatsRequest,
        UpdateRuntimeConfigRequest, StatusRequest, GetEventsRequest, ListMetricDescriptorsRequest,
        ListPodSandboxMetricsRequest, StreamPodSandboxMetricsRequest, RuntimeConfigRequest,
        ListImagesRequest, StreamImagesRequest, ImageFsInfoRequest, RestorePodRequest,
    ]
    pod: [
        StopPodSandboxRequest, RemovePodSandboxRequest, PodSandboxStatusRequest,
        PortForwardRequest, PodSandboxStatsRequest, UpdatePodSandboxResourcesRequest,
        CheckpointPodRequest,
    ]
    container: [
        StartContainerRequest, StopContainerRequest, RemoveContainerRequest,
        ContainerStatusRequest, UpdateContainerResourcesRequest, ReopenContainerLogRequest,
        ExecSyncRequest, ExecRequest, AttachRequest, ContainerStatsRequest,
        CheckpointContainerRequest,
    ]
    image: [ImageStatusRequest, PullImageRequest, RemoveImageRequest]
}

impl RequestIds for v1::CreateContainerRequest {
    fn ids(&self) -> Ids {
        Ids {
            pod: Some(self.pod_sandbox_id.clone()),
            image: self
                .config
                .as_ref()
                .and_then(|c| c.image.as_ref())
                .map(|i| i.image.clone()),
            ..Ids::default()
        }
    }
}
