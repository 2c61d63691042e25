//! One layer in one pass, on a blocking thread: the compressed bytes (from
//! the download, or from a blob already stored) are hashed, counted, written
//! to a temp blob, decompressed (gzip, zstd or none, told by magic bytes),
//! hashed again (the diff id) and applied onto an empty temp snapshot dir.
//! Only when the digest, the size and the diff id all match are the blob and
//! the snapshot renamed into place; on any failure both temp copies go.
//!
//! The layer is applied *before* its digest is verified (the digest is only
//! known once the last byte arrived). That is safe only because of the bounds
//! of [`UnpackLimits`]: the manifest's size of the blob, the uncompressed
//! stream, the files' apparent sizes, the entry count and each entry's headers
//! are all bounded, sparse files take only the space of their data, and the
//! thread stops as soon as its pull fails or times out ([`Progress::cancel`],
//! or the download side of a [`ChannelReader`] dropped without finishing).
//! Until the checks pass, everything lives under a temp name that a restart
//! removes; a snapshot never gets its name unless it is whole.

use berth_lock::MutexExt;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::error::Error;
use crate::store::content::{self, Paths, Usage, TMP_PREFIX};
use crate::unpack::{
    check_free_space, show_bytes, start_writeback, Applier, UnpackError, UnpackLimits,
    WRITEBACK_EVERY,
};

/// What one layer must turn out to be.
#[derive(Debug, Clone)]
pub(crate) struct LayerJob {
    /// The image reference, for errors.
    pub reference: String,
    /// Digest and size of the compressed blob, from the manifest.
    pub digest: String,
    pub size: u64,
    /// Digest of the uncompressed tar, from the image config (none for an
    /// artifact's layer: its blob's digest is all there is to check).
    pub diff_id: Option<String>,
    /// The snapshot to make.
    pub chain_id: String,
    /// chown entries to their owners (we are root).
    pub same_owner: bool,
    /// An artifact's layer that is no tar: a file, stored as its blob only
    /// (the artifact's snapshot links it).
    pub file: bool,
}

/// A message from the download to the unpacking thread.
pub(crate) enum Msg {
    Data(Bytes),
    /// The download finished; without it a closed channel means "aborted".
    End,
}

