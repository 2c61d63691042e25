//! RuntimeService stats and metrics: ContainerStats, ListContainerStats,
//! PodSandboxStats, ListPodSandboxStats, ListMetricDescriptors and
//! ListPodSandboxMetrics; and the background CPU sampler behind
//! `usage_nano_cores`.
//!
//! A container's cgroup is found from its pid. A pod's cgroup is the parent
//! of its pause's cgroup when the pod has a cgroup parent of its own (as
//! kubelet always gives); pods without one share berth's default parent, so
//! their usage is the sum of the pause's and their containers' cgroups. A
//! pod's network counters are those of the pause's network namespace, read
//! from `/proc/<pause pid>/net/dev`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use berth_cgroup_stats::net::{interfaces_of_pid, InterfaceStats};
use berth_cgroup_stats::{
    disk_usage, Cgroup, CpuSample, CpuSampler, DiskUsage, MemoryStats, Mounts, Psi, Stats,
};
use cri_api::v1;

use super::Cri;
use crate::container::{Container, ContainerState};
use crate::core::now_nanos;
use crate::error::Error;
use crate::objects::StoreExt;
use crate::sandbox::{Sandbox, SandboxState};

/// How often the sampler reads every container's and pod's CPU time.
const SAMPLE_PERIOD: Duration = Duration::from_secs(2);

/// The pod interface CNI is asked to make.
const POD_INTERFACE: &str = "eth0";

/// What the stats RPCs share: the cgroup mounts and the CPU sampler.
pub struct Collector {
    mounts: RwLock<Mounts>,
    cpu: Arc<CpuSampler>,
}

impl Default for Collector {
    fn default() -> Self {
        Collector::new()
    }
}

impl Collector {
    /// Reads the cgroup mounts once; they do not move while berth runs.
    pub fn new() -> Collector {
        let mounts = Mounts::read().unwrap_or_else(|e| {
            tracing::error!(error = %e, "reading cgroup mounts: no cgroup stats");
            Mounts::default()
        });
        tracing::debug!(mode = ?mounts.mode(), "cgroup mode");
        Collector {
            mounts: RwLock::new(mounts),
            cpu: Arc::new(CpuSampler::new()),
        }
    }

    /// The cgroup of a live process; `None` when it is gone.
    fn cgroup_of(&self, pid: u32) -> Option<Cgroup> {
        let mounts = self.mounts.read().unwrap_or_else(|e| e.into_inner());
        match Cgroup::for_pid(&mounts, pid) {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                if !e.is_not_found() {
                    tracing::debug!(pid, error = %e, "finding the cgroup of a process");
                }
                None
            }
        }
    }
}

/// Where a pod's usage is counted.
enum PodCgroup {
    /// The pod's own cgroup (the parent of its pause's and containers').
    Own(Cgroup),
    /// Sibling cgroups in a parent other pods share: the pause and the containers.
    Members(Vec<Cgroup>),
}

fn u64_value(value: u64) -> Option<v1::UInt64Value> {
    Some(v1::UInt64Value { value })
}

fn psi_stats(psi: Option<Psi>) -> Option<v1::PsiStats> {
    let data = |d: berth_cgroup_stats::PsiData| v1::PsiData {
        total: d.total_ns,
        avg10: d.avg10,
        avg60: d.avg60,
        avg300: d.avg300,
    };
    psi.map(|p| v1::PsiStats {
        full: p.full.map(data),
        some: Some(data(p.some)),
    })
}

fn cpu_usage(timestamp: i64, stats: &Stats, nano_cores: Option<u64>) -> Option<v1::CpuUsage> {
    let cpu = stats.cpu?;
    Some(v1::CpuUsage {
        timestamp,
        usage_core_nano_seconds: u64_value(cpu.usage_ns),
        usage_nano_cores: nano_cores.and_then(u64_value),
        psi: psi_stats(stats.pressure.cpu),
    })
}

