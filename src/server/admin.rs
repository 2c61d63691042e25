//! berth's admin API (`berth.admin.v1.Images`, `proto/berth/admin/v1/`),
//! served beside CRI on the same socket and through the same instrument
//! layer (refused until start-up has finished, logged, errors mapped): the
//! import and export of image archives for `berth images import|export`,
//! and the pull with progress of `berth images pull`.
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
//!
//! Pull is CRI PullImage's pull (`ImageStore::start_pull`: the same
//! registry configuration, credentials, single flight with a PullImage of
//! the same image, bounds and progress timeout) with a watcher of its
//! progress. A task turns the watcher's events into messages on a channel
//! of [`QUEUED_EVENTS`]; when the client reads slowly that task waits, and
//! the watcher, which holds one state, not a queue, skips the byte counts
//! it missed: the pull never waits for its client. A client that goes away
//! ends that task, not the pull, which runs on its own task to its end (as
//! a PullImage past its deadline).

use std::io::Write;
use std::path::PathBuf;

use cri_api::admin;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::instrument::{self, Ids};
use super::{deadline, BoxStream, Cri};
use crate::error::Error;

/// Bytes per export chunk (well under the 16 MiB message limit).
const CHUNK: usize = 1 << 20;
/// Chunks queued towards a slow client before the export waits.
const QUEUED_CHUNKS: usize = 4;
/// Progress messages queued towards a slow client before its watcher waits
/// (and skips byte counts).
const QUEUED_EVENTS: usize = 16;

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

    type PullStream = BoxStream<admin::PullProgress>;

    async fn pull(
        &self,
        request: Request<admin::PullRequest>,
    ) -> Result<Response<Self::PullStream>, Status> {
        let deadline = deadline::of(&request);
        let req = request.into_inner();
        let cri = self.0.clone();
        let ids = Ids {
            image: Some(req.image.clone()),
            ..Ids::default()
        };
        instrument::call(&self.0.gate, "admin.Pull", ids, deadline, async move {
            cri.pull_with_progress(req)
        })
        .await
    }
}

