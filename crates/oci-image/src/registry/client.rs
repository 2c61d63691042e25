//! berth's HTTP client for the OCI distribution API, on `reqwest` (rustls):
//! one [`HostClient`] per host a pull may use, with that host's TLS
//! settings (private CAs, client certificates, `skip_verify`), headers,
//! `ns` parameter and credentials (basic, bearer, token endpoint, refresh
//! token). Everything read into memory (manifests, token answers, error
//! bodies) is capped while it is read, so a hostile registry cannot make us
//! allocate more than the cap.
//!
//! Redirects are followed here, not by reqwest, one hop at a time (at most
//! [`MAX_REDIRECTS`]), each checked before it is connected to: never from
//! HTTPS to HTTP; a manifest by tag only over the scheme its host is
//! configured with; never to a loopback, link-local or metadata address
//! unless the configured host is one of the same kind (an image name must
//! not reach the node's own services through a registry). The host's
//! configured headers and credentials go to the configured host only, and
//! the body of an error answer is quoted only when that host sent it. A
//! bearer token realm on another host is verified with the system's roots,
//! not with the registry's own CA or `skip_verify`.
//!
//! `oci-client` was dropped for this: it reads manifests and token answers
//! whole before any size check, has no client certificates and one TLS
//! setting per client, and cannot use a path prefix or extra headers.

use berth_lock::MutexExt;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode, Url};
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::registry::auth::Creds;
use crate::registry::hosts::{read_small, HostSpec};

mod guard;
mod token;

#[cfg(test)]
use guard::DnsTable;
use guard::GuardedResolver;
pub(crate) use guard::{reach, Reach};
use token::bearer;

