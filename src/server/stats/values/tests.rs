use berth_cgroup_stats::{HugetlbStats, Pressure, Psi};

use super::super::descriptors::{BASE_LABELS, CONFORMANCE, DESCRIPTORS, KUBE_LABELS};
use super::super::full_reading;
use super::super::procs::Processes;
use super::super::readings::{DeviceIo, FsCapacity, MemoryMore};
use super::*;

fn labels() -> Labels {
    Labels {
        base: ["cid".into(), "web".into(), "busybox".into()],
        kube: ["ns".into(), "pod".into(), "web".into()],
    }
}

fn psi(total_s: u64) -> Option<Psi> {
    let data = PsiData {
        total_ns: total_s * NANOS_PER_SECOND,
        ..Default::default()
    };
    Some(Psi {
        some: data,
        full: Some(data),
    })
}

/// A sample with everything read.
fn full_sample() -> ContainerSample {
    let mut reading = full_reading();
    let stats = reading.stats.as_mut().unwrap();
    stats.hugetlb = vec![HugetlbStats {
        page_size: "2MB".into(),
        usage: 2 << 20,
        max_usage: Some(4 << 20),
        limit: None,
    }];
    stats.pressure = Pressure {
        cpu: psi(1),
        memory: psi(2),
        io: psi(3),
    };
    ContainerSample {
        reading,
        memory: Some(MemoryMore {
            failcnt: Some(1),
            max_usage: Some(200),
            kernel: Some(30),
            mapped_file: Some(10),
            own_faults: Some((9, 1)),
        }),
        io: vec![DeviceIo {
            major: 8,
            minor: 0,
            device: "/dev/sda".into(),
            bytes: vec![("Read".into(), 4096), ("Write".into(), 512)],
            ios: vec![("Read".into(), 2), ("Write".into(), 1)],
        }],
        fs: Some(FsCapacity {
            limit_bytes: 1 << 30,
            inodes_total: 1000,
            inodes_free: 900,
        }),
        processes: Some(Processes {
            processes: 2,
            threads: 5,
            file_descriptors: 12,
            sockets: 1,
        }),
        max_open_files: Some(1024),
        resources: Some(v1::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 20_000,
            cpu_shares: 1024,
            memory_limit_in_bytes: 64 << 20,
            memory_swap_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        started_at: 5_000_000_000,
        seen_at: 1_700_000_000,
    }
}

fn value(all: &[v1::Metric], name: &str) -> u64 {
    all.iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .value
        .unwrap()
        .value
}

#[test]
fn every_conformance_metric_is_reported_with_its_descriptors_labels() {
    let mut all = container_metric_values(labels(), &full_sample());
    let interfaces = [InterfaceStats {
        name: "eth0".into(),
        rx_bytes: 10,
        ..Default::default()
    }];
    all.extend(network_metric_values(labels(), &interfaces));
    for name in CONFORMANCE {
        assert!(all.iter().any(|m| m.name == *name), "{name} not reported");
    }
    for metric in &all {
        let d = DESCRIPTORS
            .iter()
            .find(|d| d.name == metric.name)
            .unwrap_or_else(|| panic!("{} has no descriptor", metric.name));
        assert_eq!(
            metric.label_values.len(),
            d.label_keys().len(),
            "{}",
            metric.name
        );
        assert_eq!(metric.metric_type, d.kind as i32, "{}", metric.name);
        assert_eq!(metric.label_values[..3], ["cid", "web", "busybox"]);
        let n = metric.label_values.len();
        assert_eq!(metric.label_values[n - 3..], ["ns", "pod", "web"]);
    }
    assert_eq!(BASE_LABELS.len() + KUBE_LABELS.len(), 6);
}

#[test]
fn values_and_their_own_labels() {
    let all = container_metric_values(labels(), &full_sample());
    let cpu = all
        .iter()
        .find(|m| m.name == "container_cpu_usage_seconds_total")
        .unwrap();
    assert_eq!(cpu.value.unwrap().value, 3, "whole seconds");
    assert_eq!(cpu.label_values[3], "total");
    assert_eq!(value(&all, "container_start_time_seconds"), 5);
    assert_eq!(value(&all, "container_last_seen"), 1_700_000_000);
    assert_eq!(value(&all, "container_threads"), 5);
    assert_eq!(value(&all, "container_file_descriptors"), 12);
    assert_eq!(
        value(&all, "container_pressure_io_stalled_seconds_total"),
        3
    );
    assert_eq!(value(&all, "container_spec_cpu_quota"), 20_000);
    assert_eq!(
        value(&all, "container_spec_memory_reservation_limit_bytes"),
        0
    );
    let blkio: Vec<_> = all
        .iter()
        .filter(|m| m.name == "container_blkio_device_usage_total")
        .map(|m| m.label_values[3..7].join(" "))
        .collect();
    assert_eq!(blkio, ["/dev/sda 8 0 Read", "/dev/sda 8 0 Write"]);
    let faults: Vec<_> = all
        .iter()
        .filter(|m| m.name == "container_memory_failures_total")
        .map(|m| {
            format!(
                "{} {} {}",
                m.label_values[3],
                m.label_values[4],
                m.value.unwrap().value
            )
        })
        .collect();
    assert_eq!(
        faults,
        [
            "pgfault container 9",
            "pgfault hierarchy 0",
            "pgmajfault container 1",
            "pgmajfault hierarchy 0"
        ]
    );
    let ulimit = all
        .iter()
        .find(|m| m.name == "container_ulimits_soft")
        .unwrap();
    assert_eq!(ulimit.label_values[3], "max_open_files");
}

#[test]
fn what_was_not_read_is_not_reported() {
    let mut s = full_sample();
    s.memory = None;
    s.processes = None;
    s.max_open_files = None;
    s.fs = None;
    s.io.clear();
    s.resources.as_mut().unwrap().cpu_quota = 0;
    let stats = s.reading.stats.as_mut().unwrap();
    stats.memory.as_mut().unwrap().swap_usage = None;
    stats.pressure = Pressure::default();
    stats.hugetlb.clear();
    let all = container_metric_values(labels(), &s);
    let names: Vec<_> = all.iter().map(|m| m.name.as_str()).collect();
    for absent in [
        "container_memory_max_usage_bytes",
        "container_memory_failcnt",
        "container_memory_swap",
        "container_file_descriptors",
        "container_sockets",
        "container_processes",
        "container_ulimits_soft",
        "container_fs_limit_bytes",
        "container_fs_reads_total",
        "container_spec_cpu_quota",
        "container_pressure_cpu_waiting_seconds_total",
        "container_hugetlb_usage_bytes",
    ] {
        assert!(!names.contains(&absent), "{absent} reported");
    }
    // Threads still come from the pids controller.
    assert_eq!(value(&all, "container_threads"), 3);
    // Nothing read at all: only what berth knows without reading.
    s.reading.stats = None;
    s.reading.layer = None;
    s.resources = None;
    let all = container_metric_values(labels(), &s);
    let names: Vec<_> = all.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["container_start_time_seconds", "container_last_seen"]
    );
}