impl Cri {
    /// admin.Pull: starts (or joins) the pull and streams its progress; the
    /// stream ends with `pulled`, or with the pull's error.
    pub fn pull_with_progress(
        &self,
        req: admin::PullRequest,
    ) -> Result<BoxStream<admin::PullProgress>, Error> {
        let name = super::pull_image::image_name_str(&req.image)?.to_string();
        let auth = auth_of(&req);
        let mut pulling = self.images().start_pull(&name, auth)?;
        let (tx, rx) = mpsc::channel(QUEUED_EVENTS);
        tokio::spawn(
            async move {
                while let Some(event) = pulling.watcher().next().await {
                    let Some(msg) = progress_message(event) else {
                        continue;
                    };
                    if tx.send(Ok(msg)).await.is_err() {
                        // The client went away; the pull goes on.
                        return;
                    }
                }
                let result = pulling.result().await;
                crate::counters::image_pulled(result.as_ref().ok().map(|i| i.size));
                let msg = match result {
                    Ok(image) => {
                        tracing::info!(image = %name, id = %image.id, "pulled (admin)");
                        Ok(admin::PullProgress {
                            event: Some(admin::pull_progress::Event::Pulled(admin::PullDone {
                                repo_digest: image
                                    .repo_digests
                                    .iter()
                                    .find(|d| same_repo(d, &name))
                                    .or(image.repo_digests.first())
                                    .cloned()
                                    .unwrap_or_default(),
                                image_id: image.id,
                                repo_tags: image.repo_tags,
                                size: image.size,
                            })),
                        })
                    }
                    Err(e) => Err(Error::from(e).into()),
                };
                let _ = tx.send(msg).await;
            }
            .in_current_span(),
        );
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

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
        let images = self.images().import(&path).await?;
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
            if self.images().get(name).is_none() {
                return Err(Error::NotFound {
                    kind: "image",
                    id: name.clone(),
                });
            }
        }
        let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
        let images = self.images().clone();
        tokio::spawn(async move {
            let writer = Chunks {
                tx: tx.clone(),
                buf: Vec::with_capacity(CHUNK),
            };
            if let Err(e) = images.export(req.images, req.all_tags, writer).await {
                tracing::warn!(error = %e, "export failed");
                let _ = tx.send(Err(Error::from(e).into())).await;
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// The message for one progress event (`Ended` has none: the result's
/// message follows it).
fn progress_message(event: berth_oci_image::PullEvent) -> Option<admin::PullProgress> {
    use admin::pull_progress::Event;
    use berth_oci_image::{LayerState, PullEvent};
    let state = |s: LayerState| match s {
        LayerState::Waiting => admin::LayerState::Waiting,
        LayerState::Downloading => admin::LayerState::Downloading,
        LayerState::Downloaded => admin::LayerState::Downloaded,
        LayerState::Pulled => admin::LayerState::Pulled,
        LayerState::Unpacked => admin::LayerState::Unpacked,
        LayerState::AlreadyPresent => admin::LayerState::AlreadyPresent,
    };
    let event = match event {
        PullEvent::Resolved { image, layers } => Event::Resolved(admin::PullResolved {
            reference: image.reference,
            digest: image.digest,
            image_id: image.id,
            layers: layers
                .into_iter()
                .map(|(digest, size)| admin::PullLayer { digest, size })
                .collect(),
        }),
        PullEvent::Bytes {
            index, received, ..
        } => Event::Layer(admin::LayerProgress {
            index: index as u32,
            received,
            state: admin::LayerState::Downloading.into(),
        }),
        PullEvent::Layer {
            index,
            state: s,
            size,
            ..
        } => Event::Layer(admin::LayerProgress {
            index: index as u32,
            received: if s.is_done() || s == LayerState::Downloaded {
                size
            } else {
                0
            },
            state: state(s).into(),
        }),
        PullEvent::Ended => return None,
    };
    Some(admin::PullProgress { event: Some(event) })
}

/// The credentials a pull request carries, if any (CRI's AuthConfig
/// fields; no server address: they are for the image's registry).
fn auth_of(req: &admin::PullRequest) -> Option<berth_oci_image::Auth> {
    [
        &req.username,
        &req.password,
        &req.auth,
        &req.identity_token,
        &req.registry_token,
    ]
    .iter()
    .any(|f| !f.is_empty())
    .then(|| berth_oci_image::Auth {
        username: req.username.clone(),
        password: req.password.clone(),
        auth: req.auth.clone(),
        server_address: String::new(),
        identity_token: req.identity_token.clone(),
        registry_token: req.registry_token.clone(),
    })
}

/// Whether `repo_digest` (`REPO@sha256:…`) names the repository of
/// `reference` (as the client wrote it, or normalised).
fn same_repo(repo_digest: &str, reference: &str) -> bool {
    let Some((repo, _)) = repo_digest.split_once('@') else {
        return false;
    };
    berth_oci_image::Reference::parse(reference)
        .map(|r| r.name() == repo)
        .unwrap_or(false)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_carries_credentials_only_when_given() {
        assert!(auth_of(&admin::PullRequest {
            image: "x".into(),
            ..Default::default()
        })
        .is_none());
        let auth = auth_of(&admin::PullRequest {
            image: "x".into(),
            username: "u".into(),
            password: "p".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!((auth.username.as_str(), auth.password.as_str()), ("u", "p"));
        let token = auth_of(&admin::PullRequest {
            registry_token: "t".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(token.registry_token, "t");
    }

    #[test]
    fn the_reference_pulled_is_the_repo_digest_of_its_repository() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(same_repo(
            &format!("docker.io/library/busybox@{d}"),
            "busybox"
        ));
        assert!(same_repo(
            &format!("example.com/a/b@{d}"),
            "example.com/a/b:1"
        ));
        assert!(!same_repo(
            &format!("example.com/a/c@{d}"),
            "example.com/a/b"
        ));
        assert!(!same_repo("no-digest", "example.com/a/b"));
    }

    /// Every state of the library has its message; the end has none.
    #[test]
    fn progress_events_become_messages() {
        use berth_oci_image::{LayerState, PullEvent};
        let msg = progress_message(PullEvent::Layer {
            index: 2,
            digest: "sha256:x".into(),
            size: 10,
            state: LayerState::AlreadyPresent,
        })
        .unwrap();
        let Some(admin::pull_progress::Event::Layer(l)) = msg.event else {
            panic!("{msg:?}")
        };
        assert_eq!((l.index, l.received), (2, 10));
        assert_eq!(l.state(), admin::LayerState::AlreadyPresent);
        let msg = progress_message(PullEvent::Bytes {
            index: 0,
            received: 3,
            size: 10,
        })
        .unwrap();
        let Some(admin::pull_progress::Event::Layer(l)) = msg.event else {
            panic!("{msg:?}")
        };
        assert_eq!((l.received, l.state()), (3, admin::LayerState::Downloading));
        assert!(progress_message(PullEvent::Ended).is_none());
    }
}
