//! The CRI v1 wire contract (`runtime.v1`), generated at build time from
//! `proto/runtime/v1/api.proto`. No logic lives here.

/// Messages, enums, and the `RuntimeService` / `ImageService` servers and
/// clients of package `runtime.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}
