//! The pull pipeline: resolve a reference, check its documents, fetch and
//! unpack its layers concurrently under a no-progress watchdog, and record
//! the image in the store; with progress for the watchers of a pull.

pub(crate) mod artifact;
mod fetch;
pub(crate) mod progress;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::error::Error;
use crate::layer::{Active, LayerJob, Progress};
use crate::parse;
use crate::reference::{self, Reference};
use crate::registry::auth::Auth;
use crate::registry::remote::{self, Remote, Resolved};
use crate::store::content;
use crate::store::image::{self, Image, Layer};
use crate::store::{join_err, Inner, Registration};
use fetch::{LayerCtx, LayerReport};
use progress::{LayerState, Reporter, ResolvedImage};

impl Inner {
    /// One pull, with the no-progress watchdog around it.
    pub(crate) async fn pull(
        self: Arc<Self>,
        reference: Reference,
        auth: Option<Auth>,
        reporter: &Reporter,
    ) -> Result<Image, Error> {
        let started = std::time::Instant::now();
        let progress = Arc::new(Progress::new());
        let active = Arc::new(Active::default());
        let timeout = self.cfg.progress_timeout;
        let work =
            self.clone()
                .pull_work(&reference, auth, progress.clone(), active.clone(), reporter);
        let result = if timeout.is_zero() {
            work.await
        } else {
            tokio::select! {
                r = work => r,
                _ = progress.stalled(timeout) => Err(Error::ProgressTimeout {
                    reference: reference.to_string(),
                    timeout,
                }),
            }
        };
        if result.is_err() {
            progress.cancel();
            // Unpacking threads see their input vanish and clean up; wait so
            // that nothing of a failed pull is left when it answers.
            active.wait_idle(std::time::Duration::from_secs(60)).await;
        }
        match &result {
            Ok(image) => {
                let secs = started.elapsed().as_secs_f64();
                tracing::info!(image = %reference, id = %image.id, size = image.size, seconds = format!("{secs:.2}"), "pulled")
            }
            Err(e) => tracing::warn!(image = %reference, error = %e, "pull failed"),
        }
        result
    }

    async fn pull_work(
        self: Arc<Self>,
        reference: &Reference,
        auth: Option<Auth>,
        progress: Arc<Progress>,
        active: Arc<Active>,
        reporter: &Reporter,
    ) -> Result<Image, Error> {
        let name = reference.to_string();
        let (remote, resolved) = Remote::resolve(
            &self.cfg,
            &self.clients,
            reference,
            auth.as_ref(),
            &progress,
        )
        .await?;
        let manifest_digests: Vec<String> =
            resolved.documents.iter().map(|(d, _)| d.clone()).collect();
        let _manifest_lease = self.lease(manifest_digests.clone());
        let _config_lease = self.lease(vec![resolved.config.digest.clone()]);
        let checked = self
            .check_documents(&name, &remote, &resolved, &progress)
            .await?;
        let layers = &checked.layers;
        let mut keys: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
        keys.extend(layers.iter().map(|l| l.chain_id.clone()));
        let _layer_lease = self.lease(keys);
        let id = match checked.artifact_type {
            Some(_) => resolved.manifest_digest.clone(),
            None => resolved.config.digest.clone(),
        };
        reporter.resolved(
            ResolvedImage {
                reference: name.clone(),
                digest: resolved.top_digest.clone(),
                id: id.clone(),
            },
            layers.iter().map(|l| (l.digest.clone(), l.size)).collect(),
        );
        let layers_ctx = LayersCtx {
            name: &name,
            remote: &remote,
            progress: &progress,
            active: &active,
            reporter,
        };
        self.fetch_layers(layers_ctx, &checked).await?;
        let registration = checked.registration(id, reference, &resolved, manifest_digests);
        let inner = self.clone();
        let mut images = tokio::task::spawn_blocking(move || inner.register(vec![registration]))
            .await
            .map_err(join_err)??;
        images
            .pop()
            .ok_or_else(|| Error::Internal(format!("{name}: registered no image")))
    }