/// Time of the last byte seen by a pull, shared by its downloads and
/// unpackers; and whether the pull was given up.
#[derive(Debug)]
pub(crate) struct Progress {
    start: Instant,
    last_ms: AtomicU64,
    cancelled: AtomicBool,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
        }
    }

    /// The pull failed or timed out: its unpacking threads stop at their
    /// next read or chunk, and clean up.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether [`Progress::cancel`] was called.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Something moved.
    pub(crate) fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `timeout`.
    pub(crate) async fn stalled(&self, timeout: std::time::Duration) {
        loop {
            let last = std::time::Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = self.start + last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// Where a layer's compressed bytes come from: a stored blob, or the
/// download channel. Besides reading, it tells whether the bytes still to
/// come can no longer arrive, so an unpacker busy with what it already has
/// (a zip bomb, sparse holes) stops without waiting to read again.
pub(crate) trait Source: Read {
    /// A handle that answers "aborted?" while the source itself is borrowed.
    fn abort_probe(&self) -> AbortProbe {
        AbortProbe(None)
    }
}

impl Source for File {}
impl Source for &[u8] {}

/// Answers whether the download behind a [`ChannelReader`] was dropped
/// without sending [`Msg::End`]: the pull failed or timed out.
#[derive(Clone)]
pub(crate) struct AbortProbe(Option<Arc<Mutex<Channel>>>);

impl AbortProbe {
    pub(crate) fn aborted(&self) -> bool {
        match &self.0 {
            None => false,
            Some(ch) => ch.lock_unpoisoned().aborted(),
        }
    }
}

/// The receiving end of the download channel, and what was taken out of it
/// to look for the end.
struct Channel {
    rx: mpsc::Receiver<Msg>,
    /// Messages taken from `rx` by [`Channel::aborted`], to be read first.
    queued: VecDeque<Msg>,
    /// `Msg::End` is in `queued` or was read.
    end_seen: bool,
}

impl Channel {
    fn aborted(&mut self) -> bool {
        if self.end_seen || !self.rx.is_closed() {
            return false;
        }
        // Every sender is gone: what is still in the channel is all there
        // will ever be (at most its capacity). Without an End in it, the
        // download was given up.
        while let Ok(msg) = self.rx.try_recv() {
            self.end_seen |= matches!(msg, Msg::End);
            self.queued.push_back(msg);
        }
        !self.end_seen
    }

    fn next(&mut self) -> Option<Msg> {
        let msg = match self.queued.pop_front() {
            Some(msg) => Some(msg),
            None => self.rx.blocking_recv(),
        };
        self.end_seen |= matches!(msg, Some(Msg::End));
        msg
    }
}

/// Reads the download channel as a byte stream.
pub(crate) struct ChannelReader {
    channel: Arc<Mutex<Channel>>,
    current: Bytes,
    ended: bool,
}

impl ChannelReader {
    pub(crate) fn new(rx: mpsc::Receiver<Msg>) -> ChannelReader {
        ChannelReader {
            channel: Arc::new(Mutex::new(Channel {
                rx,
                queued: VecDeque::new(),
                end_seen: false,
            })),
            current: Bytes::new(),
            ended: false,
        }
    }
}

impl Source for ChannelReader {
    fn abort_probe(&self) -> AbortProbe {
        AbortProbe(Some(self.channel.clone()))
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if !self.current.is_empty() {
                let n = buf.len().min(self.current.len());
                buf[..n].copy_from_slice(&self.current.split_to(n));
                return Ok(n);
            }
            if self.ended {
                return Ok(0);
            }
            // Only this thread locks it (the probe runs here too), so the
            // blocking receive holds it without harm.
            let msg = self.channel.lock_unpoisoned().next();
            match msg {
                Some(Msg::Data(bytes)) => self.current = bytes,
                Some(Msg::End) => self.ended = true,
                None => return Err(io::Error::other("download aborted")),
            }
        }
    }
}

/// Hashes, counts and (optionally) stores the compressed bytes as they pass.
struct BlobReader<'a, R> {
    inner: R,
    hasher: Sha256,
    count: u64,
    limit: u64,
    too_big: bool,
    failed: bool,
    eof: bool,
    sink: Option<&'a mut File>,
    progress: &'a Progress,
    cancelled: &'a dyn Fn() -> bool,
    limits: &'a UnpackLimits,
    /// Bytes stored since the free space was last checked.
    written: std::cell::Cell<u64>,
    /// Bytes stored since the blob's writeback was last started.
    unflushed: u64,
    /// The free-space reserve was reached while storing the blob.
    no_space: Option<String>,
}

impl<R: Read> Read for BlobReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if (self.cancelled)() {
            self.failed = true;
            return Err(io::Error::other("unpacking cancelled"));
        }
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) => {
                self.failed = true;
                return Err(e);
            }
        };
        if n == 0 {
            self.eof = true;
            return Ok(0);
        }
        self.count += n as u64;
        if self.count > self.limit {
            self.too_big = true;
            return Err(io::Error::other("more bytes than the manifest says"));
        }
        self.hasher.update(&buf[..n]);
        if let Some(sink) = self.sink.as_mut() {
            use std::os::fd::AsFd;
            match check_free_space(sink.as_fd(), self.limits, &self.written, n as u64)? {
                Ok(()) => {}
                Err(why) => {
                    self.no_space = Some(why.clone());
                    return Err(io::Error::other(why));
                }
            }
            sink.write_all(&buf[..n])?;
            self.unflushed += n as u64;
            if self.unflushed >= WRITEBACK_EVERY {
                start_writeback(sink.as_fd());
                self.unflushed = 0;
            }
        }
        self.progress.touch();
        Ok(n)
    }
}

