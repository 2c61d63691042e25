//! Image archives: OCI archives, OCI layout directories and docker archives
//! built here are imported with their names and unpacked; an export read
//! back gives the same image; hostile archives (path escapes, wrong digests,
//! entries over the caps, manifests naming missing blobs) are refused with
//! the reason, and nothing of them is recorded or left in the store.
//! No root and no registry needed.

mod support;

use std::path::Path;

use berth_oci_image::{ErrorKind, ImageStore, RegistryConfig, UnpackLimits};
use serde_json::json;
use support::images::{self, digest, Layer};

const OCI_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const OCI_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// An image: its layers, config, manifest.
struct Built {
    layers: Vec<Layer>,
    config: Vec<u8>,
    manifest: Vec<u8>,
}

fn build(media_type: &'static str) -> Built {
    let layers = vec![
        images::marker_layer("etc/one", "one\n", media_type),
        images::marker_layer("etc/two", "two\n", media_type),
    ];
    let config = images::config(images::host_arch(), "", &layers.iter().collect::<Vec<_>>());
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(&config), "size": config.len()},
        "layers": layers.iter().map(|l| json!({"mediaType": l.media_type,
                   "digest": digest(&l.blob), "size": l.blob.len()})).collect::<Vec<_>>(),
    }))
    .unwrap();
    Built {
        layers,
        config,
        manifest,
    }
}

fn blob_name(bytes: &[u8]) -> String {
    format!("blobs/sha256/{}", &digest(bytes)[7..])
}

/// A tar of (name, bytes) regular files, in order.
fn tar(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // `append_data` would refuse `..`: write the name raw.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

/// The files of an OCI layout holding `img` under `name`.
fn oci_files(img: &Built, name: &str) -> Vec<(String, Vec<u8>)> {
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": OCI_MANIFEST, "digest": digest(&img.manifest), "size": img.manifest.len(),
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"},
    }]});
    let mut files = vec![(
        "oci-layout".to_string(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    )];
    for l in &img.layers {
        files.push((blob_name(&l.blob), l.blob.clone()));
    }
    files.push((blob_name(&img.config), img.config.clone()));
    files.push((blob_name(&img.manifest), img.manifest.clone()));
    files.push(("index.json".into(), serde_json::to_vec(&index).unwrap()));
    files
}

async fn store(dir: &Path, limits: Option<UnpackLimits>) -> ImageStore {
    let mut cfg = RegistryConfig::default();
    // The test's temp dir may be on a nearly full disk: no reserve.
    cfg.unpack.min_free_bytes = 0;
    if let Some(l) = limits {
        cfg.unpack = l;
    }
    ImageStore::open(&dir.join("store"), cfg).await.unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn blobs_left(dir: &Path) -> Vec<String> {
    support::names(&dir.join("store/blobs/sha256"))
}

#[tokio::test]
async fn an_oci_archive_is_imported_with_its_name_and_exported_back() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_GZIP);
    let path = write(
        dir.path(),
        "x.tar",
        &tar(&oci_files(&img, "127.0.0.1:5000/test/x:1")),
    );
    let store = store(dir.path(), None).await;
    let imported = store.import(&path).await.unwrap();
    assert_eq!(imported.len(), 1);
    let image = store.get("127.0.0.1:5000/test/x:1").expect("tagged");
    assert_eq!(image.id, digest(&img.config));
    assert_eq!(
        image.repo_digests,
        [format!("127.0.0.1:5000/test/x@{}", digest(&img.manifest))]
    );
    let lower = store.lowerdirs(&image);
    assert_eq!(std::fs::read(lower[0].join("etc/two")).unwrap(), b"two\n");
    assert_eq!(std::fs::read(lower[1].join("etc/one")).unwrap(), b"one\n");

    // Exported, then imported into another store: the same image, named.
    let out = dir.path().join("out.tar");
    let file = std::fs::File::create(&out).unwrap();
    store
        .export(vec!["127.0.0.1:5000/test/x:1".into()], false, file)
        .await
        .unwrap();
    let mut ar = tar::Archive::new(std::fs::File::open(&out).unwrap());
    let mut names: Vec<String> = ar
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    names.sort();
    let mut want: Vec<String> = vec![
        "index.json".into(),
        "manifest.json".into(),
        "oci-layout".into(),
    ];
    want.extend(
        [
            &img.manifest,
            &img.config,
            &img.layers[0].blob,
            &img.layers[1].blob,
        ]
        .iter()
        .map(|b| blob_name(b)),
    );
    want.sort();
    assert_eq!(names, want);
    let other = tempfile::tempdir().unwrap();
    let second = store_in(other.path()).await;
    let again = second.import(&out).await.unwrap();
    assert_eq!(again[0].id, image.id);
    assert_eq!(again[0].repo_tags, ["127.0.0.1:5000/test/x:1"]);
    assert_eq!(again[0].layers, image.layers);
}

