//! OCI artifacts against a real docker-registry on 127.0.0.1, pushed by the
//! tests themselves over the registry API: pulled into a snapshot of their
//! files (and of their tar layers), kept over a reopen, exported and
//! imported, removed with their content; bad ones (a thousand layers, a
//! title with a path escape, a layer over the cap, a missing blob) refused
//! with nothing half-made.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use berth_oci_image::{ErrorKind, Image, ImageStore, RegistryConfig, UnpackLimits};
use support::images::{self, Entry, Pusher};
use support::{names, Registry};

const MODEL_TYPE: &str = "application/vnd.lab.model.v1";
const MODEL_CONFIG: &str = "application/vnd.lab.model.config.v1+json";
const EMPTY: &str = "application/vnd.oci.empty.v1+json";
const BIN: &str = "application/octet-stream";
const GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// 1 MiB that no compressor shrinks (a stand-in for a model's weights).
fn weights() -> Vec<u8> {
    support::noise(31, 1 << 20)
}

async fn store(dir: &Path, cfg: RegistryConfig) -> ImageStore {
    ImageStore::open(dir, cfg).await.expect("open store")
}

/// Nothing under a temp name, nothing being downloaded.
fn assert_no_leftovers(root: &Path) {
    assert!(names(&root.join("ingest")).is_empty(), "ingest left");
    let tmp: Vec<_> = names(&root.join("snapshots"))
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(tmp.is_empty(), "temp snapshots left: {tmp:?}");
}