/// Hashes the uncompressed tar (the diff id).
struct DiffReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for DiffReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Unpacks `src` into snapshot `job.chain_id` within `limits`; with
/// `store_blob`, also keeps the compressed bytes as blob `job.digest`.
/// Returns the snapshot's usage. Stops early, leaving nothing, once
/// `progress` is cancelled or the download behind `src` is dropped. An
/// artifact's file ([`LayerJob::file`]) is stored as its blob only (see
/// [`store_file`]).
pub(crate) fn run_limited(
    job: &LayerJob,
    src: impl Source,
    store_blob: bool,
    paths: &Paths,
    progress: &Progress,
    limits: &UnpackLimits,
) -> Result<Usage, Error> {
    let io_err = |op, path: &Path| {
        let path = path.to_path_buf();
        move |e| Error::io(op, path, e)
    };
    check_size(job, limits)?;
    if job.file {
        debug_assert!(store_blob, "an artifact's file is its blob");
        return store_file(job, src, paths, progress, limits).map(|()| Usage::default());
    }
    let (tmp_dir, fs_dir) = new_snapshot(paths)?;
    let mut tmp_blob = if store_blob {
        Some(
            tempfile::Builder::new()
                .prefix("layer-")
                .tempfile_in(&paths.ingest)
                .map_err(io_err("create temp blob in", &paths.ingest))?,
        )
    } else {
        None
    };
    let sink = tmp_blob.as_mut().map(|t| t.as_file_mut());
    let reading = Reading {
        job,
        paths,
        progress,
        limits,
    };
    let diff_id = reading.read(src, sink, &fs_dir, |r, cancelled| {
        unpack_stream(r, &fs_dir, job.same_owner, limits, cancelled)
    })?;
    if let Some(want) = job.diff_id.as_ref().filter(|want| **want != diff_id) {
        return Err(Error::bad(
            &job.reference,
            &job.digest,
            format!("uncompressed content hashes to {diff_id}, the config says {want}"),
        ));
    }

    if let Some(tmp) = tmp_blob {
        let dest = paths.blob(&job.digest);
        content::persist(tmp, &dest).map_err(io_err("store blob", &dest))?;
    }
    let usage = content::measure(&fs_dir).map_err(io_err("measure", &fs_dir))?;
    commit_snapshot(paths, tmp_dir, &job.chain_id, usage)?;
    Ok(usage)
}

/// A snapshot being made: its temp dir under `snapshots/` (removed when
/// dropped) and its empty `fs` dir in it.
pub(crate) fn new_snapshot(paths: &Paths) -> Result<(tempfile::TempDir, PathBuf), Error> {
    let tmp_dir = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .tempdir_in(&paths.snapshots)
        .map_err(|e| Error::io("create temp snapshot in", &paths.snapshots, e))?;
    let fs_dir = tmp_dir.path().join("fs");
    std::fs::create_dir(&fs_dir).map_err(|e| Error::io("create", &fs_dir, e))?;
    Ok((tmp_dir, fs_dir))
}

/// Gives the whole snapshot in `tmp_dir` ([`new_snapshot`]) its name
/// `chain_id`, with its `usage`: durable before it gets its name (one
/// syncfs instead of an fsync per file), the rename synced too.
pub(crate) fn commit_snapshot(
    paths: &Paths,
    tmp_dir: tempfile::TempDir,
    chain_id: &str,
    usage: Usage,
) -> Result<(), Error> {
    let usage_file = tmp_dir.path().join("usage.json");
    std::fs::write(&usage_file, serde_json::to_vec(&usage).unwrap_or_default())
        .map_err(|e| Error::io("write", &usage_file, e))?;
    let dir = File::open(tmp_dir.path()).map_err(|e| Error::io("open", tmp_dir.path(), e))?;
    nix::unistd::syncfs(&dir).map_err(|e| Error::io("syncfs", tmp_dir.path(), e.into()))?;
    let dest = paths.snapshot(chain_id);
    let tmp_path = tmp_dir.keep();
    if let Err(e) = std::fs::rename(&tmp_path, &dest) {
        let _ = std::fs::remove_dir_all(&tmp_path);
        return Err(Error::io("rename snapshot to", dest, e));
    }
    content::sync_dir(&paths.snapshots).map_err(|e| Error::io("fsync", &paths.snapshots, e))
}

