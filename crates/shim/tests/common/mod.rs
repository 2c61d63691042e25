//! Test harness for the shim: busybox bundles, shims under runc and crun, and
//! cleanup (runtime delete, shim, cgroups, directories) even when a test fails.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use berth_shim::{LogTarget, ShimClient, ShimOptions, SpawnOptions};
use oci_spec::runtime::{
    LinuxBuilder, LinuxMemoryBuilder, LinuxResourcesBuilder, RootBuilder, Spec,
};
use tempfile::TempDir;

/// The runtimes every test runs under.
pub const RUNTIMES: [&str; 2] = ["runc", "crun"];

/// The cgroup parent of every test container.
pub const CGROUP_PARENT: &str = "berth-shim-test";

/// The runtime binary to run `runtime` as, for a test in `dir`.
///
/// crun refuses every container on a hybrid cgroup host whose v2 hierarchy
/// has controllers ("cgroups in hybrid mode not supported", whatever its
/// cgroup manager), which is this machine (hugetlb sits on v2). There it runs
/// through a wrapper that covers /sys/fs/cgroup/unified with a tmpfs in a
/// private mount namespace, so crun sees a v1 host and uses the v1
/// controllers, memory included. The shim takes any binary with runc's CLI.
pub fn runtime_binary(runtime: &str, dir: &Path) -> PathBuf {
    if runtime != "crun" || crun_can_use_cgroups() {
        return PathBuf::from(runtime);
    }
    let wrapper = dir.join("crun-v1");
    if !wrapper.exists() {
        let script = "#!/bin/sh\n\
            exec unshare --mount --propagation private sh -c \
            'mount -t tmpfs -o size=64k berth-hide /sys/fs/cgroup/unified && exec crun \"$@\"' crun \"$@\"\n";
        std::fs::write(&wrapper, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    wrapper
}

/// Whether crun can manage cgroups on this host as it is.
pub fn crun_can_use_cgroups() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .map_or(true, |c| c.trim().is_empty())
}

/// Fails the test unless it runs as root. Every test that calls it is also
/// `#[ignore = "needs root..."]`: left out (and said to be) by a plain
/// `cargo test`, and failing, never passing, when included by another user.
pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
    );
}

/// The shim binary under test.
pub fn shim_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_berth-shim"))
}

/// A unique container id.
pub fn unique_id(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("shimtest-{name}-{}-{nanos:x}", std::process::id())
}

/// Commands linked to busybox in the test rootfs.
const APPLETS: &[&str] = &[
    "sh", "echo", "cat", "sleep", "tail", "head", "printf", "tr", "true", "false", "ls", "stty",
    "tty", "dd", "yes", "test", "[", "wc", "kill", "ps",
];

/// A bundle (config.json + rootfs) for one container, in its own temp dir
/// that also holds the shim's state dir, the runtime root and the log.
pub struct Bundle {
    pub dir: TempDir,
    pub id: String,
    pub spec: Spec,
}

