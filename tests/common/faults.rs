//! Fault injection for daemon tests: a CNI plugin and an OCI runtime that are
//! shell wrappers around the real ones (`/usr/lib/cni/bridge`, `runc`),
//! armed and healed through control files in the test's own dir; a small
//! ext4 file system that can be frozen (a slow syscall, for slow creates);
//! a size-limited tmpfs (a full disk); a TCP proxy that cuts a registry's
//! answers halfway; and leak checks over everything a pod or container can
//! leave behind (dirs, mounts, netns, IPAM leases, processes, records).
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::pods::TestNet;
use crate::common::{Daemon, Sandbox};

/// The real runc the runtime wrapper runs.
pub const RUNC: &str = "/usr/sbin/runc";
/// The real CNI plugins.
pub const CNI_BIN: &str = "/usr/lib/cni";

/// A daemon's world with fault wrappers: its sandbox, a test network whose
/// bridge plugin is `fbridge` (a wrapper), and a runtime handler `faulty`
/// (the default) whose binary is `fruntime` (a wrapper around runc).
pub struct Rig {
    pub net: TestNet,
    pub sandbox: Sandbox,
    /// Wrapper binaries and their control files.
    pub bin: PathBuf,
    /// Extra keys of the `[cni]` table (e.g. `timeout_secs = 2`).
    pub cni_extra: String,
}

const FBRIDGE: &str = r#"#!/bin/sh
# CNI bridge wrapper: ctl files sleep-ADD / sleep-DEL (first), then
# fail-ADD / fail-DEL.
d=$(dirname "$0")
if [ -f "$d/sleep-$CNI_COMMAND" ]; then
  sleep "$(cat "$d/sleep-$CNI_COMMAND")"
fi
if [ -f "$d/fail-$CNI_COMMAND" ]; then
  echo '{"cniVersion":"1.0.0","code":11,"msg":"injected CNI failure","details":"'"$CNI_COMMAND"'"}'
  exit 1
fi
exec /usr/lib/cni/bridge
"#;

const FRUNTIME: &str = r#"#!/bin/sh
# runc wrapper: ctl files fail-<command> (exit 1, saying so on stderr and in
# runc's JSON log, which is what berth reads when the stderr is the
# container's), once-fail-<command> (the same for the next call only: the
# file is removed), sleep-<command> (its start noted in the file `slept`).
d=$(dirname "$0")
cmd=
log=
prev=
for a in "$@"; do
  if [ "$prev" = "--log" ]; then log=$a; fi
  case "$a" in
    create|start|delete|kill|state|run|exec) [ -z "$cmd" ] && cmd=$a;;
  esac
  prev=$a
done
if [ -n "$cmd" ] && [ -f "$d/once-fail-$cmd" ] && rm "$d/once-fail-$cmd" 2>/dev/null; then
  echo "injected runtime failure at $cmd (once)" >&2
  exit 1
fi
if [ -n "$cmd" ] && [ -f "$d/fail-$cmd" ]; then
  echo "injected runtime failure at $cmd" >&2
  if [ -n "$log" ]; then
    echo '{"level":"error","msg":"injected runtime failure at '"$cmd"'","time":"2026-12-01T00:00:00Z"}' >>"$log"
  fi
  exit 1
fi
if [ -n "$cmd" ] && [ -f "$d/sleep-$cmd" ]; then
  echo "$cmd" >>"$d/slept"
  sleep "$(cat "$d/sleep-$cmd")"
