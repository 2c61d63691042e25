//! kubelet's streaming through the apiserver on berth, as a user drives it
//! with kubectl: exec (with and without stdin, with a terminal), attach,
//! logs (follow, previous, timestamps, since, tail), port-forward, cp and
//! ephemeral debug containers. Each asserts what the user gets back. Needs
//! the node of `hack/kube.sh up` (hack/test.sh stands it up and runs these).

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_kube_tests::images::{AGNHOST, BUSYBOX, NONROOT};
use berth_kube_tests::{container, restarts, rfc3339, share, summary, wait_until, Namespace};
use serde_json::Value;

const DEBUG_IMAGE: &str = "docker.io/library/busybox:1.37";

/// The longest any one kubectl call of these tests may take.
const CALL_LIMIT: &str = "120";

/// What a command run to its end gave: its exit code (128 + the signal
/// that killed it), stdout and stderr.
struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

impl Ran {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}, stdout {:?}, stderr {:?}",
            self.code,
            self.out(),
            self.stderr
        )
    }
}

fn code_of(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// `kubectl -n NS args`, with `input` on its stdin (else none), bounded by
/// [`CALL_LIMIT`]: whatever it exits with.
fn kubectl_full(ns: &Namespace, args: &[&str], input: Option<&[u8]>) -> Ran {
    let mut child = Command::new("timeout")
        .args(["-k5", CALL_LIMIT, "kubectl", "-n", &ns.name])
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kubectl");
    // Written from a thread of its own: kubectl may answer before it has
    // read all of a large input.
    let writer = input.map(|data| {
        let data = data.to_vec();
        let mut stdin = child.stdin.take().expect("piped stdin");
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        })
    });
    let out = child.wait_with_output().expect("kubectl's output");
    if let Some(w) = writer {
        let _ = w.join();
    }
    Ran {
        code: code_of(out.status),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Quotes `s` for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A long-running child (kubectl port-forward, logs -f, attach, or kubectl
/// under `script` for a terminal), bounded by coreutils' `timeout` and in a
/// process group of its own. Its stdout and stderr are collected as they
/// come. Dropped, its whole group is killed and it is waited for.
struct Background {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// Copies `from` into `to` until its end, from a thread.
fn collect(mut from: impl Read + Send + 'static, to: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => to.lock().unwrap().extend_from_slice(&buf[..n]),
            }
        }
    })
}

impl Background {
    /// Starts `program args`.
    fn spawn(program: &str, args: &[&str]) -> Background {
        let what = format!("{program} {}", args.join(" "));
        let mut child = Command::new("timeout")
            .args(["-k5", CALL_LIMIT, program])
            .args(args)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), stdout.clone()),
            collect(child.stderr.take().unwrap(), stderr.clone()),
        ];
        Background {
            what,
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
            readers,
            status: None,
        }
    }

    /// `kubectl -n NS args`.
    fn kubectl(ns: &Namespace, args: &[&str]) -> Background {
        let mut all = vec!["-n", ns.name.as_str()];
        all.extend_from_slice(args);
        Background::spawn("kubectl", &all)
    }

    /// `kubectl -n NS args` on a terminal of `rows`×`cols` (util-linux's
    /// `script`, exiting with kubectl's code), after `setup`, a shell
    /// command run on that terminal first.
    fn kubectl_on_a_tty(
        ns: &Namespace,
        rows: u16,
        cols: u16,
        setup: &str,
        args: &[&str],
    ) -> Background {
        let mut cmd = format!(
            "stty rows {rows} cols {cols}; {setup} exec kubectl -n {}",
            ns.name
        );
        for a in args {
            cmd.push(' ');
            cmd.push_str(&sh_quote(a));
        }
        let mut b = Background::spawn(
            "env",
            &["SHELL=/bin/sh", "script", "-qec", &cmd, "/dev/null"],
        );
        b.what = format!("kubectl {} (on a terminal)", args.join(" "));
        b
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// What a terminal shows of its stdout: without carriage returns.
    fn screen(&self) -> String {
        self.stdout().replace('\r', "")
    }

    /// Waits until its stdout holds of `probe` and gives it then.
    fn wait_stdout(&self, secs: u64, what: &str, probe: impl Fn(&str) -> bool) -> String {
        wait_until(secs, &format!("{}: {what}", self.what), |seen| {
            let out = self.stdout();
            *seen = format!("stdout {out:?}, stderr {:?}", self.stderr());
            probe(&out).then_some(out)
        })
        .unwrap()
    }

    /// Waits until its stderr holds of `probe`.
    fn wait_stderr(&self, secs: u64, what: &str, probe: impl Fn(&str) -> bool) -> String {
        wait_until(secs, &format!("{}: {what}", self.what), |seen| {
            let err = self.stderr();
            *seen = format!("stdout {:?}, stderr {err:?}", self.stdout());
            probe(&err).then_some(err)
        })
        .unwrap()
    }

    /// Writes `data` to its stdin.
    fn send(&mut self, data: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(data.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Sends it `signal` (`timeout` passes it on to the program).
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let st = Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .unwrap();
        assert!(st.success(), "kill -s {signal} {pid}");
    }

    /// Its exit code once it has exited by itself, within `secs`.
    fn wait_exit(&mut self, secs: u64) -> i32 {
        let what = format!("{} exits", self.what);
        let status = wait_until(secs, &what, |seen| {
            *seen = format!("stdout {:?}, stderr {:?}", self.stdout(), self.stderr());
            self.child.try_wait().unwrap()
        })
        .unwrap();
        self.status = Some(status);
        // Its output is complete once the pipes' readers are done: when
        // the program, and all that held the pipes, is gone.
        wait_until(10, &format!("{}: the end of its output", self.what), |_| {
            self.readers.iter().all(|r| r.is_finished()).then_some(())
        })
        .unwrap();
        code_of(status)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.status.is_none() {
            // Its process group (`timeout` and the program), then it.
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &group])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A pod `name` of one busybox container `c` running `script` under
/// `sh -c`, with `extra` YAML appended to the container (indented four
/// spaces) and `pod_extra` to the pod's spec (indented two).
fn busybox_pod(name: &str, script: &str, extra: &str, pod_extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
{pod_extra}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {script:?}]
{extra}
"#
    )
}

