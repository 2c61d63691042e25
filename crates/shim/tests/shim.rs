//! The shim under real runc and crun, on busybox bundles, as root: each test
//! is ignored by a plain `cargo test` and fails, saying so, when included
//! (`--include-ignored`) by another user. Every test runs once per runtime.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use berth_shim::{
    read_exit_file, AttachOptions, ContainerStatus, ExecOptions, ShimClient, StreamEvent,
};
use common::*;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Deletes through the shim and checks that the shim went away with its socket.
async fn delete_and_check_gone(client: &ShimClient) {
    within(30, "delete", client.delete(false)).await.unwrap();
    let pid = client.shim_pid();
    eventually(Duration::from_secs(10), "the shim to exit", || {
        !process_alive(pid)
    })
    .await;
    assert!(!client.socket().exists(), "socket left behind");
    assert!(client.exit_file().exists(), "exit file removed");
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn container_prints_and_exits() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox(
            "print",
            &[
                "sh",
                "-c",
                "echo hello; echo oops >&2; echo; printf partial; exit 3",
            ],
        );
        let (client, _cleanup) = spawn(rt, &bundle).await;
        assert!(client.pid() > 0);
        let state = client.state().await.unwrap();
        assert_eq!(state.status, ContainerStatus::Created, "{rt}");
        assert_eq!(state.started_at_ns, None, "{rt}: not started yet");
        let before = now_ns();
        assert_eq!(client.start().await.unwrap(), client.pid());
        let started = client.state().await.unwrap().started_at_ns;
        assert!(
            started.is_some_and(|t| t >= before && t <= now_ns()),
            "{rt}: started at {started:?}, Start was asked at {before}"
        );
        let exit = within(30, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 3, "{rt}");
        assert!(!exit.oom_killed);
        assert_eq!(exit.pid, client.pid());
        assert!(
            exit.exited_at_ns >= before && exit.exited_at_ns <= now_ns(),
            "{rt}: {exit:?}"
        );
        // Written before the answer.
        assert_eq!(read_exit_file(client.exit_file()).unwrap(), Some(exit));
        assert_eq!(
            client.state().await.unwrap().status,
            ContainerStatus::Stopped
        );

        let records = read_log(&bundle.log_path());
        let stdout: Vec<_> = records.iter().filter(|r| r.stream == "stdout").collect();
        let stderr: Vec<_> = records.iter().filter(|r| r.stream == "stderr").collect();
        let pairs = |v: &[&Record]| -> Vec<(String, String)> {
            v.iter()
                .map(|r| (r.tag.clone(), r.content.clone()))
                .collect()
        };
        assert_eq!(
            pairs(&stdout),
            [("F", "hello"), ("F", ""), ("P", "partial")]
                .map(|(t, c)| (t.to_string(), c.to_string())),
            "{rt}"
        );
        assert_eq!(
            pairs(&stderr),
            [("F".to_string(), "oops".to_string())],
            "{rt}"
        );
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn long_line_is_split() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("long", &["sh", "-c", "printf '%040000d\\n' 0; echo short"]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        assert_eq!(
            within(30, "wait", client.wait()).await.unwrap().exit_code,
            0
        );
        let records = read_log(&bundle.log_path());
        let shape: Vec<(&str, usize)> = records
            .iter()
            .map(|r| (r.tag.as_str(), r.content.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("P", 16384),
                ("P", 16384),
                ("F", 40000 - 2 * 16384),
                ("F", 5)
            ],
            "{rt}"
        );
        assert!(records[..3]
            .iter()
            .all(|r| r.content.bytes().all(|b| b == b'0')));
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn sigterm_ignored_then_sigkill() {
    require_root();
    for rt in RUNTIMES {
        let script = "trap '' TERM; echo ready; while true; do sleep 1; done";
        let bundle = Bundle::busybox("kill", &["sh", "-c", script]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        let log = bundle.log_path();
        eventually(Duration::from_secs(10), "ready", || {
            read_log(&log).iter().any(|r| r.content == "ready")
        })
        .await;
        client.kill(libc::SIGTERM, false).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(1500), client.wait()).await;
        assert!(early.is_err(), "{rt}: SIGTERM was not ignored: {early:?}");
        assert_eq!(
            client.state().await.unwrap().status,
            ContainerStatus::Running
        );
        client.kill(libc::SIGKILL, false).await.unwrap();
        let exit = within(30, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 137, "{rt}");
        // Killing an exited container is a no-op, not an error.
        client.kill(libc::SIGKILL, false).await.unwrap();
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn exec_sync_output_and_timeouts() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("exec", &["sleep", "1000"]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        // Not running yet.
        let err = client
            .exec_sync(&process(&["true"]), None)
            .await
            .unwrap_err();
        assert!(err.is_failed_precondition(), "{rt}: {err}");
        client.start().await.unwrap();
        // Nothing of the shim's (or the daemon's) leaks into the container
        // (once runc's init, which holds a few of its own, has exec'd).
        let init_fds = || {
            let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", client.pid()))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            fds.sort();
            fds
        };
        eventually(Duration::from_secs(5), "the container's fds", || {
            init_fds() == ["0", "1", "2"]
        })
        .await;

        let out = within(
            30,
            "exec",
            client.exec_sync(
                &process(&["sh", "-c", "echo out; echo err >&2; exit 7"]),
                Some(Duration::from_secs(20)),
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            (
                out.exit_code,
                out.stdout.as_slice(),
                out.stderr.as_slice(),
                out.timed_out
            ),
            (7, &b"out\n"[..], &b"err\n"[..], false),
            "{rt}"
        );

        // The timeout kills the process.
        let started = Instant::now();
        let out = within(
            30,
            "exec",
            client.exec_sync(
                &process(&["sh", "-c", "echo begun; exec sleep 100"]),
                Some(Duration::from_secs(1)),
            ),
        )
        .await
        .unwrap();
        assert!(out.timed_out, "{rt}: {out:?}");
        assert_eq!(out.exit_code, 137);
        assert_eq!(out.stdout, b"begun\n");
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{rt}: {:?}",
            started.elapsed()
        );

        // A background process holding the pipes holds neither the answer
        // (no timeout) nor the timeout.
        let started = Instant::now();
        let out = within(
            30,
            "exec",
            client.exec_sync(&process(&["sh", "-c", "sleep 100 & echo bg"]), None),
        )
        .await
        .unwrap();
        assert_eq!(
            (out.exit_code, out.stdout.as_slice(), out.timed_out),
            (0, &b"bg\n"[..], false),
            "{rt}"
        );
        assert!(started.elapsed() < Duration::from_secs(8));
        let started = Instant::now();
        let out = within(
            30,
            "exec",
            client.exec_sync(
                &process(&["sh", "-c", "sleep 100 & sleep 100"]),
                Some(Duration::from_secs(1)),
            ),
        )
        .await
        .unwrap();
        assert!(out.timed_out, "{rt}: {out:?}");
        assert!(started.elapsed() < Duration::from_secs(8));

        // A client that hangs up takes its process with it.
        let opts = ExecOptions {
            exec_id: "hangup".into(),
            process: process(&["sleep", "100"]),
            tty: false,
            stdin: false,
            timeout: None,
        };
        let stream = client.exec(&opts).await.unwrap();
        let pid = stream.pid().unwrap();
        assert!(process_alive(pid));
        drop(stream);
        eventually(Duration::from_secs(10), "the exec to die", || {
            !process_alive(pid)
        })
        .await;

        // A missing binary is the runtime's error, with its status and stderr.
        let err = client.exec_sync(&process(&["/no/such/binary"]), None).await;
        match err {
            Err(e) => assert!(e.runtime_exit_status().is_some(), "{rt}: {e}"),
            // Some runtimes start the process and report exit 127 instead.
            Ok(out) => assert_ne!(out.exit_code, 0, "{rt}"),
        }

        client.kill(libc::SIGKILL, false).await.unwrap();
        within(30, "wait", client.wait()).await.unwrap();
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn exec_with_tty_and_resize() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("exectty", &["sleep", "1000"]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        let opts = ExecOptions {
            exec_id: "tty1".into(),
            process: process(&["sh", "-c", "read line; echo \"got $line\"; tty; stty size"]),
            tty: true,
            stdin: true,
            timeout: Some(Duration::from_secs(20)),
        };
        let mut stream = within(30, "exec", client.exec(&opts)).await.unwrap();
        assert!(stream.pid().is_some());
        stream.resize(123, 45).await.unwrap();
        stream.stdin(b"hi\n").await.unwrap();
        // Dropping the writing half ends stdin only: the output still comes.
        let (mut reader, writer) = stream.split();
        drop(writer);
        let mut output = Vec::new();
        let exit = within(30, "exec output", async {
            loop {
                match reader.next().await.unwrap() {
                    Some(StreamEvent::Stdout(d)) => output.extend_from_slice(&d),
                    Some(StreamEvent::Stderr(_)) => panic!("stderr with a terminal"),
                    Some(StreamEvent::Exit { exit_code, .. }) => break exit_code,
                    None => panic!("stream ended without exit"),
                }
            }
        })
        .await;
        let text = String::from_utf8_lossy(&output);
        assert_eq!(exit, 0, "{rt}: {text}");
        assert!(text.contains("got hi\r\n"), "{rt}: {text:?}");
        assert!(text.contains("/dev/pts/"), "{rt}: {text:?}");
        assert!(text.contains("45 123"), "{rt}: {text:?}");
        client.kill(libc::SIGKILL, false).await.unwrap();
        within(30, "wait", client.wait()).await.unwrap();
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn container_with_tty_logs_as_stdout() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox(
            "tty",
            &[
                "sh",
                "-c",
                "while [ ! -e /tmp/go ]; do sleep 0.1; done; stty size; echo to-stderr >&2",
            ],
        )
        .with_terminal();
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        client.resize(100, 30).await.unwrap();
        std::fs::write(bundle.rootfs().join("tmp/go"), b"").unwrap();
        assert_eq!(
            within(30, "wait", client.wait()).await.unwrap().exit_code,
            0,
            "{rt}"
        );
        let records = read_log(&bundle.log_path());
        let lines: Vec<(&str, &str)> = records
            .iter()
            .map(|r| (r.stream.as_str(), r.content.as_str()))
            .collect();
        assert_eq!(
            lines,
            [("stdout", "30 100"), ("stdout", "to-stderr")],
            "{rt}"
        );
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn attach_with_stdin_once() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("attach", &["sh", "-c", "cat; echo done >&2"]);
        let (client, _cleanup) = spawn_with(&shim_bin(), rt, &bundle, |o| {
            o.stdin = true;
            o.stdin_once = true;
        })
        .await;
        let mut stream = client
            .attach(AttachOptions {
                stdin: true,
                stdout: true,
                stderr: true,
            })
            .await
            .unwrap();
        client.start().await.unwrap();
        stream.stdin(b"ping\n").await.unwrap();
        let mut out = Vec::new();
        let mut err = Vec::new();
        while !out.ends_with(b"ping\n") {
            match within(20, "echo", stream.next()).await.unwrap() {
                Some(StreamEvent::Stdout(d)) => out.extend_from_slice(&d),
                other => panic!("{rt}: {other:?}"),
            }
        }
        // The first attach's stdin ends: stdin_once closes the container's.
        stream.close_stdin().await.unwrap();
        let (mut reader, writer) = stream.split();
        drop(writer);
        let code = loop {
            match within(20, "exit", reader.next()).await.unwrap() {
                Some(StreamEvent::Stderr(d)) => err.extend_from_slice(&d),
                Some(StreamEvent::Exit { exit_code, .. }) => break exit_code,
                other => panic!("{rt}: {other:?}"),
            }
        };
        assert_eq!((code, err.as_slice()), (0, &b"done\n"[..]), "{rt}");
        let exit = within(10, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 0);
        let records = read_log(&bundle.log_path());
        assert!(
            records
                .iter()
                .any(|r| r.stream == "stdout" && r.content == "ping"),
            "{rt}"
        );
        delete_and_check_gone(&client).await;
    }
}

/// Waits for /tmp/`name` to appear inside the container.
fn wait_for_file(name: &str) -> String {
    format!("while [ ! -e /tmp/{name} ]; do sleep 0.1; done")
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn reconnect_after_client_crash() {
    require_root();
    for rt in RUNTIMES {
        let script = format!("echo up; {}; exit 5", wait_for_file("go"));
        let bundle = Bundle::busybox("crash", &["sh", "-c", &script]);
        let opts = bundle.options(rt);
        let _cleanup = Cleanup::new(rt, &bundle);
        // A stand-in daemon in its own process: it spawns the shim, starts the
        // container, prints the socket and waits to be killed.
        let mut daemon = KillOnDrop(
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "stand_in_daemon",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(
                    STAND_IN_ENV,
                    serde_json::to_string(&StandIn::from(&opts)).unwrap(),
                )
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let stdout = daemon.0.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(stdout).lines();
            // libtest prints "test stand_in_daemon ... " before it on the same line.
            lines.find_map(|l| {
                l.ok()
                    .and_then(|l| l.split_once("SHIM ").map(|(_, pid)| pid.trim().to_string()))
            })
        });
        let line = within(60, "the stand-in daemon", line).await.unwrap();
        let shim_pid: u32 = line
            .unwrap_or_else(|| panic!("{rt}: the stand-in daemon failed"))
            .parse()
            .unwrap();
        // The daemon dies the hard way, with a wait in flight.
        daemon.0.kill().unwrap();
        daemon.0.wait().unwrap();
        assert!(
            process_alive(shim_pid),
            "{rt}: the shim died with the daemon"
        );

        let socket = bundle.state_dir().join("shim.sock");
        let client = ShimClient::connect(&socket).await.unwrap();
        assert_eq!(
            (client.id(), client.shim_pid()),
            (bundle.id.as_str(), shim_pid)
        );
        let state = client.state().await.unwrap();
        assert_eq!(state.status, ContainerStatus::Running, "{rt}");
        std::fs::write(bundle.rootfs().join("tmp/go"), b"").unwrap();
        let exit = within(30, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 5, "{rt}");
        assert_eq!(read_exit_file(client.exit_file()).unwrap(), Some(exit));
        delete_and_check_gone(&client).await;
    }
}

/// A child process killed (and reaped) when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const STAND_IN_ENV: &str = "BERTH_SHIM_TEST_STAND_IN";

/// What the stand-in daemon needs (ShimOptions is not serde).
#[derive(serde::Serialize, serde::Deserialize)]
struct StandIn {
    args: Vec<String>,
}

impl From<&berth_shim::ShimOptions> for StandIn {
    fn from(o: &berth_shim::ShimOptions) -> StandIn {
        StandIn {
            args: o
                .to_args()
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect(),
        }
    }
}

/// Not a test on its own: the stand-in daemon of `reconnect_after_client_crash`,
/// run in a child process (does nothing without its environment variable).
/// Ignored, so that no run counts it as a test that passed; hack/test.sh
/// leaves it out of its `--include-ignored` run.
#[tokio::test]
#[ignore = "not a test: reconnect_after_client_crash runs it in a child process"]
async fn stand_in_daemon() {
    let Ok(json) = std::env::var(STAND_IN_ENV) else {
        return;
    };
    let stand_in: StandIn = serde_json::from_str(&json).unwrap();
    let opts =
        berth_shim::ShimOptions::from_args(stand_in.args.into_iter().map(Into::into)).unwrap();
    let client = ShimClient::spawn(&berth_shim::SpawnOptions::new(shim_bin(), opts))
        .await
        .unwrap();
    client.start().await.unwrap();
    // A wait in flight when the daemon dies.
    let waiter = client.clone();
    tokio::spawn(async move { waiter.wait().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("SHIM {}", client.shim_pid());
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn exit_while_no_client_is_connected() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("noclient", &["sh", "-c", "sleep 0.5; echo bye; exit 4"]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        let before = now_ns();
        client.start().await.unwrap();
        let (socket, exit_file, pid) = (
            client.socket().to_path_buf(),
            client.exit_file().to_path_buf(),
            client.pid(),
        );
        drop(client);
        eventually(Duration::from_secs(20), "the exit file", || {
            exit_file.exists()
        })
        .await;
        let exit = read_exit_file(&exit_file).unwrap().unwrap();
        assert_eq!(
            (exit.exit_code, exit.pid, exit.oom_killed),
            (4, pid, false),
            "{rt}"
        );
        assert!(exit.exited_at_ns > before && exit.exited_at_ns <= now_ns());

        let client = ShimClient::connect(&socket).await.unwrap();
        let state = client.state().await.unwrap();
        assert_eq!(
            (state.status, state.exit),
            (ContainerStatus::Stopped, Some(exit)),
            "{rt}"
        );
        assert_eq!(client.wait().await.unwrap(), exit);
        assert!(read_log(&bundle.log_path())
            .iter()
            .any(|r| r.content == "bye"));
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn log_reopen_after_rotation() {
    require_root();
    for rt in RUNTIMES {
        let script = format!(
            "echo one; {}; echo two; {}; echo three",
            wait_for_file("next"),
            wait_for_file("end")
        );
        let bundle = Bundle::busybox("rotate", &["sh", "-c", &script]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        let log = bundle.log_path();
        let rotated = log.with_extension("log.1");
        eventually(Duration::from_secs(10), "one", || {
            read_log(&log).iter().any(|r| r.content == "one")
        })
        .await;
        std::fs::rename(&log, &rotated).unwrap();
        std::fs::write(bundle.rootfs().join("tmp/next"), b"").unwrap();
        // Until the reopen, records go to the moved file.
        eventually(Duration::from_secs(10), "two", || {
            read_log(&rotated).iter().any(|r| r.content == "two")
        })
        .await;
        assert!(!log.exists());
        client.reopen_log().await.unwrap();
        assert!(log.exists());
        std::fs::write(bundle.rootfs().join("tmp/end"), b"").unwrap();
        assert_eq!(
            within(30, "wait", client.wait()).await.unwrap().exit_code,
            0
        );
        let old: Vec<String> = read_log(&rotated).into_iter().map(|r| r.content).collect();
        let new: Vec<String> = read_log(&log).into_iter().map(|r| r.content).collect();
        assert_eq!(
            (old, new),
            (
                vec!["one".to_string(), "two".to_string()],
                vec!["three".to_string()]
            ),
            "{rt}"
        );
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn oom_killed_container() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("oom", &["tail", "/dev/zero"]).with_memory_limit(8 << 20);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        let exit = within(60, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 137, "{rt}: {exit:?}");
        assert!(exit.oom_killed, "{rt}: {exit:?}");
        assert_eq!(read_exit_file(client.exit_file()).unwrap(), Some(exit));
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn pause_runs_as_pid1_and_exits_on_sigterm() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::pause("pause");
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let state = client.state().await.unwrap();
        assert_eq!(state.status, ContainerStatus::Running, "{rt}");
        // It is PID 1 of its namespace.
        let status = std::fs::read_to_string(format!("/proc/{}/status", client.pid())).unwrap();
        let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
        assert!(nspid.trim_end().ends_with("\t1"), "{rt}: {nspid}");
        client.kill(libc::SIGTERM, false).await.unwrap();
        let exit = within(10, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 0, "{rt}");
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn create_failure_is_reported() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("badcreate", &["sh"]);
        let mut opts = bundle.options(rt);
        std::fs::remove_dir_all(bundle.rootfs()).unwrap();
        let _cleanup = Cleanup::new(rt, &bundle);
        opts.runtime_timeout = Duration::from_secs(20);
        let err = ShimClient::spawn(&berth_shim::SpawnOptions::new(shim_bin(), opts))
            .await
            .unwrap_err();
        let remote = err.remote().unwrap_or_else(|| panic!("{rt}: {err}"));
        assert_eq!(
            remote.kind,
            berth_shim::protocol::ErrorKind::Runtime,
            "{rt}: {err}"
        );
        assert!(remote.exit_status.is_some_and(|s| s != 0));
        assert!(
            !remote.stderr.as_deref().unwrap_or("").is_empty(),
            "{rt}: {err}"
        );
        assert!(!bundle.state_dir().join("shim.sock").exists());
    }
}

/// The shim as production builds it: release, glibc linked statically
/// (`cargo rustc --release -p berth-shim --bin berth-shim
/// --no-default-features -- -C target-feature=+crt-static`), into a target
/// dir of its own; or `BERTH_SHIM_RELEASE_BINARY` when set.
fn release_shim() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("BERTH_SHIM_RELEASE_BINARY") {
        return path.into();
    }
    let debug_bin = shim_bin();
    let target_dir = debug_bin
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("static-shim");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "rustc",
            "--release",
            "--bin",
            "berth-shim",
            "--no-default-features",
        ])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .args(["--", "-C", "target-feature=+crt-static"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("running cargo");
    assert!(status.success(), "building the release shim: {status}");
    target_dir.join("release/berth-shim")
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn idle_shim_rss_under_2mib() {
    require_root();
    let release = tokio::task::spawn_blocking(release_shim).await.unwrap();
    for rt in RUNTIMES {
        let mut measured = Vec::new();
        for binary in [release.clone(), shim_bin()] {
            let bundle = Bundle::busybox("rss", &["sleep", "1000"]);
            let (client, _cleanup) = spawn_with(&binary, rt, &bundle, |_| {}).await;
            client.start().await.unwrap();
            // Idle after some work: a state and an exec.
            client.state().await.unwrap();
            let out = client
                .exec_sync(&process(&["echo", "hi"]), Some(Duration::from_secs(10)))
                .await
                .unwrap();
            assert_eq!(out.stdout, b"hi\n");
            tokio::time::sleep(Duration::from_millis(500)).await;
            measured.push(rss_kib(client.shim_pid()));
            client.kill(libc::SIGKILL, false).await.unwrap();
            within(30, "wait", client.wait()).await.unwrap();
            delete_and_check_gone(&client).await;
        }
        eprintln!(
            "{rt}: idle shim VmRSS: release (static) {} KiB, debug {} KiB",
            measured[0], measured[1]
        );
        assert!(
            measured[0] < 2048,
            "{rt}: idle release shim uses {} KiB",
            measured[0]
        );
    }
}

/// The children of `pid`: (pid, state).
fn children(pid: u32) -> Vec<(u32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let mut fields = rest.split(' ');
        let (state, ppid) = (fields.next(), fields.next());
        if ppid == Some(pid.to_string().as_str()) {
            found.push((child, state.and_then(|s| s.chars().next()).unwrap_or('?')));
        }
    }
    found
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn orphans_are_reaped() {
    require_root();
    for rt in RUNTIMES {
        // In the host PID namespace, orphans of the container go to the
        // nearest subreaper: the shim.
        let script = "for i in 1 2 3 4 5; do (sleep 2 &); done; echo forked; exec sleep 1000";
        let mut bundle = Bundle::busybox("orphans", &["sh", "-c", script]);
        let mut linux = bundle.spec.linux().clone().unwrap();
        let namespaces = linux.namespaces().clone().unwrap_or_default();
        linux.set_namespaces(Some(
            namespaces
                .into_iter()
                .filter(|n| n.typ() != oci_spec::runtime::LinuxNamespaceType::Pid)
                .collect(),
        ));
        bundle.spec.set_linux(Some(linux));
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();
        let log = bundle.log_path();
        eventually(Duration::from_secs(10), "forked", || {
            read_log(&log).iter().any(|r| r.content == "forked")
        })
        .await;
        // An exec'd process that leaves an orphan behind, too.
        let out = client
            .exec_sync(
                &process(&["sh", "-c", "(sleep 2 >/dev/null 2>&1 &); echo ok"]),
                Some(Duration::from_secs(10)),
            )
            .await
            .unwrap();
        assert_eq!(out.stdout, b"ok\n", "{rt}");
        // The init and the six orphans are the shim's children now…
        let kids = children(client.shim_pid());
        assert!(kids.len() >= 7, "{rt}: {kids:?}");
        // …and once they exit, none stays a zombie.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let kids = children(client.shim_pid());
        assert_eq!(kids, vec![(client.pid(), 'S')], "{rt}");
        // The orphans' exits were not taken for the container's.
        let state = client.state().await.unwrap();
        assert_eq!(
            (state.status, state.exit),
            (ContainerStatus::Running, None),
            "{rt}"
        );
        client.kill(libc::SIGKILL, false).await.unwrap();
        assert_eq!(
            within(30, "wait", client.wait()).await.unwrap().exit_code,
            137
        );
        delete_and_check_gone(&client).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn delete_of_a_created_container() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("delcreated", &["sleep", "1000"]);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        let pid = client.pid();
        assert!(process_alive(pid));
        within(30, "delete", client.delete(true)).await.unwrap();
        eventually(Duration::from_secs(10), "the shim to exit", || {
            !process_alive(client.shim_pid())
        })
        .await;
        assert!(!process_alive(pid), "{rt}: init survived the delete");
        let exit = read_exit_file(client.exit_file())
            .unwrap()
            .expect("exit file");
        assert_eq!(exit.exit_code, 137, "{rt}");
        // The shim is gone: calls say so.
        let err = client.state().await.unwrap_err();
        assert!(err.is_shim_gone(), "{rt}: {err}");
    }
}

#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn update_pause_and_resume() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("update", &["sleep", "1000"]).with_memory_limit(64 << 20);
        let (client, _cleanup) = spawn(rt, &bundle).await;
        client.start().await.unwrap();

        let memory = oci_spec::runtime::LinuxMemoryBuilder::default()
            .limit(32i64 << 20)
            .swap(32i64 << 20)
            .build()
            .unwrap();
        let resources = oci_spec::runtime::LinuxResourcesBuilder::default()
            .memory(memory)
            .build()
            .unwrap();
        within(30, "update", client.update(&resources))
            .await
            .unwrap();
        let limit = memory_limit(client.pid()).expect("memory cgroup of the container");
        assert_eq!(limit, 32 << 20, "{rt}");

        within(30, "pause", client.pause()).await.unwrap();
        assert_eq!(
            client.state().await.unwrap().status,
            ContainerStatus::Paused,
            "{rt}"
        );
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", client.pid())).unwrap();
        let state = stat.rsplit_once(") ").unwrap().1.chars().next().unwrap();
        assert!(matches!(state, 'D' | 'T' | 't' | 'S'), "{rt}: {state}");
        within(30, "resume", client.resume()).await.unwrap();
        assert_eq!(
            client.state().await.unwrap().status,
            ContainerStatus::Running,
            "{rt}"
        );

        client.kill(libc::SIGKILL, false).await.unwrap();
        within(30, "wait", client.wait()).await.unwrap();
        delete_and_check_gone(&client).await;
    }
}

/// The memory limit of the cgroup `pid` is in (v1 or v2).
fn memory_limit(pid: u32) -> Option<u64> {
    cgroup_file(pid, "memory", "memory.limit_in_bytes")
        .or_else(|| cgroup_file(pid, "", "memory.max"))?
        .parse()
        .ok()
}

/// The trimmed content of `file` in the cgroup of `pid` for v1 `controller`
/// (`""`: the v2 hierarchy at /sys/fs/cgroup).
fn cgroup_file(pid: u32, controller: &str, file: &str) -> Option<String> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let dir = match controller {
            "" if controllers.is_empty() => format!("/sys/fs/cgroup{path}"),
            c if !c.is_empty() && controllers.split(',').any(|x| x == c) => {
                format!("/sys/fs/cgroup/{c}{path}")
            }
            _ => return None,
        };
        let text = std::fs::read_to_string(format!("{dir}/{file}")).ok()?;
        Some(text.trim().to_string())
    })
}

/// `run_detached`: one runtime exec; the container runs before Start is
/// asked, and the first Start reports it. A process that exits (or is
/// OOM-killed) at once is still recorded whole: output, exit code, OOM.
#[tokio::test]
#[ignore = "needs root, runc and crun: hack/test.sh runs it (--include-ignored)"]
async fn run_detached_starts_at_once_and_records_fast_exits() {
    require_root();
    for rt in RUNTIMES {
        let bundle = Bundle::busybox("rund", &["sh", "-c", "echo fast; exit 7"]);
        let before = now_ns();
        let (client, _cleanup) =
            spawn_with(&shim_bin(), rt, &bundle, |o| o.run_detached = true).await;
        let exit = within(30, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 7, "{rt}: {exit:?}");
        // Started when the runtime was told to run it, before it exited.
        let started = client.state().await.unwrap().started_at_ns;
        assert!(
            started.is_some_and(|t| t >= before && t <= exit.exited_at_ns),
            "{rt}: started at {started:?}, spawned at {before}, exited at {}",
            exit.exited_at_ns
        );
        // Exited before Start was asked: Start still reports the start,
        // once, without a round trip to the shim (its socket moved away).
        let aside = client.socket().with_extension("aside");
        std::fs::rename(client.socket(), &aside).unwrap();
        assert_eq!(client.start().await.unwrap(), client.pid(), "{rt}");
        assert!(client.start().await.is_err(), "{rt}: a second Start");
        std::fs::rename(&aside, client.socket()).unwrap();
        let records = read_log(&bundle.log_path());
        assert!(
            records
                .iter()
                .any(|r| r.stream == "stdout" && r.content == "fast"),
            "{rt}: {records:?}"
        );
        delete_and_check_gone(&client).await;

        let bundle = Bundle::busybox("rundoom", &["tail", "/dev/zero"]).with_memory_limit(8 << 20);
        let (client, _cleanup) =
            spawn_with(&shim_bin(), rt, &bundle, |o| o.run_detached = true).await;
        // Running, or already killed by the OOM killer on a busy machine.
        let status = client.state().await.unwrap().status;
        assert!(
            matches!(status, ContainerStatus::Running | ContainerStatus::Stopped),
            "{rt}: {status:?}"
        );
        client.start().await.unwrap();
        let exit = within(60, "wait", client.wait()).await.unwrap();
        assert_eq!(exit.exit_code, 137, "{rt}: {exit:?}");
        assert!(exit.oom_killed, "{rt}: {exit:?}");
        delete_and_check_gone(&client).await;
    }
}
