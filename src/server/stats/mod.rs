//! RuntimeService stats and metrics, one file per RPC (ContainerStats,
//! ListContainerStats, PodSandboxStats, ListPodSandboxStats,
//! ListMetricDescriptors, ListPodSandboxMetrics); here what they share: the
//! cgroup mounts, the background CPU sampler behind `usage_nano_cores`, and
//! the readings of a container's and a pod's usage. `convert.rs` turns
//! readings into CRI stats, `values.rs` into cAdvisor-style metrics, whose
//! table is `descriptors.rs`; the metrics read more (`sample.rs`:
//! `readings.rs`, `procs.rs`) where the host has it (`host.rs`).
//!
//! A container's cgroup is found from its pid. A pod's cgroup is the parent
//! of its pause's (or, for a pod without a pause, a running container's)
//! cgroup when the pod has a cgroup parent of its own (as kubelet always
//! gives); pods without one share berth's default parent, so their usage is
//! the sum of the pause's and their containers' cgroups. A pod's network
//! counters are those of its network namespace, read from
//! `/proc/<pid>/net/dev` of the pause or a running container, else from a
//! thread inside the namespace.

mod container_stats;
mod convert;
mod descriptors;
mod host;
mod list_container_stats;
mod list_metric_descriptors;
mod list_pod_sandbox_metrics;
mod list_pod_sandbox_stats;
mod pod_sandbox_stats;
mod procs;
mod readings;
mod sample;
mod values;

use berth_lock::RwLockExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use berth_cgroup_stats::net::{interfaces_of_pid, InterfaceStats};
use berth_cgroup_stats::{disk_usage, Cgroup, CpuSample, CpuSampler, DiskUsage, Mounts, Stats};

use super::Cri;
use crate::container::{Container, ContainerState};
use crate::core::{now_nanos, Core};
use crate::error::Error;
use crate::sandbox::{Sandbox, SandboxState};

/// How often the sampler reads every container's and pod's CPU time.
const SAMPLE_PERIOD: Duration = Duration::from_secs(2);

/// What the stats RPCs share: the cgroup mounts, what the host lets berth
/// measure, and the CPU sampler.
pub struct Collector {
    /// Whose containers and pods are measured.
    core: Arc<Core>,
    mounts: RwLock<Mounts>,
    host: host::Host,
    pub(super) cpu: Arc<CpuSampler>,
}

impl Collector {
    /// The collector of `core`'s containers and pods; reads the cgroup
    /// mounts once (they do not move while berth runs).
    pub fn new(core: Arc<Core>) -> Collector {
        let mounts = Mounts::read().unwrap_or_else(|e| {
            tracing::error!(error = %e, "reading cgroup mounts: no cgroup stats");
            Mounts::default()
        });
        let host = host::Host::probe(&mounts);
        tracing::debug!(?host, "cgroup mode and what the host lets berth measure");
        Collector {
            core,
            mounts: RwLock::new(mounts),
            host,
            cpu: Arc::new(CpuSampler::new()),
        }
    }

