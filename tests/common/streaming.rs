//! For the streaming tests: a daemon on a test network with extra config
//! (a short `[streaming] token_ttl`), and the CRI calls that hand out
//! streaming URLs.

use cri_api::v1;

use super::pods::TestNet;
use super::{Daemon, Sandbox};

/// Like `pods::daemon`, with `extra` TOML (sections before `[cni]`).
pub async fn daemon_with(net: &TestNet, extra: &str) -> Daemon {
    let sandbox = Sandbox::new();
    let cni = sandbox.cni_dir();
    let config = sandbox.write_config(&format!("{}conf_dir = {cni:?}\n", net.config(extra)));
    Daemon::start_in(sandbox, &config).await
}

/// Which streams an Exec or Attach asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The Exec RPC: the streaming URL.
pub async fn exec_url(
    daemon: &Daemon,
    id: &str,
    cmd: &[&str],
    s: Streams,
) -> Result<String, tonic::Status> {
    daemon
        .runtime()
        .await
        .exec(v1::ExecRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            tty: s.tty,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        })
        .await
        .map(|r| r.into_inner().url)
}

/// The Attach RPC: the streaming URL.
pub async fn attach_url(daemon: &Daemon, id: &str, s: Streams) -> Result<String, tonic::Status> {
    daemon
        .runtime()
        .await
        .attach(v1::AttachRequest {
            container_id: id.into(),
            tty: s.tty,
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        })
        .await
        .map(|r| r.into_inner().url)
}

/// The PortForward RPC: the streaming URL.
pub async fn port_forward_url(
    daemon: &Daemon,
    pod: &str,
    ports: &[i32],
) -> Result<String, tonic::Status> {
    daemon
        .runtime()
        .await
        .port_forward(v1::PortForwardRequest {
            pod_sandbox_id: pod.into(),
            port: ports.to_vec(),
        })
        .await
        .map(|r| r.into_inner().url)
}
