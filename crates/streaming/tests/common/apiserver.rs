//! Just enough of an API server for `kubectl exec`, `attach` and
//! `port-forward` against one pod, `default/demo`: discovery, the pod, and
//! its streaming sub-resources, which get a fresh URL from the streaming
//! server and are proxied to it byte for byte (as the API server and
//! kubelet proxy them to a runtime's streaming server).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use berth_streaming::{AttachRequest, ExecRequest, PortForwardRequest, StreamingServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What one proxied sub-resource request asked for: the sub-resource and
/// its `Upgrade` header, lowered (`websocket`, `spdy/3.1`).
pub type Upgrades = Arc<Mutex<Vec<(String, String)>>>;

/// The fake API server, stopped on drop.
pub struct FakeApiServer {
    pub addr: SocketAddr,
    /// Every sub-resource request proxied, in order.
    pub upgrades: Upgrades,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiServer {
    /// Serves on a free port of 127.0.0.1, minting URLs with `streaming`.
    pub async fn start(streaming: StreamingServer) -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upgrades = Upgrades::default();
        let seen = upgrades.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(serve(tcp, streaming.clone(), seen.clone()));
            }
        });
        FakeApiServer {
            addr,
            upgrades,
            task,
        }
    }

    /// Writes a kubeconfig for this server into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            self.addr
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"demo","namespace":"default","uid":"u1"},
"spec":{"containers":[{"name":"c","image":"busybox","stdin":true}]},
"status":{"phase":"Running","containerStatuses":[{"name":"c","ready":true,"restartCount":0,"image":"busybox","imageID":"","state":{"running":{}}}]}}"#;

const API_VERSIONS: &str = r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}"#;

const API_GROUPS: &str = r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#;

const V1_RESOURCES: &str = r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[
{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},
{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},
{"name":"pods/attach","singularName":"","namespaced":true,"kind":"PodAttachOptions","verbs":["create","get"]},
{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#;

async fn respond(tcp: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(body.as_bytes()).await
}

/// The query's values of `key`.
fn query<'a>(q: &'a str, key: &str) -> Vec<&'a str> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .collect()
}

fn unescape(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn flag(q: &str, key: &str) -> bool {
    query(q, key).iter().any(|v| *v == "true" || *v == "1")
}

/// The streaming URL for a sub-resource request.
fn mint(streaming: &StreamingServer, sub: &str, q: &str) -> Option<String> {
    let container_id = "c1".to_string();
    match sub {
        "exec" => streaming
            .get_exec_url(ExecRequest {
                container_id,
                cmd: query(q, "command").into_iter().map(unescape).collect(),
                tty: flag(q, "tty"),
                stdin: flag(q, "stdin"),
                stdout: flag(q, "stdout"),
                stderr: flag(q, "stderr"),
            })
            .ok(),
        "attach" => streaming
            .get_attach_url(AttachRequest {
                container_id,
                tty: flag(q, "tty"),
                stdin: flag(q, "stdin"),
                stdout: flag(q, "stdout"),
                stderr: flag(q, "stderr"),
            })
            .ok(),
        "portforward" => streaming
            .get_port_forward_url(PortForwardRequest {
                pod_sandbox_id: "demo".into(),
                ports: query(q, "ports")
                    .into_iter()
                    .filter_map(|p| p.parse().ok())
                    .collect(),
            })
            .ok(),
        _ => None,
    }
}

async fn serve(mut tcp: TcpStream, streaming: StreamingServer, upgrades: Upgrades) {
    loop {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8];
            match tcp.read(&mut b).await {
                Ok(1) => head.push(b[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default().to_string();
        let mut parts = request_line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        let (path, q) = target.split_once('?').unwrap_or((target, ""));
        let length: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if tcp.read_exact(&mut body).await.is_err() {
            return;
        }
        let sub = path.strip_prefix("/api/v1/namespaces/default/pods/demo/");
        let result = match (method, path, sub) {
            (_, _, Some(sub)) => {
                let upgrade = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .find(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
                    .map(|(_, v)| v.trim().to_ascii_lowercase())
                    .unwrap_or_default();
                upgrades
                    .lock()
                    .unwrap()
                    .push((sub.to_string(), upgrade));
                let Some(url) = mint(&streaming, sub, q) else {
                    let _ = respond(&mut tcp, "400 Bad Request", "{}").await;
                    return;
                };
                // Hand the connection to the streaming server, as is.
                let token_path = &url[url.find("://").map_or(0, |i| i + 3)..];
                let token_path = &token_path[token_path.find('/').unwrap_or(0)..];
                let rest = &head[request_line.len()..];
                let Ok(mut upstream) = TcpStream::connect(streaming.local_addr()).await else {
                    return;
                };
                let forwarded = format!("{method} {token_path} HTTP/1.1{rest}");
                if upstream.write_all(forwarded.as_bytes()).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
                return;
            }
            ("GET", "/api", _) => respond(&mut tcp, "200 OK", API_VERSIONS).await,
            ("GET", "/apis", _) => respond(&mut tcp, "200 OK", API_GROUPS).await,
            ("GET", "/api/v1", _) => respond(&mut tcp, "200 OK", V1_RESOURCES).await,
            ("GET", "/api/v1/namespaces/default/pods/demo", _) => {
                respond(&mut tcp, "200 OK", POD).await
            }
            _ => {
                respond(
                    &mut tcp,
                    "404 Not Found",
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
                )
                .await
            }
        };
        if result.is_err() {
            return;
        }
    }
}
