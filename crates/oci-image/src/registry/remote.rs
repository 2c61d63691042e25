//! Talking to registries: choosing the hosts (mirrors and the registry, see
//! `hosts.rs`), resolving a reference to a platform manifest on the first
//! host that can, and fetching documents and blobs by digest from the hosts
//! that may pull, in order. Every document is checked against the digest and
//! size its parent names before it is used.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;

use crate::config::RegistryConfig;
use crate::error::Error;
use crate::layer::Progress;
use crate::parse;
use crate::reference::{Reference, DEFAULT_DOMAIN};
use crate::registry::auth::{Auth, Creds, NodeAuths};
use crate::registry::client::{ClientCache, HostClient};
use crate::registry::hosts::{self, HostSpec};
use crate::store::content::sha256_digest;
use crate::store::image::{Descriptor, ManifestKind};

/// Largest manifest or index accepted.
pub(crate) const MAX_MANIFEST: usize = parse::MAX_MANIFEST;
/// Largest image config accepted.
pub(crate) const MAX_CONFIG: u64 = parse::MAX_CONFIG as u64;

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";

/// The hosts of one pull, with a client and credentials for each.
pub(crate) struct Remote {
    hosts: Vec<HostClient>,
    /// Indexes of the hosts that may pull, the one that resolved first.
    order: Vec<usize>,
    reference: String,
}

/// A blob's bytes as they arrive, and the host sending them.
pub(crate) struct BlobStream {
    pub stream: BoxStream<'static, Result<Bytes, reqwest::Error>>,
    pub host: String,
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
    /// The platform manifest's `artifactType`, if any.
    pub artifact_type: Option<String>,
}

/// The names `auths` keys of a docker `config.json` may use for `spec`.
fn auth_names<'a>(spec: &'a HostSpec, domain: &'a str) -> Vec<&'a str> {
    let mut names = vec![spec.host.as_str()];
    if spec.upstream {
        names.push(domain);
        if domain == DEFAULT_DOMAIN {
            names.extend(["index.docker.io", "registry-1.docker.io"]);
        }
    }
    names
}

/// `e` with a note of the hosts that failed before it (the last host's
/// failure keeps its kind: a mirror's "not found" followed by an
/// unreachable registry is Unavailable, and says both).
fn with_tried(mut e: Error, tried: &[String]) -> Error {
    if tried.is_empty() {
        return e;
    }
    let note = format!(" (tried before: {})", tried.join("; "));
    match &mut e {
        Error::RemoteNotFound { message, .. }
        | Error::Unauthenticated { message, .. }
        | Error::PermissionDenied { message, .. }
        | Error::Registry { message, .. } => message.push_str(&note),
        Error::BadContent { reason, .. } => reason.push_str(&note),
        _ => {}
    }
    e
}

