//! The CRI v1 server: the state every RPC shares, and thin tonic trait impls
//! that only pass each call through [`instrument::call`] to its handler.
//! Handlers live one file per RPC family beside this one.

mod container_create;
mod container_start;
mod container_status;
mod container_update;
mod ids;
mod image;
pub mod instrument;
pub mod recovery;
mod runtime_config;
mod sandbox_run;
mod sandbox_status;
mod sandbox_stop;
mod stats;
mod status;
mod streaming;
mod version;

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use cri_api::v1;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::config::Config;
use crate::container::ContainerStore;
use crate::error::Error;
use crate::sandbox::SandboxStore;
use instrument::{Gate, RequestIds};

/// A shim's state dir under `state`: short, so its socket path fits a unix address.
pub fn shim_dir(state: &std::path::Path, id: &str) -> std::path::PathBuf {
    state.join("s").join(&id[..id.len().min(24)])
}

/// The OCI runtime's state root under `state` (`--root` of runc and crun).
pub fn runtime_root(state: &std::path::Path) -> std::path::PathBuf {
    state.join("runtime")
}

/// What recovery would change, from the records on disk; changes nothing.
pub async fn recovery_plan(config: &Config) -> Result<Vec<String>, Error> {
    let open_err =
        |what: &str, e: std::io::Error| Error::Internal(format!("opening {what} records: {e}"));
    let (sandboxes, mut problems) = SandboxStore::open(&config.root.join("records/sandboxes"))
        .map_err(|e| open_err("sandbox", e))?;
    let (containers, broken) = ContainerStore::open(&config.root.join("records/containers"))
        .map_err(|e| open_err("container", e))?;
    problems.extend(broken);
    let mut lines: Vec<String> = problems
        .into_iter()
        .map(|p| format!("skip broken record: {p}"))
        .collect();
    lines.extend(
        recovery::plan(config, &sandboxes, &containers)
            .await
            .into_iter()
            .map(|a| a.to_string()),
    );
    Ok(lines)
}

/// A stream of replies for the server-streaming RPCs.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// What all RPC handlers share.
pub struct Cri {
    pub config: Config,
    /// Closed until start-up has finished.
    pub gate: Gate,
    /// The pod CIDR kubelet last gave through UpdateRuntimeConfig.
    pod_cidr: Mutex<String>,
    pub sandboxes: SandboxStore,
    pub containers: ContainerStore,
    /// The CNI client for pod networks.
    pub cni: berth_cni::Cni,
    /// Images: content store, metadata and snapshots.
    pub images: berth_oci_image::ImageStore,
    /// Container and sandbox life-cycle events for GetContainerEvents.
    pub events: crate::events::Events,
    /// Cgroup mounts and the CPU sampler behind the stats RPCs.
    pub stats: stats::Collector,
    /// The exec/attach/port-forward server, once started ([`Cri::start_streaming`]).
    pub streaming: std::sync::OnceLock<berth_streaming::StreamingServer>,
}

impl Cri {
    /// Opens the stores under the configured root. Records that cannot be
    /// read are logged and left on disk.
    pub async fn new(config: Config) -> Result<Arc<Cri>, Error> {
        let images =
            berth_oci_image::ImageStore::open(&config.root.join("images"), config.registry.clone())
                .await?;
        let dir = config.root.join("records/sandboxes");
        let (sandboxes, broken) = SandboxStore::open(&dir).map_err(|e| {
            Error::Internal(format!("opening sandbox records in {}: {e}", dir.display()))
        })?;
        for problem in broken {
            tracing::error!(%problem, "skipping a sandbox record that cannot be loaded");
        }
        let dir = config.root.join("records/containers");
        let (containers, broken) = ContainerStore::open(&dir).map_err(|e| {
            Error::Internal(format!(
                "opening container records in {}: {e}",
                dir.display()
            ))
        })?;
        for problem in broken {
            tracing::error!(%problem, "skipping a container record that cannot be loaded");
        }
        let cni = berth_cni::Cni::new(berth_cni::CniOptions {
            conf_dirs: vec![config.cni.conf_dir.clone()],
            bin_dirs: config.cni.bin_dirs.clone(),
            cache_dir: config.root.join("cni"),
            network_name: Some(config.cni.network_name.clone()).filter(|n| !n.is_empty()),
            timeout: std::time::Duration::from_secs(config.cni.timeout_secs),
        });
        Ok(Arc::new(Cri {
            config,
            gate: Gate::default(),
            pod_cidr: Mutex::new(String::new()),
            sandboxes,
            containers,
            cni,
            images,
            events: crate::events::Events::new(),
            stats: stats::Collector::new(),
            streaming: std::sync::OnceLock::new(),
        }))
    }

