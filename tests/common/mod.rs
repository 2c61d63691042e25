//! Test harness: starts the real berth daemon on a temporary socket, root and
//! state dir, and connects CRI clients to it.
#![allow(dead_code)]

pub mod artifacts;
pub mod crash;
pub mod cri;
pub mod faults;
pub mod images;
pub mod pods;
pub mod prom;
pub mod streaming;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tempfile::TempDir;
use tonic::transport::{Channel, Endpoint, Uri};

/// The berth binary under test.
pub fn berth_bin() -> &'static str {
    env!("CARGO_BIN_EXE_berth")
}

/// A temporary directory with the paths one daemon uses.
pub struct Sandbox {
    pub dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::Builder::new()
                .prefix("berth-test-")
                .tempdir()
                .expect("temp dir"),
        }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn socket(&self) -> PathBuf {
        self.path("run/berth.sock")
    }
    pub fn cni_dir(&self) -> PathBuf {
        let dir = self.path("net.d");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
    /// Writes a config file: `extra` TOML appended to the paths of this sandbox.
    pub fn write_config(&self, extra: &str) -> PathBuf {
        let file = self.path("config.toml");
        let mut text = format!(
            "socket = {:?}\nroot = {:?}\nstate = {:?}\nlog_level = \"debug\"\n{extra}",
            self.socket(),
            self.path("root"),
            self.path("state"),
        );
        // NRI on (berth's default), on this sandbox's own socket and
        // plugin dirs: daemons in parallel never share one. Not added to a
        // file that does not parse: a test of a bad file keeps its errors.
        if !extra.contains("[nri]") && text.parse::<toml::Table>().is_ok() {
            text.push_str(&format!("\n{}", self.nri_section("")));
        }
        std::fs::write(&file, text).unwrap();
        file
    }
    /// An `[nri]` section on this sandbox's socket and plugin dirs, with
    /// `extra` keys.
    pub fn nri_section(&self, extra: &str) -> String {
        format!(
            "[nri]\nsocket_path = {:?}\nplugin_path = {:?}\nplugin_config_path = {:?}\n{extra}\n",
            self.nri_socket(),
            self.path("nri/plugins"),
            self.path("nri/conf.d"),
        )
    }
    pub fn nri_socket(&self) -> PathBuf {
        self.path("nri/nri.sock")
    }
    /// Like [`Sandbox::write_config`], with the sandbox's own (empty) CNI
    /// dir and no default network written into it.
    pub fn write_test_config(&self, extra: &str) -> PathBuf {
        let cni = self.cni_dir();
        self.write_config(&format!(
            "{extra}\n[cni]\nconf_dir = {cni:?}\nwrite_default_network = false\n"
        ))
    }

    /// The berth command with `--config` pointing at this sandbox's file.
    pub fn command(&self, config: &Path) -> Command {
        let mut cmd = Command::new(berth_bin());
        cmd.arg("--config").arg(config);
        cmd
    }
    /// The daemon's log file (its stderr when started by [`Daemon`]).
    pub fn log_file(&self) -> PathBuf {
        self.path("berth.log")
    }
}

impl Sandbox {
    /// The dirs berth makes shared mount points of (the netns and pinned
    /// namespace dirs, as /run/netns is): mount points, but not leaks.
    pub fn shared_mount_points(&self) -> Vec<String> {
        ["state/netns", "state/podns"]
            .iter()
            .map(|d| self.path(d).display().to_string())
            .collect()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Undone so the temp dir can go: its shared netns and podns dirs,
        // and whatever else is mounted below it (a test that ends, or
        // fails, with pods left, or kills the daemon, leaves their shm,
        // rootfs and image volume mounts, which would outlive the test).
        unmount_below(self.dir.path());
    }
}