impl Bundle {
    /// A busybox bundle running `args`.
    pub fn busybox(name: &str, args: &[&str]) -> Bundle {
        let dir = tempfile::Builder::new()
            .prefix("berth-shim-")
            .tempdir()
            .expect("temp dir");
        let rootfs = dir.path().join("bundle/rootfs");
        for sub in ["bin", "proc", "dev", "sys", "etc", "tmp"] {
            std::fs::create_dir_all(rootfs.join(sub)).unwrap();
        }
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).expect("copying /bin/busybox");
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
        let id = unique_id(name);
        let spec = Self::spec(&id, args);
        Bundle { dir, id, spec }
    }

    /// A bundle whose rootfs is berth's pause rootfs.
    pub fn pause(name: &str) -> Bundle {
        let dir = tempfile::Builder::new()
            .prefix("berth-shim-")
            .tempdir()
            .expect("temp dir");
        berth_shim::write_pause_rootfs(&dir.path().join("bundle/rootfs")).unwrap();
        let id = unique_id(name);
        let mut spec = Self::spec(&id, &[berth_shim::PAUSE_PATH]);
        let mut root = spec.root().clone().unwrap();
        root.set_readonly(Some(true));
        spec.set_root(Some(root));
        Bundle { dir, id, spec }
    }

    fn spec(id: &str, args: &[&str]) -> Spec {
        let mut spec = Spec::default();
        // The default capabilities and rlimits stay; no oomScoreAdj (root
        // here cannot lower it).
        let mut p = spec.process().clone().unwrap_or_default();
        p.set_terminal(Some(false));
        p.set_args(Some(args.iter().map(|s| s.to_string()).collect()));
        p.set_env(Some(vec![
            "PATH=/bin".to_string(),
            "TERM=xterm".to_string(),
        ]));
        p.set_cwd("/".into());
        p.set_oom_score_adj(None);
        spec.set_process(Some(p));
        spec.set_hostname(Some("shimtest".into()));
        spec.set_root(Some(
            RootBuilder::default()
                .path("rootfs")
                .readonly(false)
                .build()
                .unwrap(),
        ));
        let mut linux = spec
            .linux()
            .clone()
            .unwrap_or_else(|| LinuxBuilder::default().build().unwrap());
        linux.set_cgroups_path(Some(PathBuf::from(format!("/{CGROUP_PARENT}/{id}"))));
        spec.set_linux(Some(linux));
        spec
    }

    /// Gives the container a terminal.
    pub fn with_terminal(mut self) -> Bundle {
        let mut p = self.spec.process().clone().unwrap();
        p.set_terminal(Some(true));
        self.spec.set_process(Some(p));
        self
    }

    /// Limits the container's memory (and memory + swap) to `bytes`.
    pub fn with_memory_limit(mut self, bytes: i64) -> Bundle {
        let mut linux = self.spec.linux().clone().unwrap();
        let mut resources = linux
            .resources()
            .clone()
            .unwrap_or_else(|| LinuxResourcesBuilder::default().build().unwrap());
        resources.set_memory(Some(
            LinuxMemoryBuilder::default()
                .limit(bytes)
                .swap(bytes)
                .build()
                .unwrap(),
        ));
        linux.set_resources(Some(resources));
        self.spec.set_linux(Some(linux));
        self
    }

    pub fn bundle_dir(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.bundle_dir().join("rootfs")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("logs/0.log")
    }
    pub fn runtime_root(&self) -> PathBuf {
        self.dir.path().join("runtime-root")
    }

    /// Writes config.json and returns the shim options for `runtime`.
    pub fn options(&self, runtime: &str) -> ShimOptions {
        std::fs::write(
            self.bundle_dir().join("config.json"),
            serde_json::to_vec_pretty(&self.spec).unwrap(),
        )
        .unwrap();
        let mut opts = ShimOptions::new(&self.id, self.bundle_dir(), self.state_dir());
        opts.runtime = runtime_binary(runtime, self.dir.path());
        opts.runtime_root = self.runtime_root();
        opts.log = Some(LogTarget::new(self.dir.path().join("logs"), "0.log").unwrap());
        opts.tty = self
            .spec
            .process()
            .as_ref()
            .and_then(|p| p.terminal())
            .unwrap_or(false);
        opts.runtime_timeout = Duration::from_secs(30);
        opts
    }
}

/// Cleans up one container however its test ends: runtime delete --force,
/// SIGKILL to any shim serving its state dir, cgroup directories.
pub struct Cleanup {
    pub runtime: PathBuf,
    pub root: PathBuf,
    pub id: String,
    pub state_dir: PathBuf,
}

