//! A layer as a registry may send it, unpacked by the code a pull runs
//! (`berth_oci_image::unpack_layer`, with the real [`UnpackLimits`] checks,
//! at small values so each run is quick) into `run/root` of a scratch dir,
//! with `run/sentinel` next to it. After each run nothing but `root` and the
//! untouched sentinel may be in `run`, and nothing but `run` next to it:
//! whatever the bytes, nothing is written outside the root, and no panic.
//!
//! The first byte picks how the rest is fed: bit 0 gzips it first (the
//! fuzzer mutates the tar, the gzip path runs), bit 1 unpacks as root does
//! in the daemon (owners kept, device nodes made; only when we are root),
//! bit 2 sets the checksum of every header first (a mutated header gets past
//! the reader's checksum test to the code behind it). Otherwise the bytes go
//! in as they are (plain tar, or gzip or zstd told by their magic bytes, as
//! in a pull).
#![no_main]

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use berth_oci_image::{unpack_layer, UnpackLimits};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

mod scratch;
mod tarfix;

use tarfix::fix_checksums;

/// The real bounds, small: a run never writes more than a few MiB.
const LIMITS: UnpackLimits = UnpackLimits {
    max_layer_bytes: 4 << 20,
    max_entries: 512,
    max_layers: 16,
    // The least `UnpackLimits::validate` accepts.
    max_entry_header_bytes: 64 << 10,
    min_free_bytes: 1 << 30,
};

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// What must not change in the sentinel.
fn fingerprint(path: &Path) -> (u32, u32, u32, u64, i64, u64) {
    let m = fs::symlink_metadata(path).unwrap();
    (m.mode(), m.uid(), m.gid(), m.nlink(), m.mtime(), m.size())
}

/// Removes `dir` whatever the layer made of its modes.
fn remove(dir: &Path) {
    if fs::remove_dir_all(dir).is_ok() {
        return;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let _ = fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    fs::remove_dir_all(dir).unwrap();
}

fn assert_no_devices(root: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            let t = m.file_type();
            assert!(!t.is_block_device(), "block device {}", e.path().display());
            if t.is_char_device() {
                assert_eq!(m.rdev(), 0, "char device {}", e.path().display());
            }
            if t.is_dir() {
                stack.push(e.path());
            }
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, tar)) = data.split_first() else {
        return;
    };
    let gzipped = mode & 1 != 0;
    let same_owner = mode & 2 != 0 && nix_is_root();
    let mut tar = tar.to_vec();
    if mode & 4 != 0 {
        fix_checksums(&mut tar);
    }
    let tar = &tar[..];
    let input = if gzipped { gzip(tar) } else { tar.to_vec() };

    let base = scratch::dir();
    let run: PathBuf = base.join("run");
    let (root, sentinel) = (run.join("root"), run.join("sentinel"));
    fs::create_dir(&run).unwrap();
    fs::create_dir(&root).unwrap();
    fs::create_dir(&sentinel).unwrap();
    let victim = sentinel.join("victim");
    fs::write(&victim, b"original").unwrap();
    let before = (fingerprint(&sentinel), fingerprint(&victim));

    let result = unpack_layer(&mut &input[..], &root, same_owner, &LIMITS);

    assert_eq!(names(base), ["run"], "written next to the scratch dir");
    assert_eq!(
        names(&run),
        ["root", "sentinel"],
        "written next to the root"
    );
    assert_eq!(names(&sentinel), ["victim"], "written into the sentinel");
    assert_eq!(fs::read(&victim).unwrap(), b"original");
    assert_eq!((fingerprint(&sentinel), fingerprint(&victim)), before);
    if result.is_ok() && !same_owner {
        // Unprivileged unpacking makes no device node but whiteouts (0:0).
        assert_no_devices(&root);
    }
    if let Ok(diff_id) = result {
        // The diff id is the hash of the whole uncompressed stream.
        let magic = tar.starts_with(&[0x1f, 0x8b]) || tar.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]);
        if gzipped || !magic {
            let want = format!("sha256:{}", hex(&Sha256::digest(tar)));
            assert_eq!(diff_id, want);
        }
    }
    remove(&run);
});

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