fn memory_usage(timestamp: i64, stats: &Stats) -> Option<v1::MemoryUsage> {
    let m: MemoryStats = stats.memory?;
    Some(v1::MemoryUsage {
        timestamp,
        working_set_bytes: u64_value(m.working_set),
        available_bytes: m.available().and_then(u64_value),
        usage_bytes: u64_value(m.usage),
        rss_bytes: u64_value(m.rss),
        page_faults: u64_value(m.page_faults),
        major_page_faults: u64_value(m.major_page_faults),
        psi: psi_stats(stats.pressure.memory),
    })
}

fn swap_usage(timestamp: i64, stats: &Stats) -> Option<v1::SwapUsage> {
    let m = stats.memory?;
    let usage = m.swap_usage?;
    Some(v1::SwapUsage {
        timestamp,
        swap_available_bytes: m
            .swap_limit
            .map(|l| l.saturating_sub(usage))
            .and_then(u64_value),
        swap_usage_bytes: u64_value(usage),
    })
}

fn io_usage(timestamp: i64, stats: &Stats) -> Option<v1::IoUsage> {
    let psi = psi_stats(stats.pressure.io)?;
    Some(v1::IoUsage {
        timestamp,
        psi: Some(psi),
    })
}

fn interface_usage(i: &InterfaceStats) -> v1::NetworkInterfaceUsage {
    v1::NetworkInterfaceUsage {
        name: i.name.clone(),
        rx_bytes: u64_value(i.rx_bytes),
        rx_errors: u64_value(i.rx_errors),
        tx_bytes: u64_value(i.tx_bytes),
        tx_errors: u64_value(i.tx_errors),
    }
}

/// A pod's interfaces without loopback.
fn pod_interfaces(pause_pid: u32) -> Vec<InterfaceStats> {
    match interfaces_of_pid(pause_pid) {
        Ok(all) => all.into_iter().filter(|i| i.name != "lo").collect(),
        Err(e) => {
            if !e.is_not_found() {
                tracing::debug!(pid = pause_pid, error = %e, "reading network counters");
            }
            Vec::new()
        }
    }
}

fn network_usage(timestamp: i64, interfaces: &[InterfaceStats]) -> Option<v1::NetworkUsage> {
    let default = interfaces
        .iter()
        .find(|i| i.name == POD_INTERFACE)
        .or_else(|| interfaces.first())?;
    Some(v1::NetworkUsage {
        timestamp,
        default_interface: Some(interface_usage(default)),
        interfaces: interfaces.iter().map(interface_usage).collect(),
    })
}

/// What one container has used, read now.
struct ContainerReading {
    stats: Option<Stats>,
    layer: Option<DiskUsage>,
}

/// What one pod has used, read now.
struct PodReading {
    stats: Option<Stats>,
    interfaces: Vec<InterfaceStats>,
}

impl Cri {
    /// Starts the background CPU sampler; it ends when the daemon's state goes.
    pub fn start_stats_sampler(self: &Arc<Self>) {
        let cri = Arc::downgrade(self);
        let started = self.stats.cpu.spawn(SAMPLE_PERIOD, move || {
            let cri = cri.upgrade()?;
            Some(cri.cpu_samples())
        });
        if let Err(e) = started {
            tracing::error!(error = %e, "starting the CPU sampler: usage_nano_cores stays unset");
        }
    }

    /// One CPU sample of every running container and every ready pod.
    fn cpu_samples(&self) -> Vec<(String, CpuSample)> {
        let mut samples = Vec::new();
        let mut push = |key: &str, usage_ns: Option<u64>| {
            if let Some(usage_ns) = usage_ns {
                let timestamp_ns = now_nanos();
                samples.push((
                    key.to_string(),
                    CpuSample {
                        timestamp_ns,
                        usage_ns,
                    },
                ));
            }
        };
        for container in self.core.containers.list() {
            let usage = self
                .container_cgroup(&container)
                .and_then(|cg| cg.cpu_usage_ns().ok());
            push(&container.meta.id, usage);
        }
        for sandbox in self.core.sandboxes.list() {
            let usage = self.pod_cgroup(&sandbox).and_then(|pod| match pod {
                PodCgroup::Own(cg) => cg.cpu_usage_ns().ok(),
                // A container that just exited drops out of the sum.
                PodCgroup::Members(cgs) => {
                    Some(cgs.iter().filter_map(|cg| cg.cpu_usage_ns().ok()).sum())
                }
            });
            push(&sandbox.meta.id, usage);
        }
        samples
    }