/// Unmounts (lazily) every mount point at or below `dir`, deepest first.
pub fn unmount_below(dir: &Path) {
    let text = std::fs::read_to_string(berth_mountinfo::SELF).unwrap_or_default();
    for point in berth_mountinfo::points_below(&text, dir) {
        let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// CNI config text that counts as a configured network.
pub const CNI_CONFLIST: &str =
    r#"{"cniVersion":"1.0.0","name":"berth-test","plugins":[{"type":"loopback"}]}"#;

/// A running daemon, killed on drop.
pub struct Daemon {
    pub child: Child,
    pub sandbox: Sandbox,
    config: PathBuf,
    args: Vec<String>,
    /// The umask berth is started with (the test's own when `None`).
    umask: Option<u32>,
}

impl Daemon {
    /// Starts berth with this config text and waits until it answers calls.
    pub async fn start(extra_config: &str) -> Daemon {
        let sandbox = Sandbox::new();
        let config = sandbox.write_test_config(extra_config);
        Daemon::start_in(sandbox, &config).await
    }

    /// Starts berth in `sandbox` with `config` and waits until its socket answers.
    pub async fn start_in(sandbox: Sandbox, config: &Path) -> Daemon {
        Daemon::start_with_args(sandbox, config, &[]).await
    }

    /// Like [`Daemon::start_in`], with extra command-line arguments.
    pub async fn start_with_args(sandbox: Sandbox, config: &Path, args: &[&str]) -> Daemon {
        Daemon::start_with(sandbox, config, args, None).await
    }

    /// Like [`Daemon::start_in`], berth started with `umask` (as from a
    /// shell that ran `umask 000`).
    pub async fn start_with_umask(sandbox: Sandbox, config: &Path, umask: u32) -> Daemon {
        Daemon::start_with(sandbox, config, &[], Some(umask)).await
    }

    async fn start_with(
        sandbox: Sandbox,
        config: &Path,
        args: &[&str],
        umask: Option<u32>,
    ) -> Daemon {
        let child = spawn_logged(&sandbox, config, args, umask);
        let mut daemon = Daemon {
            child,
            sandbox,
            config: config.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            umask,
        };
        daemon.wait_ready().await;
        daemon
    }

    /// Starts the daemon again, with the same sandbox, config and arguments,
    /// after the previous process has exited (killed or stopped).
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.child = spawn_logged(&self.sandbox, &self.config, &args, self.umask);
        self.wait_ready().await;
    }

    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("berth exited early ({status}): {}", self.stderr());
            }
            if self.sandbox.socket().exists() {
                if let Ok(cri) = cri::Cri::connect(&self.sandbox.socket()).await {
                    if cri.version().await.is_ok() {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "berth did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A CRI client connected to the daemon (a new connection).
    pub async fn cri(&self) -> cri::Cri {
        cri::Cri::connect(&self.sandbox.socket())
            .await
            .expect("connect")
    }

    /// Calls Version, panicking unless it answers.
    pub async fn version(&self) -> cri_api::v1::VersionResponse {
        self.cri().await.version().await.expect("Version")
    }

    /// Sends `signal` and waits up to `timeout` for the daemon to exit.
    pub async fn signal_and_wait(
        &mut self,
        signal: nix::sys::signal::Signal,
        timeout: Duration,
    ) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        wait_exit(&mut self.child, timeout).await
    }

    /// What the daemon has logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.sandbox.log_file()).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A test that failed half-way leaves its pods and containers
        // running: they go with the daemon, so that no later test (and not
        // the machine) keeps running them.
        self.sandbox.sweep_runtime();
    }
}

impl Sandbox {
    /// Deletes, forcibly, every container the OCI runtime holds under this
    /// sandbox's state (runc first, then crun, as they share the root), and
    /// kills what shims of this sandbox are left.
    pub fn sweep_runtime(&self) {
        let root = self.path("state/runtime");
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        for id in entries.flatten().map(|e| e.file_name()) {
            for runtime in ["runc", "crun"] {
                let deleted = Command::new(runtime)
                    .arg("--root")
                    .arg(&root)
                    .args(["delete", "--force"])
                    .arg(&id)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if deleted {
                    break;
                }
            }
        }
        let marker = self.dir.path().display().to_string();
        for pid in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = pid.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains("berth-shim") && cmdline.contains(&marker) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Spawns berth with its stderr appended to the sandbox's log file, with
/// `umask` when one is given.
fn spawn_logged(sandbox: &Sandbox, config: &Path, args: &[&str], umask: Option<u32>) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(sandbox.log_file())
        .expect("log file");
    let mut cmd = sandbox.command(config);
    cmd.args(args).stdout(Stdio::null()).stderr(log);
    if let Some(mask) = umask {
        use std::os::unix::process::CommandExt;
        // SAFETY: umask is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(mask as libc::mode_t);
                Ok(())
            });
        }
    }
    cmd.spawn().expect("spawn berth")
}

