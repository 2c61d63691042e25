//! One connected plugin: the mux over its socket, our ttrpc client of its
//! `Plugin` service, our ttrpc server of the `Runtime` service for it, and
//! the bounded calls that NRI's adaptation makes (containerd/nri
//! `pkg/adaptation/plugin.go`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex as StdMutex, OnceLock, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::time::Instant;
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server, TtrpcContext};

use crate::api;
use crate::api_ttrpc::{self, PluginClient};
use crate::events::{EventMask, VALID_EVENTS};
use crate::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::{Error, Host, PluginStats};

/// How a plugin came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// Connected to the NRI socket by itself.
    External,
    /// Pre-installed: started by us, pre-connected over fd 3.
    Launched,
}

/// The outcome of one bounded request.
#[derive(Debug)]
pub(crate) enum Call<T> {
    Done(T),
    /// The plugin does not implement the method (ttrpc UNIMPLEMENTED).
    Unimplemented,
    /// The plugin timed out or its connection broke: it has been closed and
    /// the event goes on without it.
    Dropped,
}

/// Identity given to a launched plugin by its file name.
pub(crate) struct Launch {
    pub idx: String,
    pub name: String,
    pub child: tokio::process::Child,
}

pub(crate) struct Plugin {
    pub idx: String,
    pub name: String,
    pub kind: PluginKind,
    pub pid: Option<u32>,
    events: AtomicI32,
    client: PluginClient,
    mux: Mux,
    server: StdMutex<Option<Server>>,
    child: StdMutex<Option<tokio::process::Child>>,
    closed: AtomicBool,
    /// Shared with the registry's record of dropped plugins (see
    /// [`crate::Nri::stats`]), so no count is lost once it is dropped.
    stats: Arc<StdMutex<PluginStats>>,
    timeout: Duration,
}

/// Our `Runtime` service for one plugin connection.
struct RuntimeService {
    registered: StdMutex<Option<oneshot::Sender<Result<api::RegisterPluginRequest, String>>>>,
    external: bool,
    name: OnceLock<String>,
    host: Arc<dyn Host>,
}

fn status(code: ttrpc::Code, msg: String) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg))
}

#[async_trait::async_trait]
impl api_ttrpc::Runtime for RuntimeService {
    async fn register_plugin(
        &self,
        _ctx: &TtrpcContext,
        req: api::RegisterPluginRequest,
    ) -> ttrpc::Result<api::Empty> {
        let check = if self.external {
            check_plugin_name(&req.plugin_name).and(check_plugin_index(&req.plugin_idx))
        } else {
            Ok(())
        };
        let tx = self.registered.lock().ok().and_then(|mut g| g.take());
        let Some(tx) = tx else {
            return Err(status(
                ttrpc::Code::ALREADY_EXISTS,
                "plugin already registered".into(),
            ));
        };
        match check {
            Ok(()) => {
                let _ = tx.send(Ok(req));
                Ok(api::Empty::new())
            }
            Err(e) => {
                let _ = tx.send(Err(e.clone()));
                Err(status(ttrpc::Code::INVALID_ARGUMENT, e))
            }
        }
    }

    async fn update_containers(
        &self,
        _ctx: &TtrpcContext,
        req: api::UpdateContainersRequest,
    ) -> ttrpc::Result<api::UpdateContainersResponse> {
        let Some(name) = self.name.get() else {
            return Err(status(
                ttrpc::Code::FAILED_PRECONDITION,
                "plugin not registered".into(),
            ));
        };
        let failed = self
            .host
            .update_containers(name, req.update, req.evict)
            .await;
        Ok(api::UpdateContainersResponse {
            failed,
            ..Default::default()
        })
    }
}

/// NRI's rule for plugin indices: exactly two ASCII digits.
pub fn check_plugin_index(idx: &str) -> Result<(), String> {
    if idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!("invalid plugin index {idx:?}, must be 2 digits"))
    }
}

/// NRI's rule for plugin names: non-empty, `[A-Za-z0-9._+-]`. We also bound
/// the length, since names end up in logs and metrics.
pub fn check_plugin_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 128 {
        return Err(format!("invalid plugin name {name:?}: empty or too long"));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+')))
    {
        Some(c) => Err(format!("invalid plugin name {name:?}: contains {c:?}")),
        None => Ok(()),
    }
}

