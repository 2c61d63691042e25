//! The daemon's integration tests, one test binary: each file of tests/ is
//! a module here (`cargo test --test integration pods::` runs one file's
//! tests, `cargo test --test integration NAME` one test). One binary is
//! linked once instead of once a file, and its tests share one pool of
//! test threads and one test registry (`common::registry`), instead of a
//! file's slowest test holding up the next file.

#[macro_use]
mod common;

mod artifacts;
mod config_import;
mod containers;
mod daemon;
mod data_safety;
mod deadlines;
mod docs;
mod endurance;
mod faults;
mod grpc_clients;
mod handlers;
mod images;
mod list_streams;
mod nri;
mod package;
mod pinned;
mod pods;
mod recovery;
mod security;
mod soak;
mod stats;
mod streaming;
mod streaming_hostile;
mod streaming_tls;
mod userns;
mod volumes;