impl Cleanup {
    pub fn new(runtime: &str, bundle: &Bundle) -> Cleanup {
        Cleanup {
            runtime: runtime_binary(runtime, bundle.dir.path()),
            root: bundle.runtime_root(),
            id: bundle.id.clone(),
            state_dir: bundle.state_dir(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.runtime)
            .arg("--root")
            .arg(&self.root)
            .args(["delete", "--force", &self.id])
            .stderr(std::process::Stdio::null())
            .status();
        for pid in shims_of(&self.state_dir) {
            // SAFETY: kill takes a pid and a signal number.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        remove_cgroups(&self.id);
    }
}

/// rmdir of the test cgroup of `id` in every hierarchy. The shared parent
/// stays: another test of this binary may be creating a cgroup under it
/// right now (crun fails with ENOENT when the parent goes between its
/// mkdirs); hack/test.sh removes the empty parents when all tests are done.
pub fn remove_cgroups(id: &str) {
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        roots.extend(entries.flatten().map(|e| e.path()));
    }
    for root in roots {
        let parent = root.join(CGROUP_PARENT);
        let _ = std::fs::remove_dir(parent.join(id));
    }
}

/// Whether any thread of `pid` is still running (not a zombie). A killed
/// multi-threaded process shows its leader a zombie while its other threads
/// still exit, holding its descriptors (a pipe's read end among them).
pub fn process_alive(pid: u32) -> bool {
    let running = |stat: &str| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| running(&stat))
    })
}

/// The pids of shims whose command line names `state_dir` (as one of its
/// arguments, or as a word of a command line shown as one string, as a
/// standby shim shows its options where it cannot show them separately).
pub fn shims_of(state_dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let wanted = state_dir.as_os_str().as_encoded_bytes().to_vec();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let mut args = cmdline.split(|b| *b == 0 || *b == b' ');
            args.next().is_some_and(|a| a.ends_with(b"berth-shim"))
                && args.any(|a| a == wanted.as_slice())
        })
        .collect()
}

/// Spawns a shim for `bundle` under `runtime` with `binary`, registering cleanup.
pub async fn spawn_with(
    binary: &Path,
    runtime: &str,
    bundle: &Bundle,
    tweak: impl FnOnce(&mut ShimOptions),
) -> (ShimClient, Cleanup) {
    let cleanup = Cleanup::new(runtime, bundle);
    let mut opts = bundle.options(runtime);
    tweak(&mut opts);
    let client = ShimClient::spawn(&SpawnOptions::new(binary, opts))
        .await
        .unwrap_or_else(|e| panic!("{runtime}: spawning the shim: {e}"));
    (client, cleanup)
}

/// Spawns a shim (the binary under test) for `bundle` under `runtime`.
pub async fn spawn(runtime: &str, bundle: &Bundle) -> (ShimClient, Cleanup) {
    spawn_with(&shim_bin(), runtime, bundle, |_| {}).await
}

/// One parsed CRI log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub stream: String,
    pub tag: String,
    pub content: String,
}

/// Parses a CRI log file, checking each timestamp's format.
pub fn read_log(path: &Path) -> Vec<Record> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .map(|line| {
            let line = line.strip_suffix('\n').expect("record without a newline");
            let mut parts = line.splitn(4, ' ');
            let ts = parts.next().unwrap();
            assert_eq!(ts.len(), 30, "timestamp {ts:?}");
            assert!(
                ts.ends_with('Z') && ts.as_bytes()[10] == b'T' && ts.as_bytes()[19] == b'.',
                "{ts:?}"
            );
            Record {
                stream: parts.next().unwrap().to_string(),
                tag: parts.next().unwrap().to_string(),
                content: parts.next().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// Polls `f` until it is true or `timeout` passes.
pub async fn eventually(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `fut` with a test-sized bound.
pub async fn within<T>(secs: u64, what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {secs}s"))
}

/// A process spec for exec.
pub fn process(args: &[&str]) -> oci_spec::runtime::Process {
    let mut p = oci_spec::runtime::Process::default();
    p.set_args(Some(args.iter().map(|s| s.to_string()).collect()));
    p.set_env(Some(vec!["PATH=/bin".to_string()]));
    p.set_oom_score_adj(None);
    p
}