async fn store_in(dir: &Path) -> ImageStore {
    store(dir, None).await
}

#[tokio::test]
async fn an_oci_layout_directory_is_imported() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_TAR);
    let layout = dir.path().join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    for (name, bytes) in oci_files(&img, "example.com/dir/img:2") {
        std::fs::write(layout.join(name), bytes).unwrap();
    }
    let store = store(dir.path(), None).await;
    store.import(&layout).await.unwrap();
    let image = store.get("example.com/dir/img:2").expect("tagged");
    assert_eq!(image.layers.len(), 2);
}

#[tokio::test]
async fn a_docker_archive_is_imported_with_its_tags() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_TAR);
    let config_name = format!("{}.json", &digest(&img.config)[7..]);
    let layer_names: Vec<String> = img
        .layers
        .iter()
        .map(|l| format!("{}.tar", &l.diff_id[7..]))
        .collect();
    // As skopeo writes it: layers as <hex>.tar, and the legacy
    // <id>/layer.tar as symlinks to them; manifest.json names the links.
    let mut b = tar::Builder::new(Vec::new());
    let file = |b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).unwrap();
    };
    for (name, l) in layer_names.iter().zip(&img.layers) {
        file(&mut b, name, &l.blob);
    }
    for (i, name) in layer_names.iter().enumerate() {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, format!("legacy{i}/layer.tar"), format!("../{name}"))
            .unwrap();
    }
    file(&mut b, &config_name, &img.config);
    let manifest = json!([{"Config": config_name,
        "RepoTags": ["busybox:imported", "example.com/a/b:c"],
        "Layers": ["legacy0/layer.tar", "legacy1/layer.tar"]}]);
    file(
        &mut b,
        "manifest.json",
        &serde_json::to_vec(&manifest).unwrap(),
    );
    let path = write(dir.path(), "d.tar", &b.into_inner().unwrap());

    let store = store(dir.path(), None).await;
    let imported = store.import(&path).await.unwrap();
    assert_eq!(imported.len(), 1);
    let image = store.get("busybox:imported").expect("tagged");
    assert_eq!(store.get("example.com/a/b:c").unwrap().id, image.id);
    assert_eq!(
        image.repo_tags,
        ["docker.io/library/busybox:imported", "example.com/a/b:c"]
    );
    assert_eq!(image.id, digest(&img.config));
    let lower = store.lowerdirs(&image);
    assert_eq!(std::fs::read(lower[1].join("etc/one")).unwrap(), b"one\n");
    // The manifest made for it is stored, so that it can be exported.
    let out = dir.path().join("again.tar");
    store
        .export(
            vec!["busybox:imported".into()],
            false,
            std::fs::File::create(&out).unwrap(),
        )
        .await
        .unwrap();
    let other = tempfile::tempdir().unwrap();
    let again = store_in(other.path()).await.import(&out).await.unwrap();
    assert_eq!(again[0].id, image.id);
}

/// Imports `bytes` as an archive into a fresh store and returns the error,
/// checking that nothing was recorded and no blob was left.
async fn refused(bytes: &[u8], limits: Option<UnpackLimits>) -> berth_oci_image::Error {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.tar", bytes);
    let store = store(dir.path(), limits).await;
    let e = store.import(&path).await.expect_err("refused");
    assert!(store.list().is_empty(), "{e}: an image was recorded");
    assert_eq!(blobs_left(dir.path()), Vec::<String>::new(), "{e}");
    assert!(
        support::names(&dir.path().join("store/snapshots")).is_empty(),
        "{e}: snapshots left"
    );
    e
}

