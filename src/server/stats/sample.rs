//! Everything the metrics of one running container are made of, read now:
//! the stats' reading (cgroup, writable layer) and what only the metrics
//! need ([`super::readings`], [`super::procs`], the CRI resources).

use std::path::PathBuf;

use berth_cgroup_stats::Cgroup;
use cri_api::v1;

use super::host::Host;
use super::procs::{self, Processes};
use super::readings::{self, DeviceIo, FsCapacity, MemoryMore};
use super::{ContainerReading, Cri};
use crate::container::Container;

/// One container, read for ListPodSandboxMetrics.
pub(super) struct ContainerSample {
    pub(super) reading: ContainerReading,
    pub(super) memory: Option<MemoryMore>,
    pub(super) io: Vec<DeviceIo>,
    pub(super) fs: Option<FsCapacity>,
    pub(super) processes: Option<Processes>,
    /// The soft limit on open files of the container's process.
    pub(super) max_open_files: Option<u64>,
    /// The CRI resources it runs with (its config, or the last update).
    pub(super) resources: Option<v1::LinuxContainerResources>,
    /// Nanoseconds since the epoch (0: not started).
    pub(super) started_at: i64,
    /// When it was read, in seconds since the epoch.
    pub(super) seen_at: u64,
}

impl Cri {
    /// Reads container `c` for its metrics (blocking file reads).
    pub(super) fn sample_container(&self, c: &Container) -> ContainerSample {
        let status = c.status();
        let cgroup = self.stats.container_cgroup(c);
        let reading = self.read_container_in(c, cgroup.as_ref());
        let pid = status.pid;
        let memory = cgroup
            .as_ref()
            .and_then(|cg| Some(readings::memory_more(&cg.dir("memory")?, cg.is_v2())));
        let io = match (&cgroup, pid) {
            (Some(cg), Some(pid)) => io_dir(&self.stats.host, cg, pid)
                .map(|(dir, v2)| readings::block_io(&dir, v2))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let processes = cgroup
            .as_ref()
            .and_then(|cg| cg.dir("memory").or_else(|| cg.dir("pids")))
            .and_then(|dir| procs::count(&dir));
        ContainerSample {
            reading,
            memory,
            io,
            fs: readings::fs_capacity(&self.layout.container_dirs(&c.meta.id).upper()),
            processes,
            max_open_files: pid.and_then(procs::max_open_files),
            resources: status.resources(&c.meta),
            started_at: status.started_at,
            seen_at: crate::core::now_nanos().max(0) as u64 / 1_000_000_000,
        }
    }
}

/// The directory of the I/O controller of process `pid` in cgroup `cg`,
/// and whether it is v2's `io` (else v1's `blkio`).
fn io_dir(host: &Host, cg: &Cgroup, pid: u32) -> Option<(PathBuf, bool)> {
    if cg.is_v2() {
        return Some((cg.dir("io")?, true));
    }
    let blkio = host.blkio.as_ref()?;
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "blkio").then_some(path)
    })?;
    Some((blkio.dir_of(path), false))
}
