//! What a registry sends for a pull, and what the image store reads back at
//! start, through the parsers the pull and the store call
//! (`berth_oci_image::parse`). The first byte picks the document:
//!
//! - 0: a manifest or an index (then the platform pick, as the pull does);
//! - 1: an image config (then the record's runtime part);
//! - 2: an image record of the store (`images/<id>.json`), which must read
//!   back as written;
//! - 3: a manifest, a NUL byte, then its config: the layer list the pull
//!   builds from the two;
//! - 4: the `WWW-Authenticate` header of a registry asking for credentials.
//!
//! Any bytes give a document or an error, never a panic.
#![no_main]

use berth_oci_image::parse::{self, Descriptor, ManifestKind};
use libfuzzer_sys::fuzz_target;

fn manifest(bytes: &[u8]) -> Option<Vec<Descriptor>> {
    match parse::manifest(bytes).ok()? {
        ManifestKind::Index(entries) => {
            for arch in [parse::host_arch(), "amd64", "arm64", "s390x"] {
                if let Some(e) = parse::platform(&entries, arch) {
                    let p = e.platform.as_ref().expect("picked without a platform");
                    assert!(p.os == "linux" && p.architecture == arch, "{p:?}");
                    let _ = parse::size(e);
                }
            }
            None
        }
        ManifestKind::Image { config, layers, .. } => {
            let _ = parse::size(&config);
            Some(layers)
        }
    }
}

fn config(bytes: &[u8]) -> Option<parse::ConfigFile> {
    let config = parse::config(bytes).ok()?;
    let _ = config.image_config();
    Some(config)
}

fn record(bytes: &[u8]) {
    if let Ok(image) = parse::image_record(bytes) {
        // What the store writes back (write_records) reads back the same.
        let written = serde_json::to_vec_pretty(&image).unwrap();
        assert_eq!(parse::image_record(&written).unwrap(), image);
    }
}

fn manifest_and_config(bytes: &[u8]) {
    let Some(nul) = bytes.iter().position(|&b| b == 0) else {
        return;
    };
    let (Some(descriptors), Some(config)) = (manifest(&bytes[..nul]), config(&bytes[nul + 1..]))
    else {
        return;
    };
    if let Ok(layers) = parse::layers(&config, "sha256:config", "sha256:manifest", &descriptors) {
        assert_eq!(layers.len(), descriptors.len());
        for (layer, diff_id) in layers.iter().zip(config.diff_ids()) {
            assert_eq!(&layer.diff_id, diff_id);
            // Chain ids name snapshot directories.
            let hex = layer.chain_id.strip_prefix("sha256:").unwrap();
            assert!(hex.len() == 64 && !hex.contains('/'), "{}", layer.chain_id);
        }
    }
}

fn challenge(bytes: &[u8]) {
    let Ok(header) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Some((scheme, params)) = parse::challenge(header) {
        assert_eq!(scheme, scheme.to_ascii_lowercase());
        for key in params.keys() {
            assert_eq!(*key, key.to_ascii_lowercase());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, doc)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => drop(manifest(doc)),
        1 => drop(config(doc)),
        2 => record(doc),
        3 => manifest_and_config(doc),
        _ => challenge(doc),
    }
});
