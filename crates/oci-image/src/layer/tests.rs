use super::*;
use crate::error::ErrorKind;

/// `run_limited` with the default limits, as the store runs it.
fn run_default(
    job: &LayerJob,
    src: impl Source,
    store_blob: bool,
    paths: &Paths,
    progress: &Progress,
) -> Result<Usage, Error> {
    run_limited(
        job,
        src,
        store_blob,
        paths,
        progress,
        &UnpackLimits::default(),
    )
}

fn gz_tar(files: &[(&str, &[u8])]) -> (Vec<u8>, String) {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, path, *data).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let diff_id = content::sha256_digest(&tar);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&tar).unwrap();
    (enc.finish().unwrap(), diff_id)
}

fn setup() -> (tempfile::TempDir, Paths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    paths.create_dirs().unwrap();
    (dir, paths)
}

fn job(blob: &[u8], diff_id: &str) -> LayerJob {
    LayerJob {
        reference: "test".into(),
        digest: content::sha256_digest(blob),
        size: blob.len() as u64,
        diff_id: Some(diff_id.into()),
        chain_id: diff_id.into(),
        same_owner: false,
        file: false,
    }
}

fn assert_empty(paths: &Paths) {
    for dir in [&paths.snapshots, &paths.ingest, &paths.blobs] {
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert!(left.is_empty(), "{} not empty: {left:?}", dir.display());
    }
}

#[test]
fn a_good_layer_becomes_a_blob_and_a_snapshot() {
    let (_dir, paths) = setup();
    let (blob, diff_id) = gz_tar(&[("etc/hostname", b"berth\n")]);
    let j = job(&blob, &diff_id);
    let usage = run_default(&j, &blob[..], true, &paths, &Progress::new()).unwrap();
    assert!(usage.inodes >= 3);
    assert_eq!(std::fs::read(paths.blob(&j.digest)).unwrap(), blob);
    assert_eq!(
        std::fs::read(paths.snapshot_fs(&j.chain_id).join("etc/hostname")).unwrap(),
        b"berth\n"
    );
}

#[test]
fn digest_size_and_diff_id_mismatches_leave_nothing() {
    let (_dir, paths) = setup();
    let (blob, diff_id) = gz_tar(&[("a", b"a")]);
    let progress = Progress::new();

    let mut j = job(&blob, &diff_id);
    j.digest = content::sha256_digest(b"something else");
    let e = run_default(&j, &blob[..], true, &paths, &progress).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss);
    assert!(e.to_string().contains("digest mismatch"), "{e}");
    assert_empty(&paths);

    let mut j = job(&blob, &diff_id);
    j.size -= 1;
    let e = run_default(&j, &blob[..], true, &paths, &progress).unwrap_err();
    assert!(e.to_string().contains("larger"), "{e}");
    assert_empty(&paths);

    let j = job(&blob, &diff_id);
    let e = run_default(&j, &blob[..blob.len() - 5], true, &paths, &progress).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss);
    assert_empty(&paths);

    let j = job(&blob, &content::sha256_digest(b"other tar"));
    let e = run_default(&j, &blob[..], true, &paths, &progress).unwrap_err();
    assert!(e.to_string().contains("the config says"), "{e}");
    assert_empty(&paths);
}

#[test]
fn a_hostile_layer_leaves_nothing() {
    let (dir, paths) = setup();
    // The tar crate refuses to build `..` paths, so write the name raw.
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..12].copy_from_slice(b"../../escape");
    h.set_size(1);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &b"x"[..]).unwrap();
    let tar = b.into_inner().unwrap();
    let j = job(&tar, &content::sha256_digest(&tar));
    let e = run_default(&j, &tar[..], true, &paths, &Progress::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss);
    assert!(e.to_string().contains(".."), "{e}");
    assert_empty(&paths);
    assert!(!dir.path().join("escape").exists());
    assert!(!dir.path().parent().unwrap().join("escape").exists());
}

