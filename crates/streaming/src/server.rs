//! The HTTP server behind the URLs the Exec, Attach and PortForward RPCs
//! return: `/exec/TOKEN`, `/attach/TOKEN`, `/portforward/TOKEN`, by GET or
//! POST, upgraded to SPDY/3.1 (`Upgrade: SPDY/3.1`, sub-protocol in
//! `X-Stream-Protocol-Version`) or to a WebSocket (`Sec-WebSocket-Protocol`;
//! for port-forward also `SPDY/3.1+portforward.k8s.io`, SPDY inside the
//! WebSocket). With TLS every connection starts with the handshake (bounded
//! like a request head); one that starts with anything else gets 400.
//!
//! A token is checked before the upgrade and used only when the upgrade
//! goes ahead, so a client that retries with another protocol (client-go
//! falls back from WebSocket to SPDY) can still use it. Errors are plain
//! text: 404 for a wrong, expired or used token, 400 for a request that is
//! not an upgrade, 403 when no sub-protocol matches (with the accepted ones
//! in `X-Accepted-Stream-Protocol-Versions`, as kubelet answers).
//!
//! Connections are rationed ([`crate::admission`]): per peer address and in
//! all, with room made by closing the oldest connections that have not
//! shown a valid token. A connection must send its first request head (and
//! finish its TLS handshake) within [`Config::header_timeout`] of its
//! accept, a deadline no later request moves. A request without a valid
//! token is answered and the connection closed (`Connection: close`); one
//! with a valid token whose upgrade is refused may be followed by another
//! within [`Config::keepalive_timeout`] of the answer.

use berth_lock::MutexExt;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::{Method, Request as HttpRequest, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::WebSocketStream;

use crate::admission::{Admission, Admit, Slot};
use crate::backend::{AttachRequest, Backend, ExecRequest, PortForwardRequest};
use crate::error::Error;
use crate::idle::Idle;
use crate::remotecommand::{self, Command};
use crate::token::{Lookup, TokenCache};
use crate::{portforward, tunnel, websocket, Config};

/// Most bytes of a request head buffered (kubelet's clients send well under
/// 4 KiB; hyper's own default is some 400 KiB per connection).
const MAX_REQUEST_HEAD: usize = 64 * 1024;

/// What a token stands for.
#[derive(Debug, Clone)]
enum Pending {
    Exec(ExecRequest),
    Attach(AttachRequest),
    PortForward(PortForwardRequest),
}

impl Pending {
    fn path(&self) -> &'static str {
        match self {
            Pending::Exec(_) => "exec",
            Pending::Attach(_) => "attach",
            Pending::PortForward(_) => "portforward",
        }
    }
}

type Body = Full<Bytes>;
/// An answer that refuses the upgrade.
type Refusal = Box<Response<Body>>;
type Session = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The streaming server. Cheap to clone: clones share one server.
#[derive(Clone)]
pub struct StreamingServer {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    local_addr: SocketAddr,
    base_url: String,
    tokens: TokenCache<Pending>,
    backend: Arc<dyn Backend>,
    listener: Mutex<Option<std::net::TcpListener>>,
    stop: watch::Sender<bool>,
    /// With TLS: the handshake of every connection.
    tls: Option<TlsAcceptor>,
}

impl std::fmt::Debug for StreamingServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingServer")
            .field("base_url", &self.inner.base_url)
            .finish()
    }
}

