//! Running one plugin binary: the `CNI_*` environment, the configuration on
//! stdin, stdout and stderr captured, a timeout that kills the plugin's whole
//! process group, and the plugin's error JSON (`code`, `msg`, `details`)
//! turned into [`Error::Plugin`].

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::{Command, Error, PluginCall, PluginFailure};

/// Bounds on what is read from a plugin (results and logs are small).
const MAX_STDOUT: u64 = 16 << 20;
const MAX_STDERR: u64 = 1 << 20;
/// Spawn retries when the binary is briefly busy (ETXTBSY: being written or
/// held open for writing by a process that is forking).
const SPAWN_RETRIES: u32 = 5;

/// Finds and runs plugin binaries.
#[derive(Debug, Clone)]
pub(crate) struct Exec {
    bin_dirs: Vec<PathBuf>,
    timeout: Duration,
}

/// One invocation of one plugin.
pub(crate) struct Call<'a> {
    pub command: Command,
    pub network: &'a str,
    pub plugin: &'a str,
    /// Container id, netns path, interface name and CNI_ARGS; None for STATUS.
    pub container: Option<ContainerEnv<'a>>,
    pub stdin: Vec<u8>,
}

/// The per-container part of the environment.
pub(crate) struct ContainerEnv<'a> {
    pub id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
}

/// The error object a plugin prints on failure.
#[derive(Deserialize)]
struct PluginError {
    code: Option<u64>,
    #[serde(default)]
    msg: String,
    #[serde(default)]
    details: String,
}

impl Exec {
    pub(crate) fn new(bin_dirs: Vec<PathBuf>, timeout: Duration) -> Self {
        Exec { bin_dirs, timeout }
    }

    /// `CNI_PATH`: the bin dirs joined with ':'.
    fn cni_path(&self) -> String {
        crate::config::join_paths(&self.bin_dirs, ":")
    }

    /// The first executable file named `plugin` in the bin dirs.
    pub(crate) fn find(&self, network: &str, plugin: &str) -> Result<PathBuf, Error> {
        self.bin_dirs
            .iter()
            .map(|dir| dir.join(plugin))
            .find(|path| {
                std::fs::metadata(path)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .ok_or_else(|| Error::PluginNotFound {
                network: network.to_owned(),
                plugin: plugin.to_owned(),
                dirs: self.cni_path(),
            })
    }

    /// Runs the plugin and returns its stdout when it exits 0.
    pub(crate) async fn run(&self, mut call: Call<'_>) -> Result<Vec<u8>, Error> {
        let path = self.find(call.network, call.plugin)?;
        let mut cmd = tokio::process::Command::new(&path);
        // The plugin inherits the daemon's environment (PATH: iptables, ip, ...)
        // minus any CNI_* it may carry, plus the protocol's variables.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CNI_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("CNI_COMMAND", call.command.as_str())
            .env("CNI_PATH", self.cni_path());
        if let Some(c) = &call.container {
            cmd.env("CNI_CONTAINERID", c.id)
                .env("CNI_NETNS", c.netns)
                .env("CNI_IFNAME", c.ifname)
                .env("CNI_ARGS", c.args);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = spawn(&mut cmd, &path).await?;
        let pid = child.id();
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());

        let input = std::mem::take(&mut call.stdin);
        let work = async {
            let feed = async move {
                if let Some(mut stdin) = stdin {
                    // A plugin may exit without reading stdin: its exit status tells.
                    let _ = stdin.write_all(&input).await;
                }
            };
            let ((), out, err, status) = tokio::join!(
                feed,
                read_bounded(stdout, MAX_STDOUT),
                read_bounded(stderr, MAX_STDERR),
                child.wait()
            );
            (out, err, status)
        };
        let finished = tokio::time::timeout(self.timeout, work).await;
        let (stdout, stderr, status) = match finished {
            Ok(done) => done,
            Err(_) => {
                // The leader is not reaped yet, so its pid is still its group's id.
                if let Some(pid) = pid {
                    // SAFETY: kill(2) on our own child's process group.
                    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
                }
                let _ = child.kill().await;
                return Err(Error::Timeout {
                    call: plugin_call(&call),
                    timeout: self.timeout,
                });
            }
        };
        let status = status.map_err(|source| Error::Exec {
            path: path.clone(),
            source,
        })?;
        if status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
        let (code, msg, details) = match serde_json::from_slice::<PluginError>(&stdout) {
            Ok(e) if !e.msg.is_empty() || e.code.is_some() => (e.code, e.msg, e.details),
            _ => {
                let out = String::from_utf8_lossy(&stdout).trim().to_owned();
                let msg = [out.as_str(), stderr.as_str()]
                    .into_iter()
                    .find(|s| !s.is_empty())
                    .map_or_else(|| "no error message".to_owned(), tail);
                (None, msg, String::new())
            }
        };
        Err(Error::Plugin {
            call: plugin_call(&call),
            failure: Box::new(PluginFailure {
                code,
                msg,
                details,
                stderr,
                status: status.to_string(),
            }),
        })
    }
}

fn plugin_call(call: &Call<'_>) -> Box<PluginCall> {
    Box::new(PluginCall {
        network: call.network.into(),
        plugin: call.plugin.into(),
        command: call.command,
        container_id: call
            .container
            .as_ref()
            .map(|c| c.id.to_owned())
            .unwrap_or_default(),
    })
}

/// The last 4 KiB of a message, on a character boundary.
fn tail(s: &str) -> String {
    const MAX: usize = 4096;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut start = s.len() - MAX;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

async fn spawn(
    cmd: &mut tokio::process::Command,
    path: &Path,
) -> Result<tokio::process::Child, Error> {
    let mut attempt = 0;
    loop {
        match cmd.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < SPAWN_RETRIES => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(10 << attempt)).await;
            }
            Err(source) => {
                return Err(Error::Exec {
                    path: path.to_owned(),
                    source,
                })
            }
        }
    }
}

async fn read_bounded<R: AsyncRead + Unpin>(pipe: Option<R>, limit: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        // A read error just ends the capture; the exit status still decides.
        let _ = pipe.take(limit).read_to_end(&mut buf).await;
    }
    buf
}