    /// The cgroup of a running container.
    fn container_cgroup(&self, container: &Container) -> Option<Cgroup> {
        let status = container.status();
        if status.state != ContainerState::Running {
            return None;
        }
        self.stats.cgroup_of(status.pid?)
    }

    /// Where a ready pod's usage is counted.
    fn pod_cgroup(&self, sandbox: &Sandbox) -> Option<PodCgroup> {
        let status = sandbox.status();
        if status.state != SandboxState::Ready {
            return None;
        }
        let pause = self.stats.cgroup_of(status.pid?)?;
        let own_parent = sandbox
            .meta
            .config()
            .linux
            .as_ref()
            .is_some_and(|l| !l.cgroup_parent.is_empty());
        if own_parent {
            return pause.parent().map(PodCgroup::Own);
        }
        let mut members = vec![pause];
        members.extend(
            self.core
                .containers
                .list()
                .iter()
                .filter(|c| c.meta.sandbox_id == sandbox.meta.id)
                .filter_map(|c| self.container_cgroup(c)),
        );
        Some(PodCgroup::Members(members))
    }

    /// Reads a container's cgroup and writable layer (blocking file reads).
    fn read_container(&self, container: &Container) -> ContainerReading {
        let stats = self.container_cgroup(container).and_then(|cg| {
            cg.stats()
                .map_err(|e| {
                    if !e.is_not_found() {
                        tracing::warn!(container = %container.meta.id, error = %e, "reading cgroup stats");
                    }
                })
                .ok()
        });
        let upper = self.core.layout.container_dirs(&container.meta.id).upper();
        let layer = disk_usage(&upper)
            .map_err(|e| {
                if !e.is_not_found() {
                    tracing::warn!(container = %container.meta.id, error = %e, "measuring the writable layer");
                }
            })
            .ok();
        ContainerReading { stats, layer }
    }

    /// Reads a pod's cgroup(s) and network counters (blocking file reads).
    fn read_pod(&self, sandbox: &Sandbox) -> PodReading {
        let stats = self.pod_cgroup(sandbox).and_then(|pod| match pod {
            PodCgroup::Own(cg) => cg.stats().ok(),
            PodCgroup::Members(cgs) => {
                let all: Vec<Stats> = cgs.iter().filter_map(|cg| cg.stats().ok()).collect();
                Some(Stats::sum(&all))
            }
        });
        let pid = sandbox.status().pid;
        let interfaces = match (&sandbox.meta.netns, pid) {
            (Some(_), Some(pid)) => pod_interfaces(pid),
            // Host network: the node's counters are not the pod's.
            _ => Vec::new(),
        };
        PodReading { stats, interfaces }
    }

    /// The CRI stats of a container.
    fn container_stats_now(&self, container: &Container) -> v1::ContainerStats {
        let timestamp = now_nanos();
        let reading = self.read_container(container);
        let config = container.meta.config();
        let mut out = v1::ContainerStats {
            attributes: Some(v1::ContainerAttributes {
                id: container.meta.id.clone(),
                metadata: config.metadata.clone(),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
            }),
            writable_layer: reading.layer.map(|u| v1::FilesystemUsage {
                timestamp,
                fs_id: Some(v1::FilesystemIdentifier {
                    mountpoint: self
                        .core
                        .config
                        .root
                        .join("containers")
                        .display()
                        .to_string(),
                }),
                used_bytes: u64_value(u.bytes),
                inodes_used: u64_value(u.inodes),
            }),
            ..Default::default()
        };
        if let Some(stats) = &reading.stats {
            let nano_cores = self.stats.cpu.nano_cores(&container.meta.id);
            out.cpu = cpu_usage(timestamp, stats, nano_cores);
            out.memory = memory_usage(timestamp, stats);
            out.swap = swap_usage(timestamp, stats);
            out.io = io_usage(timestamp, stats);
        }
        out
    }

