//! Talking to registries with `oci-client`: choosing the endpoint (mirrors in
//! order, then the registry itself), resolving a reference to a platform
//! manifest, and fetching blobs. Every document is checked against the digest
//! and size its parent names before it is used.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;

use crate::auth::Auth;
use crate::config::{Endpoint, RegistryConfig};
use crate::content::sha256_digest;
use crate::error::{Error, ErrorKind};
use crate::image::{self, Descriptor, ManifestKind, RawManifest};
use crate::layer::Progress;
use crate::reference::Reference;

/// Largest manifest or index accepted.
const MAX_MANIFEST: usize = 4 << 20;
/// Largest image config accepted.
pub(crate) const MAX_CONFIG: u64 = 16 << 20;

const ACCEPT: &[&str] = &[
    image::OCI_INDEX,
    image::DOCKER_LIST,
    image::OCI_MANIFEST,
    image::DOCKER_MANIFEST,
];

/// One registry endpoint, with a client and credentials for it.
pub(crate) struct Remote {
    client: oci_client::Client,
    auth: RegistryAuth,
    endpoint: Endpoint,
    repository: String,
    reference: String,
}

/// What a reference resolved to.
pub(crate) struct Resolved {
    /// Digest of the document the reference names (index or manifest).
    pub top_digest: String,
    /// (digest, bytes) of every manifest document fetched, index first.
    pub documents: Vec<(String, Bytes)>,
    /// Digest of the platform manifest.
    pub manifest_digest: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

impl Remote {
    /// Tries each endpoint for `reference` and returns the first that
    /// resolves it. Mirror failures are logged and skipped; the registry's
    /// own failure is the error.
    pub(crate) async fn resolve(
        cfg: &RegistryConfig,
        reference: &Reference,
        auth: Option<&Auth>,
        progress: &Progress,
    ) -> Result<(Remote, Resolved), Error> {
        let mut last_err = None;
        for endpoint in cfg.endpoints(reference.domain(), reference.upstream_host()) {
            let scheme = if endpoint.plain_http { "http" } else { "https" };
            // Like containerd, the pull's credentials go to the image's own
            // registry only, never to a mirror.
            let creds = match (auth, endpoint.mirror) {
                (Some(a), false) => {
                    a.to_registry_auth(
                        scheme,
                        &endpoint.host,
                        reference.path(),
                        &reference.to_string(),
                    )
                    .await?
                }
                _ => RegistryAuth::Anonymous,
            };
            let remote = Remote::new(cfg, endpoint, creds, reference)?;
            match remote.resolve_manifest(reference, progress).await {
                Ok(resolved) => return Ok((remote, resolved)),
                Err(e) if remote.endpoint.mirror => {
                    tracing::warn!(image = %reference, mirror = %remote.endpoint.host, error = %e, "mirror failed; trying the next endpoint");
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Internal("no registry endpoint".into())))
    }

    fn new(
        cfg: &RegistryConfig,
        endpoint: Endpoint,
        auth: RegistryAuth,
        reference: &Reference,
    ) -> Result<Remote, Error> {
        // The pull's watchdog enforces `progress_timeout`; the socket timeout
        // is only a backstop (and the bound when the watchdog is off).
        let timeout = if cfg.progress_timeout.is_zero() {
            Duration::from_secs(300)
        } else {
            cfg.progress_timeout + Duration::from_secs(30)
        };
        let config = ClientConfig {
            protocol: if endpoint.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(Duration::from_secs(30).min(timeout)),
            read_timeout: Some(timeout),
            user_agent: "berth",
            ..ClientConfig::default()
        };
        let client = oci_client::Client::try_from(config)
            .map_err(|e| Error::Internal(format!("registry client for {}: {e}", endpoint.host)))?;
        Ok(Remote {
            client,
            auth,
            endpoint,
            repository: reference.path().to_string(),
            reference: reference.to_string(),
        })
    }

    /// The endpoint in use.
    pub(crate) fn host(&self) -> &str {
        &self.endpoint.host
    }

    fn oci_ref_digest(&self, digest: &str) -> oci_client::Reference {
        oci_client::Reference::with_digest(
            self.endpoint.host.clone(),
            self.repository.clone(),
            digest.to_string(),
        )
    }

    async fn resolve_manifest(
        &self,
        reference: &Reference,
        progress: &Progress,
    ) -> Result<Resolved, Error> {
        let top_ref = match (reference.digest(), reference.tag()) {
            (Some(d), _) => self.oci_ref_digest(d),
            (None, Some(tag)) => oci_client::Reference::with_tag(
                self.endpoint.host.clone(),
                self.repository.clone(),
                tag.to_string(),
            ),
            (None, None) => {
                return Err(Error::invalid_reference(
                    &self.reference,
                    "no tag or digest",
                ))
            }
        };
        let (top_digest, top) = self
            .fetch_manifest(&top_ref, reference.digest(), None, progress)
            .await?;
        let mut documents = vec![(top_digest.clone(), top.clone())];
        let kind = self.parse(&top_digest, &top)?;
        let (manifest_digest, config, layers) = match kind {
            ManifestKind::Image { config, layers } => (top_digest.clone(), config, layers),
            ManifestKind::Index(manifests) => {
                let arch = image::host_arch();
                let entry = image::pick_platform(&manifests, arch).ok_or_else(|| {
                    Error::RemoteNotFound {
                        reference: self.reference.clone(),
                        registry: self.endpoint.host.clone(),
                        message: format!("the image index has no manifest for linux/{arch}"),
                    }
                })?;
                let size = self.size_of(entry, &top_digest)?;
                let (digest, bytes) = self
                    .fetch_manifest(
                        &self.oci_ref_digest(&entry.digest),
                        Some(&entry.digest),
                        Some(size),
                        progress,
                    )
                    .await?;
                let kind = self.parse(&digest, &bytes)?;
                documents.push((digest.clone(), bytes));
                match kind {
                    ManifestKind::Image { config, layers } => (digest, config, layers),
                    ManifestKind::Index(_) => {
                        return Err(Error::bad(
                            &self.reference,
                            &digest,
                            "an index inside an index",
                        ))
                    }
                }
            }
        };
        Ok(Resolved {
            top_digest,
            documents,
            manifest_digest,
            config,
            layers,
        })
    }

    /// The size a descriptor promises, refused when negative.
    pub(crate) fn size_of(&self, d: &Descriptor, parent: &str) -> Result<u64, Error> {
        u64::try_from(d.size).map_err(|_| {
            Error::bad(
                &self.reference,
                parent,
                format!("negative size for {}", d.digest),
            )
        })
    }

    fn parse(&self, digest: &str, bytes: &[u8]) -> Result<ManifestKind, Error> {
        let raw: RawManifest = serde_json::from_slice(bytes)
            .map_err(|e| Error::bad(&self.reference, digest, format!("bad manifest: {e}")))?;
        raw.kind()
            .map_err(|m| Error::bad(&self.reference, digest, m))
    }

    /// Fetches a manifest; checks its digest (when known) and size (when known).
    async fn fetch_manifest(
        &self,
        oref: &oci_client::Reference,
        want_digest: Option<&str>,
        want_size: Option<u64>,
        progress: &Progress,
    ) -> Result<(String, Bytes), Error> {
        let (bytes, _) = self
            .client
            .pull_manifest_raw(oref, &self.auth, ACCEPT)
            .await
            .map_err(|e| self.map_err(e, "manifest"))?;
        progress.touch();
        let digest = sha256_digest(&bytes);
        if bytes.len() > MAX_MANIFEST {
            return Err(Error::bad(
                &self.reference,
                &digest,
                "manifest larger than 4 MiB",
            ));
        }
        if let Some(want) = want_digest {
            if digest != want {
                return Err(Error::bad(
                    &self.reference,
                    want,
                    format!("manifest hashes to {digest}"),
                ));
            }
        }
        if let Some(size) = want_size {
            if bytes.len() as u64 != size {
                return Err(Error::bad(
                    &self.reference,
                    &digest,
                    format!("manifest is {} bytes, its index says {size}", bytes.len()),
                ));
            }
        }
        Ok((digest, bytes))
    }

    /// Opens the byte stream of a blob (digest and size checked by the reader).
    pub(crate) async fn blob_stream(
        &self,
        digest: &str,
        size: u64,
        media_type: &str,
    ) -> Result<oci_client::client::SizedStream, Error> {
        let desc = OciDescriptor {
            media_type: media_type.to_string(),
            digest: digest.to_string(),
            size: size as i64,
            urls: None,
            annotations: None,
            artifact_type: None,
        };
        let stream = self
            .client
            .pull_blob_stream(&self.oci_ref_digest(digest), &desc)
            .await
            .map_err(|e| self.map_err(e, "blob"))?;
        if let Some(len) = stream.content_length {
            if len != size {
                return Err(Error::bad(
                    &self.reference,
                    digest,
                    format!("registry sends {len} bytes, the manifest says {size}"),
                ));
            }
        }
        Ok(stream)
    }

    /// Fetches a small blob (the config) into memory, checked.
    pub(crate) async fn small_blob(
        &self,
        d: &Descriptor,
        parent: &str,
        limit: u64,
        progress: &Progress,
    ) -> Result<Vec<u8>, Error> {
        let size = self.size_of(d, parent)?;
        if size > limit {
            return Err(Error::bad(
                &self.reference,
                &d.digest,
                format!("{size} bytes is too large"),
            ));
        }
        let mut stream = self.blob_stream(&d.digest, size, &d.media_type).await?;
        let mut out = Vec::with_capacity(size as usize);
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| self.stream_err(&d.digest, e, out.len() as u64 >= size))?;
            progress.touch();
            out.extend_from_slice(&chunk);
            if out.len() as u64 > size {
                return Err(Error::bad(
                    &self.reference,
                    &d.digest,
                    "more bytes than the manifest says",
                ));
            }
        }
        if out.len() as u64 != size {
            return Err(Error::bad(
                &self.reference,
                &d.digest,
                format!("truncated: {} of {size} bytes", out.len()),
            ));
        }
        let digest = sha256_digest(&out);
        if digest != d.digest {
            return Err(Error::bad(
                &self.reference,
                &d.digest,
                format!("content hashes to {digest}"),
            ));
        }
        Ok(out)
    }