impl StreamingServer {
    /// Binds `config.addr` (port 0: a free port); [`StreamingServer::serve`]
    /// then answers on it.
    pub fn new(config: Config, backend: Arc<dyn Backend>) -> Result<StreamingServer, Error> {
        config.validate()?;
        let bind_err = |source| Error::Bind {
            addr: config.addr,
            source,
        };
        let listener = std::net::TcpListener::bind(config.addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        let tls = match &config.tls {
            Some(identity) => Some(TlsAcceptor::from(identity.server_config()?)),
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        Ok(StreamingServer {
            inner: Arc::new(Inner {
                base_url: format!("{scheme}://{local_addr}"),
                tls,
                local_addr,
                tokens: TokenCache::new(config.token_ttl, config.max_in_flight),
                backend,
                listener: Mutex::new(Some(listener)),
                stop: watch::channel(false).0,
                config,
            }),
        })
    }

    /// Where the server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// `http://ADDR` (`https://ADDR` with TLS), what every URL starts with.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    fn url(&self, pending: Pending) -> Result<String, Error> {
        let path = pending.path();
        let token = self.inner.tokens.insert(pending)?;
        Ok(format!("{}/{path}/{token}", self.inner.base_url))
    }

    /// The URL of an exec: `http://ADDR/exec/TOKEN`.
    pub fn get_exec_url(&self, req: ExecRequest) -> Result<String, Error> {
        req.validate()?;
        self.url(Pending::Exec(req))
    }

    /// The URL of an attach: `http://ADDR/attach/TOKEN`.
    pub fn get_attach_url(&self, req: AttachRequest) -> Result<String, Error> {
        req.validate()?;
        self.url(Pending::Attach(req))
    }

    /// The URL of a port forward: `http://ADDR/portforward/TOKEN`.
    pub fn get_port_forward_url(&self, req: PortForwardRequest) -> Result<String, Error> {
        req.validate()?;
        self.url(Pending::PortForward(req))
    }

    /// Serves until [`StreamingServer::shutdown`]; then every connection and
    /// session is ended. Serves once.
    pub async fn serve(&self) -> Result<(), Error> {
        let listener = self
            .inner
            .listener
            .lock_unpoisoned()
            .take()
            .ok_or(Error::AlreadyServing)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut stop = self.inner.stop.subscribe();
        let mut connections = JoinSet::new();
        let config = &self.inner.config;
        // Where kubelet connects from: the loopbacks, or the address itself.
        let kubelet = [
            IpAddr::from(Ipv4Addr::LOCALHOST),
            IpAddr::from(Ipv6Addr::LOCALHOST),
            self.inner.local_addr.ip(),
        ];
        let admission = Admission::new(
            config.max_connections,
            config.max_connections_per_peer,
            &kubelet,
        );
        loop {
            tokio::select! {
                _ = async { let _ = stop.wait_for(|stop| *stop).await; } => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, peer)) => match admission.admit(peer.ip()) {
                        Admit::Yes { slot, evicted } => {
                            let accepted = Instant::now();
                            if let Some(evicted) = evicted {
                                tracing::debug!(
                                    %peer,
                                    closed = %evicted.peer,
                                    "streaming server: closing a connection without a valid token to make room"
                                );
                                evicted.close();
                            }
                            let id = slot.id();
                            let inner = self.inner.clone();
                            let task = connections.spawn(async move {
                                serve_connection(inner, tcp, peer, accepted, slot).await;
                            });
                            admission.spawned(id, task);
                        }
                        Admit::Full => {
                            tracing::warn!(
                                %peer,
                                max = config.max_connections,
                                "streaming server: every connection is a session; closing a new one"
                            );
                            drop(tcp);
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "streaming server: accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections.shutdown().await;
        Ok(())
    }

    /// Stops [`StreamingServer::serve`] and ends all sessions.
    pub fn shutdown(&self) {
        self.inner.stop.send_replace(true);
    }
}

/// What a TLS server answers a plain HTTP request, as Go's servers do.
const PLAIN_HTTP_REFUSAL: &str = "Client sent an HTTP request to an HTTPS server.\n";
/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

async fn serve_connection(
    inner: Arc<Inner>,
    tcp: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    slot: Slot,
) {
    let _ = tcp.set_nodelay(true);
    // The handshake and the first request head, together.
    let first_head = accepted + inner.config.header_timeout;
    let Some(acceptor) = inner.tls.clone() else {
        return serve_http(inner, tcp, peer, first_head, slot).await;
    };
    let handshake = tokio::time::timeout_at(first_head, async {
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await {
            Ok(1) if first[0] != TLS_HANDSHAKE => {
                let mut tcp = tcp;
                let answer = format!(
                    "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PLAIN_HTTP_REFUSAL}",
                    PLAIN_HTTP_REFUSAL.len()
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
                let _ = tcp.shutdown().await;
                Err("a plain HTTP request to the TLS server".to_string())
            }
            Ok(1) => acceptor.accept(tcp).await.map_err(|e| e.to_string()),
            Ok(_) => Err("closed before the handshake".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    match handshake {
        Ok(Ok(tls)) => serve_http(inner, tls, peer, first_head, slot).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "streaming server: TLS"),
        Err(_) => tracing::debug!(%peer, "streaming server: no TLS handshake in time"),
    }
}

/// What an answer does to its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// No valid token: answered, then closed.
    Close,
    /// A valid token whose upgrade was refused: the client may try again
    /// on this connection (within the keep-alive timeout).
    KeepAlive,
    /// Upgraded: the session runs.
    Upgrade,
}

/// One connection, as its request handler sees it.
struct Connection {
    slot: Slot,
    /// When it is closed unless a request head has come in by then; `None`
    /// once upgraded (the session has its own idle timeout).
    deadline: watch::Sender<Option<Instant>>,
}

/// Serves HTTP/1.1 on one connection (plain or TLS), then the session it
/// upgraded to, if any. The connection ends if no request head is in by
/// `first_head`, or within the keep-alive timeout of an answer.
async fn serve_http<IO>(
    inner: Arc<Inner>,
    io: IO,
    peer: SocketAddr,
    first_head: Instant,
    slot: Slot,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let header_timeout = inner.config.header_timeout;
    let keepalive = inner.config.keepalive_timeout;
    let (deadline, mut deadlines) = watch::channel(Some(first_head));
    let connection = Arc::new(Connection { slot, deadline });
    let upgraded: Arc<Mutex<Option<Session>>> = Arc::default();
    let session_slot = upgraded.clone();
    let conn = connection.clone();
    let service = hyper::service::service_fn(move |req| {
        let (mut response, outcome) = handle(&inner, req, &session_slot, &conn.slot);
        // The answer is written at once; the next head (if any) must
        // follow within the keep-alive timeout, and so must the end of a
        // body hyper still drains.
        let next = Instant::now() + keepalive;
        match outcome {
            Outcome::Close => {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
                conn.deadline.send_replace(Some(next));
            }
            Outcome::KeepAlive => {
                conn.deadline.send_replace(Some(next));
            }
            Outcome::Upgrade => {
                conn.deadline.send_replace(None);
            }
        }
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_REQUEST_HEAD)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    // `connection` keeps the sender alive: `changed` never fails here.
    let served = loop {
        let Some(deadline) = *deadlines.borrow_and_update() else {
            break conn.as_mut().await;
        };
        tokio::select! {
            served = conn.as_mut() => break served,
            _ = deadlines.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {
                tracing::debug!(%peer, "streaming server: no request in time; closing");
                return;
            }
        }
    };
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "streaming server: connection");
    }
    let session = upgraded.lock_unpoisoned().take();
    if let Some(session) = session {
        session.await;
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut message = message.into();
    message.push('\n');
    let mut resp = Response::new(Full::new(Bytes::from(message)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// The values of a header, comma lists split.
fn header_list(req: &HttpRequest<Incoming>, name: &str) -> Vec<String> {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

fn header_has(
    req: &HttpRequest<Incoming>,
    name: impl hyper::header::AsHeaderName,
    word: &str,
) -> bool {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains(word))
}

fn is_websocket(req: &HttpRequest<Incoming>) -> bool {
    header_has(req, UPGRADE, "websocket") && header_has(req, CONNECTION, "upgrade")
}

/// The transport a request asked for, agreed.
enum Transport {
    Spdy(String),
    WebSocket(String),
}

/// The first of the client's protocols that the server speaks.
fn negotiate(client: &[String], server: &[&str]) -> Option<String> {
    client
        .iter()
        .find(|c| server.contains(&c.as_str()))
        .cloned()
}

fn spdy_handshake(
    req: &HttpRequest<Incoming>,
    server: &[&'static str],
    response: &mut Response<Body>,
) -> Result<Transport, Refusal> {
    let client = header_list(req, "x-stream-protocol-version");
    if client.is_empty() {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: X-Stream-Protocol-Version is required",
        )));
    }
    let Some(protocol) = negotiate(&client, server) else {
        let mut resp = text(
            StatusCode::FORBIDDEN,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {client:?}, server accepts {server:?}"
            ),
        );
        for p in server {
            resp.headers_mut().append(
                "X-Accepted-Stream-Protocol-Versions",
                HeaderValue::from_static(p),
            );
        }
        return Err(Box::new(resp));
    };
    if !header_has(req, CONNECTION, "upgrade") || !header_has(req, UPGRADE, "spdy/3.1") {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request (Connection: Upgrade, Upgrade: SPDY/3.1)",
        )));
    }
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    if let Ok(v) = HeaderValue::from_str(&protocol) {
        headers.insert("X-Stream-Protocol-Version", v);
    }
    Ok(Transport::Spdy(protocol))
}

fn websocket_handshake(
    req: &HttpRequest<Incoming>,
    server: &[&'static str],
    response: &mut Response<Body>,
) -> Result<Transport, Refusal> {
    let version_ok = req
        .headers()
        .get("sec-websocket-version")
        .is_some_and(|v| v.as_bytes() == b"13");
    let Some(key) = req
        .headers()
        .get("sec-websocket-key")
        .filter(|_| version_ok)
    else {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "websocket: the request needs Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key",
        )));
    };
    let mut client = header_list(req, "sec-websocket-protocol");
    if client.is_empty() {
        client.push(String::new());
    }
    let Some(protocol) = negotiate(&client, server) else {
        return Err(Box::new(text(
            StatusCode::FORBIDDEN,
            format!("requested protocol(s) are not supported: {client:?}; supports {server:?}"),
        )));
    };
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert("Sec-WebSocket-Accept", v);
    }
    if !protocol.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&protocol) {
            headers.insert("Sec-WebSocket-Protocol", v);
        }
    }
    Ok(Transport::WebSocket(protocol))
}