#[tokio::test]
async fn hostile_archives_are_refused_and_leave_nothing() {
    let img = build(OCI_GZIP);
    let name = "example.com/h/x:1";

    // A path escape.
    let mut files = oci_files(&img, name);
    files.insert(0, ("../x".into(), b"escape".to_vec()));
    let e = refused(&tar(&files), None).await;
    assert!(e.to_string().contains("escapes the archive"), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);

    // A blob whose content does not match its name (one byte of a file
    // in an uncompressed layer changed): found when unpacked.
    let plain = build(OCI_TAR);
    let mut files = oci_files(&plain, name);
    let first = blob_name(&plain.layers[0].blob);
    let blob = &mut files.iter_mut().find(|(n, _)| *n == first).unwrap().1;
    let at = blob.windows(4).position(|w| w == b"one\n").unwrap();
    blob[at] = b'O';
    let e = refused(&tar(&files), None).await;
    assert!(e.to_string().contains("content hashes to"), "{e}");
    assert!(
        e.to_string().contains(&digest(&plain.layers[0].blob)),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::DataLoss, "{e}");

    // A wrong config (digest mismatch on a document).
    let mut files = oci_files(&img, name);
    let cfg = blob_name(&img.config);
    let entry = files.iter_mut().find(|(n, _)| *n == cfg).unwrap();
    entry.1[0] = b' ';
    let e = refused(&tar(&files), None).await;
    assert!(e.to_string().contains("content hashes to"), "{e}");

    // A manifest naming a missing blob.
    let mut files = oci_files(&img, name);
    let last_layer = blob_name(&img.layers[1].blob);
    files.retain(|(n, _)| *n != last_layer);
    let e = refused(&tar(&files), None).await;
    assert!(e.to_string().contains("missing"), "{e}");

    // A layer over the unpack limit.
    let limits = UnpackLimits {
        max_layer_bytes: 16,
        min_free_bytes: 0,
        ..UnpackLimits::default()
    };
    let e = refused(&tar(&oci_files(&img, name)), Some(limits)).await;
    assert!(e.to_string().contains("max_layer_bytes"), "{e}");

    // A huge index.json: refused by its size, before it is read.
    let mut files = oci_files(&img, name);
    let huge = vec![b' '; 5 << 20];
    files.last_mut().unwrap().1 = huge;
    let e = refused(&tar(&files), None).await;
    assert!(e.to_string().contains("index.json is"), "{e}");

    // A huge manifest.json of a docker archive.
    let e = refused(&tar(&[("manifest.json".into(), vec![b'['; 5 << 20])]), None).await;
    assert!(e.to_string().contains("manifest.json is"), "{e}");

    // A docker archive whose layer link leaves the archive.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "l/layer.tar", "../../etc/passwd")
        .unwrap();
    let config_bytes = img.config.clone();
    let mut h = tar::Header::new_gnu();
    h.set_size(config_bytes.len() as u64);
    b.append_data(&mut h, "c.json", config_bytes.as_slice())
        .unwrap();
    let m = serde_json::to_vec(&json!([{"Config":"c.json","RepoTags":["a:b"],
        "Layers":["l/layer.tar","l/layer.tar"]}]))
    .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(m.len() as u64);
    b.append_data(&mut h, "manifest.json", m.as_slice())
        .unwrap();
    let e = refused(&b.into_inner().unwrap(), None).await;
    assert!(e.to_string().contains("leaves the archive"), "{e}");

    // Not an archive of images at all.
    let e = refused(&tar(&[("hello".into(), b"hi".to_vec())]), None).await;
    assert!(e.to_string().contains("neither an OCI layout"), "{e}");
}

#[tokio::test]
async fn a_failed_import_keeps_the_images_already_there() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_GZIP);
    let good = write(
        dir.path(),
        "good.tar",
        &tar(&oci_files(&img, "example.com/k/x:1")),
    );
    let store = store(dir.path(), None).await;
    store.import(&good).await.unwrap();
    let before = blobs_left(dir.path());
    // The same image under another name, with a missing layer: refused,
    // and the name is not given, the first image untouched.
    let mut files = oci_files(&img, "example.com/k/y:1");
    let last = blob_name(&img.layers[1].blob);
    files.retain(|(n, _)| *n != last);
    // Its layers are in the store already, so only the archive's own
    // check of the file catches it.
    let bad = write(dir.path(), "bad.tar", &tar(&files));
    let e = store.import(&bad).await.unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    assert!(store.get("example.com/k/y:1").is_none());
    assert!(store.get("example.com/k/x:1").is_some());
    assert_eq!(blobs_left(dir.path()), before);
}

