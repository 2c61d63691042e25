//! The harness of berth's node tests: a Kubernetes node stood up by
//! `hack/kube.sh up` (kubelet, control plane, berth), driven as a user
//! drives it, through `kubectl`, and looked at on the host.
//!
//! The node is found through the environment `hack/kube.sh env` prints
//! (`KUBECONFIG`, `KUBE_STATE`, `PATH` with our kubectl and crictl). Each
//! test works in a namespace of its own ([`Namespace`]), deleted when it is
//! dropped. Tests that stop a part of the node take [`disrupt`]; the others
//! take [`share`], so they never run while a part is down.

use berth_lock::RwLockExt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What a harness call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{cmd}: exit {status}: {stderr}")]
    Failed {
        cmd: String,
        status: i32,
        stderr: String,
    },
    #[error("{cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("{what}: not within {secs} s (last seen: {last})")]
    Timeout {
        what: String,
        secs: u64,
        last: String,
    },
    #[error("{what}: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
    #[error("the node's environment: {0} is not set (eval \"$(bash hack/kube.sh env)\")")]
    NoNode(&'static str),
}

pub type Result<T> = std::result::Result<T, Error>;

/// The longest any one kubectl or crictl call may take.
const CALL_LIMIT: &str = "120";

static PARTS: RwLock<()> = RwLock::new(());

/// Held by a test that needs every part of the node up.
pub fn share() -> RwLockReadGuard<'static, ()> {
    PARTS.read_unpoisoned()
}

/// Held by a test that stops or restarts a part of the node: no other test
/// runs meanwhile.
pub fn disrupt() -> RwLockWriteGuard<'static, ()> {
    PARTS.write_unpoisoned()
}

