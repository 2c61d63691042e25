//! Hostile layers through a real pull (docker-registry on 127.0.0.1): a gzip
//! of under 100 bytes holding a GNU sparse file of 1 TiB, and a layer whose
//! download stalls while its unpacker is busy with 60 GiB of sparse holes.
//! The store lives on a small tmpfs made by the test, so that even a
//! regression cannot fill the machine's disk: what the pull leaves on it is
//! measured with statvfs.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_oci_image::{ErrorKind, ImageStore, RegistryConfig};
use support::images::{self, Pusher};
use support::{names, Proxy, Registry};

const OCI_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// A tmpfs of `size` mounted on a temp dir; unmounted (lazily) on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("berth-tmpfs-")
            .tempdir()
            .unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={size},mode=0700").as_str()),
        )
        .expect("mount tmpfs");
        Tmpfs { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Bytes in use on it.
    fn used(&self) -> u64 {
        let st = nix::sys::statvfs::statvfs(self.dir.path()).unwrap();
        (st.blocks() - st.blocks_free()) as u64 * st.fragment_size() as u64
    }
}

/// The most bytes in use on a [`Tmpfs`] while it ran, sampled every
/// millisecond by a thread of its own (writes to tmpfs run at GB/s: a
/// regression fills 64 MiB in tens of milliseconds).
struct Peak {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Peak {
    fn start(fs: &Tmpfs) -> Peak {
        let stop = Arc::new(AtomicBool::new(false));
        let path = fs.path();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                let st = nix::sys::statvfs::statvfs(&path).unwrap();
                peak =
                    peak.max((st.blocks() - st.blocks_free()) as u64 * st.fragment_size() as u64);
                std::thread::sleep(Duration::from_millis(1));
            }
            peak
        });
        Peak { stop, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Pushes a one-layer image of `tar` as `repo:latest`; returns the layer's digest.
async fn push(reg: &Registry, repo: &str, tar: Vec<u8>) -> (String, usize) {
    let layer = images::layer(tar, OCI_GZIP);
    let config = images::config(images::host_arch(), "", &[&layer]);
    berth_oci_image::install_crypto_provider();
    Pusher::new(&reg.addr, None)
        .image(repo, Some("latest"), false, &config, &[&layer])
        .await
        .expect("push");
    (images::digest(&layer.blob), layer.blob.len())
}

fn assert_nothing_left(root: &Path) {
    assert!(names(&root.join("ingest")).is_empty(), "ingest left");
    assert!(
        names(&root.join("snapshots")).is_empty(),
        "snapshots: {:?}",
        names(&root.join("snapshots"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn a_tiny_layer_of_a_1_tib_sparse_file_is_refused() {
    require_ready!();
    let reg = Registry::start(None).await;
    let (digest, blob_len) = push(
        &reg,
        "berth-test/sparse-bomb",
        images::sparse_tar("zeros", 1 << 40, b""),
    )
    .await;
    assert!(blob_len < 100, "{blob_len} bytes");
    let fs = Tmpfs::new("64m");
    let store = ImageStore::open(&fs.path(), RegistryConfig::default())
        .await
        .unwrap();
    let before = fs.used();
    let peak = Peak::start(&fs);
    let started = Instant::now();
    let e = store
        .pull(&reg.image("berth-test/sparse-bomb:latest"), None)
        .await
        .unwrap_err();
    let peak = peak.stop();
    assert!(
        peak < before + (1 << 20),
        "{} bytes used at the peak",
        peak - before
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::DataLoss, "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&digest), "{msg}");
    assert!(
        msg.contains("max_layer_bytes") && msg.contains("64 GiB") && msg.contains("1 TiB"),
        "{msg}"
    );
    assert!(store.list().is_empty());
    assert_nothing_left(&fs.path());
    let grown = fs.used().saturating_sub(before);
    assert!(grown < 1 << 20, "the store grew by {grown} bytes");
    // Nor did it go to memory.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(hwm_kib < 512 << 10, "peak RSS {hwm_kib} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, docker-registry and busybox-static: hack/test.sh runs it (--include-ignored)"]
async fn a_stalled_download_stops_its_busy_unpacker() {
    require_ready!();
    let reg = Registry::start(None).await;
    // 60 GiB of holes (within the default limit: seconds of reading zeros),
    // then 2 MiB that does not compress, so the blob is still downloading
    // when the proxy stalls.
    let (_, blob_len) = push(
        &reg,
        "berth-test/sparse-slow",
        images::sparse_tar("zeros", 60 << 30, &support::noise(0, 2 << 20)),
    )
    .await;
    assert!(blob_len > 1 << 20);
    // Manifest and config fit in the first 64 KiB; the layer does not.
    let proxy = Proxy::start(&reg.addr, support::STALL, 64 * 1024).await;
    let fs = Tmpfs::new("64m");
    let timeout = Duration::from_secs(2);
    let cfg = RegistryConfig {
        progress_timeout: timeout,
        ..RegistryConfig::default()
    };
    let store = ImageStore::open(&fs.path(), cfg).await.unwrap();
    let before = fs.used();
    let peak = Peak::start(&fs);
    let started = Instant::now();
    let e = store
        .pull(
            &format!("{}/berth-test/sparse-slow:latest", proxy.addr),
            None,
        )
        .await
        .unwrap_err();
    let took = started.elapsed();
    let peak = peak.stop() - before;
    eprintln!("pull answered after {took:?} ({peak} bytes used at the peak): {e}");
    // What was downloaded before the stall (< 64 KiB), and no zeros.
    assert!(peak < 1 << 20, "{peak} bytes used at the peak");
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    // The pull waits for its unpackers before it answers: it answers soon
    // after the timeout only if the busy one stopped at once.
    assert!(took < timeout + Duration::from_secs(3), "{took:?}");
    assert!(store.list().is_empty());
    assert_nothing_left(&fs.path());
    let grown = fs.used().saturating_sub(before);
    assert!(grown < 1 << 20, "the store grew by {grown} bytes");
    // And it stays so: no thread is still writing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_nothing_left(&fs.path());
}
