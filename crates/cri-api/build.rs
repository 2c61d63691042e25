//! Compiles `proto/runtime/v1/api.proto` (and berth's admin API,
//! `proto/berth/admin/v1/admin.proto`) with protox (pure Rust, no `protoc`
//! needed) and generates the prost messages and tonic servers and clients.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest.join("../../proto");
    let file = proto_root.join("runtime/v1/api.proto");
    let admin = proto_root.join("berth/admin/v1/admin.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    println!("cargo:rerun-if-changed={}", admin.display());

    let descriptors = protox::compile([&file, &admin], [&proto_root])?;
    // The descriptors themselves, for code that reads messages by reflection.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("file_descriptor_set.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
