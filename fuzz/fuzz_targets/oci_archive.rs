//! An image archive as `berth images import` reads it (a docker-archive or
//! an OCI-archive tarball, `berth_oci_image::ImageStore::import`), into a
//! store in a scratch dir, with the pull's limits at small values. Any
//! bytes give images or an error, never a panic; a failed import records
//! no image (all or nothing), and what one imports is removed again so the
//! store stays small.
//!
//! The first byte picks the shape: bit 0 sets the checksum of every tar
//! header first (a mutated header gets past the reader's checksum test to
//! the archive code behind it); the rest is the tar.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use berth_oci_image::{ImageStore, RegistryConfig, UnpackLimits};
use libfuzzer_sys::fuzz_target;

mod scratch;
mod tarfix;

use tarfix::fix_checksums;

struct Rig {
    rt: tokio::runtime::Runtime,
    store: ImageStore,
    file: PathBuf,
}

fn rig() -> &'static Rig {
    static RIG: OnceLock<Rig> = OnceLock::new();
    RIG.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut cfg = RegistryConfig::default();
        cfg.unpack = UnpackLimits {
            max_layer_bytes: 4 << 20,
            max_entries: 512,
            max_layers: 16,
            max_entry_header_bytes: 64 << 10,
            min_free_bytes: 0,
        };
        let dir = scratch::dir();
        let store = rt
            .block_on(ImageStore::open(&dir.join("store"), cfg))
            .unwrap();
        Rig {
            rt,
            store,
            file: dir.join("archive.tar"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, tar)) = data.split_first() else {
        return;
    };
    let mut tar = tar.to_vec();
    if mode & 1 != 0 {
        fix_checksums(&mut tar);
    }
    let r = rig();
    std::fs::write(&r.file, &tar).unwrap();
    let before = r.store.list().len();
    match r.rt.block_on(r.store.import(&r.file)) {
        Err(_) => assert_eq!(
            r.store.list().len(),
            before,
            "a failed import left an image"
        ),
        Ok(images) => {
            for image in images {
                let _ = r.rt.block_on(r.store.remove(&image.id));
            }
            let _ = r.rt.block_on(r.store.gc());
        }
    }
});
