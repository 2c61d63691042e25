//! One layer of a pull: from the stored blob when there is one, else
//! downloaded and unpacked in one pass.

use std::fs::File;
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::{mpsc, Semaphore, SemaphorePermit};

use crate::error::Error;
use crate::layer::{self, Active, ChannelReader, LayerJob, Msg, Progress};
use crate::pull::progress::{ByteTicker, LayerState, Reporter};
use crate::registry::remote::Remote;
use crate::store::{join_err, Inner};

/// What one layer of a pull works with ([`Inner::ensure_layer`]).
pub(super) struct LayerCtx<'a> {
    pub remote: &'a Remote,
    pub progress: &'a Arc<Progress>,
    pub active: &'a Arc<Active>,
    pub downloads: &'a Semaphore,
    pub unpacks: &'a Semaphore,
    pub report: LayerReport<'a>,
}

/// One layer's line to its pull's [`Reporter`].
#[derive(Clone, Copy)]
pub(super) struct LayerReport<'a> {
    pub reporter: &'a Reporter,
    pub index: usize,
}

impl LayerReport<'_> {
    pub fn state(&self, state: LayerState) {
        self.reporter.layer(self.index, state);
    }

    fn bytes(&self, received: u64) {
        self.reporter.bytes(self.index, received);
    }
}

/// How often a long layer download logs its progress (at debug).
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Bytes per second since `since`.
fn rate(bytes: u64, since: std::time::Instant) -> u64 {
    let secs = since.elapsed().as_secs_f64();
    if secs > 0.0 {
        (bytes as f64 / secs) as u64
    } else {
        bytes
    }
}

impl Inner {
    /// Makes sure snapshot `job.chain_id` exists: from the stored blob if
    /// there is one, else downloaded and unpacked in one pass. A layer holds
    /// one of `unpacks` while it is unpacked, and one of `downloads` only
    /// while its bytes arrive: the next layer's download starts while this
    /// one finishes (its last chunks, the syncfs that makes it durable).
    pub(super) async fn ensure_layer(
        self: &Arc<Self>,
        ctx: LayerCtx<'_>,
        job: LayerJob,
    ) -> Result<(), Error> {
        // What the layer makes: a snapshot, or (an artifact's file) a blob.
        let (key, made) = match job.file {
            false => (&job.chain_id, self.paths.snapshot(&job.chain_id)),
            true => (&job.digest, self.paths.blob(&job.digest)),
        };
        let lock = self.key_lock(key);
        let _guard = lock.lock().await;
        if made.exists() {
            ctx.report.state(LayerState::AlreadyPresent);
            return Ok(());
        }
        let _unpacking = ctx
            .unpacks
            .acquire()
            .await
            .map_err(|_| Error::Internal("unpack semaphore closed".into()))?;
        if self.paths.blob(&job.digest).is_file() {
            return self.unpack_stored(&ctx, job).await;
        }
        let downloading = ctx
            .downloads
            .acquire()
            .await
            .map_err(|_| Error::Internal("download semaphore closed".into()))?;
        self.download_and_unpack(&ctx, job, downloading).await
    }

    /// Unpacks the layer from its stored blob.
    async fn unpack_stored(
        self: &Arc<Self>,
        ctx: &LayerCtx<'_>,
        job: LayerJob,
    ) -> Result<(), Error> {
        let blob_path = self.paths.blob(&job.digest);
        let (inner, progress, guard) = (self.clone(), ctx.progress.clone(), ctx.active.enter());
        let chain_id = job.chain_id.clone();
        let usage = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            let file = File::open(&blob_path).map_err(|e| Error::io("open", &blob_path, e))?;
            layer::run_limited(
                &job,
                file,
                false,
                &inner.paths,
                &progress,
                &inner.cfg.unpack,
            )
        })
        .await
        .map_err(join_err)??;
        self.disk().usage.insert(chain_id, usage);
        ctx.report.state(LayerState::Unpacked);
        Ok(())
    }

    /// Downloads the layer and unpacks it as its bytes arrive; the download
    /// slot is given back as soon as the last byte is in.
    async fn download_and_unpack(
        self: &Arc<Self>,
        ctx: &LayerCtx<'_>,
        job: LayerJob,
        downloading: SemaphorePermit<'_>,
    ) -> Result<(), Error> {
        let (remote, progress, report) = (ctx.remote, ctx.progress, ctx.report);
        let blob = remote.blob_stream(&job.digest, job.size).await?;
        let (mut stream, host) = (blob.stream, blob.host);
        progress.touch();
        let started = std::time::Instant::now();
        let mut last_report = started;
        let (tx, rx) = mpsc::channel::<Msg>(16);
        let (inner, progress2, guard) = (self.clone(), progress.clone(), ctx.active.enter());
        let job2 = job.clone();
        let unpack = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            layer::run_limited(
                &job2,
                ChannelReader::new(rx),
                true,
                &inner.paths,
                &progress2,
                &inner.cfg.unpack,
            )
        });
        let mut received = 0u64;
        let mut ticker = ByteTicker::new();
        let download: Result<(), Error> = loop {
            match stream.next().await {
                Some(Ok(bytes)) => {
                    received += bytes.len() as u64;
                    progress.touch();
                    if ticker.due() {
                        report.bytes(received);
                    }
                    if last_report.elapsed() >= REPORT_EVERY {
                        last_report = std::time::Instant::now();
                        tracing::debug!(image = %job.reference, layer = %job.digest, from = %host, received, size = job.size, bytes_per_sec = rate(received, started), "downloading layer");
                    }
                    if received > job.size {
                        break Err(Error::bad(
                            &job.reference,
                            &job.digest,
                            "more bytes than the manifest says",
                        ));
                    }
                    if tx.send(Msg::Data(bytes)).await.is_err() {
                        break Ok(()); // the unpacker stopped: its error tells why
                    }
                }
                Some(Err(e)) => break Err(remote.stream_err(&job.digest, &host, &e)),
                None => {
                    let _ = tx.send(Msg::End).await;
                    report.state(LayerState::Downloaded);
                    break Ok(());
                }
            }
        };
        drop(tx);
        // What is left (at most the channel's chunks, then the syncfs) needs
        // no download slot.
        drop(downloading);
        let unpacked = unpack.await.map_err(join_err)?;
        download?;
        let usage = unpacked?;
        tracing::debug!(image = %job.reference, layer = %job.digest, from = %host, bytes = received, seconds = format!("{:.2}", started.elapsed().as_secs_f64()), bytes_per_sec = rate(received, started), "layer downloaded and unpacked");
        if !job.file {
            self.disk().usage.insert(job.chain_id, usage);
        }
        report.state(LayerState::Pulled);
        Ok(())
    }
}
