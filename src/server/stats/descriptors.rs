//! The metrics berth reports through ListPodSandboxMetrics, as
//! ListMetricDescriptors describes them.

/// Label keys every metric has: the container (or pod) id, its name, its image.
pub(super) const BASE_LABELS: [&str; 3] = ["id", "name", "image"];

/// One metric berth reports through ListPodSandboxMetrics.
pub(super) struct Descriptor {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    /// Label keys after [`BASE_LABELS`].
    pub(super) extra_labels: &'static [&'static str],
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

pub(super) const DESCRIPTORS: &[Descriptor] = &[
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_names_are_unique() {
        let mut names: Vec<_> = DESCRIPTORS.iter().map(|d| d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DESCRIPTORS.len());
    }
}