#[tokio::test]
async fn symlinks_and_relative_paths_are_refused_as_archive_paths() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_GZIP);
    let real = write(
        dir.path(),
        "x.tar",
        &tar(&oci_files(&img, "example.com/s/x:1")),
    );
    let link = dir.path().join("link.tar");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let store = store(dir.path(), None).await;
    let e = store.import(&link).await.unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    let e = store.import(Path::new("x.tar")).await.unwrap_err();
    assert!(e.to_string().contains("absolute"), "{e}");
    let e = store.import(Path::new("/dev/null")).await.unwrap_err();
    assert!(e.to_string().contains("neither a regular file"), "{e}");
    assert!(store.list().is_empty());
}

/// The files of the tar at `path`: (name, bytes), in order.
fn entries_of(path: &Path) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut ar = tar::Archive::new(std::fs::File::open(path).unwrap());
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).unwrap();
            (name, bytes)
        })
        .collect()
}

/// `name`'s JSON in the archive at `path`.
fn json_of(path: &Path, name: &str) -> serde_json::Value {
    let entries = entries_of(path);
    let (_, bytes) = entries
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {}", path.display()));
    serde_json::from_slice(bytes).unwrap()
}

/// Exports `queries` from `store` to a file of `dir`; its path.
async fn export(
    store: &ImageStore,
    dir: &Path,
    queries: &[&str],
    all_tags: bool,
) -> std::path::PathBuf {
    let out = dir.join("export.tar");
    let file = std::fs::File::create(&out).unwrap();
    store
        .export(
            queries.iter().map(|q| q.to_string()).collect(),
            all_tags,
            file,
        )
        .await
        .unwrap();
    out
}

/// `index.json`'s entries as (digest, `io.containerd.image.name`,
/// `org.opencontainers.image.ref.name`).
fn index_entries(path: &Path) -> Vec<(String, Option<String>, Option<String>)> {
    let index = json_of(path, "index.json");
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let a = |k: &str| e["annotations"][k].as_str().map(str::to_string);
            (
                e["digest"].as_str().unwrap().to_string(),
                a("io.containerd.image.name"),
                a("org.opencontainers.image.ref.name"),
            )
        })
        .collect()
}