    /// The CRI stats of a pod, its containers' included.
    fn pod_stats_now(&self, sandbox: &Sandbox) -> v1::PodSandboxStats {
        let timestamp = now_nanos();
        let reading = self.read_pod(sandbox);
        let config = sandbox.meta.config();
        let mut linux = v1::LinuxPodSandboxStats {
            network: network_usage(timestamp, &reading.interfaces),
            containers: self
                .core
                .sandbox_containers(&sandbox.meta.id)
                .iter()
                .map(|c| self.container_stats_now(c))
                .collect(),
            ..Default::default()
        };
        if let Some(stats) = &reading.stats {
            let nano_cores = self.stats.cpu.nano_cores(&sandbox.meta.id);
            linux.cpu = cpu_usage(timestamp, stats, nano_cores);
            linux.memory = memory_usage(timestamp, stats);
            linux.io = io_usage(timestamp, stats);
            linux.process = stats.pids.map(|p| v1::ProcessUsage {
                timestamp,
                process_count: u64_value(p.current),
            });
        }
        v1::PodSandboxStats {
            attributes: Some(v1::PodSandboxAttributes {
                id: sandbox.meta.id.clone(),
                metadata: config.metadata.clone(),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
            }),
            linux: Some(linux),
            windows: None,
        }
    }

