//! Compiles NRI's `api.proto` (messages and ttrpc services) into OUT_DIR with
//! the pure-Rust protobuf parser: there is no `protoc` on the build machines.
fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=proto/api.proto");
    ttrpc_codegen::Codegen::new()
        .out_dir(&out)
        .inputs(["proto/api.proto"])
        .include("proto")
        .rust_protobuf()
        .customize(ttrpc_codegen::Customize {
            async_all: true,
            ..Default::default()
        })
        .rust_protobuf_customize(ttrpc_codegen::ProtobufCustomize::default().gen_mod_rs(false))
        .run()
        .expect("generating the NRI API from proto/api.proto");
    // The generated files start with inner attributes (`#![allow(..)]`),
    // which `include!` cannot take: drop them (lib.rs puts the equivalent
    // outer attributes on the modules).
    for name in ["api.rs", "api_ttrpc.rs"] {
        let path = std::path::Path::new(&out).join(name);
        let text = std::fs::read_to_string(&path).expect("reading generated code");
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("#![") && !l.starts_with("//!"))
            .collect();
        std::fs::write(&path, kept.join("\n")).expect("writing generated code");
    }
}