    /// Writes berth's default CNI network when the config dir holds none.
    pub fn ensure_default_network(&self) -> Result<(), Error> {
        if !self.config.cni.write_default_network {
            return Ok(());
        }
        let subnet = self.config.cni.default_subnet.parse().map_err(|e| {
            Error::Internal(format!(
                "cni.default_subnet {:?}: {e}",
                self.config.cni.default_subnet
            ))
        })?;
        let name = match self.config.cni.network_name.as_str() {
            "" => "berth",
            name => name,
        };
        let mut net = berth_cni::DefaultNetwork::new(name, subnet, &self.config.cni.default_bridge);
        net.hostport_snat = self.config.cni.hostport_snat;
        std::fs::create_dir_all(&self.config.cni.conf_dir).map_err(|e| {
            Error::Internal(format!(
                "creating {}: {e}",
                self.config.cni.conf_dir.display()
            ))
        })?;
        berth_cni::write_default_network(&self.config.cni.conf_dir, &net)
            .map(|_| ())
            .map_err(|e| Error::Internal(format!("writing the default CNI network: {e}")))
    }

    /// The files of a sandbox's pause container.
    pub fn pause_paths(&self, id: &str) -> crate::sandbox::pause::PausePaths {
        let files =
            crate::sandbox::files::SandboxFiles::new(&self.config.root, &self.config.state, id);
        crate::sandbox::pause::PausePaths {
            id: id.to_string(),
            bundle: files.bundle(),
            shim_dir: self.shim_dir(id),
            runtime_root: self.runtime_root(),
            shim_binary: self.shim_binary(),
        }
    }

    /// A shim's state dir: short, so its socket path fits a unix address.
    pub fn shim_dir(&self, id: &str) -> std::path::PathBuf {
        shim_dir(&self.config.state, id)
    }

    /// The OCI runtime's state root (`--root` of runc and crun).
    pub fn runtime_root(&self) -> std::path::PathBuf {
        runtime_root(&self.config.state)
    }

    /// The berth-shim executable: from config, else next to this binary, else in PATH.
    pub fn shim_binary(&self) -> std::path::PathBuf {
        if !self.config.runtime.shim_binary.is_empty() {
            return std::path::PathBuf::from(&self.config.runtime.shim_binary);
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("berth-shim")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| std::path::PathBuf::from("berth-shim"))
    }

    /// Cgroup version and the options the spec generator needs.
    pub fn spec_options(&self) -> berth_spec::SpecOptions {
        let mut opts = berth_spec::SpecOptions::detect();
        opts.cgroup_driver_systemd =
            self.config.runtime.cgroup_driver == crate::config::CgroupDriver::Systemd;
        opts
    }

    /// Where pods' network namespaces are mounted.
    pub fn netns_dir(&self) -> std::path::PathBuf {
        self.config.state.join("netns")
    }
}

/// The tonic `RuntimeService`.
#[derive(Clone)]
pub struct RuntimeApi(pub Arc<Cri>);

/// The tonic `ImageService`.
#[derive(Clone)]
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
        "ListMetricDescriptors" list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse => list_metric_descriptors;
        "ListPodSandboxMetrics" list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse => list_pod_sandbox_metrics;
        "RuntimeConfig" runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse => runtime_config;
        "UpdatePodSandboxResources" update_pod_sandbox_resources(UpdatePodSandboxResourcesRequest) -> UpdatePodSandboxResourcesResponse => unimplemented;
    }
    streams {
        "StreamPodSandboxes" stream_pod_sandboxes(StreamPodSandboxesRequest) -> StreamPodSandboxesStream<StreamPodSandboxesResponse> => unimplemented;
        "StreamContainers" stream_containers(StreamContainersRequest) -> StreamContainersStream<StreamContainersResponse> => unimplemented;
        "StreamContainerStats" stream_container_stats(StreamContainerStatsRequest) -> StreamContainerStatsStream<StreamContainerStatsResponse> => unimplemented;
        "StreamPodSandboxStats" stream_pod_sandbox_stats(StreamPodSandboxStatsRequest) -> StreamPodSandboxStatsStream<StreamPodSandboxStatsResponse> => unimplemented;
        "GetContainerEvents" get_container_events(GetEventsRequest) -> GetContainerEventsStream<ContainerEventResponse> => get_container_events;
        "StreamPodSandboxMetrics" stream_pod_sandbox_metrics(StreamPodSandboxMetricsRequest) -> StreamPodSandboxMetricsStream<StreamPodSandboxMetricsResponse> => unimplemented;
    }
}

delegate! {
    impl v1::image_service_server::ImageService, for ImageApi {
        "ListImages" list_images(ListImagesRequest) -> ListImagesResponse => list_images;
        "ImageStatus" image_status(ImageStatusRequest) -> ImageStatusResponse => image_status;
        "PullImage" pull_image(PullImageRequest) -> PullImageResponse => pull_image_metered;
        "RemoveImage" remove_image(RemoveImageRequest) -> RemoveImageResponse => remove_image;
        "ImageFsInfo" image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse => image_fs_info;
    }
    streams {
        "StreamImages" stream_images(StreamImagesRequest) -> StreamImagesStream<StreamImagesResponse> => unimplemented;
    }
}