/// Pushes the lab's model: a custom config, `model.bin` and
/// `tok/vocab.txt` as files, and a gzip tar of `data/a.txt`.
async fn push_model(p: &Pusher, tag: &str) -> String {
    let tar = images::layer(
        images::tar_of(&[
            Entry::Dir("data", 0o755),
            Entry::File("data/a.txt", 0o644, 0, b"from a tar\n"),
        ]),
        GZ,
    );
    let (digest, _) = p
        .artifact(
            "lab/model",
            tag,
            Some(MODEL_TYPE),
            (MODEL_CONFIG, br#"{"name":"m"}"#),
            &[
                (BIN, &weights(), Some("model.bin")),
                ("text/plain", b"hello\nworld\n", Some("tok/vocab.txt")),
                (GZ, &tar.blob, None),
            ],
        )
        .await
        .unwrap();
    digest
}

fn artifact_of(image: &Image) -> &berth_oci_image::Artifact {
    image.artifact.as_ref().expect("an artifact")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn an_artifact_is_pulled_into_snapshots_of_its_files_and_tars() {
    require_ready!();
    let reg = Registry::start(None).await;
    let p = Pusher::new(&reg.addr, None);
    let digest = push_model(&p, "v1").await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let name = reg.image("lab/model:v1");
    let image = s.pull(&name, None).await.unwrap();

    // Known by its manifest's digest, with its type; no runtime config.
    assert_eq!(image.id, digest);
    assert_eq!(artifact_of(&image).artifact_type, MODEL_TYPE);
    assert_eq!(image.repo_tags, std::slice::from_ref(&name));
    assert!(image.size > 1 << 20);
    assert!(image.config.cmd.is_empty() && image.uid.is_none());
    assert_eq!(s.get(&name).unwrap().id, digest);
    assert_eq!(s.get(&digest).unwrap().id, digest);

    // Two snapshots: the files on top, the tar below.
    let lower = s.lowerdirs(&image);
    assert_eq!(lower.len(), 2, "{lower:?}");
    let (files, tar) = (&lower[0], &lower[1]);
    assert_eq!(std::fs::read(files.join("model.bin")).unwrap(), weights());
    assert_eq!(
        std::fs::read(files.join("tok/vocab.txt")).unwrap(),
        b"hello\nworld\n"
    );
    assert_eq!(
        std::fs::read(tar.join("data/a.txt")).unwrap(),
        b"from a tar\n"
    );
    let md = std::fs::metadata(files.join("model.bin")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.uid(), md.gid()), (0o444, 0, 0));
    // One copy on disk: the file is its blob in the content store.
    let model = image
        .layers
        .iter()
        .find(|l| l.file.as_deref() == Some("model.bin"));
    let blob = dir
        .path()
        .join("blobs/sha256")
        .join(&model.unwrap().digest["sha256:".len()..]);
    assert_eq!(std::fs::metadata(&blob).unwrap().ino(), md.ino());
    // Its config is kept, as a blob.
    let config = &artifact_of(&image).config;
    assert!(names(&dir.path().join("blobs/sha256")).contains(&config["sha256:".len()..].into()));

    // Pulled again: the same, from what is there.
    assert_eq!(s.pull(&name, None).await.unwrap(), image);
    // Kept over a restart of the store.
    drop(s);
    let s = store(dir.path(), RegistryConfig::default()).await;
    assert_eq!(s.get(&name).unwrap(), image);
    assert!(s.lowerdirs(&image).iter().all(|d| d.is_dir()));

    // Two artifacts with the empty config each have their own id.
    let (other, _) = p
        .artifact(
            "lab/empty",
            "v1",
            Some(MODEL_TYPE),
            (EMPTY, b"{}"),
            &[(BIN, b"one", Some("one.txt"))],
        )
        .await
        .unwrap();
    let (another, _) = p
        .artifact(
            "lab/empty",
            "v2",
            Some("application/vnd.lab.other.v1"),
            (EMPTY, b"{}"),
            &[(BIN, b"two", Some("two.txt"))],
        )
        .await
        .unwrap();
    let a = s.pull(&reg.image("lab/empty:v1"), None).await.unwrap();
    let b = s.pull(&reg.image("lab/empty:v2"), None).await.unwrap();
    assert_eq!(
        (a.id.as_str(), b.id.as_str()),
        (other.as_str(), another.as_str())
    );
    assert_eq!(s.list().len(), 3);

    // Removed: its blobs and snapshots go with it (no other user).
    for n in [&name, &a.id, &b.id] {
        assert!(s.remove(n).await.unwrap());
    }
    assert!(s.list().is_empty());
    assert!(names(&dir.path().join("blobs/sha256")).is_empty());
    assert!(names(&dir.path().join("snapshots")).is_empty());
    assert_no_leftovers(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn an_artifact_goes_through_an_archive_whole() {
    require_ready!();
    let reg = Registry::start(None).await;
    let p = Pusher::new(&reg.addr, None);
    let digest = push_model(&p, "v1").await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("a"), RegistryConfig::default()).await;
    let image = s.pull(&reg.image("lab/model:v1"), None).await.unwrap();
    let archive = dir.path().join("model.tar");
    let file = std::fs::File::create(&archive).unwrap();
    s.export(vec![image.id.clone()], false, file).await.unwrap();

    let fresh = store(&dir.path().join("b"), RegistryConfig::default()).await;
    let imported = fresh.import(&archive).await.unwrap();
    assert_eq!(imported.len(), 1);
    let got = &imported[0];
    assert_eq!(got.id, digest);
    assert_eq!(got.artifact, image.artifact);
    assert_eq!(got.layers, image.layers);
    let files = &fresh.lowerdirs(got)[0];
    assert_eq!(std::fs::read(files.join("model.bin")).unwrap(), weights());
}

/// Pushes an artifact of `layers` (with the custom config) as `lab/bad:TAG`,
/// then deletes every blob it names from the registry: a pull that fetched
/// one would fail with NotFound, not with the refusal expected.
async fn push_without_blobs(
    p: &Pusher,
    tag: &str,
    layers: &[(&str, &[u8], Option<&str>)],
) -> Vec<String> {
    let (_, manifest) = p
        .artifact(
            "lab/bad",
            tag,
            Some(MODEL_TYPE),
            (MODEL_CONFIG, b"{}"),
            layers,
        )
        .await
        .unwrap();
    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let mut digests: Vec<String> = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect();
    digests.push(m["config"]["digest"].as_str().unwrap().to_string());
    digests.sort();
    digests.dedup();
    for d in &digests {
        p.delete_blob("lab/bad", d).await.unwrap();
    }
    digests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn bad_artifacts_are_refused_before_any_blob_is_fetched() {
    require_ready!();
    let reg = Registry::start(None).await;
    let p = Pusher::new(&reg.addr, None);
    let titles: Vec<String> = (0..1000).map(|n| format!("f{n}")).collect();
    let thousand: Vec<(&str, &[u8], Option<&str>)> = titles
        .iter()
        .map(|t| (BIN, &b"x"[..], Some(t.as_str())))
        .collect();
    push_without_blobs(&p, "thousand", &thousand).await;
    push_without_blobs(&p, "escape", &[(BIN, b"x", Some("../../etc/cron.d/x"))]).await;
    push_without_blobs(&p, "absolute", &[(BIN, b"x", Some("/etc/passwd"))]).await;
    push_without_blobs(&p, "untitled", &[(BIN, b"x", None)]).await;
    push_without_blobs(
        &p,
        "twice",
        &[
            (BIN, b"x", Some("model.bin")),
            (BIN, b"y", Some("model.bin")),
        ],
    )
    .await;
    let big = vec![0u8; (1 << 20) + 1];
    push_without_blobs(&p, "big", &[(BIN, &big, Some("big.bin"))]).await;

    let dir = tempfile::tempdir().unwrap();
    let cfg = RegistryConfig {
        unpack: UnpackLimits {
            max_layer_bytes: 1 << 20,
            ..UnpackLimits::default()
        },
        ..RegistryConfig::default()
    };
    let s = store(dir.path(), cfg).await;
    for (tag, why) in [
        ("thousand", "1000 layers, more than the limit of 128"),
        ("escape", "\"..\" component"),
        ("absolute", "is absolute"),
        ("untitled", "has no org.opencontainers.image.title"),
        ("twice", "two layers have it"),
        ("big", "max_layer_bytes"),
    ] {
        let e = s
            .pull(&reg.image(&format!("lab/bad:{tag}")), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DataLoss, "{tag}: {e}");
        assert!(e.to_string().contains(why), "{tag}: {e}");
        // Not a byte stored: not even the manifest.
        assert!(s.list().is_empty());
        for sub in ["blobs/sha256", "snapshots", "images", "ingest"] {
            assert!(names(&dir.path().join(sub)).is_empty(), "{tag}: {sub}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn an_artifact_naming_a_missing_blob_leaves_only_garbage() {
    require_ready!();
    let reg = Registry::start(None).await;
    let p = Pusher::new(&reg.addr, None);
    let (_, manifest) = p
        .artifact(
            "lab/missing",
            "v1",
            Some(MODEL_TYPE),
            (MODEL_CONFIG, b"{}"),
            &[
                (BIN, b"present", Some("here.bin")),
                (BIN, b"absent", Some("gone.bin")),
            ],
        )
        .await
        .unwrap();
    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let gone = m["layers"][1]["digest"].as_str().unwrap();
    p.delete_blob("lab/missing", gone).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let e = s
        .pull(&reg.image("lab/missing:v1"), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains(gone), "{e}");
    // No image, no snapshot of the files, nothing under a temp name; what
    // was stored (the manifest, the config, one blob) no image holds, and
    // the next collection takes it.
    assert!(s.list().is_empty());
    assert!(names(&dir.path().join("snapshots")).is_empty());
    assert_no_leftovers(dir.path());
    s.gc().await.unwrap();
    assert!(names(&dir.path().join("blobs/sha256")).is_empty());
}
