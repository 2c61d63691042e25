//! What this host can do, asked in one place: which cgroup hierarchies are
//! mounted and with which controllers, the kernel's version, seccomp, the
//! security modules and the bounding set ([`Facts`]); whether a pod's user
//! namespace works here ([`userns`]); and what each OCI runtime binary runs
//! here ([`runtime`]). `berth check` reports it, the Status RPC advertises
//! it and the spec builder follows it.
//!
//! Every look goes through [`Host`], so what is made of the answers is
//! unit-tested against [`fake::FakeHost`]; [`RealHost`] is the machine.

mod cgroup;
mod facts;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod process;
mod real;
pub mod runtime;
pub mod userns;

use std::path::{Path, PathBuf};

pub use cgroup::{cgroup_mode, enabled_v1_controllers, hybrid_v2_mount, CgroupMode};
pub use facts::{bounding_set, kernel_version, Facts};
pub use real::RealHost;

/// How one run of a program the host is asked about ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// It exited 0; what it printed (bounded).
    Ok(String),
    /// It could not be started, or exited non-zero: why.
    Failed(String),
    /// It did not answer in time (and was killed): ask again later.
    TimedOut,
}

/// What may be asked of the host.
pub trait Host {
    /// The contents of a small file (`/proc`, `/sys`, CNI configs), or None.
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Whether `path` is a file with an execute bit.
    fn is_executable(&self, path: &Path) -> bool;
    /// The entries of a directory, sorted; empty when it cannot be read.
    fn list_dir(&self, path: &Path) -> Vec<PathBuf>;
    /// The directories of `PATH`.
    fn path_dirs(&self) -> Vec<PathBuf>;
    /// Runs `binary arg` (no stdin), bounded in time and output.
    fn run(&self, binary: &Path, arg: &str) -> Ran;
    /// The running kernel's release (`uname -r`).
    fn kernel_release(&self) -> String;
    /// The effective user id.
    fn euid(&self) -> u32;
    /// The directory of the running berth binary.
    fn exe_dir(&self) -> Option<PathBuf>;

    /// The first line of `binary --version`, or why it could not be had.
    fn version(&self, binary: &Path) -> Result<String, String> {
        match self.run(binary, "--version") {
            Ran::Ok(out) => Ok(out.lines().next().unwrap_or("").trim().to_string()),
            Ran::Failed(why) => Err(why),
            Ran::TimedOut => Err(format!(
                "`--version` did not answer in {}s",
                real::COMMAND_TIMEOUT.as_secs()
            )),
        }
    }

    /// A binary named by an absolute path, or looked up in `PATH`.
    fn resolve(&self, binary: &str) -> Option<PathBuf> {
        if binary.contains('/') {
            let path = PathBuf::from(binary);
            return self.is_executable(&path).then_some(path);
        }
        self.path_dirs()
            .into_iter()
            .map(|dir| dir.join(binary))
            .find(|p| self.is_executable(p))
    }
}
