//! Container images the tests build themselves: a busybox layer and layers
//! of entries with their owners and modes, with an image config, written
//! into an OCI layout and pushed to the test registry with skopeo.

use super::artifacts::{push, TAR};

/// One entry of a layer.
pub enum Entry<'a> {
    /// path, mode, uid:gid
    Dir(&'a str, u32, (u64, u64)),
    /// path, mode, uid:gid, contents
    File(&'a str, u32, (u64, u64), &'a [u8]),
    /// path, target
    Symlink(&'a str, &'a str),
}

/// A plain tar of `entries` (fixed mtime).
pub fn layer(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let header = |kind, mode, (uid, gid): (u64, u64), size| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(uid);
        h.set_gid(gid);
        h.set_mtime(1_704_067_200);
        h.set_size(size);
        h
    };
    for e in entries {
        match e {
            Entry::Dir(p, mode, owner) => {
                let mut h = header(tar::EntryType::Directory, *mode, *owner, 0);
                b.append_data(&mut h, p, &b""[..]).unwrap();
            }
            Entry::File(p, mode, owner, data) => {
                let mut h = header(tar::EntryType::Regular, *mode, *owner, data.len() as u64);
                b.append_data(&mut h, p, *data).unwrap();
            }
            Entry::Symlink(p, target) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, (0, 0), 0);
                b.append_link(&mut h, p, target).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// Busybox (the host's busybox-static) with `sh` and the applets the
/// tests run, and `/tmp`.
pub fn busybox_layer() -> Vec<u8> {
    let binary = std::fs::read("/bin/busybox").expect("/bin/busybox (busybox-static)");
    let mut entries = vec![
        Entry::Dir("bin", 0o755, (0, 0)),
        Entry::File("bin/busybox", 0o755, (0, 0), &binary),
        Entry::Dir("tmp", 0o1777, (0, 0)),
    ];
    let applets = [
        "sh", "cat", "ls", "stat", "readlink", "sleep", "echo", "touch", "id", "find",
    ];
    let links: Vec<String> = applets.iter().map(|a| format!("bin/{a}")).collect();
    entries.extend(links.iter().map(|l| Entry::Symlink(l, "busybox")));
    layer(&entries)
}

/// Pushes an image of `layers` (plain tars, bottom first) whose config
/// has `config` (the `config` object of an image config: `Volumes`,
/// `User`, …) to the test registry as `name` (`repo:tag`); its full name.
pub fn push_image(name: &str, config: serde_json::Value, layers: &[Vec<u8>]) -> String {
    let reg = super::registry();
    let diff_ids: Vec<String> = layers.iter().map(|l| super::artifacts::digest(l)).collect();
    let image_config = serde_json::json!({
        "architecture": host_arch(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let image_config = serde_json::to_vec(&image_config).unwrap();
    let layers: Vec<_> = layers.iter().map(|l| (TAR, l.as_slice(), None)).collect();
    push(
        &reg.addr,
        name,
        None,
        ("application/vnd.oci.image.config.v1+json", &image_config),
        &layers,
    );
    format!("{}/{name}", reg.addr)
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
