//! Readings → cAdvisor-style metrics (ListPodSandboxMetrics): network
//! counters at the pod level; CPU, memory, huge pages, pressure, processes,
//! writable layer, block I/O and spec per running container. Labels and
//! types are the descriptors' (`descriptors.rs`); a value that was not read
//! gives no sample.

use berth_cgroup_stats::net::InterfaceStats;
use berth_cgroup_stats::{PsiData, Stats};
use cri_api::v1;

use super::convert::u64_value;
use super::descriptors::descriptor;
use super::sample::ContainerSample;
use super::Cri;
use crate::container::ContainerState;
use crate::sandbox::Sandbox;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

impl Cri {
    /// cAdvisor-style metrics of a pod: network counters at the pod level,
    /// the rest per running container.
    pub(super) fn pod_metrics_now(&self, sandbox: &Sandbox) -> v1::PodSandboxMetrics {
        let pod = sandbox.meta.config().metadata.clone().unwrap_or_default();
        let pod_labels = Labels {
            base: [sandbox.meta.id.clone(), pod.name.clone(), String::new()],
            kube: [pod.namespace.clone(), pod.name.clone(), String::new()],
        };
        let interfaces = self.pod_network(sandbox);
        let container_metrics = self
            .core
            .sandbox_containers(&sandbox.meta.id)
            .iter()
            .filter(|c| c.status().state == ContainerState::Running)
            .map(|c| {
                let config = c.meta.config();
                let name = config
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                let labels = Labels {
                    base: [c.meta.id.clone(), name.clone(), c.meta.image_name.clone()],
                    kube: [pod.namespace.clone(), pod.name.clone(), name],
                };
                v1::ContainerMetrics {
                    container_id: c.meta.id.clone(),
                    metrics: container_metric_values(labels, &self.sample_container(c)),
                }
            })
            .collect();
        v1::PodSandboxMetrics {
            pod_sandbox_id: sandbox.meta.id.clone(),
            metrics: network_metric_values(pod_labels, &interfaces),
            container_metrics,
        }
    }
}

/// The label values every metric of a container (or pod) has.
struct Labels {
    /// For `BASE_LABELS`.
    base: [String; 3],
    /// For `KUBE_LABELS`.
    kube: [String; 3],
}

/// Builds metrics that share label values.
struct MetricList {
    labels: Labels,
    out: Vec<v1::Metric>,
}

impl MetricList {
    fn new(labels: Labels) -> MetricList {
        MetricList {
            labels,
            out: Vec::new(),
        }
    }

    /// One sample of metric `name` with its own label values `extra`.
    fn push(&mut self, name: &'static str, extra: &[&str], value: u64) {
        let Some(d) = descriptor(name) else {
            debug_assert!(false, "{name} has no descriptor");
            return;
        };
        debug_assert_eq!(d.extra_labels.len(), extra.len(), "{name}");
        let label_values = self
            .labels
            .base
            .iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .chain(self.labels.kube.iter().cloned())
            .collect();
        self.out.push(v1::Metric {
            name: name.to_string(),
            // Gathered live.
            timestamp: 0,
            metric_type: d.kind as i32,
            label_values,
            value: u64_value(value),
        });
    }

    fn one(&mut self, name: &'static str, value: u64) {
        self.push(name, &[], value);
    }

    fn maybe(&mut self, name: &'static str, value: Option<u64>) {
        if let Some(value) = value {
            self.one(name, value);
        }
    }
}

fn seconds(ns: u64) -> u64 {
    ns / NANOS_PER_SECOND
}

fn container_metric_values(labels: Labels, s: &ContainerSample) -> Vec<v1::Metric> {
    let mut m = MetricList::new(labels);
    if let Some(stats) = &s.reading.stats {
        cpu_values(&mut m, stats);
        memory_values(&mut m, stats, s);
        pressure_values(&mut m, stats);
    }
    process_values(&mut m, s);
    fs_values(&mut m, s);
    spec_values(&mut m, s);
    if s.started_at > 0 {
        m.one("container_start_time_seconds", seconds(s.started_at as u64));
    }
    m.one("container_last_seen", s.seen_at);
    m.out
}

fn cpu_values(m: &mut MetricList, stats: &Stats) {
    let Some(cpu) = stats.cpu else { return };
    m.push(
        "container_cpu_usage_seconds_total",
        &["total"],
        seconds(cpu.usage_ns),
    );
    m.one("container_cpu_user_seconds_total", seconds(cpu.user_ns));
    m.one("container_cpu_system_seconds_total", seconds(cpu.system_ns));
    m.one("container_cpu_cfs_periods_total", cpu.periods);
    m.one(
        "container_cpu_cfs_throttled_periods_total",
        cpu.throttled_periods,
    );
    m.one(
        "container_cpu_cfs_throttled_seconds_total",
        seconds(cpu.throttled_ns),
    );
}