    /// The containers ListContainers would list for these filter fields.
    async fn filtered_containers(
        &self,
        filter: v1::ContainerStatsFilter,
    ) -> Result<Vec<Arc<Container>>, Error> {
        let listed = self
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    id: filter.id,
                    pod_sandbox_id: filter.pod_sandbox_id,
                    label_selector: filter.label_selector,
                    state: None,
                }),
            })
            .await?;
        Ok(listed
            .containers
            .iter()
            .filter_map(|c| self.core.containers.get(&c.id).ok())
            .collect())
    }

    /// The ready sandboxes ListPodSandbox would list for these filter fields.
    async fn filtered_sandboxes(
        &self,
        filter: v1::PodSandboxStatsFilter,
    ) -> Result<Vec<Arc<Sandbox>>, Error> {
        let listed = self
            .list_pod_sandbox(v1::ListPodSandboxRequest {
                filter: Some(v1::PodSandboxFilter {
                    id: filter.id,
                    label_selector: filter.label_selector,
                    state: Some(v1::PodSandboxStateValue {
                        state: v1::PodSandboxState::SandboxReady as i32,
                    }),
                }),
            })
            .await?;
        Ok(listed
            .items
            .iter()
            .filter_map(|s| self.core.sandboxes.get(&s.id).ok())
            .collect())
    }

    /// Runs blocking reads off the async workers.
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        read: impl FnOnce(&Cri) -> T + Send + 'static,
    ) -> Result<T, Error> {
        let cri = self.clone();
        tokio::task::spawn_blocking(move || read(&cri))
            .await
            .map_err(|e| Error::Internal(format!("reading stats: {e}")))
    }

    pub async fn container_stats(
        self: &Arc<Self>,
        req: v1::ContainerStatsRequest,
    ) -> Result<v1::ContainerStatsResponse, Error> {
        let container = self.core.containers.lookup(&req.container_id)?;
        let stats = self
            .blocking(move |cri| cri.container_stats_now(&container))
            .await?;
        Ok(v1::ContainerStatsResponse { stats: Some(stats) })
    }

    pub async fn list_container_stats(
        self: &Arc<Self>,
        req: v1::ListContainerStatsRequest,
    ) -> Result<v1::ListContainerStatsResponse, Error> {
        let containers = self
            .filtered_containers(req.filter.unwrap_or_default())
            .await?;
        let stats = self
            .blocking(move |cri| {
                containers
                    .iter()
                    .map(|c| cri.container_stats_now(c))
                    .collect()
            })
            .await?;
        Ok(v1::ListContainerStatsResponse { stats })
    }

    pub async fn pod_sandbox_stats(
        self: &Arc<Self>,
        req: v1::PodSandboxStatsRequest,
    ) -> Result<v1::PodSandboxStatsResponse, Error> {
        let sandbox = self.core.sandboxes.lookup(&req.pod_sandbox_id)?;
        if sandbox.status().state != SandboxState::Ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {} is not ready: it has no stats",
                sandbox.meta.id
            )));
        }
        let stats = self
            .blocking(move |cri| cri.pod_stats_now(&sandbox))
            .await?;
        Ok(v1::PodSandboxStatsResponse { stats: Some(stats) })
    }

    pub async fn list_pod_sandbox_stats(
        self: &Arc<Self>,
        req: v1::ListPodSandboxStatsRequest,
    ) -> Result<v1::ListPodSandboxStatsResponse, Error> {
        let sandboxes = self
            .filtered_sandboxes(req.filter.unwrap_or_default())
            .await?;
        let stats = self
            .blocking(move |cri| sandboxes.iter().map(|s| cri.pod_stats_now(s)).collect())
            .await?;
        Ok(v1::ListPodSandboxStatsResponse { stats })
    }

    pub async fn list_metric_descriptors(
        &self,
        _req: v1::ListMetricDescriptorsRequest,
    ) -> Result<v1::ListMetricDescriptorsResponse, Error> {
        Ok(v1::ListMetricDescriptorsResponse {
            descriptors: DESCRIPTORS
                .iter()
                .map(|d| v1::MetricDescriptor {
                    name: d.name.to_string(),
                    help: d.help.to_string(),
                    label_keys: BASE_LABELS
                        .iter()
                        .chain(d.extra_labels)
                        .map(|k| k.to_string())
                        .collect(),
                })
                .collect(),
        })
    }

    pub async fn list_pod_sandbox_metrics(
        self: &Arc<Self>,
        _req: v1::ListPodSandboxMetricsRequest,
    ) -> Result<v1::ListPodSandboxMetricsResponse, Error> {
        let sandboxes = self
            .filtered_sandboxes(v1::PodSandboxStatsFilter::default())
            .await?;
        let pod_metrics = self
            .blocking(move |cri| sandboxes.iter().map(|s| cri.pod_metrics_now(s)).collect())
            .await?;
        Ok(v1::ListPodSandboxMetricsResponse { pod_metrics })
    }

    /// cAdvisor-style metrics of a pod: network counters at the pod level,
    /// CPU, memory, processes and writable layer per container.
    fn pod_metrics_now(&self, sandbox: &Sandbox) -> v1::PodSandboxMetrics {
        let pod = sandbox.meta.config().metadata.clone().unwrap_or_default();
        let pod_labels = [sandbox.meta.id.clone(), pod.name.clone(), String::new()];
        let pid = sandbox.status().pid;
        let interfaces = match (&sandbox.meta.netns, pid) {
            (Some(_), Some(pid)) => pod_interfaces(pid),
            _ => Vec::new(),
        };
        let container_metrics = self
            .core
            .sandbox_containers(&sandbox.meta.id)
            .iter()
            .filter(|c| c.status().state == ContainerState::Running)
            .map(|c| {
                let name = c
                    .meta
                    .config()
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                let labels = [c.meta.id.clone(), name, c.meta.image_name.clone()];
                let reading = self.read_container(c);
                v1::ContainerMetrics {
                    container_id: c.meta.id.clone(),
                    metrics: container_metric_values(&labels, &reading, c.status().started_at),
                }
            })
            .collect();
        v1::PodSandboxMetrics {
            pod_sandbox_id: sandbox.meta.id.clone(),
            metrics: network_metric_values(&pod_labels, &interfaces),
            container_metrics,
        }
    }
}