/// Whether a command line (arguments joined by spaces) is a standby shim's
/// (`berth-shim --standby --state-root DIR`) not yet taken: one that was
/// taken shows the options of its container instead.
pub fn is_standby_shim(cmdline: &str) -> bool {
    let mut args = cmdline.split(' ');
    args.next().is_some_and(|a| a.ends_with("berth-shim")) && args.next() == Some("--standby")
}

/// The pids of standby shims (not yet taken) of the daemon whose sandbox
/// dir is `dir`.
pub fn standby_shims(dir: &Path) -> Vec<u32> {
    let dir = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            // A zombie has an empty cmdline: never listed here.
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            is_standby_shim(&cmdline) && cmdline.contains(&dir)
        })
        .collect()
}

/// Waits for a child to exit, panicking after `timeout`.
/// Async, so the test's own runtime keeps serving its client connections meanwhile.
pub async fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "process did not exit in {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `done` until it holds, failing with `what` after `timeout`: for
/// a test that waits for something to happen, where a fixed sleep would
/// either wait too long or, under load, not long enough.
pub async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "not in {timeout:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 10 s) until the file at `path` holds `what`; its text.
pub async fn wait_for_text(path: &Path, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held {what:?}: {text:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gRPC channel over the unix socket at `path`.
pub async fn channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// A registry on 127.0.0.1 with the test images, shared by the tests of one
/// test binary; it stops by itself (`--max-lifetime`) after the run.
pub struct TestRegistry {
    pub addr: String,
    _dir: TempDir,
}

impl TestRegistry {
    /// `ADDR/berth-test/busybox:latest`.
    pub fn busybox(&self) -> String {
        format!("{}/berth-test/busybox:latest", self.addr)
    }
}

/// Starts (once per test binary) the registry and pushes the test images.
pub fn registry() -> &'static TestRegistry {
    static REGISTRY: std::sync::OnceLock<TestRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = tempfile::Builder::new()
            .prefix("berth-registry-")
            .tempdir()
            .unwrap();
        let out = Command::new("bash")
            .arg(repo.join("hack/registry.sh"))
            .arg("start")
            .arg(dir.path())
            .args(["--max-lifetime", "1800"])
            .output()
            .expect("hack/registry.sh");
        assert!(
            out.status.success(),
            "registry.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let addr = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let out = Command::new("bash")
            .arg(repo.join("hack/build-test-images.sh"))
            .arg(&addr)
            .output()
            .expect("hack/build-test-images.sh");
        assert!(
            out.status.success(),
            "build-test-images.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TestRegistry { addr, _dir: dir }
    })
}

/// Fails the test unless it runs as root. Every test that calls it is also
/// `#[ignore = "needs root: ..."]`: a plain `cargo test` leaves it out (and
/// says so: "ignored"); asked for with `--include-ignored` (as hack/test.sh
/// does, as root) by another user, it fails here, saying why, and never
/// passes without having run.
#[macro_export]
macro_rules! require_root {
    () => {
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
        )
    };
}

/// Whether `crun` runs a container on this host: a bundle of busybox
/// running `true`, made and run in a temp dir (crun refuses every
/// container on a cgroup v1 hybrid host with cgroup2 controllers).
pub fn crun_runs_here() -> bool {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("rootfs/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let Ok(busybox) = which_busybox() else {
        return false;
    };
    std::fs::copy(busybox, bin.join("busybox")).unwrap();
    let spec = Command::new("crun")
        .arg("spec")
        .current_dir(dir.path())
        .status();
    if !spec.is_ok_and(|s| s.success()) {
        return false;
    }
    let config = dir.path().join("config.json");
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    value["process"]["args"] = serde_json::json!(["/bin/busybox", "true"]);
    value["process"]["terminal"] = serde_json::json!(false);
    std::fs::write(&config, serde_json::to_vec(&value).unwrap()).unwrap();
    let id = format!("berth-test-probe-{}", std::process::id());
    Command::new("crun")
        .args(["run", &id])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
}

fn which_busybox() -> Result<PathBuf, ()> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or(())
}
