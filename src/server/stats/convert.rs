//! Readings → CRI stats: the CPU, memory, swap, I/O and network usage
//! messages, and the whole stats of a container and of a pod.

use berth_cgroup_stats::net::InterfaceStats;
use berth_cgroup_stats::{MemoryStats, Psi, Stats};
use cri_api::v1;

use super::Cri;
use crate::container::Container;
use crate::core::now_nanos;
use crate::sandbox::Sandbox;

/// The pod interface CNI is asked to make.
const POD_INTERFACE: &str = "eth0";

pub(super) fn u64_value(value: u64) -> Option<v1::UInt64Value> {
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

impl Cri {
    /// The CRI stats of a container.
    pub(super) fn container_stats_now(&self, container: &Container) -> v1::ContainerStats {
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
                    mountpoint: self.layout.containers_root().display().to_string(),
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
    pub(super) fn pod_stats_now(&self, sandbox: &Sandbox) -> v1::PodSandboxStats {
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
}

#[cfg(test)]
mod tests {
    use super::super::full_reading;
    use super::*;
    use berth_cgroup_stats::PsiData;

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
