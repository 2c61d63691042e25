//! The layers of one pull are downloaded and unpacked at once, up to
//! `max_concurrent_downloads` of them: seen through a proxy that serves the
//! registry slowly on every connection, as temp snapshot dirs that exist at
//! the same time, and as a pull that takes about one layer's time, not the
//! sum of them. A layer frees its download slot once its bytes are in: the
//! next layer downloads while it finishes unpacking.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_oci_image::{ImageStore, RegistryConfig};
use support::images::{self, Entry, Pusher};
use support::{names, Proxy, Registry};

const OCI_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const LAYERS: usize = 4;
/// Per layer: through the slow proxy, well over a second.
const LAYER_BYTES: usize = 1 << 20;

/// Layer `i` of the test image: `layer-<i>.bin`, [`LAYER_BYTES`] of noise.
fn noise_layer(i: usize) -> images::Layer {
    let data = support::noise(i as u64, LAYER_BYTES);
    let path = format!("layer-{i}.bin");
    images::layer(
        images::tar_of(&[Entry::File(&path, 0o644, 0, &data)]),
        OCI_GZIP,
    )
}

/// Pushes an image of [`LAYERS`] layers of noise as `repo:latest`.
async fn push(reg: &Registry, repo: &str) {
    let layers: Vec<images::Layer> = (0..LAYERS).map(noise_layer).collect();
    push_layers(reg, repo, &layers).await;
}

async fn push_layers(reg: &Registry, repo: &str, layers: &[images::Layer]) {
    let refs: Vec<&images::Layer> = layers.iter().collect();
    let config = images::config(images::host_arch(), "", &refs);
    berth_oci_image::install_crypto_provider();
    Pusher::new(&reg.addr, None)
        .image(repo, Some("latest"), false, &config, &refs)
        .await
        .expect("push");
}

/// The most temp snapshot dirs (layers being unpacked) seen at once under
/// `root/snapshots`, sampled every millisecond until stopped.
struct Watch {
    stop: Arc<AtomicBool>,
    most: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Watch {
    fn start(root: &Path) -> Watch {
        let (stop, most) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (flag, seen, dir) = (stop.clone(), most.clone(), root.join("snapshots"));
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let n = names(&dir)
                    .iter()
                    .filter(|n| n.starts_with(".tmp-"))
                    .count();
                seen.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Watch { stop, most, thread }
    }

    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.most.load(Ordering::Relaxed)
    }
}

/// Pulls `image` into a new store under `dir` with `downloads` at once;
/// returns the store, the image, the time taken and the most layers seen
/// unpacking at once.
async fn pull_into(
    dir: &Path,
    image: &str,
    downloads: usize,
) -> (ImageStore, berth_oci_image::Image, Duration, usize) {
    let cfg = RegistryConfig {
        max_concurrent_downloads: downloads,
        ..RegistryConfig::default()
    };
    let root: PathBuf = dir.join(format!("store-{downloads}"));
    let store = ImageStore::open(&root, cfg).await.unwrap();
    let watch = Watch::start(&root);
    let started = Instant::now();
    let pulled = store.pull(image, None).await;
    let took = started.elapsed();
    let most = watch.stop();
    let pulled = pulled.unwrap();
    assert!(
        names(&root.join("snapshots"))
            .iter()
            .all(|n| !n.starts_with('.')),
        "temp snapshot dirs left"
    );
    (store, pulled, took, most)
}

/// [`pull_into`] of the noise image, checked file by file.
async fn pull(dir: &Path, image: &str, downloads: usize) -> (Duration, usize) {
    let (store, pulled, took, most) = pull_into(dir, image, downloads).await;
    assert_eq!(pulled.layers.len(), LAYERS);
    for (i, dir) in store.lowerdirs(&pulled).iter().rev().enumerate() {
        let file = dir.join(format!("layer-{i}.bin"));
        assert_eq!(
            std::fs::read(&file).unwrap(),
            support::noise(i as u64, LAYER_BYTES)
        );
    }
    (took, most)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn the_layers_of_one_pull_unpack_at_once_within_the_download_bound() {
    require_ready!();
    let reg = Registry::start(None).await;
    push(&reg, "berth-test/four-layers").await;
    // Manifest and config pass at full speed; the layers crawl.
    let proxy = Proxy::start(&reg.addr, support::SLOW, 8 * 1024).await;
    let image = format!("{}/berth-test/four-layers:latest", proxy.addr);
    let dir = tempfile::tempdir().unwrap();

    // One at a time: the time of all layers, one after another (a layer
    // may finish while the next downloads).
    let (serial, most) = pull(dir.path(), &image, 1).await;
    eprintln!("1 download at a time: {serial:?}, at most {most} unpacking");
    assert!(
        (1..=2).contains(&most),
        "at most {most} layers unpacked at once"
    );
    // All at once: about one layer's time.
    let (parallel, most) = pull(dir.path(), &image, LAYERS).await;
    eprintln!("{LAYERS} at a time: {parallel:?}, at most {most} unpacking");
    assert!(most >= LAYERS - 1, "at most {most} layers unpacked at once");
    assert!(
        parallel * 2 < serial,
        "{LAYERS} at once took {parallel:?}, one at a time {serial:?}"
    );
    // The bound holds: 2 downloading, and as many finishing.
    let (_, most) = pull(dir.path(), &image, 2).await;
    assert!((2..=4).contains(&most), "with 2 downloads at once: {most}");
}

/// With one download at a time, the second layer downloads while the first,
/// whose blob is in at once, is still being unpacked: the download slot is
/// not held for the unpacking (it was, so the layers went one after another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn a_layer_that_unpacks_slowly_frees_its_download_slot() {
    require_ready!();
    let reg = Registry::start(None).await;
    // 4 GiB that are all hole: a tiny blob that takes a while to unpack
    // (its zeros are read, not written).
    let slow = images::layer(images::sparse_tar("holes", 4 << 30, b""), OCI_GZIP);
    assert!(slow.blob.len() < 64 * 1024);
    push_layers(&reg, "berth-test/holes-then-noise", &[slow, noise_layer(1)]).await;
    let image = reg.image("berth-test/holes-then-noise:latest");
    let dir = tempfile::tempdir().unwrap();
    let (store, pulled, took, most) = pull_into(dir.path(), &image, 1).await;
    eprintln!("pulled in {took:?}, at most {most} unpacking");
    assert_eq!(most, 2, "the second layer waited for the first to unpack");
    let lower = store.lowerdirs(&pulled);
    assert_eq!(
        std::fs::metadata(lower[1].join("holes")).unwrap().len(),
        4 << 30
    );
    assert_eq!(
        std::fs::read(lower[0].join("layer-1.bin")).unwrap(),
        support::noise(1, LAYER_BYTES)
    );
}

