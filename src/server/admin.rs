//! berth's admin API (`berth.admin.v1.Images`, `proto/berth/admin/v1/`),
//! served beside CRI on the same socket and through the same instrument
//! layer (refused until start-up has finished, logged, errors mapped): the
//! import and export of image archives for `berth images import|export`.
//!
//! Import takes the archive's path, and the daemon opens it. The socket is
//! 0660 root, and whoever can connect to it can already run a privileged
//! pod that reads any file of the node, so reading a file its client names
//! gives nothing new; the path must still be absolute and name a regular
//! file or a directory, not a symlink, a device or a FIFO (opened with
//! O_NOFOLLOW | O_NONBLOCK), so that a mistyped path cannot hang or mislead
//! the daemon. Paths avoid copying gigabytes through gRPC into a spool file
//! the daemon would need anyway (archives are read by seeking), and are
//! what the import directory uses. Export streams the archive back in
//! chunks, so that the daemon never creates a file at a client's path.

use std::io::Write;
use std::path::PathBuf;

use cri_api::admin;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::instrument::{self, Ids};
use super::{deadline, BoxStream, Cri};
use crate::error::Error;

/// Bytes per export chunk (well under the 16 MiB message limit).
const CHUNK: usize = 1 << 20;
/// Chunks queued towards a slow client before the export waits.
const QUEUED_CHUNKS: usize = 4;

/// The tonic `berth.admin.v1.Images` service.
#[derive(Clone)]
pub struct AdminApi(pub std::sync::Arc<Cri>);

#[tonic::async_trait]
impl admin::images_server::Images for AdminApi {
    async fn import(
        &self,
        request: Request<admin::ImportRequest>,
    ) -> Result<Response<admin::ImportResponse>, Status> {
        let deadline = deadline::of(&request);
        let req = request.into_inner();
        let cri = self.0.clone();
        let ids = Ids {
            image: Some(req.path.clone()),
            ..Ids::default()
        };
        instrument::call(&self.0.gate, "admin.Import", ids, deadline, async move {
            cri.import_images(req).await
        })
        .await
    }

    type ExportStream = BoxStream<admin::ExportChunk>;

    async fn export(
        &self,
        request: Request<admin::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        let deadline = deadline::of(&request);
        let req = request.into_inner();
        let cri = self.0.clone();
        instrument::call(
            &self.0.gate,
            "admin.Export",
            Ids::default(),
            deadline,
            async move { cri.export_images(req) },
        )
        .await
    }
}

impl Cri {
    /// admin.Import: the archive at `req.path` into the image store.
    pub async fn import_images(
        &self,
        req: admin::ImportRequest,
    ) -> Result<admin::ImportResponse, Error> {
        let path = PathBuf::from(&req.path);
        if !path.is_absolute() {
            return Err(Error::InvalidArgument(format!(
                "archive path {:?} must be absolute",
                req.path
            )));
        }
        let images = self.images.import(&path).await?;
        Ok(admin::ImportResponse {
            images: images
                .into_iter()
                .map(|i| admin::ImportedImage {
                    id: i.id,
                    repo_tags: i.repo_tags,
                    repo_digests: i.repo_digests,
                })
                .collect(),
        })
    }

    /// admin.Export: the images as an OCI archive, streamed. Every image
    /// must exist before the first byte is sent.
    pub fn export_images(
        &self,
        req: admin::ExportRequest,
    ) -> Result<BoxStream<admin::ExportChunk>, Error> {
        if req.images.is_empty() {
            return Err(Error::InvalidArgument("no image to export".into()));
        }
        for name in &req.images {
            if self.images.get(name).is_none() {
                return Err(Error::NotFound {
                    kind: "image",
                    id: name.clone(),
                });
            }
        }
        let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
        let images = self.images.clone();
        tokio::spawn(async move {
            let writer = Chunks {
                tx: tx.clone(),
                buf: Vec::with_capacity(CHUNK),
            };
            if let Err(e) = images.export(req.images, writer).await {
                tracing::warn!(error = %e, "export failed");
                let _ = tx.send(Err(Error::from(e).into())).await;
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// Cuts the archive into chunks for the stream (on the export's blocking
/// thread: it waits while the client is slow).
struct Chunks {
    tx: mpsc::Sender<Result<admin::ExportChunk, Status>>,
    buf: Vec<u8>,
}

impl Chunks {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(admin::ExportChunk { data }))
            .map_err(|_| std::io::Error::other("the client went away"))
    }
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

impl Cri {
    /// Imports the `*.tar` archives of `images.import_dir` (if set and
    /// present), in name order; a failure is logged with the file's name
    /// and the next archive is imported.
    pub async fn import_dir(&self) {
        let dir = self.core.config.images.import_dir.clone();
        if dir.as_os_str().is_empty() {
            return;
        }
        let mut names = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "tar"))
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                return tracing::error!(dir = %dir.display(), error = %e, "reading the image import directory")
            }
        };
        names.sort();
        for path in names {
            match self.images.import(&path).await {
                Ok(images) => {
                    let tags: Vec<&String> = images.iter().flat_map(|i| &i.repo_tags).collect();
                    tracing::info!(archive = %path.display(), images = images.len(), ?tags, "image archive imported at start-up")
                }
                Err(e) => {
                    tracing::error!(archive = %path.display(), error = %e, "image archive not imported")
                }
            }
        }
    }
}
