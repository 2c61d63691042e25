//! berth-shim: the small process that owns one container, and the client the
//! daemon uses to talk to it.
//!
//! One shim runs per container (and per pod's pause container). It is started
//! by the daemon for one OCI bundle, detaches (own session, re-parented), and
//! as the container's child subreaper drives the OCI runtime CLI ([`runc`]),
//! owns the container's stdio (the CRI log file in kubelet's format, stdin,
//! terminal), serves the daemon over its own unix socket ([`protocol`]), and
//! records how the container ended in an exit file before it tells anyone.
//!
//! - [`ShimClient`] (feature `client`, async): spawn a shim, reconnect to one
//!   by its socket, and call it.
//! - [`ShimLauncher`] (feature `client`): the daemon's way to start shims,
//!   from a standby shim started ahead when one is ready.
//! - [`runc::Runtime`]: the runtime CLI with timeouts and typed errors, for
//!   the daemon too.
//! - [`pause_binary`] / [`write_pause_rootfs`]: the built-in pause program.
//! - [`read_exit_file`]: how a container ended, even with its shim gone.

mod cgroup;
#[cfg(feature = "client")]
mod client;
pub mod crilog;
mod error;
mod exit_file;
#[cfg(feature = "client")]
mod launcher;
mod options;
mod pause;
pub mod protocol;
pub mod runc;
#[doc(hidden)]
pub mod server;
mod sys;

#[cfg(feature = "client")]
pub use client::{
    delete_container, new_exec_id, AttachOptions, ExecOptions, ExecOutput, IoStream, ShimClient,
    SpawnOptions, StreamEvent, StreamReader, StreamWriter,
};
pub use crilog::{LogError, LogTarget};
pub use error::Error;
pub use exit_file::{read_exit_file, write_exit_file};
#[cfg(feature = "client")]
pub use launcher::{LaunchNotice, LaunchStats, ShimLauncher};
pub use options::{args_frame, validate_id, ShimOptions, ShimPaths, MAX_OPTIONS_FRAME};
pub use pause::{pause_binary, write_pause_rootfs, PAUSE_PATH};
pub use protocol::{ContainerStatus, ExitInfo, RemoteError, ShimState};
