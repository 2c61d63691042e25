//! What a registry sends for an OCI artifact, through the code the pull
//! runs before it fetches a blob (`berth_oci_image::parse`): the layer
//! list's bounds, the artifact's type, and its layers' plan, whose titles
//! become paths in a snapshot. The first byte picks the input:
//!
//! - 0: a manifest; its layers are checked and planned as an artifact's;
//! - 1: a title, checked as the path of an artifact's file.
//!
//! Any bytes give a plan or an error, never a panic; a plan's files are
//! paths that stay in their snapshot, each once, and no file is another's
//! directory.
#![no_main]

use std::collections::BTreeSet;
use std::path::{Component, Path};

use berth_oci_image::parse::{self, ManifestKind};
use berth_oci_image::UnpackLimits;
use libfuzzer_sys::fuzz_target;

/// A path that `check_file_path` let through stays below its root.
fn assert_inside(path: &str) {
    assert!(!path.is_empty() && path.len() <= parse::MAX_FILE_PATH, "{path:?}");
    for c in Path::new(path).components() {
        assert!(matches!(c, Component::Normal(_)), "{path:?}: {c:?}");
    }
    assert!(!path.chars().any(char::is_control), "{path:?}");
}

fn plan(bytes: &[u8]) {
    let Ok(ManifestKind::Image {
        config,
        layers,
        artifact_type,
    }) = parse::manifest(bytes)
    else {
        return;
    };
    let limits = UnpackLimits {
        max_layers: 64,
        ..UnpackLimits::default()
    };
    if parse::check_layer_list("sha256:manifest", &layers, &limits).is_err() {
        return;
    }
    let _ = parse::artifact_type(&config, artifact_type.as_deref());
    let Ok(plan) = parse::artifact_layers("sha256:manifest", &layers) else {
        return;
    };
    assert_eq!(plan.len(), layers.len());
    // Tars first, then the files, which share one snapshot.
    let first_file = plan
        .iter()
        .position(|l| !parse::is_tar_layer(&l.media_type))
        .unwrap_or(plan.len());
    assert!(plan[first_file..]
        .iter()
        .all(|l| !parse::is_tar_layer(&l.media_type) && l.chain_id == plan[first_file].chain_id));
    let mut paths = BTreeSet::new();
    for l in &plan {
        // Snapshot names are sha256 digests: a directory name, never a path.
        let hex = l.chain_id.strip_prefix("sha256:").unwrap();
        assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if let Some(path) = &l.file {
            assert_inside(path);
            assert!(paths.insert(path.as_str()), "{path:?} twice");
        }
    }
    for path in &paths {
        for (i, _) in path.match_indices('/') {
            assert!(!paths.contains(&path[..i]), "{path:?} under a file");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 2 {
        0 => plan(rest),
        _ => {
            if let Ok(path) = std::str::from_utf8(rest) {
                if parse::check_file_path(path).is_ok() {
                    assert_inside(path);
                }
            }
        }
    }
});
