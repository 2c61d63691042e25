//! kubectl (that is client-go, what kubelet's clients are made of) against
//! the streaming server, through a fake API server that proxies the
//! sub-resources the way the API server and kubelet do: exec over
//! WebSocket v5 and over SPDY v4, with output, exit code and stdin; attach;
//! port-forward over SPDY and through the WebSocket tunnel
//! (`SPDY/3.1+portforward.k8s.io`, kubectl 1.31+'s default), which must
//! be used as such (no fallback to SPDY). Ignored by a plain `cargo test`;
//! fails, saying so, when included (`--include-ignored`) without kubectl on
//! PATH (hack/test.sh leaves these tests out, counted as skipped, then).

mod common;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::apiserver::FakeApiServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

fn kubectl() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join("kubectl"))
        .find(|p| p.is_file())
}

/// kubectl, failing the test when it is not on PATH. Every test that calls
/// it is also `#[ignore = "needs kubectl..."]`: left out (and said to be) by
/// a plain `cargo test`, and failing, never passing, when included without it.
fn require_kubectl() -> PathBuf {
    kubectl().expect("needs kubectl on PATH")
}

struct Kubectl {
    bin: PathBuf,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    api: FakeApiServer,
    _server: common::Server,
}

impl Kubectl {
    async fn start(bin: PathBuf) -> Kubectl {
        let server = common::start();
        let api = FakeApiServer::start(server.server.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = api.kubeconfig(dir.path());
        Kubectl {
            bin,
            dir,
            kubeconfig,
            api,
            _server: server,
        }
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .envs(env.iter().copied())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
        let mut child = self
            .command(args, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin).await.unwrap();
        drop(input);
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl did not finish")
            .unwrap()
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}, stdout {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Both transports kubectl speaks for exec and attach.
const REMOTE_COMMAND: &[(&str, &str)] = &[
    ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "true"),
    ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false"),
];

#[tokio::test]
#[ignore = "needs kubectl on PATH: hack/test.sh runs it (--include-ignored)"]
async fn kubectl_exec() {
    let k = Kubectl::start(require_kubectl()).await;
    for env in REMOTE_COMMAND {
        let out = k
            .run(
                &["exec", "demo", "--", "echo", "hello", "world"],
                &[*env],
                b"",
            )
            .await;
        assert!(out.status.success(), "{env:?}: {}", show(&out));
        assert_eq!(out.stdout, b"hello world\n", "{env:?}");

        let out = k
            .run(&["exec", "demo", "--", "fail", "3"], &[*env], b"")
            .await;
        assert_eq!(out.status.code(), Some(3), "{env:?}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("oops"),
            "{}",
            show(&out)
        );

        let out = k
            .run(
                &["exec", "-i", "demo", "--", "cat"],
                &[*env],
                b"piped\ndata",
            )
            .await;
        assert!(out.status.success(), "{env:?}: {}", show(&out));
        assert_eq!(out.stdout, b"piped\ndata", "{env:?}");
    }
}

#[tokio::test]
#[ignore = "needs kubectl on PATH: hack/test.sh runs it (--include-ignored)"]
async fn kubectl_attach() {
    let k = Kubectl::start(require_kubectl()).await;
    for env in REMOTE_COMMAND {
        let out = k
            .run(&["attach", "-i", "demo", "-c", "c"], &[*env], b"ping\n")
            .await;
        assert!(out.status.success(), "{env:?}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ping"),
            "{env:?}: {}",
            show(&out)
        );
    }
}

#[tokio::test]
#[ignore = "needs kubectl on PATH: hack/test.sh runs it (--include-ignored)"]
async fn kubectl_port_forward() {
    let k = Kubectl::start(require_kubectl()).await;
    for websockets in ["false", "true"] {
        k.api.upgrades.lock().unwrap().clear();
        let env = [("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)];
        let mut child = k
            .command(&["port-forward", "demo", ":80"], &env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("kubectl port-forward said nothing")
            .unwrap()
            .unwrap_or_default();
        // "Forwarding from 127.0.0.1:NNNNN -> 80"
        let local = line
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("unexpected: {line:?}"))
            .to_string();
        for round in 0..2 {
            let mut tcp = tokio::net::TcpStream::connect(&local).await.unwrap();
            tcp.write_all(format!("abc{round}").as_bytes())
                .await
                .unwrap();
            tcp.shutdown().await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut got))
                .await
                .expect("no answer through kubectl port-forward")
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                format!("hi from 80\nabc{round}"),
                "websockets={websockets}"
            );
        }
        child.kill().await.unwrap();
        // One upgrade per session: the tunnel was accepted, not refused
        // and retried over SPDY.
        let upgrades = k.api.upgrades.lock().unwrap().clone();
        let want = if websockets == "true" {
            "websocket"
        } else {
            "spdy/3.1"
        };
        assert!(
            !upgrades.is_empty()
                && upgrades
                    .iter()
                    .all(|(sub, u)| sub == "portforward" && u == want),
            "websockets={websockets}: {upgrades:?}"
        );
    }
}
