//! Which hosts serve a registry, in which order, with which TLS settings:
//! containerd's `hosts.toml` directories (`registry.config_path`) and
//! berth's inline `registry.mirrors`, both turned into one list of
//! [`HostSpec`]s per pull.
//!
//! The rules follow containerd (`core/remotes/docker/config/hosts.go` and
//! `docs/hosts.md`):
//!
//! - The directory for `host:port` is the first that exists of
//!   `host_port_`, `host:port` and `_default` under `config_path` (for a
//!   host without a port: `host`, then `_default`).
//! - In it, `hosts.toml` lists `[host."URL"]` entries, tried in the order
//!   they are written, then `server`. When `server` is not set, the image's
//!   own registry is the last host (and takes the root-level `ca`, `client`,
//!   `skip_verify` and `header`). A file that sets `server` to a mirror never
//!   falls back to the registry.
//! - A directory without `hosts.toml` is read the way docker reads
//!   `certs.d`: `*.crt` are CAs, `*.cert` client certificates with their
//!   `*.key`.
//! - A URL without a scheme is HTTPS; `/v2` is appended to its path unless
//!   `override_path = true`. Relative file names are relative to the
//!   directory of the `hosts.toml`.
//! - `capabilities` (`pull`, `resolve`, `push`; none listed means all):
//!   resolving a tag needs `pull` and `resolve`, fetching by digest `pull`.
//!
//! Where berth differs: a `hosts.toml` that does not parse fails the pull
//! (containerd logs it and carries on without it, which can send an
//! air-gapped node to the internet); unknown keys are errors (a misspelt
//! `skip_verify` must not go unnoticed).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::config::{self, RegistryConfig};
use crate::error::Error;
use crate::reference::{DEFAULT_DOMAIN, DOCKER_HUB_HOST};

/// Largest `hosts.toml`, CA, certificate or key file read.
pub(crate) const MAX_FILE: u64 = 1 << 20;

/// One host to try for a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostSpec {
    /// Plain HTTP instead of HTTPS.
    pub plain_http: bool,
    /// `host[:port]`.
    pub host: String,
    /// The API root, `/v2` unless `override_path` says otherwise (no
    /// trailing slash; empty for the server's root).
    pub path: String,
    /// May serve content by digest.
    pub pull: bool,
    /// May turn a tag into a digest.
    pub resolve: bool,
    /// CA files trusted on top of the system's roots.
    pub ca: Vec<PathBuf>,
    /// Client certificates with their keys (`None`: the key is in the
    /// certificate's file).
    pub client: Vec<(PathBuf, Option<PathBuf>)>,
    /// Do not verify the server's certificate.
    pub skip_verify: bool,
    /// Extra request headers.
    pub header: Vec<(String, String)>,
    /// Connect timeout.
    pub dial_timeout: Option<Duration>,
    /// Proxy URL for this host.
    pub proxy: Option<String>,
    /// The image's own registry (false for a mirror): the pull's own
    /// credentials go only here.
    pub upstream: bool,
    /// Where this host was configured (for messages).
    pub source: String,
}

impl HostSpec {
    /// `scheme://host`.
    pub(crate) fn origin(&self) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}", self.host)
    }

    /// The same host with none of its TLS settings (no CA of its own, no
    /// client certificate, verified): for other hosts it names.
    pub(crate) fn without_tls(&self) -> HostSpec {
        HostSpec {
            ca: Vec::new(),
            client: Vec::new(),
            skip_verify: false,
            ..self.clone()
        }
    }

    /// Whether it carries TLS settings of its own.
    pub(crate) fn has_tls_settings(&self) -> bool {
        !self.ca.is_empty() || !self.client.is_empty() || self.skip_verify
    }
}

/// Whether `host` is the registry that names under `domain` live on.
pub(crate) fn is_registry_host(host: &str, domain: &str) -> bool {
    let host = host.to_ascii_lowercase();
    host.eq_ignore_ascii_case(domain)
        || (domain.eq_ignore_ascii_case(DEFAULT_DOMAIN)
            && matches!(
                host.as_str(),
                DOCKER_HUB_HOST | "index.docker.io" | "docker.io"
            ))
}

/// The hosts to try for images named under `domain`, in order. Empty when
/// the upstream may not be contacted and nothing else is configured.
pub(crate) fn hosts_for(cfg: &RegistryConfig, domain: &str) -> Result<Vec<HostSpec>, Error> {
    // Host names are compared case-folded: `REGISTRY.K8S.IO` is configured
    // by `registry.k8s.io/hosts.toml` and `mirrors."registry.k8s.io"`.
    let domain = &domain.to_ascii_lowercase();
    let mut hosts = if !cfg.config_path.as_os_str().is_empty() {
        match host_dir(&cfg.config_path, domain)? {
            Some(dir) => load_host_dir(&dir)?,
            None => vec![Entry::default()],
        }
    } else {
        inline_mirrors(cfg, domain)
    };
    // The last entry without a host is the registry itself.
    if let Some(last) = hosts.last_mut() {
        if last.spec.host.is_empty() {
            if cfg.mirror_only {
                hosts.pop();
            } else {
                let spec = &mut last.spec;
                if domain == DEFAULT_DOMAIN {
                    spec.host = DOCKER_HUB_HOST.to_string();
                    spec.plain_http = false;
                } else {
                    spec.host = domain.to_string();
                    spec.plain_http = cfg.is_plain_http(domain);
                }
                spec.path = "/v2".into();
                spec.pull = true;
                spec.resolve = true;
            }
        }
    }
    Ok(hosts
        .into_iter()
        .map(|e| {
            let mut spec = e.spec;
            spec.upstream = is_registry_host(&spec.host, domain);
            spec
        })
        .collect())
}