/// Refuses a layer whose manifest size is beyond `max_layer_bytes`, before
/// a byte of it is read.
fn check_size(job: &LayerJob, limits: &UnpackLimits) -> Result<(), Error> {
    if job.size <= limits.max_layer_bytes {
        return Ok(());
    }
    Err(Error::bad(
        &job.reference,
        &job.digest,
        format!(
            "layer refused: the manifest gives it {}, more than the limit of {} \
             (unpack limit max_layer_bytes)",
            show_bytes(job.size),
            show_bytes(limits.max_layer_bytes)
        ),
    ))
}

/// Stores an artifact's file layer as blob `job.digest` from `src`, within
/// `limits` (its size, the free-space reserve), checked against the
/// manifest's size and digest, readable by all (0444): the artifact's
/// snapshot links it (see `artifact.rs`); the blob directory itself stays
/// closed to others. Nothing is left on a failure.
fn store_file(
    job: &LayerJob,
    src: impl Source,
    paths: &Paths,
    progress: &Progress,
    limits: &UnpackLimits,
) -> Result<(), Error> {
    let ingest = &paths.ingest;
    let mut tmp = tempfile::Builder::new()
        .prefix("file-")
        .tempfile_in(ingest)
        .map_err(|e| Error::io("create temp blob in", ingest, e))?;
    let reading = Reading {
        job,
        paths,
        progress,
        limits,
    };
    reading.read(src, Some(tmp.as_file_mut()), ingest, |r, _| {
        io::copy(r, &mut io::sink())
            .map(drop)
            .map_err(UnpackError::Read)
    })?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))
        .map_err(|e| Error::io("chmod", tmp.path(), e))?;
    let dest = paths.blob(&job.digest);
    content::persist(tmp, &dest).map_err(|e| Error::io("store blob", &dest, e))
}

/// One layer's blob being read: what it must be, within which limits.
#[derive(Clone, Copy)]
struct Reading<'a> {
    job: &'a LayerJob,
    paths: &'a Paths,
    progress: &'a Progress,
    limits: &'a UnpackLimits,
}

impl Reading<'_> {
    /// Reads `src` through `consume` (the unpacker, or a plain copy),
    /// hashing and counting the bytes and, with `sink`, storing them as
    /// they pass; then checks that they are the blob the manifest names
    /// (size, digest). `root` is where `consume` writes (for the paths of
    /// its I/O errors).
    fn read<S: Source, T>(
        &self,
        src: S,
        sink: Option<&mut File>,
        root: &Path,
        consume: impl FnOnce(&mut dyn Read, &dyn Fn() -> bool) -> Result<T, UnpackError>,
    ) -> Result<T, Error> {
        let Reading {
            job,
            paths,
            progress,
            limits,
        } = *self;
        let probe = src.abort_probe();
        let cancelled = || progress.is_cancelled() || probe.aborted();
        let mut blob = BlobReader {
            inner: src,
            hasher: Sha256::new(),
            count: 0,
            limit: job.size,
            too_big: false,
            failed: false,
            eof: false,
            sink,
            progress,
            cancelled: &cancelled,
            limits,
            written: std::cell::Cell::new(u64::MAX),
            unflushed: 0,
            no_space: None,
        };
        let consumed = consume(&mut blob, &cancelled);
        let bad = |reason: String| Error::bad(&job.reference, &job.digest, reason);
        if matches!(consumed, Err(UnpackError::Cancelled)) || cancelled() {
            return Err(Error::Internal(format!(
                "{}: layer {}: download aborted (the pull failed or timed out); unpacking stopped",
                job.reference, job.digest
            )));
        }
        if let Some(why) = blob.no_space.take() {
            return Err(Error::io(
                "store blob in",
                &paths.ingest,
                io::Error::new(io::ErrorKind::StorageFull, why),
            ));
        }
        if blob.failed {
            return Err(Error::Internal(format!(
                "{}: layer {}: download aborted",
                job.reference, job.digest
            )));
        }
        if blob.too_big {
            return Err(bad(format!(
                "blob is larger than the {} bytes the manifest says",
                job.size
            )));
        }
        if blob.eof && blob.count < job.size {
            return Err(bad(format!(
                "truncated: {} of {} bytes",
                blob.count, job.size
            )));
        }
        let value = match consumed {
            Ok(value) => value,
            Err(UnpackError::Io { entry, op, source }) => {
                return Err(Error::io(op, root.join(entry), source));
            }
            Err(UnpackError::NoSpace { entry, reason }) => {
                return Err(Error::io(
                    "unpack",
                    root.join(entry),
                    io::Error::new(io::ErrorKind::StorageFull, reason),
                ));
            }
            Err(e) => return Err(bad(format!("layer refused: {e}"))),
        };
        let digest = content::finish_digest(std::mem::take(&mut blob.hasher));
        if blob.count != job.size {
            return Err(bad(format!(
                "{} bytes, the manifest says {}",
                blob.count, job.size
            )));
        }
        if digest != job.digest {
            return Err(bad(format!("digest mismatch: content hashes to {digest}")));
        }
        Ok(value)
    }
}

