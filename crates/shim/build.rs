//! Compiles the pause program (`pause/pause.rs`, no_std, raw syscalls) with
//! `rustc` alone into a static executable in OUT_DIR, which the library embeds.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "pause/pause.rs";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let output = out_dir.join("pause");

    let status = Command::new(&rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "bin",
            "--crate-name",
            "pause",
        ])
        .args(["--target", &target])
        .args([
            "-C",
            "panic=abort",
            "-C",
            "opt-level=s",
            "-C",
            "debuginfo=0",
        ])
        .args(["-C", "relocation-model=static", "-C", "strip=symbols"])
        .args(["-C", "link-arg=-nostartfiles", "-C", "link-arg=-nostdlib"])
        .args([
            "-C",
            "link-arg=-static",
            "-C",
            "link-arg=-Wl,--build-id=none",
        ])
        .arg("-o")
        .arg(&output)
        .arg(source)
        // Flags meant for the crate being built (coverage, sanitizers) must
        // not leak into the pause program.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap_or_else(|e| panic!("running {rustc:?} to build the pause program: {e}"));
    if !status.success() {
        panic!("building the pause program from {source} failed: {status}");
    }
}