/// A host entry before the registry's own host is filled in.
#[derive(Debug, Clone)]
struct Entry {
    spec: HostSpec,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            spec: HostSpec {
                plain_http: false,
                host: String::new(),
                path: "/v2".into(),
                pull: true,
                resolve: true,
                ca: Vec::new(),
                client: Vec::new(),
                skip_verify: false,
                header: Vec::new(),
                dial_timeout: None,
                proxy: None,
                upstream: false,
                source: "default".into(),
            },
        }
    }
}

/// `registry.mirrors` as host entries: each endpoint may pull and resolve,
/// then the registry itself unless the mirror is `mirror_only`.
fn inline_mirrors(cfg: &RegistryConfig, domain: &str) -> Vec<Entry> {
    let own = cfg
        .mirrors
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(domain));
    let (key, mirror) = match own {
        Some(found) => found,
        None => match cfg.mirrors.get_key_value("*") {
            Some(found) => found,
            None => return vec![Entry::default()],
        },
    };
    let mut out: Vec<Entry> = mirror
        .endpoints
        .iter()
        .filter_map(|e| config::parse_endpoint(e, cfg).ok())
        .map(|(host, plain_http)| {
            let mut entry = Entry::default();
            entry.spec.host = host;
            entry.spec.plain_http = plain_http;
            entry.spec.source = format!("registry.mirrors.{key:?}");
            entry
        })
        .collect();
    if !mirror.mirror_only {
        out.push(Entry::default());
    }
    out
}

/// The directory configuring `host` under `root`, if any.
fn host_dir(root: &Path, host: &str) -> Result<Option<PathBuf>, Error> {
    let mut candidates = Vec::new();
    if let Some(i) = host.rfind(':') {
        if i > 0 {
            candidates.push(format!("{}_{}_", &host[..i], &host[i + 1..]));
        }
    }
    candidates.push(host.to_string());
    candidates.push("_default".to_string());
    for name in candidates {
        let path = root.join(&name);
        match std::fs::metadata(&path) {
            Ok(_) => return Ok(Some(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("stat", path, e)),
        }
    }
    Ok(None)
}

/// Reads at most [`MAX_FILE`] bytes of `path`.
pub(crate) fn read_small(path: &Path) -> Result<Vec<u8>, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let mut out = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::io("read", path, e))?;
    if out.len() as u64 > MAX_FILE {
        return Err(Error::Config(format!(
            "{}: larger than {MAX_FILE} bytes",
            path.display()
        )));
    }
    Ok(out)
}

fn load_host_dir(dir: &Path) -> Result<Vec<Entry>, Error> {
    let file = dir.join("hosts.toml");
    match std::fs::metadata(&file) {
        Ok(_) => {
            let bytes = read_small(&file)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Error::Config(format!("{}: not UTF-8", file.display())))?;
            parse_hosts_file(dir, &text)
                .map_err(|m| Error::Config(format!("{}: {m}", file.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => load_cert_files(dir),
        Err(e) => Err(Error::io("stat", file, e)),
    }
}

/// Docker's `certs.d` layout: `*.crt` CAs, `*.cert` + `*.key` client pairs.
fn load_cert_files(dir: &Path) -> Result<Vec<Entry>, Error> {
    let mut entry = Entry::default();
    entry.spec.source = dir.display().to_string();
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(it) => it
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| !t.is_dir()).unwrap_or(false))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Vec::new(),
        Err(e) => return Err(Error::io("read dir", dir, e)),
    };
    names.sort();
    for name in &names {
        if name.ends_with(".crt") {
            entry.spec.ca.push(dir.join(name));
        }
        if let Some(stem) = name.strip_suffix(".cert") {
            let key = format!("{stem}.key");
            let key = names.contains(&key).then(|| dir.join(key));
            entry.spec.client.push((dir.join(name), key));
        }
    }
    Ok(vec![entry])
}

