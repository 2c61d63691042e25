//! The `[streaming]` section: the server behind Exec, Attach and PortForward.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Most `streaming.max_connections` (each is a file descriptor and, once a
/// session, a process and a shim connection).
const MAX_CONNECTIONS: usize = 65536;

/// The HTTP server behind the URLs of Exec, Attach and PortForward: plain
/// HTTP, or HTTPS with `enable_tls` (containerd's `enable_tls_streaming`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamingConfig {
    /// IP address to listen on.
    pub address: String,
    /// Port; 0: a free port chosen at start.
    pub port: u16,
    /// How long a returned URL stays valid (single use), e.g. `"1m"`.
    pub token_ttl: String,
    /// A session with no traffic for this long is closed, e.g. `"4h"`.
    pub idle_timeout: String,
    /// Most connections at once. When all are taken, a new one closes the
    /// oldest that has not shown a valid token; sessions are never closed.
    pub max_connections: usize,
    /// Most connections one address holds before they show a valid token
    /// (past it, its own oldest is closed); kubelet's addresses (the
    /// loopbacks, `address`) are not capped.
    pub max_connections_per_peer: usize,
    /// From the accept: the TLS handshake and the first request head.
    pub header_timeout: String,
    /// After an answer on a kept connection, until the next request head.
    pub keepalive_timeout: String,
    /// Serve HTTPS only.
    pub enable_tls: bool,
    /// With `enable_tls`: the PEM certificate (chain) file; empty: a
    /// self-signed certificate made at each start.
    pub tls_cert_file: PathBuf,
    /// The PEM private key of `tls_cert_file`.
    pub tls_key_file: PathBuf,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            address: "127.0.0.1".into(),
            port: 0,
            token_ttl: "1m".into(),
            idle_timeout: "4h".into(),
            max_connections: 256,
            max_connections_per_peer: 16,
            header_timeout: "10s".into(),
            keepalive_timeout: "10s".into(),
            enable_tls: false,
            tls_cert_file: PathBuf::new(),
            tls_key_file: PathBuf::new(),
        }
    }
}

impl StreamingConfig {
    /// The server's configuration, or the key that is wrong and why.
    pub fn server_config(&self) -> Result<berth_streaming::Config, (&'static str, String)> {
        let ip: std::net::IpAddr = self.address.parse().map_err(|_| {
            (
                "streaming.address",
                format!("{:?} is not an IP address", self.address),
            )
        })?;
        let token_ttl = berth_oci_image::parse_duration(&self.token_ttl)
            .map_err(|e| ("streaming.token_ttl", e))?;
        if token_ttl.is_zero() {
            return Err(("streaming.token_ttl", "must be above 0".into()));
        }
        let idle_timeout = berth_oci_image::parse_duration(&self.idle_timeout)
            .map_err(|e| ("streaming.idle_timeout", e))?;
        if idle_timeout.is_zero() {
            return Err(("streaming.idle_timeout", "must be above 0".into()));
        }
        let above_zero = |key: &'static str, text: &str| match berth_oci_image::parse_duration(text)
            .map_err(|e| (key, e))?
        {
            d if d.is_zero() => Err((key, "must be above 0".to_string())),
            d => Ok(d),
        };
        let header_timeout = above_zero("streaming.header_timeout", &self.header_timeout)?;
        let keepalive_timeout = above_zero("streaming.keepalive_timeout", &self.keepalive_timeout)?;
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err((
                "streaming.max_connections",
                format!("must be from 1 to {MAX_CONNECTIONS}"),
            ));
        }
        if self.max_connections_per_peer == 0 {
            return Err((
                "streaming.max_connections_per_peer",
                "must be at least 1".into(),
            ));
        }
        let (cert, key) = (&self.tls_cert_file, &self.tls_key_file);
        for (name, path) in [
            ("streaming.tls_cert_file", cert),
            ("streaming.tls_key_file", key),
        ] {
            if !path.as_os_str().is_empty() && !path.is_absolute() {
                return Err((
                    name,
                    format!("must be an absolute path, got {}", path.display()),
                ));
            }
        }
        match (cert.as_os_str().is_empty(), key.as_os_str().is_empty()) {
            (false, true) => {
                return Err((
                    "streaming.tls_key_file",
                    "is needed with tls_cert_file".into(),
                ))
            }
            (true, false) => {
                return Err((
                    "streaming.tls_cert_file",
                    "is needed with tls_key_file".into(),
                ))
            }
            (false, false) if !self.enable_tls => {
                return Err((
                    "streaming.enable_tls",
                    "must be true when tls_cert_file is set".into(),
                ))
            }
            _ => {}
        }
        // The certificate itself is read (or made) when the server starts.
        Ok(berth_streaming::Config {
            addr: std::net::SocketAddr::new(ip, self.port),
            token_ttl,
            idle_timeout,
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            header_timeout,
            keepalive_timeout,
            ..berth_streaming::Config::default()
        })
    }
}
