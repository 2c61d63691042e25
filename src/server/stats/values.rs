//! Readings → cAdvisor-style metrics (ListPodSandboxMetrics): network
//! counters at the pod level; CPU, memory, processes and writable layer
//! per container.

use berth_cgroup_stats::net::InterfaceStats;
use cri_api::v1;

use super::convert::u64_value;
use super::{ContainerReading, Cri};
use crate::container::ContainerState;
use crate::sandbox::Sandbox;

impl Cri {
    /// cAdvisor-style metrics of a pod: network counters at the pod level,
    /// CPU, memory, processes and writable layer per container.
    pub(super) fn pod_metrics_now(&self, sandbox: &Sandbox) -> v1::PodSandboxMetrics {
        let pod = sandbox.meta.config().metadata.clone().unwrap_or_default();
        let pod_labels = [sandbox.meta.id.clone(), pod.name.clone(), String::new()];
        let interfaces = self.pod_network(sandbox);
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
    use super::super::descriptors::{BASE_LABELS, DESCRIPTORS};
    use super::super::full_reading;
    use super::*;

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
}