/// Label keys every metric has: the container (or pod) id, its name, its image.
const BASE_LABELS: [&str; 3] = ["id", "name", "image"];

/// One metric berth reports through ListPodSandboxMetrics.
struct Descriptor {
    name: &'static str,
    help: &'static str,
    /// Label keys after [`BASE_LABELS`].
    extra_labels: &'static [&'static str],
}

const fn desc(
    name: &'static str,
    help: &'static str,
    extra_labels: &'static [&'static str],
) -> Descriptor {
    Descriptor {
        name,
        help,
        extra_labels,
    }
}

const DESCRIPTORS: &[Descriptor] = &[
    desc(
        "container_cpu_usage_seconds_total",
        "Cumulative CPU time consumed in seconds.",
        &["cpu"],
    ),
    desc(
        "container_cpu_user_seconds_total",
        "Cumulative user CPU time consumed in seconds.",
        &[],
    ),
    desc(
        "container_cpu_system_seconds_total",
        "Cumulative system CPU time consumed in seconds.",
        &[],
    ),
    desc(
        "container_cpu_cfs_periods_total",
        "Number of elapsed enforcement period intervals.",
        &[],
    ),
    desc(
        "container_cpu_cfs_throttled_periods_total",
        "Number of throttled period intervals.",
        &[],
    ),
    desc(
        "container_cpu_cfs_throttled_seconds_total",
        "Total time duration the container has been throttled.",
        &[],
    ),
    desc(
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        &[],
    ),
    desc(
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        &[],
    ),
    desc("container_memory_rss", "Size of RSS in bytes.", &[]),
    desc(
        "container_memory_cache",
        "Number of bytes of page cache memory.",
        &[],
    ),
    desc(
        "container_memory_swap",
        "Container swap usage in bytes.",
        &[],
    ),
    desc(
        "container_memory_failures_total",
        "Cumulative count of memory allocation failures.",
        &["failure_type", "scope"],
    ),
    desc(
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        &[],
    ),
    desc(
        "container_oom_events_total",
        "Count of out of memory events observed for the container.",
        &[],
    ),
    desc(
        "container_threads",
        "Number of threads running inside the container.",
        &[],
    ),
    desc(
        "container_threads_max",
        "Maximum number of threads allowed inside the container.",
        &[],
    ),
    desc(
        "container_fs_usage_bytes",
        "Number of bytes that are consumed by the container's writable layer.",
        &[],
    ),
    desc(
        "container_fs_inodes_used",
        "Number of inodes the container's writable layer uses.",
        &[],
    ),
    desc(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        &[],
    ),
    desc(
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received.",
        &["interface"],
    ),
    desc(
        "container_network_receive_packets_total",
        "Cumulative count of packets received.",
        &["interface"],
    ),
    desc(
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving.",
        &["interface"],
    ),
    desc(
        "container_network_receive_packets_dropped_total",
        "Cumulative count of packets dropped while receiving.",
        &["interface"],
    ),
    desc(
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted.",
        &["interface"],
    ),
    desc(
        "container_network_transmit_packets_total",
        "Cumulative count of packets transmitted.",
        &["interface"],
    ),
    desc(
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting.",
        &["interface"],
    ),
    desc(
        "container_network_transmit_packets_dropped_total",
        "Cumulative count of packets dropped while transmitting.",
        &["interface"],
    ),
];

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// Builds metrics that share base label values.
struct MetricList<'a> {
    base: &'a [String; 3],
    out: Vec<v1::Metric>,
}