/// Ports named in the URL (`?port=80&port=8080` or `?port=80,8080`).
fn query_ports(req: &HttpRequest<Incoming>) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for pair in req.uri().query().unwrap_or_default().split('&') {
        let Some(("port", value)) = pair.split_once('=') else {
            continue;
        };
        for p in value.split(',') {
            match p.parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => return Err(format!("unable to parse {p:?} as a port")),
            }
        }
    }
    Ok(ports)
}

/// A refused request: the answer, and what it does to the connection.
type Refused = (Refusal, Outcome);

/// Answers one request: an error, or 101 with the session left in `slot`
/// to run once hyper hands the connection over; and what that does to the
/// connection.
fn handle(
    inner: &Arc<Inner>,
    mut req: HttpRequest<Incoming>,
    slot: &Arc<Mutex<Option<Session>>>,
    connection: &Slot,
) -> (Response<Body>, Outcome) {
    match upgrade(inner, &mut req, connection) {
        Ok((response, session)) => {
            *slot.lock_unpoisoned() = Some(session);
            (response, Outcome::Upgrade)
        }
        Err((refusal, outcome)) => (*refusal, outcome),
    }
}

/// Checks the request and its token, agrees the transport, and uses the
/// token: the 101 answer and the session to run after it.
fn upgrade(
    inner: &Arc<Inner>,
    req: &mut HttpRequest<Incoming>,
    connection: &Slot,
) -> Result<(Response<Body>, Session), Refused> {
    use Outcome::{Close, KeepAlive};
    let (kind, token) = route(req.uri().path()).map_err(|r| (r, Close))?;
    allow_method(req).map_err(|r| (r, Close))?;
    let gone = |lookup| (token_gone(lookup, inner.tokens.ttl()), Close);
    let pending = match inner.tokens.peek(&token) {
        Lookup::Found(p) => p,
        other => return Err(gone(other)),
    };
    if pending.path() != kind {
        let message = format!("this token is for /{}, not /{kind}", pending.path());
        return Err((Box::new(text(StatusCode::NOT_FOUND, message)), Close));
    }
    // From here on the token is valid: a refused upgrade may be retried.
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let transport = handshake(req, &pending, &mut response).map_err(|r| (r, KeepAlive))?;
    let ws_ports = websocket_ports(req, &pending, &transport).map_err(|r| (r, KeepAlive))?;
    // The upgrade goes ahead: the connection becomes a session, unless it
    // was just chosen to make room for another (its task is ending).
    if !connection.prove() {
        let message = "the streaming server closed this connection to make room; try again";
        return Err((
            Box::new(text(StatusCode::SERVICE_UNAVAILABLE, message)),
            Close,
        ));
    }
    // Use the token now (a racing request loses).
    let pending = match inner.tokens.take(&token) {
        Lookup::Found(p) => p,
        other => return Err(gone(other)),
    };
    let on_upgrade = hyper::upgrade::on(req);
    let session = session(inner, on_upgrade, transport, pending, ws_ports);
    Ok((response, session))
}