/// An image with three names (another registry's, a mirror's, docker
/// hub's) is exported under the names asked for only, as containerd's `ctr
/// images export` does: one `index.json` entry per name (the whole name and
/// its tag) and Docker's `manifest.json` with the short names; by id, an
/// entry without a name; `all_tags` adds every name. An unknown name is
/// NotFound.
#[tokio::test]
async fn an_export_holds_the_names_asked_for_only() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_GZIP);
    let names = [
        "example.com/a/b:c",
        "127.0.0.1:5000/mirror/b:c",
        "docker.io/library/busybox:1.37.0",
    ];
    let mut files = oci_files(&img, names[0]);
    let index = json!({"schemaVersion": 2, "manifests": names.iter().map(|n| json!({
        "mediaType": OCI_MANIFEST, "digest": digest(&img.manifest), "size": img.manifest.len(),
        "annotations": {"io.containerd.image.name": n},
    })).collect::<Vec<_>>()});
    files.last_mut().unwrap().1 = serde_json::to_vec(&index).unwrap();
    let path = write(dir.path(), "three.tar", &tar(&files));
    let store = store(dir.path(), None).await;
    store.import(&path).await.unwrap();
    let image = store.get(names[0]).unwrap();
    assert_eq!(image.repo_tags.len(), 3);
    let manifest = digest(&img.manifest);
    let layers: Vec<String> = img.layers.iter().map(|l| blob_name(&l.blob)).collect();
    let named = |n: &str, tag: &str| (manifest.clone(), Some(n.to_string()), Some(tag.into()));

    let out = export(&store, dir.path(), &["example.com/a/b:c"], false).await;
    assert_eq!(index_entries(&out), [named("example.com/a/b:c", "c")]);
    assert_eq!(
        json_of(&out, "manifest.json"),
        json!([{"Config": blob_name(&img.config), "RepoTags": ["example.com/a/b:c"],
                "Layers": layers}])
    );

    // Two names (one short) of one image: two entries, one docker image.
    let out = export(&store, dir.path(), &["busybox:1.37.0", names[1]], false).await;
    assert_eq!(
        index_entries(&out),
        [
            named("docker.io/library/busybox:1.37.0", "1.37.0"),
            named(names[1], "c")
        ]
    );
    assert_eq!(
        json_of(&out, "manifest.json")[0]["RepoTags"],
        json!(["busybox:1.37.0", "127.0.0.1:5000/mirror/b:c"])
    );

    // By id: no name; with all_tags: every name.
    let out = export(&store, dir.path(), &[&image.id], false).await;
    assert_eq!(index_entries(&out), [(manifest.clone(), None, None)]);
    assert_eq!(json_of(&out, "manifest.json")[0]["RepoTags"], json!([]));
    let out = export(&store, dir.path(), &[names[0]], true).await;
    assert_eq!(
        index_entries(&out),
        [
            named(names[0], "c"),
            named(names[1], "c"),
            named(names[2], "1.37.0")
        ]
    );

    // Read back: the names written, no other.
    let other = tempfile::tempdir().unwrap();
    let out = export(&store, dir.path(), &[names[1]], false).await;
    let again = store_in(other.path()).await.import(&out).await.unwrap();
    assert_eq!(again[0].repo_tags, [names[1]]);

    // An unknown name: NotFound.
    let e = store
        .export(
            vec![names[0].into(), "example.com/a/b:nope".into()],
            false,
            Vec::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("example.com/a/b:nope"), "{e}");
}

/// An image imported (or pulled) from an index is exported as that index,
/// with the platform the store holds: the index blob, this platform's
/// manifest, config and layers, not the other platforms' manifests (as
/// `ctr images export` does for its platform). Read back, it is the same
/// image with the index's digest.
#[tokio::test]
async fn an_index_is_exported_with_the_platform_held() {
    let dir = tempfile::tempdir().unwrap();
    let img = build(OCI_GZIP);
    let other_platform = br#"{"schemaVersion":2}"#.to_vec();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": digest(&other_platform),
             "size": other_platform.len(),
             "platform": {"os": "linux", "architecture": "s390x"}},
            {"mediaType": OCI_MANIFEST, "digest": digest(&img.manifest),
             "size": img.manifest.len(),
             "platform": {"os": "linux", "architecture": images::host_arch()}},
        ],
    }))
    .unwrap();
    let name = "example.com/multi/x:1";
    let mut files = oci_files(&img, name);
    let top = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": digest(&index), "size": index.len(),
        "annotations": {"io.containerd.image.name": name},
    }]});
    files.last_mut().unwrap().1 = serde_json::to_vec(&top).unwrap();
    files.push((blob_name(&index), index.clone()));
    let path = write(dir.path(), "multi.tar", &tar(&files));
    let store = store(dir.path(), None).await;
    store.import(&path).await.unwrap();

    let out = export(&store, dir.path(), &[name], false).await;
    let exported = json_of(&out, "index.json");
    assert_eq!(
        exported["manifests"][0]["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(index_entries(&out).len(), 1);
    assert_eq!(index_entries(&out)[0].0, digest(&index));
    let names: Vec<String> = entries_of(&out).into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&blob_name(&index)), "{names:?}");
    assert!(names.contains(&blob_name(&img.manifest)), "{names:?}");
    assert!(!names.contains(&blob_name(&other_platform)), "{names:?}");
    assert_eq!(
        json_of(&out, "manifest.json")[0]["Config"],
        blob_name(&img.config)
    );
    let other = tempfile::tempdir().unwrap();
    let again = store_in(other.path()).await.import(&out).await.unwrap();
    assert_eq!(again[0].id, digest(&img.config));
    assert_eq!(
        again[0].repo_digests,
        [format!("example.com/multi/x@{}", digest(&index))]
    );
}