impl MetricList<'_> {
    fn push(&mut self, name: &str, kind: v1::MetricType, extra: &[&str], value: u64) {
        self.out.push(v1::Metric {
            name: name.to_string(),
            // Gathered live.
            timestamp: 0,
            metric_type: kind as i32,
            label_values: self
                .base
                .iter()
                .cloned()
                .chain(extra.iter().map(|s| s.to_string()))
                .collect(),
            value: u64_value(value),
        });
    }
    fn counter(&mut self, name: &str, value: u64) {
        self.push(name, v1::MetricType::Counter, &[], value);
    }
    fn gauge(&mut self, name: &str, value: u64) {
        self.push(name, v1::MetricType::Gauge, &[], value);
    }
}

fn container_metric_values(
    labels: &[String; 3],
    reading: &ContainerReading,
    started_at: i64,
) -> Vec<v1::Metric> {
    let mut m = MetricList {
        base: labels,
        out: Vec::new(),
    };
    if let Some(stats) = &reading.stats {
        if let Some(cpu) = stats.cpu {
            m.push(
                "container_cpu_usage_seconds_total",
                v1::MetricType::Counter,
                &["total"],
                cpu.usage_ns / NANOS_PER_SECOND,
            );
            m.counter(
                "container_cpu_user_seconds_total",
                cpu.user_ns / NANOS_PER_SECOND,
            );
            m.counter(
                "container_cpu_system_seconds_total",
                cpu.system_ns / NANOS_PER_SECOND,
            );
            m.counter("container_cpu_cfs_periods_total", cpu.periods);
            m.counter(
                "container_cpu_cfs_throttled_periods_total",
                cpu.throttled_periods,
            );
            m.counter(
                "container_cpu_cfs_throttled_seconds_total",
                cpu.throttled_ns / NANOS_PER_SECOND,
            );
        }
        if let Some(mem) = stats.memory {
            m.gauge("container_memory_usage_bytes", mem.usage);
            m.gauge("container_memory_working_set_bytes", mem.working_set);
            m.gauge("container_memory_rss", mem.rss);
            m.gauge("container_memory_cache", mem.cache);
            if let Some(swap) = mem.swap_usage {
                m.gauge("container_memory_swap", swap);
            }
            for (kind, value) in [
                ("pgfault", mem.page_faults),
                ("pgmajfault", mem.major_page_faults),
            ] {
                m.push(
                    "container_memory_failures_total",
                    v1::MetricType::Counter,
                    &[kind, "container"],
                    value,
                );
            }
            m.gauge("container_spec_memory_limit_bytes", mem.limit.unwrap_or(0));
            if let Some(kills) = mem.oom_kills {
                m.counter("container_oom_events_total", kills);
            }
        }
        if let Some(pids) = stats.pids {
            m.gauge("container_threads", pids.current);
            m.gauge("container_threads_max", pids.limit.unwrap_or(0));
        }
    }
    if let Some(layer) = reading.layer {
        m.gauge("container_fs_usage_bytes", layer.bytes);
        m.gauge("container_fs_inodes_used", layer.inodes);
    }
    if started_at > 0 {
        m.gauge(
            "container_start_time_seconds",
            started_at as u64 / NANOS_PER_SECOND,
        );
    }
    m.out
}