fn memory_values(m: &mut MetricList, stats: &Stats, s: &ContainerSample) {
    if let Some(mem) = stats.memory {
        m.one("container_memory_usage_bytes", mem.usage);
        m.one("container_memory_working_set_bytes", mem.working_set);
        m.one("container_memory_rss", mem.rss);
        m.one("container_memory_cache", mem.cache);
        m.maybe("container_memory_swap", mem.swap_usage);
        m.maybe("container_oom_events_total", mem.oom_kills);
        let own = s.memory.and_then(|more| more.own_faults);
        let faults = [
            ("pgfault", mem.page_faults, own.map(|f| f.0)),
            ("pgmajfault", mem.major_page_faults, own.map(|f| f.1)),
        ];
        for (kind, hierarchy, container) in faults {
            let name = "container_memory_failures_total";
            if let Some(container) = container {
                m.push(name, &[kind, "container"], container);
            }
            m.push(name, &[kind, "hierarchy"], hierarchy);
        }
    }
    if let Some(more) = s.memory {
        m.maybe("container_memory_max_usage_bytes", more.max_usage);
        m.maybe("container_memory_mapped_file", more.mapped_file);
        m.maybe("container_memory_kernel_usage", more.kernel);
        m.maybe("container_memory_failcnt", more.failcnt);
    }
    for h in &stats.hugetlb {
        m.push("container_hugetlb_usage_bytes", &[&h.page_size], h.usage);
        if let Some(max) = h.max_usage {
            m.push("container_hugetlb_max_usage_bytes", &[&h.page_size], max);
        }
    }
}

fn pressure_values(m: &mut MetricList, stats: &Stats) {
    let p = &stats.pressure;
    for (psi, waiting, stalled) in [
        (
            p.cpu,
            "container_pressure_cpu_waiting_seconds_total",
            "container_pressure_cpu_stalled_seconds_total",
        ),
        (
            p.memory,
            "container_pressure_memory_waiting_seconds_total",
            "container_pressure_memory_stalled_seconds_total",
        ),
        (
            p.io,
            "container_pressure_io_waiting_seconds_total",
            "container_pressure_io_stalled_seconds_total",
        ),
    ] {
        let Some(psi) = psi else { continue };
        let total = |d: PsiData| seconds(d.total_ns);
        m.one(waiting, total(psi.some));
        m.maybe(stalled, psi.full.map(total));
    }
}

fn process_values(m: &mut MetricList, s: &ContainerSample) {
    let pids = s.reading.stats.as_ref().and_then(|st| st.pids);
    if let Some(p) = s.processes {
        m.one("container_processes", p.processes);
        m.one("container_threads", p.threads);
        m.one("container_file_descriptors", p.file_descriptors);
        m.one("container_sockets", p.sockets);
    } else if let Some(pids) = pids {
        // Tasks are threads: the pids controller counts them all.
        m.one("container_threads", pids.current);
    }
    if let Some(pids) = pids {
        m.one("container_threads_max", pids.limit.unwrap_or(0));
    }
    if let Some(n) = s.max_open_files {
        m.push("container_ulimits_soft", &["max_open_files"], n);
    }
}

fn fs_values(m: &mut MetricList, s: &ContainerSample) {
    if let Some(layer) = s.reading.layer {
        m.one("container_fs_usage_bytes", layer.bytes);
        m.one("container_fs_inodes_used", layer.inodes);
    }
    if let Some(fs) = s.fs {
        m.one("container_fs_limit_bytes", fs.limit_bytes);
        m.one("container_fs_inodes_total", fs.inodes_total);
        m.one("container_fs_inodes_free", fs.inodes_free);
    }
    for d in &s.io {
        let device = [d.device.as_str()];
        for (name, value) in [
            ("container_fs_reads_bytes_total", d.bytes("Read")),
            ("container_fs_writes_bytes_total", d.bytes("Write")),
            ("container_fs_reads_total", d.ios("Read")),
            ("container_fs_writes_total", d.ios("Write")),
        ] {
            if let Some(value) = value {
                m.push(name, &device, value);
            }
        }
        let (major, minor) = (d.major.to_string(), d.minor.to_string());
        for (op, value) in &d.bytes {
            m.push(
                "container_blkio_device_usage_total",
                &[&d.device, &major, &minor, op],
                *value,
            );
        }
    }
}

/// The spec metrics: what the CRI resources ask (kubelet's values as it
/// gave them, the same on cgroup v1 and v2); limits that are not set are
/// 0, periods, quotas and shares that are not set are not reported.
fn spec_values(m: &mut MetricList, s: &ContainerSample) {
    let Some(r) = &s.resources else { return };
    let positive = |v: i64| u64::try_from(v).ok().filter(|v| *v > 0);
    m.maybe("container_spec_cpu_period", positive(r.cpu_period));
    m.maybe("container_spec_cpu_quota", positive(r.cpu_quota));
    m.maybe("container_spec_cpu_shares", positive(r.cpu_shares));
    let limit = |v: i64| positive(v).unwrap_or(0);
    m.one(
        "container_spec_memory_limit_bytes",
        limit(r.memory_limit_in_bytes),
    );
    m.one(
        "container_spec_memory_swap_limit_bytes",
        limit(r.memory_swap_limit_in_bytes),
    );
    let min = r.unified.get("memory.min").map(|v| v.trim().parse::<u64>());
    match min {
        None => m.one("container_spec_memory_reservation_limit_bytes", 0),
        Some(Ok(min)) => m.one("container_spec_memory_reservation_limit_bytes", min),
        // "max" or garbage: nothing a byte count can say.
        Some(Err(_)) => {}
    }
}

fn network_metric_values(labels: Labels, interfaces: &[InterfaceStats]) -> Vec<v1::Metric> {
    let mut m = MetricList::new(labels);
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
            m.push(name, &[i.name.as_str()], value);
        }
    }
    m.out
}

#[cfg(test)]
mod tests;