fi
exec /usr/sbin/runc "$@"
"#;

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Rig {
    pub fn new() -> Rig {
        let net = TestNet::new();
        let sandbox = Sandbox::new();
        let bin = sandbox.path("fbin");
        std::fs::create_dir_all(&bin).unwrap();
        write_exec(&bin.join("fbridge"), FBRIDGE);
        write_exec(&bin.join("fruntime"), FRUNTIME);
        let conflist = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": net.name,
            "plugins": [{
                "type": "fbridge",
                "bridge": net.bridge,
                "isGateway": true,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": format!("{}0/24", net.subnet_prefix)}]],
                    "routes": []
                }
            }]
        });
        std::fs::write(
            sandbox.cni_dir().join("10-faults.conflist"),
            conflist.to_string(),
        )
        .unwrap();
        Rig {
            net,
            sandbox,
            bin,
            cni_extra: String::new(),
        }
    }

    /// The config file: this rig's network and runtime wrapper, then `extra`.
    pub fn config(&self, extra: &str) -> PathBuf {
        let cni = self.sandbox.cni_dir();
        self.sandbox.write_config(&format!(
            "[runtime]\ndefault_handler = \"faulty\"\n\
             [runtime.handlers.faulty]\nbinary = {:?}\n\
             [runtime.handlers.missing]\nbinary = \"/nonexistent/berth-test/runc\"\n\
             {extra}\n\
             [cni]\nconf_dir = {cni:?}\nbin_dirs = [{:?}, {CNI_BIN:?}]\n\
             network_name = {:?}\nwrite_default_network = false\n{}\n",
            self.bin.join("fruntime"),
            self.bin,
            self.net.name,
            self.cni_extra,
        ))
    }

    /// Arms a fault: control file `name` (e.g. `fail-ADD`, `sleep-create`).
    pub fn arm(&self, name: &str, content: &str) {
        std::fs::write(self.bin.join(name), content).unwrap();
    }

    /// Heals a fault.
    pub fn heal(&self, name: &str) {
        let _ = std::fs::remove_file(self.bin.join(name));
    }

    /// The runtime wrapper disappears (a missing binary) / comes back.
    pub fn remove_runtime(&self) {
        std::fs::rename(self.bin.join("fruntime"), self.bin.join("fruntime.away")).unwrap();
    }
    pub fn restore_runtime(&self) {
        std::fs::rename(self.bin.join("fruntime.away"), self.bin.join("fruntime")).unwrap();
    }

    /// Starts the daemon (with `extra` config) in this rig.
    pub async fn start(self, extra: &str) -> (Daemon, Rigged) {
        let config = self.config(extra);
        let Rig {
            net, sandbox, bin, ..
        } = self;
        let dir = sandbox.dir.path().to_path_buf();
        let daemon = Daemon::start_in(sandbox, &config).await;
        (daemon, Rigged { net, bin, dir })
    }
}

/// What a started rig keeps beside the daemon (which owns the sandbox).
/// Dropped before the daemon (`let (daemon, rig) = ...` drops `rig`
/// first): when the test panicked, it deletes what the daemon's runc still
/// holds, kills the test's shims and unmounts its mounts, so a failed test
/// leaves no pods running on the host.
pub struct Rigged {
    pub net: TestNet,
    pub bin: PathBuf,
    /// The daemon's sandbox dir.
    pub dir: PathBuf,
}

impl Drop for Rigged {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let runtime = self.dir.join("state/runtime");
        for id in entries(&runtime) {
            let _ = Command::new(RUNC)
                .arg("--root")
                .arg(&runtime)
                .args(["delete", "--force", &id])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let dir = self.dir.display().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            // This test's shims (and its daemon): they name its own dir.
            if String::from_utf8_lossy(&cmdline).contains(&dir) && pid as u32 != std::process::id()
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        super::unmount_below(&self.dir);
    }
}

impl Rigged {
    pub fn arm(&self, name: &str, content: &str) {
        std::fs::write(self.bin.join(name), content).unwrap();
    }
    pub fn heal(&self, name: &str) {
        let _ = std::fs::remove_file(self.bin.join(name));
    }
    /// Whether the control file `name` is still there (a `once-` one is
    /// removed when it fires).
    pub fn armed(&self, name: &str) -> bool {
        self.bin.join(name).exists()
    }
    pub fn remove_runtime(&self) {
        std::fs::rename(self.bin.join("fruntime"), self.bin.join("fruntime.away")).unwrap();
    }
    pub fn restore_runtime(&self) {
        std::fs::rename(self.bin.join("fruntime.away"), self.bin.join("fruntime")).unwrap();
    }
    pub fn leases(&self) -> Vec<String> {
        self.net.leases()
    }
    /// Waits until a runtime command armed with `sleep-<cmd>` has begun its
    /// sleep: the call that ran it is inside it now.
    pub async fn wait_for_sleep(&self, cmd: &str) {
        let slept = self.bin.join("slept");
        let what = format!("runtime {cmd} sleeping");
        super::wait_until(&what, Duration::from_secs(30), || {
            std::fs::read_to_string(&slept).is_ok_and(|t| t.lines().any(|l| l == cmd))
        })
        .await;
    }
}

