//! The metrics berth reports through ListPodSandboxMetrics, as
//! ListMetricDescriptors describes them: the cAdvisor metrics kubelet
//! serves on `/metrics/cadvisor` (KEP-2371), by cAdvisor's names, types
//! and metric labels.
//!
//! Every metric's label keys are [`BASE_LABELS`], then its own (`cpu`,
//! `interface`, `device`…), then [`KUBE_LABELS`]; label order carries no
//! meaning in CRI (values follow the keys), and Prometheus sorts them.
//! Values are whole numbers (CRI metrics are unsigned integers): seconds
//! are whole seconds, as CRI-O and containerd report them.
//!
//! A metric is offered only where berth measures it on this host
//! ([`Needs`]); a container whose value cannot be read (not running, a file
//! its kernel does not have) has no sample, never a made-up one.

use cri_api::v1::MetricType;

use super::host::Host;

/// Label keys every metric has first: the container's (or the pod's) id,
/// its name, its image.
pub(super) const BASE_LABELS: [&str; 3] = ["id", "name", "image"];

/// Label keys every metric has last: the Kubernetes names of the pod and the
/// container (empty at the pod level), as cAdvisor's series carry them.
pub(super) const KUBE_LABELS: [&str; 3] = ["namespace", "pod", "container"];

/// What a host needs for berth to measure a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Needs {
    /// Every cgroup v1 or v2 host.
    Nothing,
    /// Pressure stall information.
    Pressure,
    /// The hugetlb controller.
    Hugetlb,
    /// Huge page peaks (v1).
    HugetlbPeak,
}

impl Needs {
    fn met_by(self, host: &Host) -> bool {
        match self {
            Needs::Nothing => true,
            Needs::Pressure => host.pressure,
            Needs::Hugetlb => host.hugetlb,
            Needs::HugetlbPeak => host.hugetlb_peak,
        }
    }
}

/// One metric berth reports through ListPodSandboxMetrics.
#[derive(Debug)]
pub(super) struct Descriptor {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    pub(super) kind: MetricType,
    /// Label keys between [`BASE_LABELS`] and [`KUBE_LABELS`].
    pub(super) extra_labels: &'static [&'static str],
    pub(super) needs: Needs,
}

impl Descriptor {
    /// All its label keys, in order.
    pub(super) fn label_keys(&self) -> Vec<String> {
        BASE_LABELS
            .iter()
            .chain(self.extra_labels)
            .chain(KUBE_LABELS.iter())
            .map(|k| k.to_string())
            .collect()
    }
}

const fn counter(
    name: &'static str,
    help: &'static str,
    extra: &'static [&'static str],
) -> Descriptor {
    Descriptor {
        name,
        help,
        kind: MetricType::Counter,
        extra_labels: extra,
        needs: Needs::Nothing,
    }
}

const fn gauge(
    name: &'static str,
    help: &'static str,
    extra: &'static [&'static str],
) -> Descriptor {
    Descriptor {
        name,
        help,
        kind: MetricType::Gauge,
        extra_labels: extra,
        needs: Needs::Nothing,
    }
}

const fn needing(needs: Needs, d: Descriptor) -> Descriptor {
    Descriptor { needs, ..d }
}

const DEVICE: &[&str] = &["device"];
const IFACE: &[&str] = &["interface"];

