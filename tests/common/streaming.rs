//! For the streaming tests: a daemon on a test network with extra config
//! (a short `[streaming] token_ttl`). The CRI calls that hand out streaming
//! URLs are [`super::cri::Cri`]'s `exec`, `attach` and `port_forward`.

use super::pods::TestNet;
use super::{Daemon, Sandbox};

/// Like `pods::daemon`, with `extra` TOML (sections before `[cni]`).
pub async fn daemon_with(net: &TestNet, extra: &str) -> Daemon {
    let sandbox = Sandbox::new();
    let cni = sandbox.cni_dir();
    let config = sandbox.write_config(&format!("{}conf_dir = {cni:?}\n", net.config(extra)));
    Daemon::start_in(sandbox, &config).await
}