/// Connects to a plugin over `trunk` and waits (bounded by
/// `registration_timeout`) for it to register.
pub(crate) async fn connect<T>(
    trunk: T,
    launch: Option<Launch>,
    host: Arc<dyn Host>,
    registration_timeout: Duration,
    timeout: Duration,
) -> Result<Arc<Plugin>, String>
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mux, mut conns) = Mux::start(trunk, &[PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN]);
    let (Some(runtime_conn), Some(plugin_conn)) = (conns.pop(), conns.pop()) else {
        return Err("mux gave no connections".into());
    };
    let client = PluginClient::new(Client::new(Socket::new(plugin_conn)));
    let (tx, rx) = oneshot::channel();
    let svc = Arc::new(RuntimeService {
        registered: StdMutex::new(Some(tx)),
        external: launch.is_none(),
        name: OnceLock::new(),
        host,
    });
    let once = futures::stream::once(async move { Ok::<_, std::io::Error>(runtime_conn) });
    let listener = Listener::new(once.chain(futures::stream::pending()));
    let mut server = Server::new()
        .register_service(api_ttrpc::create_runtime(svc.clone()))
        .add_listener(listener);
    server
        .start()
        .await
        .map_err(|e| format!("ttrpc server: {e}"))?;
    let mut launch = launch;
    let kill = |launch: &mut Option<Launch>| {
        if let Some(l) = launch.as_mut() {
            let _ = l.child.start_kill();
        }
    };
    let reg = tokio::select! {
        r = rx => r.map_err(|_| "registration channel dropped".to_string()),
        why = mux.closed() => Err(format!("connection closed before registration ({why:?})")),
        _ = tokio::time::sleep(registration_timeout) => Err("plugin registration timed out".into()),
    };
    let req = match reg.and_then(|r| r.map_err(|e| format!("registration refused: {e}"))) {
        Ok(req) => req,
        Err(e) => {
            kill(&mut launch);
            return Err(e);
        }
    };
    let (idx, name, kind, child) = match launch {
        Some(l) => (l.idx, l.name, PluginKind::Launched, Some(l.child)),
        None => (req.plugin_idx, req.plugin_name, PluginKind::External, None),
    };
    let _ = svc.name.set(format!("{idx}-{name}"));
    let plugin = Arc::new(Plugin {
        pid: child.as_ref().and_then(|c| c.id()),
        idx,
        name,
        kind,
        events: AtomicI32::new(0),
        client,
        mux,
        server: StdMutex::new(Some(server)),
        child: StdMutex::new(child),
        closed: AtomicBool::new(false),
        stats: Arc::new(StdMutex::new(PluginStats::default())),
        timeout,
    });
    watch_close(&plugin);
    Ok(plugin)
}

/// Closes the plugin as soon as its trunk stops (crash, EOF, bad frame).
fn watch_close(plugin: &Arc<Plugin>) {
    let weak: Weak<Plugin> = Arc::downgrade(plugin);
    tokio::spawn(async move {
        let Some(p) = weak.upgrade() else { return };
        let why = p.mux.closed().await;
        tracing::info!(plugin = %p.full_name(), ?why, "NRI plugin connection closed");
        p.close();
    });
}

impl Plugin {
    /// `IDX-NAME`, the name NRI uses for a plugin everywhere.
    pub fn full_name(&self) -> String {
        format!("{}-{}", self.idx, self.name)
    }

    pub fn events(&self) -> EventMask {
        EventMask(self.events.load(Ordering::Relaxed))
    }