#[rustfmt::skip]
pub(super) const DESCRIPTORS: &[Descriptor] = &[
    // CPU (cgroup cpu/cpuacct).
    counter("container_cpu_usage_seconds_total", "Cumulative CPU time consumed in seconds.", &["cpu"]),
    counter("container_cpu_user_seconds_total", "Cumulative user CPU time consumed in seconds.", &[]),
    counter("container_cpu_system_seconds_total", "Cumulative system CPU time consumed in seconds.", &[]),
    counter("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", &[]),
    counter("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", &[]),
    counter("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", &[]),
    // Memory (cgroup memory).
    gauge("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed.", &[]),
    gauge("container_memory_working_set_bytes", "Current working set in bytes.", &[]),
    gauge("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes.", &[]),
    gauge("container_memory_rss", "Size of RSS in bytes.", &[]),
    gauge("container_memory_cache", "Number of bytes of page cache memory.", &[]),
    gauge("container_memory_mapped_file", "Size of memory mapped files in bytes.", &[]),
    gauge("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", &[]),
    gauge("container_memory_swap", "Container swap usage in bytes.", &[]),
    counter("container_memory_failcnt", "Number of memory usage hits limits.", &[]),
    counter("container_memory_failures_total", "Cumulative count of memory allocation failures.", &["failure_type", "scope"]),
    counter("container_oom_events_total", "Count of out of memory events observed for the container.", &[]),
    // Huge pages (cgroup hugetlb).
    needing(Needs::Hugetlb, gauge("container_hugetlb_usage_bytes", "Current hugepage usage in bytes.", &["pagesize"])),
    needing(Needs::HugetlbPeak, gauge("container_hugetlb_max_usage_bytes", "Maximum hugepage usage recorded in bytes.", &["pagesize"])),
    // Pressure stall information (cgroup v2).
    needing(Needs::Pressure, counter("container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", &[])),
    needing(Needs::Pressure, counter("container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", &[])),
    needing(Needs::Pressure, counter("container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", &[])),
    needing(Needs::Pressure, counter("container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", &[])),
    needing(Needs::Pressure, counter("container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", &[])),
    needing(Needs::Pressure, counter("container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", &[])),
    // Processes (cgroup pids, /proc of the container's processes).
    gauge("container_processes", "Number of processes running inside the container.", &[]),
    gauge("container_threads", "Number of threads running inside the container.", &[]),
    gauge("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero.", &[]),
    gauge("container_file_descriptors", "Number of open file descriptors for the container.", &[]),
    gauge("container_sockets", "Number of open sockets for the container.", &[]),
    gauge("container_ulimits_soft", "Soft ulimit values for the container root process (limits that are unlimited are not reported).", &["ulimit"]),
    // Writable layer and its filesystem.
    gauge("container_fs_usage_bytes", "Number of bytes that are consumed by the container's writable layer.", &[]),
    gauge("container_fs_inodes_used", "Number of inodes the container's writable layer uses.", &[]),
    gauge("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on the filesystem of its writable layer.", &[]),
    gauge("container_fs_inodes_total", "Number of inodes of the filesystem of the container's writable layer.", &[]),
    gauge("container_fs_inodes_free", "Number of free inodes of the filesystem of the container's writable layer.", &[]),
    // Block I/O (cgroup blkio on v1, io on v2).
    counter("container_fs_reads_bytes_total", "Cumulative count of bytes read.", DEVICE),
    counter("container_fs_writes_bytes_total", "Cumulative count of bytes written.", DEVICE),
    counter("container_fs_reads_total", "Cumulative count of reads completed.", DEVICE),
    counter("container_fs_writes_total", "Cumulative count of writes completed.", DEVICE),
    counter("container_blkio_device_usage_total", "Blkio device bytes usage.", &["device", "major", "minor", "operation"]),
    // The container's spec (the CRI resources it runs with).
    gauge("container_spec_cpu_period", "CPU period of the container.", &[]),
    gauge("container_spec_cpu_quota", "CPU quota of the container.", &[]),
    gauge("container_spec_cpu_shares", "CPU share of the container.", &[]),
    gauge("container_spec_memory_limit_bytes", "Memory limit for the container in bytes, 0 when unlimited.", &[]),
    gauge("container_spec_memory_swap_limit_bytes", "Memory and swap limit for the container in bytes, 0 when unlimited.", &[]),
    gauge("container_spec_memory_reservation_limit_bytes", "Memory reservation limit (memory.min) for the container in bytes.", &[]),
    gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", &[]),
    gauge("container_last_seen", "Last time a container was seen by the exporter.", &[]),
    // Network (the pod's network namespace, at the pod level).
    counter("container_network_receive_bytes_total", "Cumulative count of bytes received.", IFACE),
    counter("container_network_receive_packets_total", "Cumulative count of packets received.", IFACE),
    counter("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving.", IFACE),
    counter("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving.", IFACE),
    counter("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted.", IFACE),
    counter("container_network_transmit_packets_total", "Cumulative count of packets transmitted.", IFACE),
    counter("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting.", IFACE),
    counter("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting.", IFACE),
];

/// The descriptor of metric `name` (every metric berth reports has one).
pub(super) fn descriptor(name: &str) -> Option<&'static Descriptor> {
    DESCRIPTORS.iter().find(|d| d.name == name)
}