impl Remote {
    /// Sets up the hosts for `reference` and resolves it on the first that
    /// can. A host that fails is logged and the next one tried; the last
    /// one's failure is the error.
    pub(crate) async fn resolve(
        cfg: &RegistryConfig,
        clients: &ClientCache,
        reference: &Reference,
        auth: Option<&Auth>,
        progress: &Progress,
    ) -> Result<(Remote, Resolved), Error> {
        let name = reference.to_string();
        let domain = reference.domain();
        let specs = hosts::hosts_for(cfg, domain)?;
        if specs.is_empty() {
            return Err(Error::RemoteNotFound {
                reference: name,
                registry: domain.to_string(),
                message: "mirror-only mode and no mirror is configured for this registry".into(),
            });
        }
        let node = if cfg.auth_file.as_os_str().is_empty() {
            NodeAuths::default()
        } else {
            NodeAuths::load(&cfg.auth_file)?
        };
        // The pull's watchdog enforces `progress_timeout`; the socket timeout
        // is only a backstop (and the bound when the watchdog is off).
        let timeout = if cfg.progress_timeout.is_zero() {
            Duration::from_secs(300)
        } else {
            cfg.progress_timeout + Duration::from_secs(30)
        };
        let mut hosts = Vec::with_capacity(specs.len());
        for spec in specs {
            // Like containerd, the pull's credentials go to the image's own
            // registry only, never to a mirror; the node's go to the host
            // they are written for.
            let creds = match auth {
                Some(a) if spec.upstream => a.creds()?,
                _ => match node.lookup(&auth_names(&spec, domain)) {
                    Some(a) => a.creds()?,
                    None => Creds::Anonymous,
                },
            };
            let http = clients.client_for(&spec, timeout)?;
            let realm_http = clients.client_for(&spec.without_tls(), timeout)?;
            hosts.push(HostClient::new(
                http,
                realm_http,
                spec,
                domain,
                creds,
                &name,
                reference.path(),
            ));
        }
        let by_digest = reference.digest().is_some();
        let candidates: Vec<usize> = (0..hosts.len())
            .filter(|&i| hosts[i].spec.pull && (by_digest || hosts[i].spec.resolve))
            .collect();
        let mut remote = Remote {
            order: (0..hosts.len()).filter(|&i| hosts[i].spec.pull).collect(),
            hosts,
            reference: name.clone(),
        };
        if candidates.is_empty() {
            return Err(Error::Config(format!(
                "{name}: no host configured for {domain} may {}",
                if by_digest { "pull" } else { "resolve tags" }
            )));
        }
        let mut last_err = None;
        let mut tried = Vec::new();
        for (n, &i) in candidates.iter().enumerate() {
            match remote.resolve_manifest(i, reference, progress).await {
                Ok(resolved) => {
                    remote.order.retain(|&j| j != i);
                    remote.order.insert(0, i);
                    return Ok((remote, resolved));
                }
                Err(e) => {
                    if n + 1 < candidates.len() {
                        tracing::warn!(image = %reference, host = %remote.hosts[i].host(), error = %e, "registry host failed; trying the next one");
                        tried.push(format!("{}: {e}", remote.hosts[i].host()));
                    }
                    last_err = Some(e);
                }
            }
        }
        let e = last_err.unwrap_or_else(|| Error::Internal("no registry host".into()));
        Err(with_tried(e, &tried))
    }