fn network_metric_values(labels: &[String; 3], interfaces: &[InterfaceStats]) -> Vec<v1::Metric> {
    let mut m = MetricList {
        base: labels,
        out: Vec::new(),
    };
    for i in interfaces {
        for (name, value) in [
            ("container_network_receive_bytes_total", i.rx_bytes),
            ("container_network_receive_packets_total", i.rx_packets),
            ("container_network_receive_errors_total", i.rx_errors),
            (
                "container_network_receive_packets_dropped_total",
                i.rx_dropped,
            ),
            ("container_network_transmit_bytes_total", i.tx_bytes),
            ("container_network_transmit_packets_total", i.tx_packets),
            ("container_network_transmit_errors_total", i.tx_errors),
            (
                "container_network_transmit_packets_dropped_total",
                i.tx_dropped,
            ),
        ] {
            m.push(name, v1::MetricType::Counter, &[i.name.as_str()], value);
        }
    }
    m.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_cgroup_stats::{CpuStats, PidsStats, PsiData};

    fn full_reading() -> ContainerReading {
        ContainerReading {
            stats: Some(Stats {
                cpu: Some(CpuStats {
                    usage_ns: 3_500_000_000,
                    ..Default::default()
                }),
                memory: Some(MemoryStats {
                    usage: 100,
                    working_set: 60,
                    limit: Some(1000),
                    swap_usage: Some(5),
                    swap_limit: Some(50),
                    oom_kills: Some(1),
                    ..Default::default()
                }),
                pids: Some(PidsStats {
                    current: 3,
                    limit: None,
                }),
                ..Default::default()
            }),
            layer: Some(DiskUsage {
                bytes: 4096,
                inodes: 2,
            }),
        }
    }

    #[test]
    fn every_metric_has_a_descriptor_with_matching_labels() {
        let labels = ["id".to_string(), "name".to_string(), "image".to_string()];
        let interfaces = [InterfaceStats {
            name: "eth0".into(),
            rx_bytes: 10,
            ..Default::default()
        }];
        let mut all = container_metric_values(&labels, &full_reading(), 5_000_000_000);
        all.extend(network_metric_values(&labels, &interfaces));
        assert!(all.len() > 20);
        for metric in &all {
            let d = DESCRIPTORS
                .iter()
                .find(|d| d.name == metric.name)
                .unwrap_or_else(|| panic!("{} has no descriptor", metric.name));
            assert_eq!(
                metric.label_values.len(),
                BASE_LABELS.len() + d.extra_labels.len(),
                "{}",
                metric.name
            );
        }
        let cpu = all
            .iter()
            .find(|m| m.name == "container_cpu_usage_seconds_total")
            .unwrap();
        assert_eq!(cpu.value.unwrap().value, 3);
        assert_eq!(cpu.label_values[3], "total");
        let start = all
            .iter()
            .find(|m| m.name == "container_start_time_seconds")
            .unwrap();
        assert_eq!(start.value.unwrap().value, 5);
    }

    #[test]
    fn descriptor_names_are_unique() {
        let mut names: Vec<_> = DESCRIPTORS.iter().map(|d| d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DESCRIPTORS.len());
    }

    #[test]
    fn cri_conversions() {
        let reading = full_reading();
        let stats = reading.stats.as_ref().unwrap();
        let cpu = cpu_usage(7, stats, Some(250)).unwrap();
        assert_eq!(cpu.usage_core_nano_seconds.unwrap().value, 3_500_000_000);
        assert_eq!(cpu.usage_nano_cores.unwrap().value, 250);
        assert!(cpu.psi.is_none());
        let memory = memory_usage(7, stats).unwrap();
        assert_eq!(memory.working_set_bytes.unwrap().value, 60);
        assert_eq!(memory.available_bytes.unwrap().value, 940);
        let swap = swap_usage(7, stats).unwrap();
        assert_eq!(swap.swap_usage_bytes.unwrap().value, 5);
        assert_eq!(swap.swap_available_bytes.unwrap().value, 45);
        assert!(io_usage(7, stats).is_none());
        let psi = psi_stats(Some(Psi {
            some: PsiData {
                avg10: 1.0,
                total_ns: 9,
                ..Default::default()
            },
            full: None,
        }))
        .unwrap();
        assert_eq!(psi.some.unwrap().total, 9);
        assert!(psi.full.is_none());

        let interfaces = [
            InterfaceStats {
                name: "net1".into(),
                ..Default::default()
            },
            InterfaceStats {
                name: "eth0".into(),
                tx_bytes: 3,
                ..Default::default()
            },
        ];
        let net = network_usage(7, &interfaces).unwrap();
        assert_eq!(net.default_interface.unwrap().name, "eth0");
        assert_eq!(net.interfaces.len(), 2);
        assert!(network_usage(7, &[]).is_none());
    }
}
