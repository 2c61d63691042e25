//! Standby shims (`berth-shim --standby`) and the launcher that keeps one,
//! as root under real runc and crun: a container through a spare is the
//! same as through a fresh shim; a spare ends with its daemon's end of the
//! pipe and leaves nothing; a dead spare makes the launcher start the shim
//! afresh; options are refused as on the command line, and bounded.

mod common;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use berth_shim::protocol::{self, ErrorKind, Response};
use berth_shim::{args_frame, ContainerStatus, ShimClient, ShimLauncher, MAX_OPTIONS_FRAME};
use common::*;

/// The pids of standby shims (not yet taken) whose state root is `root`.
fn spares_of(root: &Path) -> Vec<u32> {
    let wanted = [
        b"--standby".as_slice(),
        b"--state-root",
        root.as_os_str().as_encoded_bytes(),
    ];
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.len() >= 4
                && args[0].ends_with(b"berth-shim")
                && args[1..4] == wanted
                && process_alive(*pid)
        })
        .collect()
}

/// The one spare of `root`.
fn the_spare(root: &Path) -> u32 {
    let spares = spares_of(root);
    assert_eq!(spares.len(), 1, "spares of {}: {spares:?}", root.display());
    spares[0]
}

/// A process's command line, NUL-separated arguments.
fn cmdline(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Waits (bounded) until `pid` is gone.
async fn gone(pid: u32, what: &str) {
    eventually(Duration::from_secs(5), what, || !process_alive(pid)).await;
}

/// A spare started by hand, as the launcher starts one: its first process
/// reaped, the pid of the spare itself, our ends of its stdio.
struct HandSpare {
    pid: u32,
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::process::ChildStdout>,
}

impl HandSpare {
    fn start(root: &Path) -> HandSpare {
        let mut child = Command::new(shim_bin())
            .arg("--standby")
            .arg("--state-root")
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        assert!(child.wait().unwrap().success(), "the first process failed");
        HandSpare {
            pid: the_spare(root),
            stdin,
            stdout,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.stdin.as_mut().unwrap().write_all(bytes).unwrap();
    }

    /// Its answer (`None`: its stdout ended without one), read on a thread,
    /// bounded.
    async fn answer(&mut self) -> Option<Response> {
        let mut stdout = self.stdout.take().unwrap();
        let read = tokio::task::spawn_blocking(move || {
            protocol::read_frame(&mut stdout)
                .unwrap()
                .map(|(kind, payload)| protocol::decode::<Response>(kind, &payload).unwrap())
        });
        within(10, "the spare's answer", read).await.unwrap()
    }
}

impl Drop for HandSpare {
    fn drop(&mut self) {
        // SAFETY: kill takes a pid and a signal number.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
    }
}

/// The container's stdout and stderr lines in its CRI log.
fn log_lines(bundle: &Bundle) -> Vec<(String, String)> {
    read_log(&bundle.log_path())
        .into_iter()
        .map(|r| (r.stream, r.content))
        .collect()
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn container_through_a_spare_is_as_through_a_fresh_shim() {
    require_root();
    for rt in RUNTIMES {
        for run_detached in [false, true] {
            let bundle = Bundle::busybox(
                "spare",
                &[
                    "sh",
                    "-c",
                    "echo hello; echo oops >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; exit 3",
                ],
            );
            let root = bundle.dir.path().to_path_buf();
            let launcher = ShimLauncher::new(shim_bin(), &root);
            assert!(launcher.prestart().await, "{rt}: no spare");
            let spare = the_spare(&root);
            let cleanup = Cleanup::new(rt, &bundle);
            let mut opts = bundle.options(rt);
            opts.run_detached = run_detached;
            let client = within(60, "spawn", launcher.spawn(opts.clone()))
                .await
                .unwrap_or_else(|e| panic!("{rt}: {e}"));
            // The spare became the shim, and shows its options (NUL-separated,
            // or without CAP_SYS_RESOURCE joined by spaces).
            assert_eq!(client.shim_pid(), spare, "{rt}");
            assert_eq!(launcher.stats().from_spare, 1, "{rt}");
            let mut expected = vec![shim_bin().display().to_string()];
            expected.extend(
                opts.to_args()
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned()),
            );
            let shown = || cmdline(spare).join(" ");
            let what = format!(
                "{rt}: the command line {:?}, not {:?}",
                shown(),
                expected.join(" ")
            );
            eventually(Duration::from_secs(5), &what, || {
                shown() == expected.join(" ")
            })
            .await;
            assert_eq!(shims_of(&bundle.state_dir()), [spare], "{rt}");
            // Its files, as a fresh shim's.
            let shim_log = std::fs::read_to_string(bundle.state_dir().join("shim.log")).unwrap();
            let verb = if run_detached { "started" } else { "created" };
            assert!(
                shim_log.contains(&format!("{verb} {} (pid {})", bundle.id, client.pid())),
                "{rt}: {shim_log}"
            );

            if run_detached {
                assert_eq!(
                    client.state().await.unwrap().status,
                    ContainerStatus::Running
                );
            } else {
                assert_eq!(
                    client.state().await.unwrap().status,
                    ContainerStatus::Created
                );
            }
            assert_eq!(client.start().await.unwrap(), client.pid(), "{rt}");
            let out = within(
                30,
                "exec",
                client.exec_sync(&process(&["sh", "-c", "echo in; exit 4"]), None),
            )
            .await
            .unwrap();
            assert_eq!((out.exit_code, out.stdout.as_slice()), (4, &b"in\n"[..]));
            std::fs::write(bundle.rootfs().join("tmp/go"), b"").unwrap();
            let exit = within(30, "wait", client.wait()).await.unwrap();
            assert_eq!(exit.exit_code, 3, "{rt}");
            assert_eq!(exit.pid, client.pid());
            assert_eq!(
                berth_shim::read_exit_file(client.exit_file()).unwrap(),
                Some(exit)
            );
            // (Each stream in order; the two copiers do not order them
            // between each other.)
            let mut lines = log_lines(&bundle);
            lines.sort();
            assert_eq!(
                lines,
                [("stderr", "oops"), ("stdout", "hello")]
                    .map(|(s, c)| (s.to_string(), c.to_string())),
                "{rt}"
            );
            // A reconnecting client (the daemon after a restart) finds it.
            let again = ShimClient::connect(client.socket()).await.unwrap();
            assert_eq!(again.shim_pid(), spare);

            within(30, "delete", client.delete(false)).await.unwrap();
            gone(spare, "the shim to exit after delete").await;
            assert!(!client.socket().exists(), "{rt}: socket left behind");

            // The next spare was started in the background; dropping the
            // launcher ends it.
            eventually(Duration::from_secs(10), "the next spare", || {
                spares_of(&root).len() == 1
            })
            .await;
            let next = the_spare(&root);
            assert_ne!(next, spare);
            drop(launcher);
            gone(next, "the next spare to end with its launcher").await;
            drop(cleanup);
        }
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn terminal_container_through_a_spare() {
    require_root();
    let bundle = Bundle::busybox(
        "sparetty",
        &[
            "sh",
            "-c",
            "while [ ! -e /tmp/go ]; do sleep 0.05; done; stty size; echo to-stderr >&2",
        ],
    )
    .with_terminal();
    let root = bundle.dir.path().to_path_buf();
    let launcher = ShimLauncher::new(shim_bin(), &root);
    assert!(launcher.prestart().await);
    let spare = the_spare(&root);
    let _cleanup = Cleanup::new("runc", &bundle);
    let client = within(60, "spawn", launcher.spawn(bundle.options("runc")))
        .await
        .unwrap();
    assert_eq!(client.shim_pid(), spare);
    client.start().await.unwrap();
    client.resize(100, 30).await.unwrap();
    std::fs::write(bundle.rootfs().join("tmp/go"), b"").unwrap();
    assert_eq!(
        within(30, "wait", client.wait()).await.unwrap().exit_code,
        0
    );
    assert_eq!(
        log_lines(&bundle),
        [("stdout", "30 100"), ("stdout", "to-stderr")]
            .map(|(s, c)| (s.to_string(), c.to_string()))
    );
    within(30, "delete", client.delete(false)).await.unwrap();
    gone(spare, "the shim to exit after delete").await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn dropped_spare_ends_and_leaves_nothing() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shims");
    let launcher = ShimLauncher::new(shim_bin(), &root);
    assert!(launcher.prestart().await);
    assert!(launcher.prestart().await, "a ready spare is kept");
    let spare = the_spare(&root);
    assert_eq!(launcher.stats().spares_started, 1);

    // Its descriptors: its stdio only, stderr /dev/null.
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{spare}/fd"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort();
    assert_eq!(fds, ["0", "1", "2"]);
    assert_eq!(
        std::fs::read_link(format!("/proc/{spare}/fd/2")).unwrap(),
        Path::new("/dev/null")
    );
    // Our end of its stdin is close-on-exec: no process we start holds it.
    let stdin = std::fs::read_link(format!("/proc/{spare}/fd/0")).unwrap();
    let ours: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == stdin))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    assert_eq!(ours.len(), 1, "our ends of {}: {ours:?}", stdin.display());
    // SAFETY: F_GETFD on a descriptor of ours; no memory is passed.
    let flags = unsafe { libc::fcntl(ours[0], libc::F_GETFD) };
    assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "flags {flags}");
    // A process started meanwhile (as the daemon starts runc and plugins)
    // holds no copy: the spare still ends once the launcher is dropped.
    let mut bystander = Command::new("sleep").arg("30").spawn().unwrap();

    drop(launcher);
    gone(spare, "the spare to end with its launcher").await;
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(!root.exists(), "the spare wrote in its state root");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `bundle`'s container (runc, run at once) through `launcher`, whose
/// spare (`spare`) was found unusable: from a shim started afresh, the
/// spare counted lost. Its client, and the runtime's cleanup.
async fn spawned_afresh(
    launcher: &ShimLauncher,
    bundle: &Bundle,
    spare: u32,
) -> (Cleanup, ShimClient) {
    let cleanup = Cleanup::new("runc", bundle);
    let mut opts = bundle.options("runc");
    opts.run_detached = true;
    let client = within(60, "spawn", launcher.spawn(opts)).await.unwrap();
    assert_ne!(client.shim_pid(), spare);
    let stats = launcher.stats();
    assert_eq!(
        (stats.spares_lost, stats.fresh, stats.from_spare),
        (1, 1, 0)
    );
    (cleanup, client)
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn dead_spare_makes_the_launcher_start_afresh() {
    require_root();
    let bundle = Bundle::busybox("deadspare", &["sh", "-c", "echo afresh; exit 5"]);
    let root = bundle.dir.path().to_path_buf();
    let launcher = ShimLauncher::new(shim_bin(), &root);
    assert!(launcher.prestart().await);
    let spare = the_spare(&root);
    // SAFETY: kill takes a pid and a signal number.
    unsafe { libc::kill(spare as i32, libc::SIGKILL) };
    gone(spare, "the killed spare").await;

    let (_cleanup, client) = spawned_afresh(&launcher, &bundle, spare).await;
    let exit = within(30, "wait", client.wait()).await.unwrap();
    assert_eq!(exit.exit_code, 5);
    assert_eq!(
        log_lines(&bundle),
        [("stdout".to_string(), "afresh".to_string())]
    );
    // The fresh shim is started from its command line (no --standby).
    assert!(!cmdline(client.shim_pid()).contains(&"--standby".to_string()));
    within(30, "delete", client.delete(false)).await.unwrap();
    gone(client.shim_pid(), "the shim to exit after delete").await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn spare_of_a_replaced_executable_is_not_used() {
    require_root();
    let bundle = Bundle::busybox("stalespare", &["sh", "-c", "echo new; exit 0"]);
    let root = bundle.dir.path().to_path_buf();
    let binary = root.join("berth-shim");
    copy_executable(shim_bin(), &binary);
    let launcher = ShimLauncher::new(&binary, &root);
    assert!(launcher.prestart().await);
    let spare = the_spare(&root);
    // An upgrade puts a new file at the path (a new inode).
    let new = root.join("berth-shim.new");
    copy_executable(shim_bin(), &new);
    std::fs::rename(&new, &binary).unwrap();

    let (_cleanup, client) = spawned_afresh(&launcher, &bundle, spare).await;
    // The stale spare was let go (its stdin closed): it ended.
    gone(spare, "the stale spare").await;
    assert_eq!(
        within(30, "wait", client.wait()).await.unwrap().exit_code,
        0
    );
    within(30, "delete", client.delete(false)).await.unwrap();
    gone(client.shim_pid(), "the shim to exit after delete").await;
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn create_failure_through_a_spare_is_reported_as_by_a_fresh_shim() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("sparefail", &["sh"]);
        let root = bundle.dir.path().to_path_buf();
        let mut opts = bundle.options(rt);
        opts.run_detached = true;
        std::fs::remove_dir_all(bundle.rootfs()).unwrap();
        let _cleanup = Cleanup::new(rt, &bundle);
        let launcher = ShimLauncher::new(shim_bin(), &root);
        assert!(launcher.prestart().await);
        let spare = the_spare(&root);
        let err = within(60, "spawn", launcher.spawn(opts.clone()))
            .await
            .unwrap_err();
        assert_eq!(launcher.stats().from_spare, 0, "{rt}: {err}");
        let remote = err.remote().unwrap_or_else(|| panic!("{rt}: {err}"));
        assert_eq!(remote.kind, ErrorKind::Runtime, "{rt}: {err}");
        assert!(remote.exit_status.is_some_and(|s| s != 0), "{rt}: {err}");
        assert!(
            !remote.stderr.as_deref().unwrap_or("").is_empty(),
            "{rt}: {err}"
        );
        // It ended with everything it had started (its threads, the
        // copiers' pipes), leaving no socket and no container log records.
        gone(spare, "the spare whose container failed").await;
        assert!(!bundle.state_dir().join("shim.sock").exists(), "{rt}");
        assert_eq!(log_lines(&bundle), [], "{rt}");
        let shim_log = std::fs::read_to_string(bundle.state_dir().join("shim.log")).unwrap();
        assert!(shim_log.contains("start-up failed"), "{rt}: {shim_log}");

        // A fresh shim says the same.
        let fresh = ShimClient::spawn(&berth_shim::SpawnOptions::new(shim_bin(), opts))
            .await
            .unwrap_err();
        let fresh = fresh.remote().unwrap();
        assert_eq!(
            (fresh.kind, fresh.exit_status),
            (remote.kind, remote.exit_status),
            "{rt}"
        );
        drop(launcher);
    }
}

/// Options a shim refuses, as arguments (`STATE` stands for a state dir).
fn bad_options(state: &Path) -> Vec<Vec<OsString>> {
    let s = state.to_str().unwrap();
    let long = format!("{s}/{}", "d".repeat(120));
    // (No arguments at all is not options: the command line prints its
    // usage, a spare says "--id is required".)
    let lists: [&[&str]; 6] = [
        &["--bundle", "/b", "--state-dir", s],
        &["--id", "c", "--bundle", "rel", "--state-dir", s],
        &["--id", "../x", "--bundle", "/b", "--state-dir", s],
        &["--id", "c", "--bundle", "/b", "--state-dir", s, "--what"],
        &["--id", "c", "--bundle", "/b", "--state-dir", &long],
        &[
            "--id",
            "c",
            "--bundle",
            "/b",
            "--state-dir",
            s,
            "--log-dir",
            "/l",
            "--log-file",
            "../0.log",
        ],
    ];
    lists
        .iter()
        .map(|l| l.iter().map(OsString::from).collect())
        .collect()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn bad_options_are_refused_as_on_the_command_line() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shims");
    let state = root.join("c");
    for args in bad_options(&state) {
        // On the command line: exit 2, the reason on stderr.
        let fresh = Command::new(shim_bin()).args(&args).output().unwrap();
        assert_eq!(fresh.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8(fresh.stderr).unwrap();
        let reason = said
            .strip_prefix("berth-shim: ")
            .and_then(|r| r.strip_suffix('\n'))
            .unwrap_or_else(|| panic!("{args:?}: {said:?}"));

        // To a spare: the same reason, as an InvalidRequest answer.
        let mut spare = HandSpare::start(&root);
        let pid = spare.pid;
        spare.write(&args_frame(&args).unwrap());
        match spare.answer().await {
            Some(Response::Error(e)) => {
                assert_eq!(e.kind, ErrorKind::InvalidRequest, "{args:?}");
                assert_eq!(e.message, reason, "{args:?}");
            }
            other => panic!("{args:?}: {other:?}"),
        }
        // It ends (while our end of its stdin is still open), leaving nothing.
        gone(pid, "the refusing spare").await;
        assert!(!root.exists(), "{args:?}: files left in the state root");
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn option_frames_are_bounded() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shims");

    // Over the limit: refused from the header alone. Our end stays open,
    // so a spare that went on reading would never answer.
    let mut spare = HandSpare::start(&root);
    let pid = spare.pid;
    spare.write(&((MAX_OPTIONS_FRAME + 1) as u32).to_be_bytes());
    // It may have refused and gone already: then this finds the pipe broken.
    let _ = spare.stdin.as_mut().unwrap().write_all(&[b'a'; 1024]);
    match spare.answer().await {
        Some(Response::Error(e)) => {
            assert_eq!(e.kind, ErrorKind::InvalidRequest);
            assert!(e.message.contains("limit"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    gone(pid, "the spare refusing a long frame").await;
    // Nothing reads that pipe any more: the rest is never read.
    let more = spare.stdin.take().unwrap().write_all(&vec![b'a'; 1 << 20]);
    assert_eq!(
        more.unwrap_err().kind(),
        std::io::ErrorKind::BrokenPipe,
        "someone still reads the spare's stdin"
    );

    // Cut short: refused.
    let mut spare = HandSpare::start(&root);
    let pid = spare.pid;
    spare.write(&100u32.to_be_bytes());
    spare.write(b"--id\0");
    drop(spare.stdin.take());
    let answer = spare.answer().await;
    assert!(
        matches!(&answer, Some(Response::Error(e)) if e.kind == ErrorKind::InvalidRequest),
        "{answer:?}"
    );
    gone(pid, "the spare refusing a short frame").await;

    // Nothing at all: it ends quietly, no answer, nothing written.
    let mut spare = HandSpare::start(&root);
    let pid = spare.pid;
    drop(spare.stdin.take());
    assert_eq!(spare.answer().await, None);
    gone(pid, "the spare without options").await;
    assert!(!root.exists(), "files left in the state root");
}

/// Copies an executable by `cp`, so no fd open for writing it is ever in
/// this process: a child another test forks meanwhile would inherit one
/// and make the copy's exec fail with ETXTBSY until that child execs.
fn copy_executable(from: impl AsRef<Path>, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg(from.as_ref())
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "cp {}: {status}", to.display());
}