/// The kind of session (`exec`, `attach` or `portforward`) and the token a
/// path names.
fn route(path: &str) -> Result<(&str, String), Refusal> {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    match (parts.next(), parts.next()) {
        (Some(kind @ ("exec" | "attach" | "portforward")), Some(token))
            if !token.is_empty() && !token.contains('/') =>
        {
            Ok((kind, token.to_string()))
        }
        _ => Err(Box::new(text(
            StatusCode::NOT_FOUND,
            format!("{path} not found: this server serves /exec/TOKEN, /attach/TOKEN and /portforward/TOKEN"),
        ))),
    }
}

/// Refuses methods other than GET and POST.
fn allow_method(req: &HttpRequest<Incoming>) -> Result<(), Refusal> {
    if req.method() == Method::GET || req.method() == Method::POST {
        return Ok(());
    }
    let mut resp = text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed: use GET or POST", req.method()),
    );
    resp.headers_mut()
        .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, POST"));
    Err(Box::new(resp))
}

/// The answer to a token that is not (or no longer) in the cache.
fn token_gone(lookup: Lookup<Pending>, ttl: Duration) -> Refusal {
    Box::new(match lookup {
        Lookup::Expired => text(
            StatusCode::NOT_FOUND,
            format!("streaming token has expired: a URL is valid for {ttl:?} after the RPC returned it"),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "unknown streaming token: it was never issued, has already been used (tokens are single-use), or has expired",
        ),
    })
}