/// Runs `program args`, with `input` on its stdin, bounded by [`CALL_LIMIT`]
/// (coreutils' `timeout`); its stdout, or what it said when it failed.
pub fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<String> {
    let cmd = format!("{program} {}", args.join(" "));
    let mut child = Command::new("timeout")
        .arg("-k5")
        .arg(CALL_LIMIT)
        .arg(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if let Some(text) = input {
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(text.as_bytes())
            .map_err(|source| Error::Spawn {
                cmd: cmd.clone(),
                source,
            })?;
    }
    let out = child.wait_with_output().map_err(|source| Error::Spawn {
        cmd: cmd.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Failed {
            cmd,
            status: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl args`.
pub fn kubectl(args: &[&str]) -> Result<String> {
    node()?;
    run("kubectl", args, None)
}

/// `kubectl args` with `input` on stdin (e.g. `apply -f -`).
pub fn kubectl_in(args: &[&str], input: &str) -> Result<String> {
    node()?;
    run("kubectl", args, Some(input))
}

/// `kubectl args -o json`, parsed.
pub fn kubectl_json(args: &[&str]) -> Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = kubectl(&all)?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        what: format!("kubectl {}", args.join(" ")),
        source,
    })
}

/// `crictl args` against the node's runtime.
pub fn crictl(args: &[&str]) -> Result<String> {
    let ep = std::env::var("CONTAINER_RUNTIME_ENDPOINT")
        .map_err(|_| Error::NoNode("CONTAINER_RUNTIME_ENDPOINT"))?;
    let mut all = vec!["--runtime-endpoint", ep.as_str(), "--timeout", "30s"];
    all.extend_from_slice(args);
    run("crictl", &all, None)
}

/// The node's state dir (`KUBE_STATE`), checking the node's environment.
pub fn node() -> Result<PathBuf> {
    std::env::var_os("KUBECONFIG").ok_or(Error::NoNode("KUBECONFIG"))?;
    std::env::var_os("KUBE_STATE")
        .map(PathBuf::from)
        .ok_or(Error::NoNode("KUBE_STATE"))
}

/// The images the node's registry serves (hack/kube.sh's
/// `build_kube_images`), under Kubernetes v1.37.2's names.
pub mod images {
    pub const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.66.1";
    pub const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2";
    pub const NONROOT: &str = "registry.k8s.io/e2e-test-images/nonroot:1.5";
}

/// The node's name (kube.sh's `--hostname-override`).
pub const NODE: &str = "127.0.0.1";

/// The repository's root (hack/kube.sh is there).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `hack/kube.sh args` (restart, status).
pub fn kube_sh(args: &[&str]) -> Result<String> {
    let script = repo().join("hack/kube.sh");
    let mut all = vec![script.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    run("bash", &all, None)
}

/// Polls `probe` every 250 ms until it gives `Some`, for at most `secs`;
/// `what` and the last thing `seen` name the wait when it times out.
pub fn wait_until<T>(
    secs: u64,
    what: &str,
    mut probe: impl FnMut(&mut String) -> Option<T>,
) -> Result<T> {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut seen = String::new();
    loop {
        if let Some(v) = probe(&mut seen) {
            return Ok(v);
        }
        if Instant::now() > end {
            return Err(Error::Timeout {
                what: what.to_string(),
                secs,
                last: seen,
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A namespace of one test, deleted (without waiting) when dropped.
pub struct Namespace {
    pub name: String,
}

impl Namespace {
    /// A fresh namespace named after the test (`t-NAME`, `_` as `-`).
    pub fn new(test: &str) -> Namespace {
        let name = format!("t-{}", test.replace('_', "-"));
        let name = name[..name.len().min(60)].trim_end_matches('-').to_string();
        // A namespace of an earlier run of the same test goes first.
        let _ = kubectl(&["delete", "namespace", &name, "--wait=true", "--timeout=90s"]);
        kubectl(&["create", "namespace", &name]).expect("create namespace");
        // The namespace's default service account, which pods need.
        wait_until(60, "default service account", |_| {
            kubectl(&["-n", &name, "get", "serviceaccount", "default"]).ok()
        })
        .expect("service account");
        Namespace { name }
    }

    /// `kubectl -n NS args`.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        kubectl(&all)
    }

    /// `kubectl -n NS args -o json`.
    pub fn json(&self, args: &[&str]) -> Result<Value> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        kubectl_json(&all)
    }

    /// `kubectl -n NS apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String> {
        kubectl_in(&["-n", &self.name, "apply", "-f", "-"], yaml)
    }

    /// The pod `name` as JSON, `None` while it does not exist.
    pub fn pod(&self, name: &str) -> Option<Value> {
        self.json(&["get", "pod", name]).ok()
    }

    /// Waits until `probe` holds of the pod `name` and gives its JSON then.
    pub fn wait_pod(
        &self,
        name: &str,
        secs: u64,
        what: &str,
        probe: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        wait_until(secs, &format!("pod {}/{name}: {what}", self.name), |seen| {
            let pod = self.pod(name)?;
            *seen = summary(&pod);
            probe(&pod).then_some(pod)
        })
    }

    /// Waits until the pod `name` is Running with every container ready.
    pub fn wait_ready(&self, name: &str, secs: u64) -> Result<Value> {
        self.wait_pod(name, secs, "Ready", |p| condition(p, "Ready"))
    }

    /// Waits until the pod `name` is gone.
    pub fn wait_gone(&self, name: &str, secs: u64) -> Result<()> {
        wait_until(
            secs,
            &format!("pod {}/{name} gone", self.name),
            |seen| match self.pod(name) {
                Some(p) => {
                    *seen = summary(&p);
                    None
                }
                None => Some(()),
            },
        )
    }

    /// `kubectl exec POD -c CONTAINER -- argv`, its stdout.
    pub fn exec(&self, pod: &str, container: &str, argv: &[&str]) -> Result<String> {
        let mut all = vec!["exec", pod, "-c", container, "--"];
        all.extend_from_slice(argv);
        self.kubectl(&all)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
    }
}

/// Whether the pod's condition `kind` is True.
pub fn condition(pod: &Value, kind: &str) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// The status of container `name` of the pod (init, app or ephemeral).
pub fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .filter_map(|k| pod["status"][k].as_array())
    .flatten()
    .find(|c| c["name"] == name)
}

/// The restart count of container `name`.
pub fn restarts(pod: &Value, name: &str) -> i64 {
    container(pod, name)
        .and_then(|c| c["restartCount"].as_i64())
        .unwrap_or(0)
}

/// A line on the pod for a timeout's message: phase, and each container's
/// state.
pub fn summary(pod: &Value) -> String {
    let mut s = pod["status"]["phase"].as_str().unwrap_or("?").to_string();
    for k in ["initContainerStatuses", "containerStatuses"] {
        for c in pod["status"][k].as_array().into_iter().flatten() {
            s.push_str(&format!(
                " {}:{} restarts={}",
                c["name"].as_str().unwrap_or("?"),
                c["state"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect::<Vec<_>>().join(","))
                    .unwrap_or_default(),
                c["restartCount"]
            ));
            if let Some(w) = c["state"]["waiting"]["reason"].as_str() {
                s.push_str(&format!("({w})"));
            }
        }
    }
    s
}

/// The container's id without its `runtime://` prefix.
pub fn container_id(pod: &Value, name: &str) -> Option<String> {
    let id = container(pod, name)?["containerID"].as_str()?;
    Some(id.split_once("://").map_or(id, |(_, id)| id).to_string())
}

/// The host PID of a running container, from the runtime (`crictl
/// inspect`).
pub fn host_pid(container_id: &str) -> Result<u32> {
    let text = crictl(&["inspect", "-o", "json", container_id])?;
    let v: Value = serde_json::from_str(&text).map_err(|source| Error::Json {
        what: format!("crictl inspect {container_id}"),
        source,
    })?;
    v["info"]["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| Error::Timeout {
            what: format!("pid of {container_id}"),
            secs: 0,
            last: text.chars().take(300).collect(),
        })
}

/// The lines of the node's log of part `name` (kubelet, berth…).
pub fn part_log(name: &str) -> Result<String> {
    let path = node()?.join("logs").join(format!("{name}.log"));
    std::fs::read_to_string(&path).map_err(|source| Error::Spawn {
        cmd: path.display().to_string(),
        source,
    })
}

/// kubelet's HTTPS endpoint `path` (`/stats/summary`, `/metrics`…), asked
/// directly with the admin's certificate: the apiserver's node proxy does
/// not proxy to a loopback address, which this node's is.
pub fn kubelet_get(path: &str) -> Result<String> {
    let pki = node()?.join("pki");
    let file = |name: &str| pki.join(name).to_string_lossy().into_owned();
    run(
        "curl",
        &[
            "-fsS",
            "--max-time",
            "60",
            "--cacert",
            &file("ca.crt"),
            "--cert",
            &file("admin.crt"),
            "--key",
            &file("admin.key"),
            &format!("https://{NODE}:10250{path}"),
        ],
        None,
    )
}

/// A value of kubelet's `/metrics` (the first sample of `name` whose labels
/// contain `labels`).
pub fn kubelet_metric(name: &str, labels: &str) -> Result<Option<f64>> {
    let text = kubelet_get("/metrics")?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| l.contains(labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok()))
}

/// kubelet restarted with `feature_gates` (`A=true,B=false`) and `config`
/// (YAML appended to its configuration); restarted as `hack/kube.sh up`
/// made it when dropped. Take [`disrupt`] first.
pub struct KubeletWith(());

impl KubeletWith {
    pub fn restart(feature_gates: &str, config: &str) -> Result<KubeletWith> {
        restart_kubelet(feature_gates, config)?;
        Ok(KubeletWith(()))
    }
}

impl Drop for KubeletWith {
    fn drop(&mut self) {
        if let Err(e) = restart_kubelet("", "") {
            eprintln!("kubelet not restarted as it was: {e}");
        }
    }
}

fn restart_kubelet(feature_gates: &str, config: &str) -> Result<()> {
    let script = repo().join("hack/kube.sh");
    let out = Command::new("timeout")
        .args(["-k5", CALL_LIMIT, "bash"])
        .arg(&script)
        .args(["restart", "kubelet"])
        .env("KUBE_FEATURE_GATES", feature_gates)
        .env("KUBE_KUBELET_CONFIG", config)
        .output()
        .map_err(|source| Error::Spawn {
            cmd: "kube.sh restart kubelet".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Failed {
            cmd: "kube.sh restart kubelet".into(),
            status: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    // Ready again: the node's status posted by the new kubelet.
    wait_until(120, "node Ready after kubelet's restart", |seen| {
        let n = kubectl_json(&["get", "node", NODE]).ok()?;
        *seen = n["status"]["conditions"].to_string();
        condition(&n, "Ready").then_some(())
    })
}

/// The cgroup v1 (or v2) directory of `controller` that the process `pid`
/// is in.
pub fn cgroup_dir(pid: u32, controller: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if ctrls.split(',').any(|c| c == controller) {
            return Some(PathBuf::from(format!("/sys/fs/cgroup/{ctrls}{path}")));
        }
    }
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(PathBuf::from(format!("/sys/fs/cgroup{path}")))
}

/// Seconds since the epoch of an RFC 3339 time (`2026-12-07T14:50:27.3Z`,
/// `…+02:00`); `None` if it is not one.
pub fn rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac = 0.0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        frac = format!("0.{}", &s[start..i]).parse().ok()?;
    }
    let offset = match s.get(i..)? {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let secs = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if o.starts_with('+') {
                secs
            } else {
                -secs
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset) as f64 + frac)
}
