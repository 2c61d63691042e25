//! Streaming for exec, attach and port-forward, the way kubelet's clients
//! (kubectl through the API server, crictl, critest) expect a container
//! runtime to serve it.
//!
//! The `Exec`, `Attach` and `PortForward` RPCs store their request under a
//! random, single-use token that expires ([`TokenCache`]) and return a URL
//! (`http://ADDR/exec/TOKEN`) of the [`StreamingServer`]. The client then
//! upgrades a request to that URL to
//! - SPDY/3.1 ([`spdy`]: framing, zlib header compression with the SPDY/3
//!   dictionary, one stream per channel) with the sub-protocols
//!   `v4.channel.k8s.io`, `v3.channel.k8s.io`, `v2.channel.k8s.io` (exec,
//!   attach) or `portforward.k8s.io`, or
//! - a WebSocket with the channel sub-protocols `v5.channel.k8s.io`,
//!   `v4.channel.k8s.io` (and their older and base64 variants) or, for
//!   port-forward, `v4.channel.k8s.io` / `portforward.k8s.io`, or
//!   `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+: the SPDY port-forward
//!   session carried in binary messages, [`tunnel`]).
//!
//! The runtime plugs in as a [`Backend`]. The server stays independent of
//! the daemon: it knows containers and pods only by id. With
//! [`Config::tls`] it serves HTTPS only ([`tls`]: a configured certificate,
//! or a self-signed one made at start), as containerd's
//! `enable_tls_streaming`; a plain HTTP request then gets 400.

mod admission;
mod backend;
mod channel;
/// A client of the server for tests and tools, behind the `test-client`
/// feature: the daemon does not carry it.
#[cfg(feature = "test-client")]
pub mod client;
mod error;
mod idle;
pub mod pool;
mod portforward;
mod remotecommand;
mod server;
pub mod spdy;
pub mod tls;
mod token;
pub mod tunnel;
mod websocket;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

pub use backend::{
    AttachRequest, Backend, BackendError, ExecRequest, Input, Output, PortForwardRequest,
    PortStream, StreamIo, TerminalSize,
};
pub use error::Error;
pub use portforward::SPDY_PROTOCOL as PORT_FORWARD_SPDY_PROTOCOL;
pub use remotecommand::{
    ResizeDecoder, ResizeError, MAX_RESIZE_PENDING, SPDY_PROTOCOLS as REMOTE_COMMAND_SPDY_PROTOCOLS,
};
pub use server::StreamingServer;
pub use tls::TlsIdentity;
pub use token::{Lookup, TokenCache};
pub use tunnel::PORT_FORWARD_PROTOCOL as PORT_FORWARD_TUNNEL_PROTOCOL;
pub use websocket::{
    decode_message as decode_websocket_message, MAX_MESSAGE as MAX_WEBSOCKET_MESSAGE, MAX_PORTS,
    PORT_FORWARD_PROTOCOLS as PORT_FORWARD_WEBSOCKET_PROTOCOLS,
    REMOTE_COMMAND_PROTOCOLS as REMOTE_COMMAND_WEBSOCKET_PROTOCOLS,
};

/// How the server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where it listens; port 0 picks a free port.
    pub addr: SocketAddr,
    /// How long a URL stays valid after the RPC returned it.
    pub token_ttl: Duration,
    /// How long a SPDY client may take to open the streams of a session.
    pub stream_creation_timeout: Duration,
    /// Most URLs handed out and not used yet.
    pub max_in_flight: usize,
    /// A session with no byte either way for this long ends.
    pub idle_timeout: Duration,
    /// Most client connections served at once (sessions and connections
    /// that have not upgraded yet). When all are taken, a new connection
    /// closes the oldest one that has not shown a valid token (of the
    /// address holding the most such); when all are sessions, the new one
    /// is closed at once.
    pub max_connections: usize,
    /// Most connections one peer address holds before it has shown a valid
    /// token; past this its oldest such connection is closed. Sessions do
    /// not count (kubelet makes them all from one address).
    pub max_connections_per_peer: usize,
    /// From the accept, how long a client may take to finish the TLS
    /// handshake and send its first request head.
    pub header_timeout: Duration,
    /// After an answer on a connection kept open (a valid token whose
    /// upgrade was refused), how long until the next request head must be
    /// in. A request without a valid token is answered and the connection
    /// closed.
    pub keepalive_timeout: Duration,
    /// Serve HTTPS with this certificate (URLs are `https://`); `None`:
    /// plain HTTP.
    pub tls: Option<TlsIdentity>,
}

impl Config {
    /// Refuses values the server cannot run with.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::Config(what.to_string()));
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1");
        }
        if self.max_connections_per_peer == 0 {
            return bad("max_connections_per_peer must be at least 1");
        }
        for (name, d) in [
            ("token_ttl", self.token_ttl),
            ("stream_creation_timeout", self.stream_creation_timeout),
            ("idle_timeout", self.idle_timeout),
            ("header_timeout", self.header_timeout),
            ("keepalive_timeout", self.keepalive_timeout),
        ] {
            if d.is_zero() {
                return bad(&format!("{name} must be above 0"));
            }
        }
        Ok(())
    }
}

impl Default for Config {
    /// 127.0.0.1 on a free port, tokens for 1 minute, 30 s to open
    /// streams, 1000 tokens in flight, 4 h idle timeout (kubelet's values),
    /// 256 connections at once and 16 not yet upgraded per peer address,
    /// 10 s for the first request head and between requests, plain HTTP.
    fn default() -> Self {
        Config {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            token_ttl: Duration::from_secs(60),
            stream_creation_timeout: Duration::from_secs(30),
            max_in_flight: 1000,
            idle_timeout: Duration::from_secs(4 * 3600),
            max_connections: 256,
            max_connections_per_peer: 16,
            header_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}