/// Processes (other than the daemon) whose command line names the daemon's
/// sandbox dir: shims, pauses, runc, plugins. The daemon's standby shim
/// (not yet taken) is its own while it runs, not a stray one; once the
/// daemon is gone, it is.
pub fn stray_processes(daemon: &Daemon) -> Vec<String> {
    let dir = daemon.sandbox.dir.path().display().to_string();
    let own = daemon.child.id();
    let daemon_alive = std::fs::read_to_string(format!("/proc/{own}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, r)| !r.starts_with('Z'))
    });
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == own || pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if daemon_alive && super::is_standby_shim(&cmdline) {
            continue;
        }
        if cmdline.contains(&dir) {
            // A zombie has an empty cmdline: never listed here.
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// Panics unless the daemon holds nothing: no pods, no containers, no
/// dirs, mounts or netns of its own, no IPAM lease, no stray process.
pub async fn assert_clean(daemon: &Daemon, net: &TestNet) {
    assert_clean_but(daemon, net, &[]).await
}

/// [`assert_clean`], with `own_mounts` (the test's own, such as a tmpfs
/// under the root) not counted as leaks.
pub async fn assert_clean_but(daemon: &Daemon, net: &TestNet, own_mounts: &[&Path]) {
    let cri = daemon.cri().await;
    let pods = cri.list_pods(None).await.unwrap();
    assert!(pods.is_empty(), "pods left: {pods:?}");
    let containers = cri.list_containers(None).await.unwrap();
    assert!(containers.is_empty(), "containers left: {containers:?}");
    for dir in [
        "state/runtime",
        "state/netns",
        "state/podns",
        "state/sandboxes",
        "state/containers",
        "state/s",
        "root/sandboxes",
        "root/containers",
        "root/records/sandboxes",
        "root/records/containers",
        "root/cni",
    ] {
        let path = daemon.sandbox.path(dir);
        let left = entries(&path);
        assert!(left.is_empty(), "{} still holds {left:?}", path.display());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = daemon.sandbox.dir.path().display().to_string();
    let shared = daemon.sandbox.shared_mount_points();
    let own: Vec<String> = own_mounts.iter().map(|p| p.display().to_string()).collect();
    let mounts: Vec<&str> = mountinfo
        .lines()
        .filter(|l| l.contains(&root))
        .filter(|l| {
            let point = l.split(' ').nth(4).unwrap_or_default();
            // The namespace dirs are shared mount points (as /run/netns is).
            !shared.iter().any(|s| s == point) && !own.iter().any(|o| o == point)
        })
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    assert!(
        net.leases().is_empty(),
        "IPAM leases left: {:?}",
        net.leases()
    );
    // Processes take a moment to be reaped after their shim lets go.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stray = stray_processes(daemon);
        if stray.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes left: {stray:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The code of a failed call, with its message for the assertion.
pub fn code_of<T: std::fmt::Debug>(r: &Result<T, tonic::Status>) -> tonic::Code {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}

/// A small ext4 file system on a loop device, which can be frozen (every
/// write to it blocks until it is thawed). Unmounted (and thawed) on drop.
pub struct FreezableFs {
    pub mount: PathBuf,
    frozen: AtomicBool,
    // Last: removed once the file system is unmounted.
    dir: tempfile::TempDir,
}

impl FreezableFs {
    /// Outside the daemon's sandbox (whose mounts the leak checks count).
    pub fn new() -> FreezableFs {
        let dir = tempfile::Builder::new()
            .prefix("berth-freeze-")
            .tempdir()
            .unwrap();
        let image = dir.path().join("freeze.img");
        let mount = dir.path().join("fs");
        std::fs::create_dir_all(&mount).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(16 << 20).unwrap();
        drop(f);
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        run(
            "mount",
            &[
                "-o",
                "loop",
                image.to_str().unwrap(),
                mount.to_str().unwrap(),
            ],
        );
        FreezableFs {
            mount,
            frozen: AtomicBool::new(false),
            dir,
        }
    }

    pub fn freeze(&self) {
        run("fsfreeze", &["--freeze", self.mount.to_str().unwrap()]);
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Thaws it (a no-op when it is not frozen).
    pub fn thaw(&self) {
        if self.frozen.swap(false, Ordering::SeqCst) {
            let _ = Command::new("fsfreeze")
                .args(["--unfreeze", self.mount.to_str().unwrap()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl Drop for FreezableFs {
    fn drop(&mut self) {
        self.thaw();
        // umount -d frees the loop device too.
        let _ = Command::new("umount")
            .args(["-d", self.mount.to_str().unwrap()])
            .status();
    }
}

/// A tmpfs of `bytes` mounted on `path` (made if missing); lazily
/// unmounted on drop.
pub struct SmallTmpfs {
    pub path: PathBuf,
}

impl SmallTmpfs {
    pub fn mount(path: &Path, bytes: u64) -> SmallTmpfs {
        std::fs::create_dir_all(path).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0711"),
                "tmpfs",
                path.to_str().unwrap(),
            ],
        );
        SmallTmpfs {
            path: path.to_path_buf(),
        }
    }

    /// Fills the file system (a file `filler` written until ENOSPC).
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path.join("filler")).unwrap();
        let chunk = vec![0x5au8; 64 << 10];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.path.display()),
            }
        }
        // The last partial chunk too.
        for size in [4096usize, 512, 1] {
            while f.write(&chunk[..size]).map(|n| n > 0).unwrap_or(false) {}
        }
        let _ = f.sync_all();
    }

    /// Fills the file system but for about `bytes`.
    pub fn fill_leaving(&self, bytes: u64) {
        self.fill();
        let filler = std::fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("filler"))
            .unwrap();
        let len = filler.metadata().unwrap().len();
        filler.set_len(len.saturating_sub(bytes)).unwrap();
    }

    /// Frees the space again.
    pub fn drain(&self) {
        let _ = std::fs::remove_file(self.path.join("filler"));
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TCP proxy on 127.0.0.1 in front of `upstream` (a test registry). While
/// `cut` is set, each connection is closed once `cut_after` bytes of
/// answers went through it (a registry dying mid-layer).
pub struct CutProxy {
    pub addr: String,
    pub cut: Arc<AtomicBool>,
    /// While set (with `cut`), a connection is held open without sending
    /// more instead of being closed (a registry that hangs mid-layer).
    pub stall: Arc<AtomicBool>,
    pub cuts: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(upstream: &str, cut_after: u64) -> CutProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(true));
        let stall = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_string();
        let (c, n, st) = (cut.clone(), cuts.clone(), stall.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let upstream = upstream.clone();
                let (cut, cuts, stall) = (c.clone(), n.clone(), st.clone());
                tokio::spawn(async move {
                    let _ = proxy_one(client, &upstream, cut_after, cut, cuts, stall).await;
                });
            }
        });
        CutProxy {
            addr,
            cut,
            stall,
            cuts,
            task,
        }
    }

    /// Lets every answer through whole from now on.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn proxy_one(
    client: tokio::net::TcpStream,
    upstream: &str,
    cut_after: u64,
    cut: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
    stall: Arc<AtomicBool>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = tokio::net::TcpStream::connect(upstream).await?;
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
    });
    let mut sent = 0u64;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = sr.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let cutting = cut.load(Ordering::SeqCst);
        if cutting && sent + n as u64 > cut_after {
            let keep = (cut_after - sent) as usize;
            cw.write_all(&buf[..keep]).await?;
            cuts.fetch_add(1, Ordering::SeqCst);
            if stall.load(Ordering::SeqCst) {
                // Hangs mid-answer: the connection stays, nothing more comes
                // (until the client gives up or the proxy is healed).
                while cut.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                up.abort();
                return Ok(());
            }
            // Dies mid-answer: no FIN-after-everything, just gone.
            up.abort();
            return Ok(());
        }
        cw.write_all(&buf[..n]).await?;
        sent += n as u64;
    }
    let _ = cw.shutdown().await;
    let _ = up.await;
    Ok(())
}

/// Every blob in the daemon's content store matches its digest (a blob cut
/// short never passes as whole).
pub fn assert_blobs_whole(daemon: &Daemon) {
    let dir = daemon.sandbox.path("root/images/blobs/sha256");
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let out = Command::new("sha256sum")
            .arg(entry.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let hex = text.split_whitespace().next().unwrap_or_default();
        assert_eq!(hex, name, "blob {name} does not match its digest");
    }
}

/// The names in a dir (empty when missing), once the trees berth moved
/// aside to remove after a call answered (`.removing-*`) are gone (up to
/// 10 s: then they are listed, as leftovers).
pub fn entries(path: &Path) -> Vec<String> {
    let list = || -> Vec<String> {
        std::fs::read_dir(path)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let names = list();
        if !names.iter().any(|n| n.starts_with(".removing-"))
            || std::time::Instant::now() >= deadline
        {
            return names;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A small deterministic random source (seeded: failures reproduce).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// 0..n
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
