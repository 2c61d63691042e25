//! Integration tests against a real docker-registry on 127.0.0.1 with the
//! images of hack/build-test-images.sh: pulls by tag, digest, mirror and
//! short name, with auth, multi-platform; lookups; concurrent pulls; a
//! registry that stalls or corrupts mid-pull; lying manifests; removal and
//! garbage collection. Each test starts (and stops) its own registry.

mod support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

use berth_oci_image::{Auth, ErrorKind, ImageStore, RegistryConfig};
use support::{names, Proxy, Registry};

async fn store(dir: &Path, cfg: RegistryConfig) -> ImageStore {
    ImageStore::open(dir, cfg).await.expect("open store")
}

/// Nothing of a failed pull is left: no temp snapshot, no temp blob.
fn assert_no_leftovers(root: &Path) {
    assert!(
        names(&root.join("ingest")).is_empty(),
        "ingest: {:?}",
        names(&root.join("ingest"))
    );
    let tmp: Vec<_> = names(&root.join("snapshots"))
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(tmp.is_empty(), "temp snapshots left: {tmp:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn pull_by_tag_then_look_up_every_way() {
    require_ready!();
    let reg = Registry::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let name = reg.image("berth-test/busybox:latest");
    let image = s.pull(&name, None).await.unwrap();

    assert!(image.id.starts_with("sha256:"));
    assert_eq!(image.repo_tags, std::slice::from_ref(&name));
    let digest = reg.digest("berth-test/busybox:latest");
    let repo_digest = format!("{}/berth-test/busybox@{digest}", reg.addr);
    assert_eq!(image.repo_digests, std::slice::from_ref(&repo_digest));
    assert_eq!(image.uid, None);
    assert_eq!(image.username, "");
    assert_eq!(image.config.cmd, ["sh"]);
    assert!(image.size > 500_000, "size {}", image.size);
    // The blobs are kept by digest: manifest, config, layer.
    let blobs = names(&dir.path().join("blobs/sha256"));
    assert!(blobs.contains(&digest.trim_start_matches("sha256:").to_string()));
    assert!(blobs.contains(&image.id_hex().to_string()));
    assert_eq!(blobs.len(), 3);

    let lower = s.lowerdirs(&image);
    assert_eq!(lower.len(), 1);
    let fs = &lower[0];
    assert_eq!(
        std::fs::read(fs.join("bin/busybox")).unwrap(),
        std::fs::read(support::images::BUSYBOX).unwrap()
    );
    assert_eq!(
        std::fs::read_link(fs.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    let passwd = std::fs::read_to_string(fs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("app:x:1000:1000"));
    let home = std::fs::metadata(fs.join("home/app")).unwrap();
    assert_eq!((home.uid(), home.gid()), (1000, 1000));
    assert_eq!(
        std::fs::metadata(fs.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );

    // Lookups: id, id without prefix, short prefixes, tag, digest.
    for q in [
        image.id.clone(),
        image.id_hex().to_string(),
        image.id_hex()[..12].to_string(),
        format!("sha256:{}", &image.id_hex()[..8]),
        name.clone(),
        repo_digest.clone(),
        format!("{name}@{digest}"),
    ] {
        assert_eq!(
            s.get(&q).map(|i| i.id),
            Some(image.id.clone()),
            "lookup {q}"
        );
    }
    assert!(s.get("busybox").is_none());
    assert!(s.get(&reg.image("berth-test/busybox:other")).is_none());
    assert_eq!(s.list().len(), 1);
    let usage = s.fs_info();
    assert_eq!(usage.path, dir.path());
    assert!(
        usage.used_bytes > 1_000_000 && usage.inodes_used > 200,
        "{usage:?}"
    );

    // A second pull finds everything in place; a reopened store knows it.
    let again = s.pull(&name, None).await.unwrap();
    assert_eq!(again, image);
    drop(s);
    let s = store(dir.path(), RegistryConfig::default()).await;
    assert_eq!(s.get(&name).unwrap().id, image.id);
    assert!(s.lowerdirs(&image)[0].join("bin/busybox").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn pull_by_digest_and_by_tag_plus_digest() {
    require_ready!();
    let reg = Registry::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let digest = reg.digest("berth-test/user-uid:latest");
    let by_digest = format!("{}@{digest}", reg.image("berth-test/user-uid"));
    let image = s.pull(&by_digest, None).await.unwrap();
    assert!(image.repo_tags.is_empty(), "{:?}", image.repo_tags);
    assert_eq!(image.repo_digests, std::slice::from_ref(&by_digest));
    assert_eq!(image.uid, Some(1000));
    assert_eq!(image.username, "");

    let both = format!("{}:latest@{digest}", reg.image("berth-test/user-uid"));
    let image = s.pull(&both, None).await.unwrap();
    assert_eq!(image.repo_tags, [reg.image("berth-test/user-uid:latest")]);

    // A digest the registry does not have.
    let missing = format!(
        "{}@sha256:{}",
        reg.image("berth-test/user-uid"),
        "0".repeat(64)
    );
    let e = s.pull(&missing, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = s
        .pull(&reg.image("berth-test/nope:latest"), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = s.pull("Bad Reference", None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");

    let named = s
        .pull(&reg.image("berth-test/user-name:latest"), None)
        .await
        .unwrap();
    assert_eq!(named.uid, None);
    assert_eq!(named.username, "app");
    assert_eq!(named.config.user, "app");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn short_names_through_mirrors() {
    require_ready!();
    let reg = Registry::start(None).await;
    // A dead endpoint first: endpoints are tried in order.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let text = format!(
        "[registry.mirrors.\"registry.k8s.io\"]\nendpoints = [\"http://{dead}\", \"http://{addr}\"]\n\
         [registry.mirrors.\"docker.io\"]\nendpoints = [\"{addr}\"]\n",
        addr = reg.addr
    );
    #[derive(serde::Deserialize)]
    struct File {
        registry: RegistryConfig,
    }
    let cfg = toml::from_str::<File>(&text).unwrap().registry;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), cfg).await;

    let image = s
        .pull("registry.k8s.io/e2e-test-images/busybox:1.29-2", None)
        .await
        .unwrap();
    assert_eq!(
        image.repo_tags,
        ["registry.k8s.io/e2e-test-images/busybox:1.29-2"]
    );
    let digest = reg.digest("e2e-test-images/busybox:1.29-2");
    assert_eq!(
        image.repo_digests,
        [format!("registry.k8s.io/e2e-test-images/busybox@{digest}")]
    );

    let short = s.pull("busybox", None).await.unwrap();
    assert_eq!(short.id, image.id);
    let tags = &s.get("busybox").unwrap().repo_tags;
    assert!(
        tags.contains(&"docker.io/library/busybox:latest".to_string()),
        "{tags:?}"
    );
    assert_eq!(s.get("docker.io/library/busybox").unwrap().id, image.id);
    assert_eq!(s.list().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn pull_with_credentials() {
    require_ready!();
    let reg = Registry::start(Some("berth:s3cret")).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let name = reg.image("berth-test/busybox:latest");

    let e = s.pull(&name, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    let e = s
        .pull(&name, Some(Auth::basic("berth", "wrong")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    assert!(s.list().is_empty());

    let image = s
        .pull(&name, Some(Auth::basic("berth", "s3cret")))
        .await
        .unwrap();
    assert_eq!(image.repo_tags, [name]);
    use base64::Engine;
    let auth = Auth {
        auth: base64::engine::general_purpose::STANDARD.encode("berth:s3cret"),
        ..Auth::default()
    };
    let zstd = s
        .pull(&reg.image("berth-test/zstd:latest"), Some(auth))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(s.lowerdirs(&zstd)[0].join("etc/zstd-marker")).unwrap(),
        "zstd\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn layers_whiteouts_and_opaque_dirs_stack_in_overlayfs() {
    require_ready!();
    let reg = Registry::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let image = s
        .pull(&reg.image("berth-test/layers:latest"), None)
        .await
        .unwrap();
    assert_eq!(image.layers.len(), 3);
    let lower = s.lowerdirs(&image);
    assert_eq!(lower.len(), 3);
    let (top, mid) = (&lower[0], &lower[1]);
    // Top layer: whiteout as a 0:0 char device, opaque xattr, new files.
    let wh = std::fs::symlink_metadata(top.join("data/a")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0);
    assert_eq!(
        berth_oci_image::get_xattr(&top.join("data/dir"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert!(!top.join("data/dir/.wh..wh..opq").exists());
    // Middle (uncompressed) layer: hard link, symlink, FIFO, owner.
    let a = std::fs::metadata(mid.join("data/a")).unwrap();
    assert_eq!(
        a.ino(),
        std::fs::metadata(mid.join("data/a-hard")).unwrap().ino()
    );
    assert_eq!(
        std::fs::read_link(mid.join("data/a-sym")).unwrap(),
        Path::new("a")
    );
    assert!(std::fs::symlink_metadata(mid.join("data/fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let b = std::fs::metadata(mid.join("data/b")).unwrap();
    assert_eq!((b.uid(), b.mode() & 0o777), (1000, 0o600));

    // Mounted as overlayfs, the layers give the merged view.
    let mnt = tempfile::tempdir().unwrap();
    let opts = format!(
        "lowerdir={}",
        lower
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    );
    nix::mount::mount(
        Some("overlay"),
        mnt.path(),
        Some("overlay"),
        nix::mount::MsFlags::MS_RDONLY,
        Some(opts.as_str()),
    )
    .expect("mount overlay");
    let m = mnt.path();
    let view = (
        m.join("bin/busybox").is_file(),
        m.join("data/a").exists(),
        std::fs::read_to_string(m.join("data/b")).ok(),
        m.join("data/dir/x").exists(),
        m.join("data/dir/sub").exists(),
        std::fs::read_to_string(m.join("data/dir/z")).ok(),
        m.join("data/a-hard").is_file(),
    );
    nix::mount::umount(m).expect("umount");
    assert_eq!(
        view,
        (
            true,
            false,
            Some("b2\n".to_string()),
            false,
            false,
            Some("z\n".to_string()),
            true
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn multi_platform_index_picks_the_host() {
    require_ready!();
    let reg = Registry::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let image = s
        .pull(&reg.image("berth-test/multi:latest"), None)
        .await
        .unwrap();
    let arch = support::images::host_arch();
    assert_eq!(image.config.architecture, arch);
    assert_eq!(
        std::fs::read_to_string(s.lowerdirs(&image)[0].join("etc/arch")).unwrap(),
        format!("{arch}\n")
    );
    // The repo digest is the index's; the index and the manifest are kept.
    let index = reg.digest("berth-test/multi:latest");
    assert_eq!(
        image.repo_digests,
        [format!("{}@{index}", reg.image("berth-test/multi"))]
    );
    assert_eq!(image.manifests.len(), 2);
    assert_eq!(image.manifests[0], index);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn concurrent_pulls_do_the_work_once() {
    require_ready!();
    let reg = Registry::start(None).await;
    let proxy = Proxy::start(&reg.addr, support::PASS, 0).await;
    let name = format!("{}/berth-test/layers:latest", proxy.addr);

    // What one pull moves.
    let one = tempfile::tempdir().unwrap();
    store(one.path(), RegistryConfig::default())
        .await
        .pull(&name, None)
        .await
        .unwrap();
    let single = proxy.bytes.swap(0, std::sync::atomic::Ordering::SeqCst);

    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let (a, b) = tokio::join!(s.pull(&name, None), s.pull(&name, None));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    let both = proxy.bytes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        both < single + single / 2,
        "two pulls moved {both} bytes, one moves {single}"
    );

    // Two different images sharing the busybox layer, at once: one snapshot.
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let (uid_name, user_name) = (
        reg.image("berth-test/user-uid:latest"),
        reg.image("berth-test/user-name:latest"),
    );
    let (u, n) = tokio::join!(s.pull(&uid_name, None), s.pull(&user_name, None));
    let (u, n) = (u.unwrap(), n.unwrap());
    assert_ne!(u.id, n.id);
    assert_eq!(s.lowerdirs(&u), s.lowerdirs(&n));
    assert_eq!(names(&dir.path().join("snapshots")).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn a_registry_that_stalls_mid_pull_times_out() {
    require_ready!();
    let reg = Registry::start(None).await;
    // Manifest and config fit in the first 64 KiB; the busybox layer does not.
    let proxy = Proxy::start(&reg.addr, support::STALL, 64 * 1024).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = RegistryConfig {
        progress_timeout: Duration::from_secs(2),
        ..RegistryConfig::default()
    };
    let s = store(dir.path(), cfg).await;
    let started = Instant::now();
    let e = s
        .pull(&format!("{}/berth-test/busybox:latest", proxy.addr), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(proxy.bytes.load(std::sync::atomic::Ordering::SeqCst) > 64 * 1024);
    assert!(s.list().is_empty());
    assert_no_leftovers(dir.path());
    assert!(names(&dir.path().join("snapshots")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn corrupt_and_lying_content_is_refused_and_cleaned_up() {
    require_ready!();
    let reg = Registry::start(None).await;
    // One flipped byte inside the layer blob.
    let proxy = Proxy::start(&reg.addr, support::CORRUPT, 200 * 1024).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let e = s
        .pull(&format!("{}/berth-test/busybox:latest", proxy.addr), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss, "{e}");
    assert!(s.list().is_empty());
    assert_no_leftovers(dir.path());
    assert!(names(&dir.path().join("snapshots")).is_empty());

    for tag in ["bigger", "smaller"] {
        let e = s
            .pull(&reg.image(&format!("berth-test/lie:{tag}")), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DataLoss, "{tag}: {e}");
        assert_no_leftovers(dir.path());
        assert!(names(&dir.path().join("snapshots")).is_empty());
    }
    // Only manifests and configs were kept, and only until the next collection.
    s.gc().await.unwrap();
    assert!(names(&dir.path().join("blobs/sha256")).is_empty());
    // The honest one pulls fine.
    s.pull(&reg.image("berth-test/lie:honest"), None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn removal_frees_blobs_and_snapshots() {
    require_ready!();
    let reg = Registry::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), RegistryConfig::default()).await;
    let busybox = s
        .pull(&reg.image("berth-test/busybox:latest"), None)
        .await
        .unwrap();
    // A second tag of the same image, and an image sharing its layer.
    s.pull(&reg.image("library/busybox:latest"), None)
        .await
        .unwrap();
    let zstd = s
        .pull(&reg.image("berth-test/zstd:latest"), None)
        .await
        .unwrap();
    assert_eq!(s.get(&busybox.id).unwrap().repo_tags.len(), 2);
    let shared = s.lowerdirs(&busybox)[0].clone();
    assert_eq!(s.lowerdirs(&zstd)[1], shared);
    assert_eq!(names(&dir.path().join("snapshots")).len(), 2);
    let before = s.fs_info();

    // Removing by one tag removes the image with both tags.
    assert!(s
        .remove(&reg.image("library/busybox:latest"))
        .await
        .unwrap());
    assert!(s.get(&reg.image("berth-test/busybox:latest")).is_none());
    assert!(s.get(&busybox.id).is_none());
    assert!(
        !s.remove(&busybox.id).await.unwrap(),
        "removing an absent image"
    );
    assert!(
        shared.join("bin/busybox").is_file(),
        "the shared snapshot stays"
    );
    assert!(!dir
        .path()
        .join("blobs/sha256")
        .join(busybox.id_hex())
        .exists());
    assert!(s.fs_info().used_bytes < before.used_bytes);

    // Removing the last image by digest empties the store.
    let digest = reg.digest("berth-test/zstd:latest");
    assert!(s
        .remove(&format!("{}@{digest}", reg.image("berth-test/zstd")))
        .await
        .unwrap());
    assert!(s.list().is_empty());
    assert!(names(&dir.path().join("snapshots")).is_empty());
    assert!(names(&dir.path().join("blobs/sha256")).is_empty());
    assert!(names(&dir.path().join("images")).is_empty());
}