/// The descriptors of the metrics berth measures on `host`.
pub(super) fn offered(host: &Host) -> impl Iterator<Item = &'static Descriptor> + '_ {
    DESCRIPTORS.iter().filter(|d| d.needs.met_by(host))
}

#[cfg(test)]
/// The names cri-tools' conformance spec expects (pkg/validate/pod.go,
/// `expectedMetricDescriptorNames`), as kubelet serves them from
/// cAdvisor.
pub(super) const CONFORMANCE: &[&str] = &[
    "container_blkio_device_usage_total",
    "container_cpu_cfs_periods_total",
    "container_cpu_cfs_throttled_periods_total",
    "container_cpu_cfs_throttled_seconds_total",
    "container_cpu_system_seconds_total",
    "container_cpu_usage_seconds_total",
    "container_cpu_user_seconds_total",
    "container_file_descriptors",
    "container_fs_inodes_free",
    "container_fs_inodes_total",
    "container_fs_limit_bytes",
    "container_fs_reads_bytes_total",
    "container_fs_reads_total",
    "container_fs_usage_bytes",
    "container_fs_writes_bytes_total",
    "container_fs_writes_total",
    "container_hugetlb_max_usage_bytes",
    "container_hugetlb_usage_bytes",
    "container_last_seen",
    "container_memory_cache",
    "container_memory_failcnt",
    "container_memory_failures_total",
    "container_memory_kernel_usage",
    "container_memory_mapped_file",
    "container_memory_max_usage_bytes",
    "container_memory_rss",
    "container_memory_swap",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_network_receive_bytes_total",
    "container_network_receive_errors_total",
    "container_network_receive_packets_dropped_total",
    "container_network_receive_packets_total",
    "container_network_transmit_bytes_total",
    "container_network_transmit_errors_total",
    "container_network_transmit_packets_dropped_total",
    "container_network_transmit_packets_total",
    "container_oom_events_total",
    "container_pressure_cpu_stalled_seconds_total",
    "container_pressure_cpu_waiting_seconds_total",
    "container_pressure_io_stalled_seconds_total",
    "container_pressure_io_waiting_seconds_total",
    "container_pressure_memory_stalled_seconds_total",
    "container_pressure_memory_waiting_seconds_total",
    "container_processes",
    "container_sockets",
    "container_spec_cpu_period",
    "container_spec_cpu_quota",
    "container_spec_cpu_shares",
    "container_spec_memory_limit_bytes",
    "container_spec_memory_reservation_limit_bytes",
    "container_spec_memory_swap_limit_bytes",
    "container_start_time_seconds",
    "container_threads",
    "container_threads_max",
    "container_ulimits_soft",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_names_are_unique_and_described() {
        let mut names: Vec<_> = DESCRIPTORS.iter().map(|d| d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DESCRIPTORS.len());
        for d in DESCRIPTORS {
            assert!(!d.help.is_empty(), "{}", d.name);
            assert!(d.name.starts_with("container_"), "{}", d.name);
            // cAdvisor's types: counters end in `_total`, but for a gauge
            // of the filesystem and `failcnt`.
            let counter = (d.name.ends_with("_total") && d.name != "container_fs_inodes_total")
                || d.name == "container_memory_failcnt";
            assert_eq!(d.kind == MetricType::Counter, counter, "{} type", d.name);
            let keys = d.label_keys();
            assert_eq!(keys[..3], BASE_LABELS);
            assert_eq!(keys[keys.len() - 3..], KUBE_LABELS);
        }
    }

    #[test]
    fn every_conformance_metric_is_offered_where_the_host_has_it() {
        let everything = Host {
            pressure: true,
            hugetlb: true,
            hugetlb_peak: true,
            ..Host::default()
        };
        let names: Vec<_> = offered(&everything).map(|d| d.name).collect();
        for name in CONFORMANCE {
            assert!(names.contains(name), "{name} not offered");
        }
        // A host without PSI or huge pages is not offered those.
        let plain: Vec<_> = offered(&Host::default()).map(|d| d.name).collect();
        assert!(!plain
            .iter()
            .any(|n| n.contains("pressure") || n.contains("hugetlb")));
        assert_eq!(plain.len(), DESCRIPTORS.len() - 8);
        assert!(descriptor("container_threads").is_some());
        assert!(descriptor("container_nonsense").is_none());
    }
}