/// Agrees the transport (SPDY or WebSocket) and the sub-protocol for what
/// the token stands for, writing the agreement into `response`.
fn handshake(
    req: &HttpRequest<Incoming>,
    pending: &Pending,
    response: &mut Response<Body>,
) -> Result<Transport, Refusal> {
    let websocket = is_websocket(req);
    let protocols = match (pending, websocket) {
        (Pending::PortForward(_), true) => websocket::PORT_FORWARD_PROTOCOLS,
        (_, true) => websocket::REMOTE_COMMAND_PROTOCOLS,
        (Pending::PortForward(_), false) => &[portforward::SPDY_PROTOCOL][..],
        (_, false) => remotecommand::SPDY_PROTOCOLS,
    };
    if websocket {
        websocket_handshake(req, protocols, response)
    } else {
        spdy_handshake(req, protocols, response)
    }
}

/// The ports of a port-forward over a plain WebSocket (its channels are
/// fixed up front): the request's, or else the URL's; empty for any other
/// session.
fn websocket_ports(
    req: &HttpRequest<Incoming>,
    pending: &Pending,
    transport: &Transport,
) -> Result<Vec<u16>, Refusal> {
    let (Pending::PortForward(pf), Transport::WebSocket(p)) = (pending, transport) else {
        return Ok(Vec::new());
    };
    if p == tunnel::PORT_FORWARD_PROTOCOL {
        return Ok(Vec::new());
    }
    let mut ports = pf.ports.clone();
    if ports.is_empty() {
        ports = query_ports(req).map_err(|e| Box::new(text(StatusCode::BAD_REQUEST, e)))?;
    }
    if ports.is_empty() || ports.len() > websocket::MAX_PORTS {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            format!(
                "port forwarding over a WebSocket needs 1 to {} ports, in the request or as query parameter \"port\"",
                websocket::MAX_PORTS
            ),
        )));
    }
    Ok(ports)
}

/// The session run on the connection once hyper hands it over: what the
/// token stands for, served over the agreed transport.
fn session(
    inner: &Inner,
    on_upgrade: hyper::upgrade::OnUpgrade,
    transport: Transport,
    pending: Pending,
    ws_ports: Vec<u16>,
) -> Session {
    let backend = inner.backend.clone();
    let creation_timeout = inner.config.stream_creation_timeout;
    let idle_timeout = inner.config.idle_timeout;
    Box::pin(async move {
        let io = match on_upgrade.await {
            Ok(upgraded) => Idle::new(TokioIo::new(upgraded), idle_timeout),
            Err(e) => {
                tracing::debug!(error = %e, "streaming: upgrade failed");
                return;
            }
        };
        let command = match &pending {
            Pending::Exec(r) => Some(Command::Exec(r.clone())),
            Pending::Attach(r) => Some(Command::Attach(r.clone())),
            Pending::PortForward(_) => None,
        };
        match (transport, command, pending) {
            (Transport::Spdy(p), Some(cmd), _) => {
                remotecommand::serve_spdy(io, &p, cmd, backend, creation_timeout).await
            }
            (Transport::WebSocket(p), Some(cmd), _) => {
                let ws =
                    WebSocketStream::from_raw_socket(io, WsRole::Server, Some(websocket::limits()))
                        .await;
                websocket::serve_remote_command(ws, &p, cmd, backend).await
            }
            (Transport::Spdy(_), None, Pending::PortForward(pf)) => {
                portforward::serve_spdy(io, pf.pod_sandbox_id, backend, creation_timeout).await
            }
            (Transport::WebSocket(p), None, Pending::PortForward(pf))
                if p == tunnel::PORT_FORWARD_PROTOCOL =>
            {
                let ws =
                    WebSocketStream::from_raw_socket(io, WsRole::Server, Some(websocket::limits()))
                        .await;
                let bytes = tunnel::WsBytes::new(ws);
                portforward::serve_spdy(bytes, pf.pod_sandbox_id, backend, creation_timeout).await
            }
            (Transport::WebSocket(p), None, Pending::PortForward(pf)) => {
                let ws =
                    WebSocketStream::from_raw_socket(io, WsRole::Server, Some(websocket::limits()))
                        .await;
                websocket::serve_port_forward(ws, &p, pf.pod_sandbox_id, ws_ports, backend).await
            }
            _ => {}
        }
    })
}