/// A string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// `client`: a file, a list of files, or a list of `[cert, key]` pairs.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ClientSpec {
    One(String),
    Many(Vec<ClientItem>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ClientItem {
    Path(String),
    Pair(Vec<String>),
}

/// The settings of one host (and of the file's root).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFields {
    #[serde(default)]
    capabilities: Vec<String>,
    ca: Option<OneOrMany>,
    client: Option<ClientSpec>,
    skip_verify: Option<bool>,
    #[serde(default)]
    header: BTreeMap<String, OneOrMany>,
    #[serde(default)]
    override_path: bool,
    dial_timeout: Option<String>,
    proxy: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostsFile {
    server: Option<String>,
    #[serde(default)]
    capabilities: Vec<String>,
    ca: Option<OneOrMany>,
    client: Option<ClientSpec>,
    skip_verify: Option<bool>,
    #[serde(default)]
    header: BTreeMap<String, OneOrMany>,
    #[serde(default)]
    override_path: bool,
    dial_timeout: Option<String>,
    proxy: Option<String>,
    #[serde(default)]
    host: OrderedHosts,
}

/// `[host."URL"]` tables in the order the file lists them.
#[derive(Debug, Default)]
struct OrderedHosts(Vec<(String, HostFields)>);

impl<'de> Deserialize<'de> for OrderedHosts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedHosts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of hosts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedHosts, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, HostFields>()? {
                    out.push((k, v));
                }
                Ok(OrderedHosts(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parses a `hosts.toml` found in `dir`: its hosts in order, then its
/// server (with an empty host when `server` is not set).
fn parse_hosts_file(dir: &Path, text: &str) -> Result<Vec<Entry>, String> {
    let file: HostsFile = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
    let mut out = Vec::new();
    for (url, fields) in file.host.0 {
        let entry =
            host_entry(Some(&url), dir, fields).map_err(|m| format!("host.{url:?}: {m}"))?;
        out.push(entry);
    }
    let root = HostFields {
        capabilities: file.capabilities,
        ca: file.ca,
        client: file.client,
        skip_verify: file.skip_verify,
        header: file.header,
        override_path: file.override_path,
        dial_timeout: file.dial_timeout,
        proxy: file.proxy,
    };
    let server = file.server.filter(|s| !s.is_empty());
    let entry = host_entry(server.as_deref(), dir, root).map_err(|m| match &server {
        Some(s) => format!("server {s:?}: {m}"),
        None => m,
    })?;
    out.push(entry);
    Ok(out)
}

fn host_entry(server: Option<&str>, dir: &Path, f: HostFields) -> Result<Entry, String> {
    let mut e = Entry::default();
    let spec = &mut e.spec;
    spec.source = dir.join("hosts.toml").display().to_string();
    if let Some(server) = server {
        let (plain_http, host, path) = parse_server(server, f.override_path)?;
        spec.plain_http = plain_http;
        spec.host = host;
        spec.path = path;
    }
    if !f.capabilities.is_empty() {
        spec.pull = false;
        spec.resolve = false;
        for c in &f.capabilities {
            match c.to_ascii_lowercase().as_str() {
                "pull" => spec.pull = true,
                "resolve" => spec.resolve = true,
                "push" => {}
                other => return Err(format!("unknown capability {other:?}")),
            }
        }
    }
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    if let Some(ca) = f.ca {
        spec.ca = ca.into_vec().into_iter().map(abs).collect();
    }
    match f.client {
        None => {}
        Some(ClientSpec::One(p)) => spec.client.push((abs(p), None)),
        Some(ClientSpec::Many(items)) => {
            for item in items {
                match item {
                    ClientItem::Path(p) => spec.client.push((abs(p), None)),
                    ClientItem::Pair(pair) => match <[String; 2]>::try_from(pair) {
                        Ok([cert, key]) => spec
                            .client
                            .push((abs(cert), (!key.is_empty()).then(|| abs(key)))),
                        Err(pair) => return Err(format!("client: invalid pair {pair:?}")),
                    },
                }
            }
        }
    }
    spec.skip_verify = f.skip_verify.unwrap_or(false);
    for (name, values) in f.header {
        reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header {name:?}: not a header name"))?;
        for v in values.into_vec() {
            reqwest::header::HeaderValue::from_str(&v)
                .map_err(|_| format!("header {name:?}: bad value"))?;
            spec.header.push((name.clone(), v));
        }
    }
    if let Some(t) = f.dial_timeout {
        spec.dial_timeout =
            Some(config::parse_duration(&t).map_err(|m| format!("dial_timeout: {m}"))?);
    }
    if let Some(p) = f.proxy {
        reqwest::Proxy::all(&p).map_err(|e| format!("proxy {p:?}: {e}"))?;
        spec.proxy = Some(p);
    }
    Ok(e)
}

/// `https://host[:port][/path]` (no scheme: HTTPS) into (plain HTTP, host,
/// API root path).
fn parse_server(server: &str, override_path: bool) -> Result<(bool, String, String), String> {
    let with_scheme = if server.starts_with("http://") || server.starts_with("https://") {
        server.to_string()
    } else if server.contains("://") {
        return Err("only http:// and https:// are supported".into());
    } else {
        format!("https://{server}")
    };
    let url = reqwest::Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err("a query, fragment or user name is not allowed".into());
    }
    let host = url.host_str().ok_or("no host")?;
    let host = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    config::check_host(&host)?;
    let mut path = clean_path(url.path());
    if !override_path && !path.ends_with("/v2") {
        path.push_str("/v2");
    }
    Ok((url.scheme() == "http", host, path))
}

/// `/a//b/./c/` → `/a/b/c`; `/` → ``.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.iter().map(|p| format!("/{p}")).collect()
}

#[cfg(test)]
mod tests;