    /// The cgroup of a live process; `None` when it is gone.
    fn cgroup_of(&self, pid: u32) -> Option<Cgroup> {
        let mounts = self.mounts.read_unpoisoned();
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
pub(super) enum PodCgroup {
    /// The pod's own cgroup (the parent of its pause's and containers').
    Own(Cgroup),
    /// Sibling cgroups in a parent other pods share: the pause and the containers.
    Members(Vec<Cgroup>),
}

/// A pod's interfaces without loopback, read through a process in its
/// network namespace (the pause, else a running container).
pub(super) fn pod_interfaces(pid: u32) -> Vec<InterfaceStats> {
    match interfaces_of_pid(pid) {
        Ok(all) => without_loopback(all),
        Err(e) => {
            if !e.is_not_found() {
                tracing::debug!(pid, error = %e, "reading network counters");
            }
            Vec::new()
        }
    }
}

/// A pod's interfaces without loopback, read from inside its network
/// namespace at `netns` (a pod without a pause and nothing running).
pub(super) fn netns_interfaces(netns: &std::path::Path) -> Vec<InterfaceStats> {
    let read = || std::fs::read_to_string("/proc/thread-self/net/dev");
    let text = berth_netns::run_in(netns, read).map_err(std::io::Error::other);
    match text.and_then(|read| read) {
        Ok(text) => without_loopback(berth_cgroup_stats::net::parse_net_dev(&text)),
        Err(e) => {
            tracing::debug!(netns = %netns.display(), error = %e, "reading network counters");
            Vec::new()
        }
    }
}

fn without_loopback(all: Vec<InterfaceStats>) -> Vec<InterfaceStats> {
    all.into_iter().filter(|i| i.name != "lo").collect()
}

/// What one container has used, read now.
pub(super) struct ContainerReading {
    pub(super) stats: Option<Stats>,
    pub(super) layer: Option<DiskUsage>,
}

/// What one pod has used, read now.
pub(super) struct PodReading {
    pub(super) stats: Option<Stats>,
    pub(super) interfaces: Vec<InterfaceStats>,
}

impl Collector {
    /// Starts the background CPU sampler; it ends once `stop` is set.
    pub fn start_sampler(self: &Arc<Self>, stop: Arc<AtomicBool>) {
        let collector = self.clone();
        let started = self.cpu.spawn(SAMPLE_PERIOD, move || {
            (!stop.load(Ordering::Relaxed)).then(|| collector.cpu_samples())
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
        for container in self.core.all_containers() {
            let usage = self
                .container_cgroup(&container)
                .and_then(|cg| cg.cpu_usage_ns().ok());
            push(&container.meta.id, usage);
        }
        for sandbox in self.core.all_sandboxes() {
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
    pub(super) fn container_cgroup(&self, container: &Container) -> Option<Cgroup> {
        let status = container.status();
        if status.state != ContainerState::Running {
            return None;
        }
        self.cgroup_of(status.pid?)
    }

    /// Where a ready pod's usage is counted.
    pub(super) fn pod_cgroup(&self, sandbox: &Sandbox) -> Option<PodCgroup> {
        let status = sandbox.status();
        if status.state != SandboxState::Ready {
            return None;
        }
        let own_parent = sandbox
            .meta
            .config()
            .linux
            .as_ref()
            .is_some_and(|l| !l.cgroup_parent.is_empty());
        let running = || {
            self.core
                .sandbox_containers(&sandbox.meta.id)
                .iter()
                .filter_map(|c| self.container_cgroup(c))
                .collect::<Vec<_>>()
        };
        let Some(pid) = status.pid else {
            // A pod without a pause: its containers' cgroups (their parent,
            // when the pod has a cgroup of its own).
            let members = running();
            if own_parent {
                return members.first()?.parent().map(PodCgroup::Own);
            }
            return Some(PodCgroup::Members(members));
        };
        let pause = self.cgroup_of(pid)?;
        if own_parent {
            return pause.parent().map(PodCgroup::Own);
        }
        let mut members = vec![pause];
        members.extend(running());
        Some(PodCgroup::Members(members))
    }
}

impl Cri {
    /// A ready pod's network counters (none for host network: the node's
    /// are not the pod's).
    pub(super) fn pod_network(&self, sandbox: &Sandbox) -> Vec<InterfaceStats> {
        let Some(netns) = &sandbox.meta.netns else {
            return Vec::new();
        };
        if let Some(pid) = sandbox.status().pid {
            return pod_interfaces(pid);
        }
        let running = self
            .core
            .sandbox_containers(&sandbox.meta.id)
            .iter()
            .find_map(|c| self.core.container_pid(&c.meta.id));
        match running {
            Some(pid) => pod_interfaces(pid),
            None if sandbox.status().state == SandboxState::Ready => netns_interfaces(netns),
            None => Vec::new(),
        }
    }

    /// Reads a container's cgroup and writable layer (blocking file reads).
    pub(super) fn read_container(&self, container: &Container) -> ContainerReading {
        self.read_container_in(container, self.stats.container_cgroup(container).as_ref())
    }

    /// Reads a container's cgroup `cgroup` (its own, found already) and its
    /// writable layer.
    pub(super) fn read_container_in(
        &self,
        container: &Container,
        cgroup: Option<&Cgroup>,
    ) -> ContainerReading {
        let stats = cgroup.and_then(|cg| {
            cg.stats()
                .map_err(|e| {
                    if !e.is_not_found() {
                        tracing::warn!(container = %container.meta.id, error = %e, "reading cgroup stats");
                    }
                })
                .ok()
        });
        let layer = writable_layer(&self.layout, &container.meta.id);
        ContainerReading { stats, layer }
    }

    /// Reads a pod's cgroup(s) and network counters (blocking file reads).
    pub(super) fn read_pod(&self, sandbox: &Sandbox) -> PodReading {
        let stats = self.stats.pod_cgroup(sandbox).and_then(|pod| match pod {
            PodCgroup::Own(cg) => cg.stats().ok(),
            PodCgroup::Members(cgs) => {
                let all: Vec<Stats> = cgs.iter().filter_map(|cg| cg.stats().ok()).collect();
                Some(Stats::sum(&all))
            }
        });
        let interfaces = self.pod_network(sandbox);
        PodReading { stats, interfaces }
    }

    /// Runs blocking reads off the async workers.
    pub(super) async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        read: impl FnOnce(&Cri) -> T + Send + 'static,
    ) -> Result<T, Error> {
        let cri = self.clone();
        tokio::task::spawn_blocking(move || read(&cri))
            .await
            .map_err(|e| Error::Internal(format!("reading stats: {e}")))
    }
}

/// A reading with every field set, for the conversion tests.
#[cfg(test)]
fn full_reading() -> ContainerReading {
    use berth_cgroup_stats::{CpuStats, MemoryStats, PidsStats};
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

/// What container `id`'s writable layer (its overlay upper dir) uses; none
/// while it is not made or after it is gone (blocking walk).
pub(super) fn writable_layer(layout: &crate::layout::Layout, id: &str) -> Option<DiskUsage> {
    let upper = layout.container_dirs(id).upper();
    disk_usage(&upper)
        .map_err(|e| {
            if !e.is_not_found() {
                tracing::warn!(container = %id, error = %e, "measuring the writable layer");
            }
        })
        .ok()
}