/// The progress of a slow pull, as `berth images pull` gets it: each
/// layer's byte count grows while it downloads, at most once a
/// [`berth_oci_image::BYTES_EVERY`], then it ends `Pulled`; a second caller
/// of the same image joins the same pull and, reading only at the end, gets
/// every layer's end and the same image. Pulled again, every layer is
/// `AlreadyPresent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn watchers_see_the_bytes_of_each_layer_then_its_end() {
    use berth_oci_image::{LayerState, PullEvent, BYTES_EVERY};
    require_ready!();
    let reg = Registry::start(None).await;
    push(&reg, "berth-test/watched").await;
    let proxy = Proxy::start(&reg.addr, support::SLOW, 8 * 1024).await;
    let image = format!("{}/berth-test/watched:latest", proxy.addr);
    let dir = tempfile::tempdir().unwrap();
    let cfg = RegistryConfig {
        max_concurrent_downloads: LAYERS,
        ..RegistryConfig::default()
    };
    let store = ImageStore::open(&dir.path().join("store"), cfg)
        .await
        .unwrap();

    let started = Instant::now();
    let mut reader = store.start_pull(&image, None).unwrap();
    let mut sleeper = store.start_pull(&image, None).unwrap();
    let mut events = Vec::new();
    while let Some(e) = reader.watcher().next().await {
        events.push(e);
    }
    let took = started.elapsed();
    let image_a = reader.result().await.unwrap();
    let Some(PullEvent::Resolved {
        image: resolved,
        layers,
    }) = events.first().cloned()
    else {
        panic!("not resolved first: {events:?}");
    };
    assert_eq!(resolved.id, image_a.id);
    assert_eq!(
        layers.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(),
        image_a
            .layers
            .iter()
            .map(|l| l.digest.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(events.last(), Some(&PullEvent::Ended));
    for (index, (_, size)) in layers.iter().enumerate() {
        let counts: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                PullEvent::Bytes {
                    index: i, received, ..
                } if *i == index => Some(*received),
                _ => None,
            })
            .collect();
        assert!(
            counts.len() >= 2 && counts.windows(2).all(|w| w[0] < w[1]),
            "layer {index}: {counts:?}"
        );
        assert!(counts.iter().all(|c| c <= size));
        let states: Vec<LayerState> = events
            .iter()
            .filter_map(|e| match e {
                PullEvent::Layer {
                    index: i, state, ..
                } if *i == index => Some(*state),
                _ => None,
            })
            .collect();
        assert_eq!(
            states.last(),
            Some(&LayerState::Pulled),
            "layer {index}: {states:?}"
        );
    }
    // Throttled: no more byte counts than one a period per layer.
    let bytes = events
        .iter()
        .filter(|e| matches!(e, PullEvent::Bytes { .. }))
        .count();
    let most = LAYERS * (took.as_millis() / BYTES_EVERY.as_millis() + 2) as usize;
    eprintln!(
        "pulled in {took:?}: {} events, {bytes} byte counts",
        events.len()
    );
    assert!(bytes <= most, "{bytes} byte counts in {took:?}");

    // The one that never read: the same pull, every end, few events.
    let mut late = Vec::new();
    while let Some(e) = sleeper.watcher().next().await {
        late.push(e);
    }
    assert_eq!(sleeper.result().await.unwrap().id, image_a.id);
    let pulled = late
        .iter()
        .filter(|e| {
            matches!(
                e,
                PullEvent::Layer {
                    state: LayerState::Pulled,
                    ..
                }
            )
        })
        .count();
    assert_eq!(pulled, LAYERS, "{late:?}");
    assert!(late.len() <= 2 + 2 * LAYERS, "{late:?}");

    // Again: nothing to fetch.
    let mut again = store.start_pull(&image, None).unwrap();
    let mut states = Vec::new();
    while let Some(e) = again.watcher().next().await {
        if let PullEvent::Layer { state, .. } = e {
            states.push(state);
        }
    }
    again.result().await.unwrap();
    assert_eq!(states, vec![LayerState::AlreadyPresent; LAYERS]);
}