    /// Tries `f` on each host that may pull, in order; the last failure is
    /// the error.
    async fn on_pull_hosts<'a, T, F, Fut>(&'a self, what: &str, mut f: F) -> Result<T, Error>
    where
        F: FnMut(&'a HostClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let mut last_err = None;
        for (n, &i) in self.order.iter().enumerate() {
            let host = &self.hosts[i];
            match f(host).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if n + 1 < self.order.len() {
                        tracing::warn!(image = %self.reference, host = %host.host(), error = %e, "fetching {what} failed; trying the next host");
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Internal("no registry host may pull".into())))
    }

    /// Resolves `reference` on host `i`; the platform manifest comes from the
    /// hosts that may pull.
    async fn resolve_manifest(
        &self,
        i: usize,
        reference: &Reference,
        progress: &Progress,
    ) -> Result<Resolved, Error> {
        let top_ref = match (reference.digest(), reference.tag()) {
            (Some(d), _) => d,
            (None, Some(tag)) => tag,
            (None, None) => {
                return Err(Error::invalid_reference(
                    &self.reference,
                    "no tag or digest",
                ))
            }
        };
        let (top_digest, top) = self
            .fetch_manifest(&self.hosts[i], top_ref, reference.digest(), None, progress)
            .await?;
        let mut documents = vec![(top_digest.clone(), top.clone())];
        let kind = self.parse(&top_digest, &top)?;
        let (manifest_digest, config, layers, artifact_type) = match kind {
            ManifestKind::Image {
                config,
                layers,
                artifact_type,
            } => (top_digest.clone(), config, layers, artifact_type),
            ManifestKind::Index(manifests) => {
                let arch = parse::host_arch();
                let entry =
                    parse::platform(&manifests, arch).ok_or_else(|| Error::RemoteNotFound {
                        reference: self.reference.clone(),
                        registry: self.hosts[i].host().to_string(),
                        message: format!("the image index has no manifest for linux/{arch}"),
                    })?;
                let size = self.size_of(entry, &top_digest)?;
                let want = entry.digest.as_str();
                // It goes into a URL: `sha256:` and 64 hex digits, nothing
                // that could be a path (`sha256:../../x`).
                crate::reference::check_digest(want)
                    .map_err(|r| Error::bad(&self.reference, &top_digest, r))?;
                // The host that resolved first, then the other pull hosts.
                let mut order = vec![i];
                order.extend(self.order.iter().copied().filter(|&j| j != i));
                let mut fetched = None;
                for (n, &j) in order.iter().enumerate() {
                    match self
                        .fetch_manifest(&self.hosts[j], want, Some(want), Some(size), progress)
                        .await
                    {
                        Ok(found) => {
                            fetched = Some(Ok(found));
                            break;
                        }
                        Err(e) => {
                            if n + 1 < order.len() {
                                tracing::warn!(image = %reference, host = %self.hosts[j].host(), error = %e, "fetching the platform manifest failed; trying the next host");
                            }
                            fetched = Some(Err(e));
                        }
                    }
                }
                let (digest, bytes) =
                    fetched.unwrap_or_else(|| Err(Error::Internal("no registry host".into())))?;
                let kind = self.parse(&digest, &bytes)?;
                documents.push((digest.clone(), bytes));
                match kind {
                    ManifestKind::Image {
                        config,
                        layers,
                        artifact_type,
                    } => (digest, config, layers, artifact_type),
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
            artifact_type,
        })
    }

    /// The size a descriptor promises, refused when negative.
    pub(crate) fn size_of(&self, d: &Descriptor, parent: &str) -> Result<u64, Error> {
        parse::size(d).map_err(|m| Error::bad(&self.reference, parent, m))
    }

    fn parse(&self, digest: &str, bytes: &[u8]) -> Result<ManifestKind, Error> {
        parse::manifest(bytes).map_err(|m| Error::bad(&self.reference, digest, m))
    }

    /// Fetches a manifest from `host`; checks its digest (when known) and
    /// size (when known). Never holds more than [`MAX_MANIFEST`] bytes.
    async fn fetch_manifest(
        &self,
        host: &HostClient,
        tag_or_digest: &str,
        want_digest: Option<&str>,
        want_size: Option<u64>,
        progress: &Progress,
    ) -> Result<(String, Bytes), Error> {
        let cap = match want_size {
            Some(size) if size > MAX_MANIFEST as u64 => {
                return Err(Error::bad(
                    &self.reference,
                    want_digest.unwrap_or(""),
                    format!("manifest of {size} bytes is larger than 4 MiB"),
                ))
            }
            Some(size) => size as usize,
            None => MAX_MANIFEST,
        };
        let bytes = host.manifest(tag_or_digest, ACCEPT, cap).await?;
        progress.touch();
        let digest = sha256_digest(&bytes);
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

    /// Opens the byte stream of a blob on the first host that has it
    /// (digest and size are checked by the reader).
    pub(crate) async fn blob_stream(&self, digest: &str, size: u64) -> Result<BlobStream, Error> {
        self.on_pull_hosts("a blob", |host| async move {
            let res = host.blob(digest).await?;
            if let Some(len) = res.content_length() {
                if len != size {
                    return Err(Error::bad(
                        &self.reference,
                        digest,
                        format!(
                            "{} sends {len} bytes, the manifest says {size}",
                            host.host()
                        ),
                    ));
                }
            }
            Ok(BlobStream {
                stream: res.bytes_stream().boxed(),
                host: host.host().to_string(),
            })
        })
        .await
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
        self.on_pull_hosts("the image config", |host| async move {
            self.small_blob_from(host, d, size, progress).await
        })
        .await
    }

    async fn small_blob_from(
        &self,
        host: &HostClient,
        d: &Descriptor,
        size: u64,
        progress: &Progress,
    ) -> Result<Vec<u8>, Error> {
        let mut res = host.blob(&d.digest).await?;
        let mut out = Vec::with_capacity(size as usize);
        while let Some(chunk) = res
            .chunk()
            .await
            .map_err(|e| host.net_err(&format!("downloading {}", d.digest), &e))?
        {
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

    /// An error in the middle of a blob stream from `host`.
    pub(crate) fn stream_err(&self, digest: &str, host: &str, e: &reqwest::Error) -> Error {
        Error::Registry {
            reference: self.reference.clone(),
            registry: host.to_string(),
            message: format!(
                "downloading {digest}: {}",
                crate::registry::client::error_chain(e)
            ),
        }
    }
}