    /// Checks what the registry resolved before any layer is fetched (the
    /// layer count and sizes, an artifact's whole layer list), stores the
    /// manifest documents and the config, and parses the config (an
    /// artifact's is kept as it is, never parsed) and the layers.
    async fn check_documents(
        &self,
        name: &str,
        remote: &Remote,
        resolved: &Resolved,
        progress: &Arc<Progress>,
    ) -> Result<Checked, Error> {
        let bad = |digest: &str, reason: String| Error::bad(name, digest, reason);
        let refused = |r: parse::Refused| bad(&r.digest, r.reason);
        reference::check_digest(&resolved.config.digest)
            .map_err(|r| bad(&resolved.config.digest, r))?;
        parse::check_layer_list(
            &resolved.manifest_digest,
            &resolved.layers,
            &self.cfg.unpack,
        )
        .map_err(refused)?;
        let artifact_type =
            parse::artifact_type(&resolved.config, resolved.artifact_type.as_deref());
        let artifact_layers = match artifact_type {
            Some(_) => Some(
                parse::artifact_layers(&resolved.manifest_digest, &resolved.layers)
                    .map_err(refused)?,
            ),
            None => None,
        };
        for (digest, bytes) in &resolved.documents {
            let path = self.paths.blob(digest);
            content::store_blob(&self.paths, digest, bytes)
                .map_err(|e| Error::io("store blob", &path, e))?;
        }
        let config_desc = &resolved.config;
        let config_bytes = remote
            .small_blob(
                config_desc,
                &resolved.manifest_digest,
                remote::MAX_CONFIG,
                progress,
            )
            .await?;
        let (config, layers) = match artifact_layers {
            Some(layers) => (None, layers),
            None => {
                let config = parse::config(&config_bytes)
                    .map_err(|reason| bad(&config_desc.digest, reason))?;
                let layers = parse::layers(
                    &config,
                    &config_desc.digest,
                    &resolved.manifest_digest,
                    &resolved.layers,
                )
                .map_err(refused)?;
                (Some(config), layers)
            }
        };
        let config_path = self.paths.blob(&config_desc.digest);
        content::store_blob(&self.paths, &config_desc.digest, &config_bytes)
            .map_err(|e| Error::io("store blob", &config_path, e))?;
        Ok(Checked {
            artifact_type,
            config,
            config_digest: config_desc.digest.clone(),
            config_size: config_bytes.len() as u64,
            layers,
        })
    }

    /// Makes every layer's snapshot (or an artifact's file blobs and the
    /// snapshot of its files), `max_concurrent_downloads` at a time.
    async fn fetch_layers(
        self: &Arc<Self>,
        at: LayersCtx<'_>,
        checked: &Checked,
    ) -> Result<(), Error> {
        let (artifact_type, layers) = (&checked.artifact_type, &checked.layers);
        // An artifact's files: their blobs are fetched only when the
        // snapshot of all of them is not there yet (leased by the caller).
        let files = artifact_type
            .as_ref()
            .and_then(|_| artifact::files_of(layers));
        let files_present = files
            .as_ref()
            .is_some_and(|(key, _)| self.paths.snapshot(key).is_dir());
        let downloads = Semaphore::new(self.cfg.max_concurrent_downloads);
        let unpacks = Semaphore::new(max_unpacks(self.cfg.max_concurrent_downloads));
        let jobs = layers.iter().enumerate().map(|(index, l)| {
            let is_file = artifact_type.is_some() && !parse::is_tar_layer(&l.media_type);
            let job = LayerJob {
                reference: at.name.to_string(),
                digest: l.digest.clone(),
                size: l.size,
                diff_id: artifact_type.is_none().then(|| l.diff_id.clone()),
                chain_id: l.chain_id.clone(),
                same_owner: self.same_owner,
                file: is_file,
            };
            let ctx = LayerCtx {
                remote: at.remote,
                progress: at.progress,
                active: at.active,
                downloads: &downloads,
                unpacks: &unpacks,
                report: LayerReport {
                    reporter: at.reporter,
                    index,
                },
            };
            let present = is_file && files_present;
            async move {
                if present {
                    ctx.report.state(LayerState::AlreadyPresent);
                    return Ok(());
                }
                self.ensure_layer(ctx, job).await
            }
        });
        futures_util::future::try_join_all(jobs).await?;
        if let Some((key, files)) = files {
            self.ensure_files(key, files).await?;
        }
        Ok(())
    }
}

/// What a pull works with while it fetches its layers.
struct LayersCtx<'a> {
    name: &'a str,
    remote: &'a Remote,
    progress: &'a Arc<Progress>,
    active: &'a Arc<Active>,
    reporter: &'a Reporter,
}

/// An image's documents, checked and stored: what is left to fetch.
struct Checked {
    artifact_type: Option<String>,
    /// `None` for an artifact.
    config: Option<parse::ConfigFile>,
    config_digest: String,
    config_size: u64,
    layers: Vec<Layer>,
}

impl Checked {
    /// The record of the image pulled as `reference`.
    fn registration(
        self,
        id: String,
        reference: &Reference,
        resolved: &Resolved,
        manifest_digests: Vec<String>,
    ) -> Registration {
        let artifact = self.artifact_type.map(|artifact_type| image::Artifact {
            artifact_type,
            config: self.config_digest,
        });
        let fresh = Image::fresh(
            id,
            self.config.as_ref(),
            self.config_size,
            self.layers,
            artifact,
        );
        Registration {
            fresh,
            tags: reference.tagged().into_iter().collect(),
            repo_digests: vec![reference.with_digest(&resolved.top_digest)],
            manifests: manifest_digests,
        }
    }
}

/// Layers of one pull unpacked at once for `downloads` downloaded at once:
/// as many again finishing (their last chunks, their syncfs) while the next
/// ones download. Each holds bounded buffers (the channel, the decoder's and
/// the copy buffer: about 2 MiB).
fn max_unpacks(downloads: usize) -> usize {
    downloads.saturating_mul(2)
}