    /// An error in the middle of a blob stream. The client checks the digest
    /// itself when the stream ends, so an error after all bytes arrived is a
    /// digest mismatch; before that it is the network.
    pub(crate) fn stream_err(&self, digest: &str, e: std::io::Error, complete: bool) -> Error {
        if complete {
            Error::bad(&self.reference, digest, format!("verification failed: {e}"))
        } else {
            Error::Registry {
                reference: self.reference.clone(),
                registry: self.endpoint.host.clone(),
                message: format!("downloading {digest}: {e}"),
            }
        }
    }

    fn map_err(&self, e: OciDistributionError, what: &str) -> Error {
        use OciDistributionError as E;
        let kind = match &e {
            E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => ErrorKind::Unauthenticated,
            E::RegistryError { envelope, .. } => match envelope.errors.first().map(|e| &e.code) {
                Some(OciErrorCode::Unauthorized) => ErrorKind::Unauthenticated,
                Some(OciErrorCode::Denied) => ErrorKind::PermissionDenied,
                Some(
                    OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::BlobUnknown
                    | OciErrorCode::NotFound,
                ) => ErrorKind::NotFound,
                _ => ErrorKind::Unavailable,
            },
            E::ServerError { code: 401, .. } => ErrorKind::Unauthenticated,
            E::ServerError { code: 403, .. } => ErrorKind::PermissionDenied,
            E::ServerError { code: 404, .. } => ErrorKind::NotFound,
            E::DigestError(_)
            | E::ManifestParsingError(_)
            | E::VersionedParsingError(_)
            | E::UnsupportedMediaTypeError(_)
            | E::UnsupportedSchemaVersionError(_)
            | E::SpecViolationError(_) => ErrorKind::DataLoss,
            _ => ErrorKind::Unavailable,
        };
        let (reference, registry, message) = (
            self.reference.clone(),
            self.endpoint.host.clone(),
            format!("{what}: {e}"),
        );
        match kind {
            ErrorKind::Unauthenticated => Error::Unauthenticated {
                reference,
                registry,
                message,
            },
            ErrorKind::PermissionDenied => Error::PermissionDenied {
                reference,
                registry,
                message,
            },
            ErrorKind::NotFound => Error::RemoteNotFound {
                reference,
                registry,
                message,
            },
            ErrorKind::DataLoss => Error::BadContent {
                reference,
                digest: String::new(),
                reason: message,
            },
            _ => Error::Registry {
                reference,
                registry,
                message,
            },
        }
    }
}