/// Unpacks one layer onto the empty directory `root` within `limits`, with
/// the code a pull runs (which wraps it in the checks of the blob's size and
/// digest and the diff id, and renames the result into place): `src` is a
/// tar stream, gzip- or zstd-compressed or not (told by its magic bytes),
/// read to its end. Returns the diff id (sha256 of the uncompressed stream).
/// `same_owner` (root only) keeps the entries' owners and allows device
/// nodes. Nothing is written outside `root`; on an error, what was already
/// written under `root` stays (the pull removes its temp dir).
pub fn unpack_layer(
    src: &mut impl Read,
    root: &Path,
    same_owner: bool,
    limits: &UnpackLimits,
) -> Result<String, UnpackError> {
    unpack_stream(src, root, same_owner, limits, &|| false)
}

/// Decompresses and applies the layer; returns its diff id. Reads the whole
/// input to its end, so the caller's digest covers every byte.
fn unpack_stream<R: Read + ?Sized>(
    src: &mut R,
    fs_dir: &Path,
    same_owner: bool,
    limits: &UnpackLimits,
    cancelled: &dyn Fn() -> bool,
) -> Result<String, UnpackError> {
    let mut applier = Applier::new(fs_dir, same_owner).map_err(|e| UnpackError::Io {
        entry: fs_dir.to_path_buf(),
        op: "open snapshot root",
        source: e,
    })?;
    let diff_id = {
        let mut buffered = BufReader::with_capacity(256 * 1024, &mut *src);
        let head = buffered.fill_buf().map_err(UnpackError::Read)?.to_vec();
        let decoded: Box<dyn Read + '_> = if head.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Box::new(zstd::stream::read::Decoder::with_buffer(buffered).map_err(UnpackError::Read)?)
        } else {
            Box::new(buffered)
        };
        let mut diff = DiffReader {
            inner: decoded,
            hasher: Sha256::new(),
        };
        // Reads the tar to its end: the end blocks and any padding count for
        // the diff id.
        applier.apply_stream(&mut diff, limits, cancelled)?;
        content::finish_digest(diff.hasher)
    };
    // Anything after the compressed stream still counts for the digest
    // (bounded by the manifest's size, itself within the limits).
    io::copy(src, &mut io::sink()).map_err(UnpackError::Read)?;
    Ok(diff_id)
}

/// Counts unpacking threads of one pull, so a failed pull can wait for their
/// cleanup before it answers.
#[derive(Debug, Default)]
pub(crate) struct Active {
    count: std::sync::Mutex<usize>,
    idle: tokio::sync::Notify,
}

/// Held by one unpacking thread.
pub(crate) struct ActiveGuard(Arc<Active>);

impl Active {
    pub(crate) fn enter(self: &Arc<Self>) -> ActiveGuard {
        *self.count.lock_unpoisoned() += 1;
        ActiveGuard(self.clone())
    }

    /// Waits until no unpacking thread runs, at most `limit`.
    pub(crate) async fn wait_idle(&self, limit: std::time::Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let notified = self.idle.notified();
                if *self.count.lock_unpoisoned() == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let mut n = self.0.count.lock_unpoisoned();
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests;