/// Starts pod `name` running `script` and waits until it is Ready.
fn ready_pod(ns: &Namespace, name: &str, script: &str, extra: &str, pod_extra: &str) -> Value {
    ns.apply(&busybox_pod(name, script, extra, pod_extra))
        .unwrap();
    ns.wait_ready(name, 120).unwrap()
}

/// Now, in seconds since the epoch.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Lines of `kubectl logs --timestamps`: each one's time and text.
fn stamped(text: &str) -> Vec<(f64, String)> {
    text.lines()
        .map(|l| {
            let (ts, rest) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("no timestamp on {l:?}"));
            let t = rfc3339(ts).unwrap_or_else(|| panic!("not RFC 3339: {ts:?} in {l:?}"));
            (t, rest.to_string())
        })
        .collect()
}

/// A scratch directory on the host, empty at first, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// The one of test `name`.
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("berth-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------- exec

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn exec_gives_stdout_stderr_and_the_exit_code() {
    let _g = share();
    let ns = Namespace::new("stream-exec");
    ready_pod(&ns, "p", "sleep 3600", "", "");

    let ran = kubectl_full(
        &ns,
        &[
            "exec",
            "p",
            "-c",
            "c",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
        None,
    );
    assert_eq!(ran.code, 7, "{ran:?}");
    assert_eq!(ran.out(), "out\n", "{ran:?}");
    assert!(ran.stderr.starts_with("err\n"), "{ran:?}");
    assert!(
        ran.stderr.contains("command terminated with exit code 7"),
        "{ran:?}"
    );

    let ran = kubectl_full(&ns, &["exec", "p", "--", "sh", "-c", "echo fine"], None);
    assert_eq!((ran.code, ran.out().as_str()), (0, "fine\n"), "{ran:?}");

    // A process killed by a signal: 128 + its number, as a shell says.
    let ran = kubectl_full(&ns, &["exec", "p", "--", "sh", "-c", "kill -9 $$"], None);
    assert_eq!(ran.code, 137, "{ran:?}");

    // A command the container does not have: kubectl fails and says why.
    let ran = kubectl_full(&ns, &["exec", "p", "--", "no-such-command"], None);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr.contains("no-such-command") && ran.stderr.contains("not found"),
        "{ran:?}"
    );

    // A container that is not there.
    let ran = kubectl_full(&ns, &["exec", "p", "-c", "nope", "--", "true"], None);
    assert_ne!(ran.code, 0, "{ran:?}");
    assert!(ran.stderr.contains("nope"), "{ran:?}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn exec_runs_as_the_containers_user_in_its_environment() {
    let _g = share();
    let ns = Namespace::new("stream-exec-user");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {NONROOT}
    command: ["sleep", "3600"]
    workingDir: /tmp
    env: [{{name: GREETING, value: from-the-pod-spec}}]
"#
    ))
    .unwrap();
    ns.wait_ready("p", 120).unwrap();
    let ran = kubectl_full(
        &ns,
        &["exec", "p", "--", "sh", "-c", "id -u; pwd; echo $GREETING"],
        None,
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(ran.out(), "1234\n/tmp\nfrom-the-pod-spec\n", "{ran:?}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn exec_with_stdin_reads_what_is_piped_in() {
    let _g = share();
    let ns = Namespace::new("stream-exec-stdin");
    ready_pod(&ns, "p", "sleep 3600", "", "");

    let ran = kubectl_full(
        &ns,
        &[
            "exec",
            "-i",
            "p",
            "--",
            "sh",
            "-c",
            "cat; echo read-to-the-end",
        ],
        Some(b"hello\nworld\n"),
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(ran.out(), "hello\nworld\nread-to-the-end\n", "{ran:?}");

    // A larger input (more than any one frame or window), every byte value,
    // through the pod and back unchanged; the pod counts it too.
    let data: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let ran = kubectl_full(&ns, &["exec", "-i", "p", "--", "cat"], Some(&data));
    assert_eq!(ran.code, 0, "stderr {}", ran.stderr);
    assert!(
        ran.stdout == data,
        "{} bytes back of {}",
        ran.stdout.len(),
        data.len()
    );
    let ran = kubectl_full(&ns, &["exec", "-i", "p", "--", "wc", "-c"], Some(&data));
    assert_eq!(ran.out().trim(), data.len().to_string(), "{ran:?}");

    // The end of stdin is the end of the command's input, not of the
    // command: it runs on and its exit code comes back.
    let ran = kubectl_full(
        &ns,
        &[
            "exec",
            "-i",
            "p",
            "--",
            "sh",
            "-c",
            "read l; sleep 0.5; echo got:$l; exit 3",
        ],
        Some(b"line\n"),
    );
    assert_eq!((ran.code, ran.out().as_str()), (3, "got:line\n"), "{ran:?}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn exec_with_a_tty_follows_the_terminal() {
    let _g = share();
    let ns = Namespace::new("stream-exec-tty");
    ready_pod(&ns, "p", "sleep 3600", "", "");
    let dir = Scratch::new(&ns.name);
    let go = dir.join("resize");
    // In the pod: the terminal's name, the size it gets, the size after
    // the user's terminal changes, a line read from the terminal, then an
    // exit code. The first size is waited for: kubectl sends it on the
    // resize stream, which the runtime applies once the process has
    // started (containerd 2.4 too), so a process that asks at once may
    // still find 0×0.
    let script = "tty; \
        i=0; until [ \"$(stty size 2>/dev/null)\" = '33 101' ] || [ $i -gt 100 ]; do sleep 0.05; i=$((i+1)); done; \
        echo size1 $(stty size); \
        i=0; until [ \"$(stty size 2>/dev/null)\" = '50 140' ] || [ $i -gt 200 ]; do sleep 0.05; i=$((i+1)); done; \
        echo size2 $(stty size); \
        read l; echo read:$l; exit 3";
    // On the user's side, the terminal changes size once the test says so.
    let resizer = format!(
        "(i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; stty rows 50 cols 140 </dev/tty) &",
        go = sh_quote(go.to_str().unwrap())
    );
    let mut k = Background::kubectl_on_a_tty(
        &ns,
        33,
        101,
        &resizer,
        &["exec", "-it", "p", "--", "sh", "-c", script],
    );
    k.wait_stdout(30, "the size of the terminal", |o| o.contains("size1"));
    let screen = k.screen();
    let tty = screen.lines().next().unwrap_or_default();
    assert!(
        tty.trim_start_matches('\0').starts_with("/dev/pts/"),
        "{screen:?}"
    );
    assert!(screen.contains("size1 33 101\n"), "{screen:?}");
    std::fs::write(&go, "").unwrap();
    k.wait_stdout(30, "the new size of the terminal", |o| o.contains("size2"));
    assert!(k.screen().contains("size2 50 140\n"), "{:?}", k.screen());
    k.send("typed\n");
    let code = k.wait_exit(30);
    let screen = k.screen();
    // The terminal echoes what was typed; the shell read it.
    assert!(screen.contains("typed\nread:typed\n"), "{screen:?}");
    assert_eq!(code, 3, "{screen:?}");
}

// ---------------------------------------------------------------- attach

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn attach_with_a_tty_reads_input_on_the_containers_terminal() {
    let _g = share();
    let ns = Namespace::new("stream-attach-tty");
    ready_pod(
        &ns,
        "p",
        "tty; while read l; do [ \"$l\" = quit ] && exit 0; echo \"got:$l size:$(stty size)\"; done",
        "    stdin: true\n    tty: true",
        "  restartPolicy: Never",
    );
    let mut k = Background::kubectl_on_a_tty(&ns, 40, 120, "", &["attach", "-it", "p", "-c", "c"]);
    k.send("one\n");
    k.wait_stdout(30, "the answer to one", |o| o.contains("got:one"));
    // The terminal has the user's size by the second line for sure.
    k.send("two\n");
    k.wait_stdout(30, "the answer to two", |o| o.contains("got:two"));
    assert!(
        k.screen().contains("got:two size:40 120\n"),
        "{:?}",
        k.screen()
    );
    // The container ends: so does the attach.
    k.send("quit\n");
    let code = k.wait_exit(30);
    assert_eq!(code, 0, "{:?}", k.screen());
    let pod = ns
        .wait_pod("p", 60, "Succeeded", |p| {
            p["status"]["phase"] == "Succeeded"
        })
        .unwrap();
    assert_eq!(restarts(&pod, "c"), 0, "{}", summary(&pod));
    // Its log has what its terminal showed, first its name.
    let log = ns.kubectl(&["logs", "p"]).unwrap().replace('\r', "");
    assert!(log.starts_with("/dev/pts/"), "{log:?}");
    assert!(
        log.contains("got:one size:") && log.contains("got:two size:40 120"),
        "{log:?}"
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn attach_with_stdin_to_a_stdin_once_container_gets_its_answer() {
    let _g = share();
    let ns = Namespace::new("stream-attach-once");
    ready_pod(
        &ns,
        "p",
        "wc -l; echo stdin-ended",
        "    stdin: true\n    stdinOnce: true",
        "  restartPolicy: Never",
    );
    // `printf 'a\nb\nc\n' | kubectl attach -i p`: the container reads to
    // the end of the attach's stdin, then answers and exits; the user sees
    // the answer (as `echo … | kubectl run -i --rm … -- wc -l` relies on).
    let ran = kubectl_full(&ns, &["attach", "-i", "p", "-c", "c"], Some(b"a\nb\nc\n"));
    let pod = ns
        .wait_pod("p", 60, "Succeeded", |p| {
            p["status"]["phase"] == "Succeeded"
        })
        .unwrap();
    let t = &container(&pod, "c").unwrap()["state"]["terminated"];
    assert_eq!(t["exitCode"], 0, "{t}");
    assert_eq!(ns.kubectl(&["logs", "p"]).unwrap(), "3\nstdin-ended\n");
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(ran.out(), "3\nstdin-ended\n", "kubectl attach: {ran:?}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn attach_without_stdin_shows_a_running_containers_output() {
    let _g = share();
    let ns = Namespace::new("stream-attach-out");
    ready_pod(
        &ns,
        "p",
        "while true; do echo tick; sleep 0.3; done",
        "",
        "",
    );
    let k = Background::kubectl(&ns, &["attach", "p", "-c", "c"]);
    // Attached once its output flows; then what the container writes
    // comes out on the same stream kubectl's user sees it on.
    k.wait_stdout(30, "the container's ticks", |o| o.contains("tick\n"));
    ns.exec("p", "c", &["sh", "-c", "echo to-stdout > /proc/1/fd/1"])
        .unwrap();
    ns.exec("p", "c", &["sh", "-c", "echo to-stderr > /proc/1/fd/2"])
        .unwrap();
    k.wait_stdout(30, "what was written to stdout", |o| {
        o.contains("to-stdout\n")
    });
    k.wait_stderr(30, "what was written to stderr", |e| {
        e.contains("to-stderr\n")
    });
    assert!(!k.stdout().contains("to-stderr"), "{:?}", k.stdout());
    assert!(!k.stderr().contains("to-stdout"), "{:?}", k.stderr());
    drop(k);
    // The attach's end is not the container's.
    let pod = ns.pod("p").unwrap();
    assert!(
        container(&pod, "c").unwrap()["state"]["running"].is_object(),
        "{}",
        summary(&pod)
    );
    assert_eq!(restarts(&pod, "c"), 0);
}

// ---------------------------------------------------------------- logs

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn logs_follow_sees_new_lines_and_ends_with_the_container() {
    let _g = share();
    let ns = Namespace::new("stream-logs-follow");
    ready_pod(
        &ns,
        "p",
        "echo first; while [ ! -f /tmp/stop ]; do sleep 0.1; done; echo last",
        "",
        "  restartPolicy: Never",
    );
    let mut k = Background::kubectl(&ns, &["logs", "-f", "p"]);
    k.wait_stdout(30, "the first line", |o| o.contains("first\n"));
    // A line written after the follow started.
    ns.exec("p", "c", &["sh", "-c", "echo second > /proc/1/fd/1"])
        .unwrap();
    k.wait_stdout(30, "the line written later", |o| o.contains("second\n"));
    // The container exits: the follow ends by itself, with all of it.
    ns.exec("p", "c", &["touch", "/tmp/stop"]).unwrap();
    let code = k.wait_exit(30);
    assert_eq!(code, 0, "stderr {:?}", k.stderr());
    assert_eq!(k.stdout(), "first\nsecond\nlast\n");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn logs_previous_shows_the_run_before_a_restart() {
    let _g = share();
    let ns = Namespace::new("stream-logs-previous");
    let extra = "    volumeMounts: [{name: d, mountPath: /d}]";
    let pod_extra = "  volumes: [{name: d, emptyDir: {}}]";
    ns.apply(&busybox_pod(
        "p",
        "if [ -f /d/ran ]; then echo second-run; exec sleep 3600; fi; touch /d/ran; echo first-run; exit 1",
        extra,
        pod_extra,
    ))
    .unwrap();
    let pod = ns
        .wait_pod("p", 120, "restarted and running", |p| {
            restarts(p, "c") == 1
                && container(p, "c").is_some_and(|c| c["state"]["running"].is_object())
        })
        .unwrap();
    let last = &container(&pod, "c").unwrap()["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 1, "{last}");
    let now = wait_until(30, "the second run's log", |seen| {
        let l = ns.kubectl(&["logs", "p"]).ok()?;
        *seen = l.clone();
        (!l.is_empty()).then_some(l)
    })
    .unwrap();
    assert_eq!(now, "second-run\n");
    assert_eq!(
        ns.kubectl(&["logs", "p", "--previous"]).unwrap(),
        "first-run\n"
    );
    assert_eq!(
        ns.kubectl(&["logs", "p", "-p", "--timestamps"])
            .unwrap()
            .split_once(' ')
            .map(|(_, l)| l.to_string()),
        Some("first-run\n".to_string())
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn logs_tail_and_timestamps() {
    let _g = share();
    let ns = Namespace::new("stream-logs-tail");
    let pod = ready_pod(
        &ns,
        "p",
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i; done; sleep 3600",
        "",
        "",
    );
    let all: String = (1..=10).map(|i| format!("line{i}\n")).collect();
    wait_until(30, "all ten lines", |seen| {
        let l = ns.kubectl(&["logs", "p"]).ok()?;
        *seen = l.clone();
        (l == all).then_some(())
    })
    .unwrap();
    assert_eq!(
        ns.kubectl(&["logs", "p", "--tail=3"]).unwrap(),
        "line8\nline9\nline10\n"
    );
    assert_eq!(ns.kubectl(&["logs", "p", "--tail=1"]).unwrap(), "line10\n");
    assert_eq!(ns.kubectl(&["logs", "p", "--tail=0"]).unwrap(), "");
    assert_eq!(ns.kubectl(&["logs", "p", "--tail=-1"]).unwrap(), all);
    assert_eq!(ns.kubectl(&["logs", "p", "--tail=50"]).unwrap(), all);

    // Each line behind the time it was written, in order, while the
    // container ran.
    let started = container(&pod, "c").unwrap()["state"]["running"]["startedAt"]
        .as_str()
        .and_then(rfc3339)
        .unwrap();
    let lines = stamped(&ns.kubectl(&["logs", "p", "--timestamps"]).unwrap());
    let texts: Vec<_> = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    assert_eq!(texts.concat(), all);
    let end = now();
    for w in lines.windows(2) {
        assert!(w[0].0 <= w[1].0, "out of order: {lines:?}");
    }
    for (t, l) in &lines {
        // startedAt is in whole seconds.
        assert!(
            *t >= started - 1.0 && *t <= end + 1.0,
            "{l} at {t}: started {started}, now {end}"
        );
    }
    let tail = stamped(
        &ns.kubectl(&["logs", "p", "--timestamps", "--tail=2"])
            .unwrap(),
    );
    assert_eq!(tail, lines[8..].to_vec());

    // No earlier run: nothing for --previous.
    let ran = kubectl_full(&ns, &["logs", "p", "--previous"], None);
    assert_ne!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stderr.contains("previous terminated container"),
        "{ran:?}"
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn logs_since_leaves_out_older_lines() {
    let _g = share();
    let ns = Namespace::new("stream-logs-since");
    ready_pod(
        &ns,
        "p",
        "echo old-1; echo old-2; while [ ! -f /tmp/go ]; do sleep 0.1; done; echo new-1; echo new-2; sleep 3600",
        "",
        "",
    );
    let old = wait_until(30, "the old lines", |seen| {
        let l = ns.kubectl(&["logs", "p", "--timestamps"]).ok()?;
        *seen = l.clone();
        let l = stamped(&l);
        (l.len() == 2).then_some(l)
    })
    .unwrap();
    let old_at = old[1].0;
    // The old lines far enough in the past, by the clock kubelet reads too.
    wait_until(30, "4 s after the old lines", |seen| {
        *seen = format!("{:.1} s after", now() - old_at);
        (now() - old_at > 4.0).then_some(())
    })
    .unwrap();
    ns.exec("p", "c", &["touch", "/tmp/go"]).unwrap();
    let lines = wait_until(30, "the new lines", |seen| {
        let l = ns.kubectl(&["logs", "p", "--timestamps"]).ok()?;
        *seen = l.clone();
        let l = stamped(&l);
        (l.len() == 4).then_some(l)
    })
    .unwrap();
    let new_at = lines[2].0;
    assert!(new_at - old_at > 4.0, "{lines:?}");

    // Relative: the last 3 s hold the new lines only (they are a moment
    // old, the old ones more than 4 s).
    let since = ns.kubectl(&["logs", "p", "--since=3s"]).unwrap();
    assert!(now() - new_at < 3.0, "the new lines got old before --since");
    assert_eq!(since, "new-1\nnew-2\n");
    assert_eq!(
        ns.kubectl(&["logs", "p", "--since=1h"]).unwrap(),
        "old-1\nold-2\nnew-1\nnew-2\n"
    );
    // Absolute: a time between the old and the new lines.
    let between = old_at + 2.0;
    let secs = between.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let stamp = civil(days, rem);
    assert!(rfc3339(&stamp).is_some_and(|t| (t - between.floor()).abs() < 0.001));
    assert_eq!(
        ns.kubectl(&["logs", "p", &format!("--since-time={stamp}")])
            .unwrap(),
        "new-1\nnew-2\n"
    );
    assert_eq!(
        ns.kubectl(&["logs", "p", "--since=1h", "--tail=1"])
            .unwrap(),
        "new-2\n"
    );
}

/// RFC 3339 (UTC) of `days` since the epoch and `secs` into that day.
fn civil(days: i64, secs: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

// ---------------------------------------------------------------- port-forward

/// `GET path` over HTTP/1.0 on 127.0.0.1:`port`: the status line and body.
fn http_get(port: u16, path: &str) -> std::io::Result<(String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default().to_string();
    Ok((status, body.to_string()))
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn port_forward_reaches_the_pods_port_until_stopped() {
    let _g = share();
    let ns = Namespace::new("stream-port-forward");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {AGNHOST}
    args: ["netexec", "--http-port=8080"]
    readinessProbe: {{httpGet: {{port: 8080, path: /healthz}}, periodSeconds: 1}}
"#
    ))
    .unwrap();
    ns.wait_ready("web", 120).unwrap();
    // A local port of kubectl's choice.
    let mut k = Background::kubectl(&ns, &["port-forward", "pod/web", ":8080"]);
    let out = k.wait_stdout(30, "forwarding", |o| {
        o.contains("Forwarding from 127.0.0.1:")
    });
    let port: u16 = out
        .split("Forwarding from 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {out:?}"));
    // netexec's answers, through the tunnel: several connections, one
    // after the other and at once.
    let (status, body) = http_get(port, "/hostname").unwrap();
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, "web");
    let (_, body) = http_get(port, "/echo?msg=through-the-tunnel").unwrap();
    assert_eq!(body, "through-the-tunnel");
    let at_once: Vec<_> = (0..4)
        .map(|i| std::thread::spawn(move || http_get(port, &format!("/echo?msg=conn{i}"))))
        .collect();
    for (i, t) in at_once.into_iter().enumerate() {
        let (_, body) = t.join().unwrap().unwrap();
        assert_eq!(body, format!("conn{i}"));
    }
    // Stopped as a user does (^C): kubectl ends at once, cleanly, and the
    // local port is closed.
    k.signal("INT");
    let code = k.wait_exit(10);
    assert_eq!(code, 0, "stderr {:?}", k.stderr());
    assert!(!k.stderr().contains("error"), "{:?}", k.stderr());
    let refused = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(refused.is_err(), "port {port} still open after the stop");
    let pod = ns.pod("web").unwrap();
    assert_eq!(restarts(&pod, "c"), 0, "{}", summary(&pod));
}

// ---------------------------------------------------------------- cp

/// Every file under `dir`: its path relative to `dir` and its content
/// (directories as `None`), sorted.
fn tree(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
            if p.is_dir() {
                all.push((rel, None));
                todo.push(p);
            } else {
                all.push((rel, Some(std::fs::read(&p).unwrap())));
            }
        }
    }
    all.sort();
    all
}

/// `md5sum` of a host file: its hex digest.
fn md5(path: &Path) -> String {
    let out = Command::new("md5sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn cp_copies_files_and_directories_both_ways() {
    let _g = share();
    let ns = Namespace::new("stream-cp");
    ready_pod(&ns, "p", "sleep 3600", "", "");
    let dir = Scratch::new(&ns.name);

    // A file of every byte value, to the pod and back.
    let data: Vec<u8> = (0..700_001u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    let file = dir.join("data.bin");
    std::fs::write(&file, &data).unwrap();
    let ran = kubectl_full(
        &ns,
        &["cp", file.to_str().unwrap(), "p:/tmp/data.bin"],
        None,
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    let there = ns.exec("p", "c", &["md5sum", "/tmp/data.bin"]).unwrap();
    assert_eq!(there.split(' ').next().unwrap(), md5(&file), "{there}");
    assert_eq!(
        ns.exec("p", "c", &["stat", "-c", "%s", "/tmp/data.bin"])
            .unwrap()
            .trim(),
        data.len().to_string()
    );
    let back = dir.join("back.bin");
    let ran = kubectl_full(
        &ns,
        &["cp", "p:/tmp/data.bin", back.to_str().unwrap()],
        None,
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the file came back changed"
    );

    // A file made in the pod, to the host.
    ns.exec(
        "p",
        "c",
        &["sh", "-c", "printf 'made\\nin the pod\\n' > /tmp/made"],
    )
    .unwrap();
    let made = dir.join("made");
    let ran = kubectl_full(&ns, &["cp", "p:/tmp/made", made.to_str().unwrap()], None);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(
        std::fs::read_to_string(&made).unwrap(),
        "made\nin the pod\n"
    );

    // A directory, nested, with an empty file and a name with a space.
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(src.join("with space.txt"), "spaced\n").unwrap();
    std::fs::write(src.join("sub/b.bin"), &data[..4099]).unwrap();
    std::fs::write(src.join("sub/deeper/empty"), "").unwrap();
    let ran = kubectl_full(&ns, &["cp", src.to_str().unwrap(), "p:/tmp/tree"], None);
    assert_eq!(ran.code, 0, "{ran:?}");
    let listed = ns
        .exec("p", "c", &["sh", "-c", "cd /tmp/tree && find . | sort"])
        .unwrap();
    assert_eq!(
        listed,
        ".\n./a.txt\n./sub\n./sub/b.bin\n./sub/deeper\n./sub/deeper/empty\n./with space.txt\n"
    );
    assert_eq!(
        ns.exec("p", "c", &["cat", "/tmp/tree/with space.txt"])
            .unwrap(),
        "spaced\n"
    );
    let back = dir.join("tree-back");
    let ran = kubectl_full(&ns, &["cp", "p:/tmp/tree", back.to_str().unwrap()], None);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        tree(&back) == tree(&src),
        "{:?}",
        tree(&back).iter().map(|e| &e.0).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------- debug

/// The status of ephemeral container `name` once `probe` holds of it.
fn wait_ephemeral(ns: &Namespace, name: &str, what: &str, probe: impl Fn(&Value) -> bool) -> Value {
    let pod = ns
        .wait_pod(
            "p",
            60,
            &format!("ephemeral container {name} {what}"),
            |p| {
                p["status"]["ephemeralContainerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["name"] == name && probe(c))
            },
        )
        .unwrap_or_else(|e| {
            let statuses = ns
                .pod("p")
                .map(|p| p["status"]["ephemeralContainerStatuses"].to_string());
            panic!("{e}: {statuses:?}")
        });
    container(&pod, name).unwrap().clone()
}

/// Whether `ps -o pid,args` output shows the target's `sleep 3601` as PID 1.
fn sees_target(ps: &str) -> bool {
    ps.lines().any(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some("1") && w.collect::<Vec<_>>() == ["sleep", "3601"]
    })
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn debug_adds_an_ephemeral_container_in_the_targets_processes() {
    let _g = share();
    let ns = Namespace::new("stream-debug");
    ready_pod(&ns, "p", "exec sleep 3601", "", "");

    // Not interactive, targeting c: it sees c's process as PID 1.
    let ran = kubectl_full(
        &ns,
        &[
            "debug",
            "p",
            &format!("--image={DEBUG_IMAGE}"),
            "--target=c",
            "--attach=false",
            "-c",
            "dbg",
            "--",
            "sh",
            "-c",
            "ps -o pid,args; echo listed; while [ ! -f /tmp/stop ]; do sleep 0.1; done; exit 4",
        ],
        None,
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    let st = wait_ephemeral(&ns, "dbg", "running", |c| c["state"]["running"].is_object());
    assert!(
        st["containerID"].as_str().unwrap().starts_with("berth://"),
        "{st}"
    );
    let ps = wait_until(30, "dbg's ps", |seen| {
        let l = ns.kubectl(&["logs", "p", "-c", "dbg"]).ok()?;
        *seen = l.clone();
        l.contains("listed").then_some(l)
    })
    .unwrap();
    assert!(sees_target(&ps), "dbg does not see c's process: {ps}");
    // exec reaches an ephemeral container too; it ends with its own code.
    ns.exec("p", "dbg", &["touch", "/tmp/stop"]).unwrap();
    let st = wait_ephemeral(&ns, "dbg", "terminated", |c| {
        c["state"]["terminated"].is_object()
    });
    assert_eq!(st["state"]["terminated"]["exitCode"], 4, "{st}");
    assert_eq!(st["state"]["terminated"]["reason"], "Error", "{st}");

    // Without a target, in a pod that shares no process namespace: only
    // its own processes.
    let ran = kubectl_full(
        &ns,
        &[
            "debug",
            "p",
            &format!("--image={DEBUG_IMAGE}"),
            "--attach=false",
            "-c",
            "alone",
            "--",
            "ps",
            "-o",
            "pid,args",
        ],
        None,
    );
    assert_eq!(ran.code, 0, "{ran:?}");
    let st = wait_ephemeral(&ns, "alone", "terminated", |c| {
        c["state"]["terminated"].is_object()
    });
    assert_eq!(st["state"]["terminated"]["exitCode"], 0, "{st}");
    let ps = ns.kubectl(&["logs", "p", "-c", "alone"]).unwrap();
    assert!(!ps.contains("sleep 3601"), "{ps}");
    assert!(
        ps.lines()
            .any(|l| l.split_whitespace().eq(["1", "ps", "-o", "pid,args"])),
        "{ps}"
    );

    // The pod's own container was never touched.
    let pod = ns.pod("p").unwrap();
    assert_eq!(restarts(&pod, "c"), 0, "{}", summary(&pod));
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn debug_interactive_shell_in_the_targets_processes() {
    let _g = share();
    let ns = Namespace::new("stream-debug-it");
    ready_pod(&ns, "p", "exec sleep 3601", "", "");
    let mut k = Background::kubectl_on_a_tty(
        &ns,
        30,
        100,
        "",
        &[
            "debug",
            "-it",
            "p",
            &format!("--image={DEBUG_IMAGE}"),
            "--target=c",
            "-c",
            "dbg",
            "--",
            "sh",
        ],
    );
    k.wait_stdout(60, "attached", |o| o.contains("try pressing enter"));
    // The marker is in the output, not in the echo of the typed line.
    k.send("ps -o pid,args; echo ps-$((1+1))-done\n");
    k.wait_stdout(30, "ps's output", |o| o.contains("ps-2-done\r\n"));
    let screen = k.screen();
    assert!(sees_target(&screen), "{screen}");
    let st = container(&ns.pod("p").unwrap(), "dbg").unwrap().clone();
    assert!(st["state"]["running"].is_object(), "{st}");
    k.send("exit 3\n");
    let code = k.wait_exit(30);
    // kubectl attach (and so debug) does not pass on the exit code.
    assert_eq!(code, 0, "{}", k.screen());
    let st = wait_ephemeral(&ns, "dbg", "terminated", |c| {
        c["state"]["terminated"].is_object()
    });
    assert_eq!(st["state"]["terminated"]["exitCode"], 3, "{st}");
}
