//! The CRI v1 wire contract (`runtime.v1`), generated at build time from
//! `proto/runtime/v1/api.proto`, and wire twins of the two relist answers
//! written by hand so that a server can send entries it encoded ahead of
//! time ([`prepacked`]). No other logic lives here.

pub mod prepacked;

/// The encoded `FileDescriptorSet` of the protos above (for reflection, as
/// the verbose info's JSON of a CRI config).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// Messages, enums, and the `RuntimeService` / `ImageService` servers and
/// clients of package `runtime.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}

/// berth's own admin API (`berth.admin.v1`, image archives), served beside
/// CRI on the same socket; the `berth images` commands are its client.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod admin {
    tonic::include_proto!("berth.admin.v1");
}