/// Largest token endpoint answer read.
pub(crate) const MAX_TOKEN: usize = 1 << 20;
/// Largest error body read (for its message).
const MAX_ERROR_BODY: usize = 16 << 10;
/// Time limit of a manifest or token request, body included.
pub(crate) const SMALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Clients kept for reuse (distinct TLS settings).
const MAX_CLIENTS: usize = 64;
/// Redirects followed for one request (as many as reqwest's default).
pub(crate) const MAX_REDIRECTS: usize = 10;
/// `scheme://host[:port]` of `url`, for messages (never its path or query:
/// a storage URL's query carries its signature).
fn origin_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(p) => format!("{}://{host}:{p}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// The `Error::source` chain of `e` in one line (TLS and connection errors
/// hide below reqwest's own message).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Why a capped read stopped.
pub(crate) enum ReadError {
    TooLarge,
    Net(reqwest::Error),
}

/// Reads the body of `res`, failing as soon as it passes `cap` bytes.
pub(crate) async fn read_capped(mut res: Response, cap: usize) -> Result<Vec<u8>, ReadError> {
    if res.content_length().is_some_and(|n| n > cap as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut out = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(ReadError::Net)? {
        if out.len() + chunk.len() > cap {
            return Err(ReadError::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Makes ring the process's default rustls provider, once: reqwest is built
/// without a provider of its own (`rustls-no-provider`) and takes the
/// default, so every `reqwest::Client` of the process needs it first
/// (berth's own clients call it; so must a test's). A provider another part
/// of the process installed first stays.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// HTTP clients by TLS settings, shared by pulls (connections are reused).
#[derive(Default)]
pub(crate) struct ClientCache {
    clients: Mutex<HashMap<String, reqwest::Client>>,
    warned: Mutex<HashSet<String>>,
    #[cfg(test)]
    dns: Option<DnsTable>,
}

impl ClientCache {
    /// A client for `spec`. Its CA, certificate and key files are read now
    /// (so that replaced files take effect at the next pull).
    pub(crate) fn client_for(
        &self,
        spec: &HostSpec,
        timeout: Duration,
    ) -> Result<reqwest::Client, Error> {
        let mut key = Sha256::new();
        // The host is part of the key: the resolver guards on its behalf.
        key.update(format!(
            "{}\0{}\0{timeout:?}\0{:?}\0{:?}\0{}\0",
            spec.host, spec.plain_http, spec.dial_timeout, spec.proxy, spec.skip_verify
        ));
        let tls = !spec.plain_http;
        let mut cas = Vec::new();
        let mut identity = None;
        if tls {
            for path in &spec.ca {
                let pem = read_small(path)?;
                key.update(&pem);
                key.update(b"\0ca\0");
                cas.push((path, pem));
            }
            if let Some((cert, k)) = spec.client.first() {
                let mut pem = read_small(cert)?;
                if let Some(k) = k {
                    pem.push(b'\n');
                    pem.extend(read_small(k)?);
                }
                key.update(&pem);
                identity = Some((cert, pem));
            }
        }
        let key = hex::encode(key.finalize());
        if let Some(c) = self.clients.lock_unpoisoned().get(&key) {
            return Ok(c.clone());
        }
        let cfg_err = |m: String| Error::Config(format!("{}: {m}", spec.source));
        install_crypto_provider();
        let mut b = reqwest::Client::builder()
            .user_agent("berth")
            .connect_timeout(
                spec.dial_timeout
                    .unwrap_or(Duration::from_secs(30))
                    .min(timeout),
            )
            .read_timeout(timeout)
            // Followed by `HostClient::get`, which checks every hop.
            .redirect(reqwest::redirect::Policy::none());
        #[allow(unused_mut)]
        let mut resolver = GuardedResolver::for_spec(spec);
        #[cfg(test)]
        {
            resolver.table = self.dns.clone();
        }
        b = b.dns_resolver(resolver);
        for (path, pem) in cas {
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| cfg_err(format!("ca {}: no PEM certificate", path.display())))?;
            b = b.tls_certs_merge(certs);
        }
        if let Some((path, pem)) = identity {
            let id = reqwest::Identity::from_pem(&pem).map_err(|e| {
                cfg_err(format!(
                    "client {}: not a PEM certificate with its key: {e}",
                    path.display()
                ))
            })?;
            b = b.identity(id);
            if spec.client.len() > 1 {
                self.warn_once(&format!("clients {}", spec.host), || {
                    tracing::warn!(host = %spec.host, source = %spec.source, "only the first client certificate is used");
                });
            }
        }
        if tls && spec.skip_verify {
            b = b.tls_danger_accept_invalid_certs(true);
            self.warn_once(&format!("skip_verify {}", spec.host), || {
                tracing::warn!(host = %spec.host, source = %spec.source, "TLS certificate verification is off for this registry host (skip_verify)");
            });
        }
        if !tls && spec.has_tls_settings() {
            self.warn_once(&format!("plain {}", spec.host), || {
                tracing::warn!(host = %spec.host, source = %spec.source, "TLS settings ignored: the host is spoken to over plain HTTP");
            });
        }
        if let Some(p) = &spec.proxy {
            let proxy = reqwest::Proxy::all(p).map_err(|e| cfg_err(format!("proxy: {e}")))?;
            b = b.proxy(proxy);
        }
        let client = b
            .build()
            .map_err(|e| cfg_err(format!("HTTP client: {}", error_chain(&e))))?;
        let mut clients = self.clients.lock_unpoisoned();
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    fn warn_once(&self, what: &str, warn: impl FnOnce()) {
        if self.warned.lock_unpoisoned().insert(what.to_string()) {
            warn();
        }
    }
}

/// One host of one pull: where to send, how to authenticate.
pub(crate) struct HostClient {
    http: reqwest::Client,
    /// For a token realm on another host: the system's roots only, no
    /// client certificate (see [`HostSpec::without_tls`]).
    realm_http: reqwest::Client,
    pub spec: HostSpec,
    /// The configured host as a URL (`None` if it is not one: then no
    /// request is made).
    origin: Option<Url>,
    /// The registry the image is named under, sent as `ns` to other hosts.
    ns: Option<String>,
    creds: Creds,
    /// The `Authorization` value that worked last.
    authorization: Mutex<Option<HeaderValue>>,
    reference: String,
    repository: String,
}

impl HostClient {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        http: reqwest::Client,
        realm_http: reqwest::Client,
        spec: HostSpec,
        domain: &str,
        creds: Creds,
        reference: &str,
        repository: &str,
    ) -> HostClient {
        let authorization = match &creds {
            Creds::Bearer(t) => bearer(t),
            _ => None,
        };
        HostClient {
            http,
            realm_http,
            origin: Url::parse(&spec.origin()).ok(),
            ns: (!spec.host.eq_ignore_ascii_case(domain)).then(|| domain.to_string()),
            spec,
            creds,
            authorization: Mutex::new(authorization),
            reference: reference.to_string(),
            repository: repository.to_string(),
        }
    }

    /// `host[:port]`.
    pub(crate) fn host(&self) -> &str {
        &self.spec.host
    }

    fn url(&self, tail: &str) -> Result<Url, Error> {
        let text = format!(
            "{}{}/{}/{tail}",
            self.spec.origin(),
            self.spec.path,
            self.repository
        );
        let mut url = Url::parse(&text)
            .map_err(|e| Error::Internal(format!("registry URL {text:?}: {e}")))?;
        if let Some(ns) = &self.ns {
            url.query_pairs_mut().append_pair("ns", ns);
        }
        Ok(url)
    }

    /// GET `<api root>/<repository>/<tail>`, authenticating when the
    /// registry asks to, following the redirects [`Self::check_redirect`]
    /// allows; errors for every answer but 2xx. `by_tag`: what is fetched
    /// is not addressed by digest (a manifest by tag).
    pub(crate) async fn get(
        &self,
        tail: &str,
        accept: Option<&str>,
        timeout: Option<Duration>,
        by_tag: bool,
    ) -> Result<Response, Error> {
        let url = self.url(tail)?;
        let mut authorized = false;
        loop {
            let current = self.authorization.lock_unpoisoned().clone();
            let (res, configured) = self
                .send_following(tail, url.clone(), accept, timeout, current.as_ref(), by_tag)
                .await?;
            if res.status() == StatusCode::UNAUTHORIZED && !authorized && configured {
                authorized = true;
                let challenge = res
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                if let Some(new) = self.authorize(challenge.as_deref()).await? {
                    if current.as_ref() != Some(&new) {
                        *self.authorization.lock_unpoisoned() = Some(new);
                        continue;
                    }
                }
            }
            if !res.status().is_success() {
                return Err(self.status_err(tail, res, configured).await);
            }
            return Ok(res);
        }
    }

    /// Sends GET `url` and follows its redirects, each checked before it is
    /// connected to. The configured headers and `authorization` go only to
    /// the configured host. Returns the last answer and whether the
    /// configured host sent it.
    async fn send_following(
        &self,
        what: &str,
        mut url: Url,
        accept: Option<&str>,
        timeout: Option<Duration>,
        authorization: Option<&HeaderValue>,
        by_tag: bool,
    ) -> Result<(Response, bool), Error> {
        let mut hops = 0;
        loop {
            let configured = self.is_configured(&url);
            let mut req = self.http.get(url.clone());
            if configured {
                for (name, value) in &self.spec.header {
                    req = req.header(name.as_str(), value.as_str());
                }
                if let Some(a) = authorization {
                    req = req.header(AUTHORIZATION, a.clone());
                }
            }
            if let Some(a) = accept {
                req = req.header(ACCEPT, a);
            }
            if let Some(t) = timeout {
                req = req.timeout(t);
            }
            let res = req.send().await.map_err(|mut e| {
                // Another host's URL may carry a signature in its query.
                if let (false, Some(u)) = (configured, e.url_mut()) {
                    u.set_query(None);
                }
                self.net_err(what, &e)
            })?;
            let status = res.status().as_u16();
            if !matches!(status, 301 | 302 | 303 | 307 | 308) {
                return Ok((res, configured));
            }
            let Some(location) = res.headers().get(LOCATION) else {
                return Ok((res, configured));
            };
            let next = location
                .to_str()
                .ok()
                .and_then(|l| url.join(l).ok())
                .ok_or_else(|| {
                    self.refused(
                        what,
                        format!("{} sent a redirect to a bad URL", origin_of(&url)),
                    )
                })?;
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(self.refused(what, format!("more than {MAX_REDIRECTS} redirects")));
            }
            self.check_redirect(&url, &next, by_tag)
                .map_err(|m| self.refused(what, m))?;
            url = next;
        }
    }

    /// Whether `url` is on the configured host (scheme, host and port).
    fn is_configured(&self, url: &Url) -> bool {
        self.origin.as_ref().is_some_and(|o| {
            o.scheme() == url.scheme()
                && o.host_str()
                    .zip(url.host_str())
                    .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b))
                && o.port_or_known_default() == url.port_or_known_default()
        })
    }

    /// Whether `url` may be reached from the configured host: any public
    /// address, or one of the configured host's own kind (loopback,
    /// link-local, metadata).
    fn may_reach(&self, url: &Url) -> Result<(), String> {
        let target = reach(url.host_str().unwrap_or(""));
        let own = self
            .origin
            .as_ref()
            .map(|o| reach(o.host_str().unwrap_or("")))
            .unwrap_or(Reach::Public);
        if target == Reach::Public || target == own {
            return Ok(());
        }
        let kind = match target {
            Reach::Loopback => "a loopback",
            Reach::LinkLocal => "a link-local",
            _ => "the metadata",
        };
        Err(format!(
            "refusing {} (it is {kind} address and {} is not)",
            origin_of(url),
            self.spec.host
        ))
    }

    /// Whether a redirect from `from` to `to` may be followed.
    fn check_redirect(&self, from: &Url, to: &Url, by_tag: bool) -> Result<(), String> {
        let target = origin_of(to);
        if !matches!(to.scheme(), "http" | "https") {
            return Err(format!("refusing a redirect to {target}"));
        }
        if from.scheme() == "https" && to.scheme() == "http" {
            return Err(format!(
                "refusing a redirect from HTTPS to plain HTTP ({target})"
            ));
        }
        let scheme = if self.spec.plain_http {
            "http"
        } else {
            "https"
        };
        if by_tag && to.scheme() != scheme {
            return Err(format!(
                "a manifest by tag is fetched over {scheme} only, refusing a redirect to {target}"
            ));
        }
        self.may_reach(to).map_err(|m| format!("redirect: {m}"))
    }

    /// A redirect or token realm refused.
    fn refused(&self, what: &str, message: String) -> Error {
        Error::Registry {
            reference: self.reference.clone(),
            registry: self.spec.host.clone(),
            message: format!("{what}: {message}"),
        }
    }

    /// A manifest (or index) by tag or digest, capped at `cap` bytes.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
        accept: &str,
        cap: usize,
    ) -> Result<Bytes, Error> {
        let tail = format!("manifests/{reference}");
        let by_tag = !reference.contains(':');
        let res = self
            .get(&tail, Some(accept), Some(SMALL_TIMEOUT), by_tag)
            .await?;
        match read_capped(res, cap).await {
            Ok(b) => Ok(Bytes::from(b)),
            Err(ReadError::TooLarge) => Err(Error::bad(
                &self.reference,
                if reference.contains(':') {
                    reference
                } else {
                    ""
                },
                format!("manifest larger than {cap} bytes (at {})", self.spec.host),
            )),
            Err(ReadError::Net(e)) => Err(self.net_err(&tail, &e)),
        }
    }

    /// The answer to GET of a blob (redirects to storage on other hosts
    /// followed, see [`Self::check_redirect`]).
    pub(crate) async fn blob(&self, digest: &str) -> Result<Response, Error> {
        self.get(&format!("blobs/{digest}"), None, None, false)
            .await
    }

    /// A transport error.
    pub(crate) fn net_err(&self, what: &str, e: &reqwest::Error) -> Error {
        Error::Registry {
            reference: self.reference.clone(),
            registry: self.spec.host.clone(),
            message: format!("{what}: {}", error_chain(e)),
        }
    }

    /// The error for a non-2xx answer, with the registry's own message
    /// when the configured host sent it (`configured`); another host (a
    /// redirect's target) is named, its body never quoted.
    async fn status_err(&self, what: &str, res: Response, configured: bool) -> Error {
        let status = res.status();
        let body = if configured {
            read_capped(res, MAX_ERROR_BODY).await.unwrap_or_default()
        } else {
            let from = origin_of(res.url());
            return self.refused(what, format!("{status} from {from} (redirected there)"));
        };
        #[derive(serde::Deserialize)]
        struct Envelope {
            #[serde(default)]
            errors: Vec<Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            #[serde(default)]
            code: String,
            #[serde(default)]
            message: String,
        }
        let first = serde_json::from_slice::<Envelope>(&body)
            .ok()
            .and_then(|e| e.errors.into_iter().next());
        let code = first.as_ref().map(|e| e.code.as_str()).unwrap_or("");
        let detail = match &first {
            Some(e) => format!(
                "{} {}",
                e.code,
                e.message.chars().take(300).collect::<String>()
            ),
            None => String::from_utf8_lossy(&body)
                .trim()
                .chars()
                .take(300)
                .collect(),
        };
        let message = format!("{what}: {status}: {}", detail.trim());
        let (reference, registry) = (self.reference.clone(), self.spec.host.clone());
        match (status.as_u16(), code) {
            (401, _) | (_, "UNAUTHORIZED") => Error::Unauthenticated {
                reference,
                registry,
                message,
            },
            (403, _) | (_, "DENIED") => Error::PermissionDenied {
                reference,
                registry,
                message,
            },
            (404, _) | (_, "MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "BLOB_UNKNOWN") => {
                Error::RemoteNotFound {
                    reference,
                    registry,
                    message,
                }
            }
            _ => Error::Registry {
                reference,
                registry,
                message,
            },
        }
    }
}

#[cfg(test)]
mod tests;