    pub fn subscribed(&self, e: api::Event) -> bool {
        !self.is_closed() && self.events().is_set(e)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> PluginStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Its counters, as they will be updated by a call still under way.
    pub(crate) fn shared_stats(&self) -> Arc<StdMutex<PluginStats>> {
        self.stats.clone()
    }

    /// Disconnects the plugin, killing it if we launched it. Idempotent and
    /// non-blocking: reaping and server teardown happen in the background.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        self.mux.close();
        let child = self.child.lock().ok().and_then(|mut c| c.take());
        let server = self.server.lock().ok().and_then(|mut s| s.take());
        tokio::spawn(async move {
            if let Some(mut c) = child {
                let _ = c.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), c.wait()).await;
            }
            if let Some(mut s) = server {
                let _ = tokio::time::timeout(Duration::from_secs(1), s.shutdown()).await;
            }
        });
    }

    fn ctx(&self) -> ttrpc::context::Context {
        ttrpc::context::with_duration(self.timeout)
    }

    /// Like [`Plugin::call`], bounded by `timeout` instead of the request
    /// timeout (Synchronize; pair it with [`Plugin::context_within`]).
    pub(crate) async fn call_within<T, F>(
        &self,
        event: &'static str,
        timeout: Duration,
        fut: F,
    ) -> Result<Call<T>, Error>
    where
        F: Future<Output = ttrpc::Result<T>>,
    {
        self.call_bounded(event, timeout, fut).await
    }

    /// Runs one request bounded by the request timeout, recording it. A
    /// timeout or a broken connection closes the plugin (NRI's "fatal"
    /// errors); an error status from the plugin is its answer, except a
    /// DEADLINE_EXCEEDED once our deadline has passed (see
    /// [`Plugin::call_bounded`]).
    pub(crate) async fn call<T, F>(&self, event: &'static str, fut: F) -> Result<Call<T>, Error>
    where
        F: Future<Output = ttrpc::Result<T>>,
    {
        self.call_bounded(event, self.timeout, fut).await
    }

    /// The request carries our deadline, and the plugin's ttrpc server
    /// enforces it too: once it passes, the server answers
    /// DEADLINE_EXCEEDED. That answer can be in before our own timer is
    /// seen to fire (timers fire up to a tick late, a loaded node later
    /// still), and `timeout` polls the request first: so a
    /// DEADLINE_EXCEEDED at or past our deadline is our timeout, not the
    /// plugin's refusal. One before it is the plugin's own answer.
    async fn call_bounded<T, F>(
        &self,
        event: &'static str,
        timeout: Duration,
        fut: F,
    ) -> Result<Call<T>, Error>
    where
        F: Future<Output = ttrpc::Result<T>>,
    {
        if self.is_closed() {
            return Ok(Call::Dropped);
        }
        let start = Instant::now();
        let res = tokio::time::timeout(timeout, fut).await;
        let elapsed = start.elapsed();
        let (out, failed, timed_out) = match res {
            Err(_) => (Ok(Call::Dropped), true, true),
            Ok(Ok(v)) => (Ok(Call::Done(v)), false, false),
            Ok(Err(ttrpc::Error::RpcStatus(s)))
                if s.code() == ttrpc::Code::DEADLINE_EXCEEDED && elapsed >= timeout =>
            {
                (Ok(Call::Dropped), true, true)
            }
            Ok(Err(ttrpc::Error::RpcStatus(s))) if s.code() == ttrpc::Code::UNIMPLEMENTED => {
                (Ok(Call::Unimplemented), false, false)
            }
            Ok(Err(ttrpc::Error::RpcStatus(s))) => (
                Err(Error::Plugin {
                    plugin: self.full_name(),
                    event,
                    reason: truncate(s.message()),
                }),
                true,
                false,
            ),
            Ok(Err(e)) => {
                let timed_out = matches!(&e, ttrpc::Error::Others(m) if m.contains("timeout"));
                tracing::warn!(plugin = %self.full_name(), event, error = %e, "NRI plugin request failed");
                (Ok(Call::Dropped), true, timed_out)
            }
        };
        if let Ok(mut s) = self.stats.lock() {
            s.requests += 1;
            s.failures += u64::from(failed);
            s.timeouts += u64::from(timed_out);
            s.latency_sum += elapsed;
        }
        if matches!(out, Ok(Call::Dropped)) {
            tracing::warn!(plugin = %self.full_name(), event, timed_out, "closing NRI plugin");
            self.close();
        }
        out
    }

    /// Configure: sends the configuration, records the subscription.
    pub(crate) async fn configure(&self, req: api::ConfigureRequest) -> Result<(), String> {
        let ctx = self.ctx();
        let rpl = match self
            .call("Configure", self.client.configure(ctx, &req))
            .await
        {
            Ok(Call::Done(r)) => r,
            Ok(_) => return Err("Configure failed (timeout, closed or unimplemented)".into()),
            Err(e) => return Err(e.to_string()),
        };
        let mut events = EventMask(rpl.events);
        if events.0 == 0 {
            events = VALID_EVENTS;
        } else if events.0 & !VALID_EVENTS.0 != 0 {
            return Err(format!(
                "invalid plugin events: 0x{:x}",
                events.0 & !VALID_EVENTS.0
            ));
        }
        self.events.store(events.0, Ordering::Relaxed);
        Ok(())
    }

    /// The typed client, for the per-event calls.
    pub(crate) fn client(&self) -> &PluginClient {
        &self.client
    }

    pub(crate) fn context(&self) -> ttrpc::context::Context {
        self.ctx()
    }

    /// A request context bounded by `timeout` (see [`Plugin::call_within`]).
    pub(crate) fn context_within(&self, timeout: Duration) -> ttrpc::context::Context {
        ttrpc::context::with_duration(timeout)
    }
}

