//! berth-nri-test-plugin: a scriptable NRI plugin speaking the real NRI
//! protocol (berth-nri's mux and ttrpc, plugin side). See README.md for the
//! flags and the script format.

mod script;
mod service;

use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex, OnceLock};

use futures::StreamExt;
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server};

use berth_nri::api;
use berth_nri::api_ttrpc::{self, RuntimeClient};
use berth_nri::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};

use service::{Service, TestPlugin};

struct Args {
    socket: Option<String>,
    name: String,
    idx: String,
    script: Option<String>,
    events: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: None,
        name: std::env::var("NRI_PLUGIN_NAME").unwrap_or_else(|_| "test".into()),
        idx: std::env::var("NRI_PLUGIN_IDX").unwrap_or_else(|_| "50".into()),
        script: None,
        events: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--socket" => a.socket = Some(val()?),
            "--name" => a.name = val()?,
            "--idx" => a.idx = val()?,
            "--script" => a.script = Some(val()?),
            "--events" => a.events = Some(val()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

async fn connect(args: &Args) -> Result<tokio::net::UnixStream, String> {
    if let Some(path) = &args.socket {
        return tokio::net::UnixStream::connect(path)
            .await
            .map_err(|e| format!("{path}: {e}"));
    }
    let fd: i32 = std::env::var("NRI_PLUGIN_SOCKET")
        .map_err(|_| "no --socket and no NRI_PLUGIN_SOCKET".to_string())?
        .parse()
        .map_err(|e| format!("NRI_PLUGIN_SOCKET: {e}"))?;
    // SAFETY: the runtime hands us this descriptor, a connected socket, and
    // nothing else in this process uses it.
    let std = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    std.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::UnixStream::from_std(std).map_err(|e| e.to_string())
}

async fn run(args: Args) -> Result<(), String> {
    let script: script::Script = match &args.script {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
            serde_json::from_str(&text).map_err(|e| format!("{p}: {e}"))?
        }
        None => Default::default(),
    };
    let log = match &args.events {
        Some(p) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("{p}: {e}"))?,
        )),
        None => None,
    };
    let stream = connect(&args).await?;
    let raw = {
        let std = stream.into_std().map_err(|e| e.to_string())?;
        let dup = std.try_clone().map_err(|e| e.to_string())?;
        let dup = tokio::net::UnixStream::from_std(dup).map_err(|e| e.to_string())?;
        (
            tokio::net::UnixStream::from_std(std).map_err(|e| e.to_string())?,
            dup,
        )
    };
    let (stream, dup) = raw;
    let plugin = Arc::new(TestPlugin {
        script,
        log,
        runtime: OnceLock::new(),
        raw: tokio::sync::Mutex::new(Some(dup)),
    });
    let (mux, mut conns) = Mux::start(stream, &[PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN]);
    let (Some(runtime_conn), Some(plugin_conn)) = (conns.pop(), conns.pop()) else {
        return Err("mux".into());
    };
    let once = futures::stream::once(async move { Ok::<_, std::io::Error>(plugin_conn) });
    let listener = Listener::new(once.chain(futures::stream::pending()));
    let mut server = Server::new()
        .register_service(api_ttrpc::create_plugin(Arc::new(Service(plugin.clone()))))
        .add_listener(listener);
    server.start().await.map_err(|e| e.to_string())?;
    let rt = RuntimeClient::new(Client::new(Socket::new(runtime_conn)));
    let _ = plugin.runtime.set(rt.clone());
    // Hanging before registering, it still sees the runtime give up on it
    // (the registration timeout closes the trunk).
    tokio::select! {
        r = plugin.misbehave("Register") => r.map_err(|e| e.to_string())?,
        why = mux.closed() => {
            plugin.record("Closed", serde_json::json!({"why": format!("{why:?}"), "registered": false}));
            return Ok(());
        }
    }
    let req = api::RegisterPluginRequest {
        plugin_name: args.name.clone(),
        plugin_idx: args.idx.clone(),
        NRI_version: berth_nri::NRI_VERSION.into(),
        ..Default::default()
    };
    rt.register_plugin(ttrpc::context::with_timeout(0), &req)
        .await
        .map_err(|e| format!("register: {e}"))?;
    plugin.record(
        "Registered",
        serde_json::json!({"name": args.name, "idx": args.idx}),
    );
    let why = mux.closed().await;
    plugin.record("Closed", serde_json::json!({"why": format!("{why:?}")}));
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("berth-nri-test-plugin: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("berth-nri-test-plugin: {e}");
        std::process::exit(1);
    }
}
