//! Resource usage of containers and pods, read from the kernel:
//!
//! - [`Mounts`] and [`Mode`]: where the cgroup hierarchies are mounted and
//!   whether the host runs cgroup v1, v2 or a hybrid of both;
//! - [`Cgroup`]: one cgroup, found from a process id (`/proc/<pid>/cgroup`)
//!   or from a cgroups path, and its [`Stats`] (CPU, memory, swap, pids,
//!   hugetlb, and pressure stall information where the kernel has it);
//! - [`CpuSampler`]: the last two CPU samples per key, so that a rate
//!   (`usage_nano_cores`) is cheap to answer;
//! - [`net`]: network interface counters of a process's network namespace;
//! - [`disk_usage`]: bytes and inodes of a directory tree (a writable layer);
//! - [`pids_below`]: the processes of a cgroup tree.
//!
//! Everything here is plain file reads: no process ever changes namespace.

mod cgroup;
mod disk;
mod error;
mod mount;
pub mod net;
mod parse;
mod procs;
mod sampler;
mod stats;

pub use cgroup::Cgroup;
pub use disk::{disk_usage, DiskUsage};
pub use error::Error;
pub use mount::{Mode, Mounts};
pub use procs::pids_below;
pub use sampler::{nano_cores, CpuSample, CpuSampler};
pub use stats::{CpuStats, HugetlbStats, MemoryStats, PidsStats, Pressure, Psi, PsiData, Stats};