/// Bounds an error text from a plugin before it goes into our errors/logs.
pub(crate) fn truncate(s: &str) -> String {
    const MAX: usize = 1024;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin whose trunk nobody answers on: `call` is driven with
    /// futures that stand for the plugin's answers.
    fn unanswered(timeout: Duration) -> (Arc<Plugin>, tokio::io::DuplexStream) {
        let (ours, peer) = tokio::io::duplex(1024);
        let (mux, mut conns) = Mux::start(ours, &[PLUGIN_SERVICE_CONN]);
        let conn = conns.pop().unwrap();
        let plugin = Arc::new(Plugin {
            idx: "10".into(),
            name: "hang".into(),
            kind: PluginKind::External,
            pid: None,
            events: AtomicI32::new(0),
            client: PluginClient::new(Client::new(Socket::new(conn))),
            mux,
            server: StdMutex::new(None),
            child: StdMutex::new(None),
            closed: AtomicBool::new(false),
            stats: Default::default(),
            timeout,
        });
        (plugin, peer)
    }

    /// What the plugin's ttrpc server answers once the deadline we sent
    /// it has passed.
    fn deadline_exceeded() -> ttrpc::Error {
        status(ttrpc::Code::DEADLINE_EXCEEDED, "timeout".into())
    }

    /// The plugin's server cuts its hanging handler off at our deadline and
    /// answers DEADLINE_EXCEEDED. When that answer is in as our own timer
    /// fires (on this paused clock, at the same instant), the plugin still
    /// timed out: it is closed and the event goes on without it.
    #[tokio::test(start_paused = true)]
    async fn the_plugins_deadline_answer_at_our_deadline_is_a_timeout() {
        let timeout = Duration::from_secs(2);
        let (p, _peer) = unanswered(timeout);
        let answer = async {
            tokio::time::sleep(timeout).await;
            Err::<(), _>(deadline_exceeded())
        };
        let out = p.call("CreateContainer", answer).await;
        assert!(matches!(out, Ok(Call::Dropped)), "{out:?}");
        assert!(p.is_closed());
        let s = p.stats();
        assert_eq!((s.requests, s.failures, s.timeouts), (1, 1, 1), "{s:?}");
    }

    /// Our own timer first: the plugin is closed as well.
    #[tokio::test(start_paused = true)]
    async fn a_plugin_silent_past_our_deadline_is_closed() {
        let (p, _peer) = unanswered(Duration::from_secs(2));
        let out = p
            .call(
                "CreateContainer",
                std::future::pending::<ttrpc::Result<()>>(),
            )
            .await;
        assert!(matches!(out, Ok(Call::Dropped)), "{out:?}");
        assert!(p.is_closed());
        assert_eq!(p.stats().timeouts, 1);
    }

    /// A DEADLINE_EXCEEDED well before our deadline is the plugin's own
    /// answer (a deadline of its own ran out): it fails the event, and the
    /// plugin stays.
    #[tokio::test(start_paused = true)]
    async fn an_early_deadline_answer_is_the_plugins_refusal() {
        let (p, _peer) = unanswered(Duration::from_secs(2));
        let out = p
            .call("CreateContainer", async {
                Err::<(), _>(deadline_exceeded())
            })
            .await;
        assert!(
            matches!(&out, Err(Error::Plugin { plugin, reason, .. }) if plugin == "10-hang" && reason == "timeout"),
            "{out:?}"
        );
        assert!(!p.is_closed());
        assert_eq!(p.stats().timeouts, 0);
    }

    #[test]
    fn names_and_indices() {
        assert!(check_plugin_index("01").is_ok());
        assert!(check_plugin_index("1").is_err());
        assert!(check_plugin_index("a1").is_err());
        assert!(check_plugin_index("001").is_err());
        assert!(check_plugin_name("my-plugin_1.0+x").is_ok());
        assert!(check_plugin_name("").is_err());
        assert!(check_plugin_name("a/b").is_err());
        assert!(check_plugin_name(&"x".repeat(200)).is_err());
        assert_eq!(truncate(&"é".repeat(1000)).len(), 1024 + 3);
    }
}