#[test]
fn an_aborted_download_is_not_taken_for_the_end() {
    let (_dir, paths) = setup();
    let (blob, diff_id) = gz_tar(&[("a", b"a")]);
    let j = job(&blob, &diff_id);
    let (tx, rx) = mpsc::channel(4);
    tx.try_send(Msg::Data(Bytes::copy_from_slice(&blob[..10])))
        .unwrap();
    drop(tx);
    let e = run_default(&j, ChannelReader::new(rx), true, &paths, &Progress::new()).unwrap_err();
    assert!(e.to_string().contains("aborted"), "{e}");
    assert_empty(&paths);
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Peak resident memory of this test process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The layer: a gzip of under 100 bytes whose GNU sparse entry
/// is 1 TiB of zeros.
fn tib_bomb() -> (Vec<u8>, String) {
    let tar = crate::unpack::tests::sparse_tar("zeros", 1 << 40, &[]);
    let blob = gz(&tar);
    assert!(blob.len() < 100, "{} bytes", blob.len());
    (blob, content::sha256_digest(&tar))
}

#[test]
fn a_tiny_layer_of_1_tib_of_zeros_is_refused_at_once() {
    let (dir, paths) = setup();
    let (blob, diff_id) = tib_bomb();
    let j = job(&blob, &diff_id);
    let started = Instant::now();
    let e = run_default(&j, &blob[..], true, &paths, &Progress::new()).unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(e.kind(), ErrorKind::DataLoss);
    let msg = e.to_string();
    assert!(msg.contains(&j.digest), "{msg}");
    assert!(
        msg.contains("max_layer_bytes") && msg.contains("64 GiB"),
        "{msg}"
    );
    assert_empty(&paths);
    let used = crate::unpack::tests::du(dir.path());
    assert!(used < 1 << 20, "{used} bytes used");
    assert!(peak_rss() < 512 << 20, "peak RSS {}", peak_rss());
}

#[test]
fn limit_errors_name_the_layer_and_the_limit() {
    let (_dir, paths) = setup();
    let big = vec![7u8; 3 << 20];
    let (blob, diff_id) = gz_tar(&[("big", &big)]);
    let j = job(&blob, &diff_id);
    let limits = UnpackLimits {
        max_layer_bytes: 2 << 20,
        ..UnpackLimits::default()
    };
    let e = run_limited(&j, &blob[..], true, &paths, &Progress::new(), &limits).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss);
    let msg = e.to_string();
    assert!(msg.contains(&j.digest), "{msg}");
    assert!(
        msg.contains("2097152 bytes (2 MiB)") && msg.contains("max_layer_bytes"),
        "{msg}"
    );
    assert_empty(&paths);

    // A manifest size beyond the limit is refused before a byte is read.
    let mut j = job(&blob, &diff_id);
    j.size = 3 << 20;
    let e = run_limited(&j, io::empty(), true, &paths, &Progress::new(), &limits).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss);
    assert!(e.to_string().contains("the manifest gives it"), "{e}");
    assert_empty(&paths);
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn the_free_space_reserve_fails_the_layer_as_a_local_error() {
    let fs = crate::unpack::tests::FullFs::new();
    let paths = Paths::new(&fs.dir.path().join("store"));
    paths.create_dirs().unwrap();
    let (blob, diff_id) = gz_tar(&[("a", b"a")]);
    let j = job(&blob, &diff_id);
    // Storing the blob, then (from a stored blob) unpacking.
    for store_blob in [true, false] {
        let e = run_default(&j, &blob[..], store_blob, &paths, &Progress::new()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
        assert!(e.to_string().contains("min_free_bytes"), "{e}");
        assert_empty(&paths);
    }
}

impl Source for io::Empty {}

/// Runs `run_limited` on a thread with limits that let the 1 TiB sparse
/// file through (minutes of reading zeros); returns its result, or None
/// if it did not end within 5 s of `stop` being called.
fn stopped_mid_layer<S: Source + Send + 'static>(
    src: S,
    stop: impl FnOnce(&Progress),
) -> (Option<Result<Usage, Error>>, tempfile::TempDir, Paths) {
    let (dir, paths) = setup();
    let (blob, diff_id) = tib_bomb();
    let j = job(&blob, &diff_id);
    let progress = Arc::new(Progress::new());
    let limits = UnpackLimits {
        max_layer_bytes: 2 << 40,
        ..UnpackLimits::default()
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (p2, paths2) = (progress.clone(), paths.clone());
    std::thread::spawn(move || {
        let r = run_limited(&j, src, true, &paths2, &p2, &limits);
        let _ = done_tx.send(r);
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Busy with the holes, writing nothing.
    assert!(done_rx.try_recv().is_err(), "ended before being stopped");
    assert!(crate::unpack::tests::du(dir.path()) < 1 << 20);
    stop(&progress);
    let r = done_rx.recv_timeout(std::time::Duration::from_secs(5)).ok();
    (r, dir, paths)
}

#[test]
fn a_dropped_download_stops_its_unpacker_mid_layer() {
    let (blob, _) = tib_bomb();
    let (tx, rx) = mpsc::channel(4);
    tx.try_send(Msg::Data(Bytes::from(blob))).unwrap();
    let mut tx = Some(tx);
    // The pull fails or times out: its future, and the sender, go away.
    let (r, dir, paths) = stopped_mid_layer(ChannelReader::new(rx), |_| drop(tx.take()));
    let e = r.expect("the unpacker still runs").unwrap_err();
    assert!(e.to_string().contains("aborted"), "{e}");
    assert_empty(&paths);
    assert!(crate::unpack::tests::du(dir.path()) < 1 << 20);
}

#[test]
fn a_cancelled_pull_stops_its_unpacker_mid_layer() {
    let (blob, _) = tib_bomb();
    let (r, dir, paths) = stopped_mid_layer(std::io::Cursor::new(blob), Progress::cancel);
    let e = r.expect("the unpacker still runs").unwrap_err();
    assert!(e.to_string().contains("aborted"), "{e}");
    assert_empty(&paths);
    assert!(crate::unpack::tests::du(dir.path()) < 1 << 20);
}

impl Source for std::io::Cursor<Vec<u8>> {}
