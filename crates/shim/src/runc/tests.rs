//! Tests of the runc wrapper, against a fake runtime script.

use super::*;

/// A fake runtime: a shell script that records its arguments and acts on them.
fn fake_runtime(dir: &Path, body: &str) -> Runtime {
    let bin = dir.join("fake-runc");
    let script = format!("#!/bin/sh\necho \"$@\" >> {}/args\n{body}\n", dir.display());
    // Written by a child process: a write fd of this (multithreaded)
    // test process would be inherited by another test's fork until its
    // exec, and exec'ing the script then fails with ETXTBSY.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(&bin)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    Runtime::new(bin, dir.join("root"))
}

fn args_seen(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("args")).unwrap()
}

#[test]
fn passes_root_and_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let rt = fake_runtime(dir.path(), "exit 0").with_global_args(vec!["--debug".into()]);
    rt.kill("c1", 15, true).unwrap();
    rt.delete("c1", true).unwrap();
    rt.start("c1").unwrap();
    let root = dir.path().join("root");
    assert_eq!(
            args_seen(dir.path()),
            format!(
                "--root {r} --debug kill --all c1 15\n--root {r} --debug delete --force c1\n--root {r} --debug start c1\n",
                r = root.display()
            )
        );
}

#[test]
fn failure_keeps_status_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let rt = fake_runtime(
        dir.path(),
        "echo 'container \"c1\" does not exist' >&2; exit 3",
    );
    let err = rt.start("c1").unwrap_err();
    assert_eq!(err.exit_status(), Some(3));
    assert_eq!(err.stderr(), "container \"c1\" does not exist");
    assert!(err.is_not_found());
    assert_eq!(err.id(), "c1");
    assert!(err.to_string().contains("start c1: exit status 3"), "{err}");
}

#[test]
fn timeout_kills() {
    let dir = tempfile::tempdir().unwrap();
    let rt = fake_runtime(dir.path(), "echo slow >&2; exec sleep 30")
        .with_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let err = rt.start("c1").unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.stderr(), "slow\n");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn state_is_parsed_and_update_reads_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
            "case \"$3\" in\n state) echo '{{\"ociVersion\":\"1.0.2\",\"id\":\"c1\",\"pid\":42,\"status\":\"running\",\"bundle\":\"/b\"}}';;\n update) cat > {}/stdin;;\nesac",
            dir.path().display()
        );
    let rt = fake_runtime(dir.path(), &body);
    let st = rt.state("c1").unwrap();
    assert_eq!(
        (st.id.as_str(), st.pid, st.status.as_str()),
        ("c1", 42, "running")
    );
    let res = serde_json::json!({"memory": {"limit": 1048576}});
    rt.update("c1", &res).unwrap();
    let seen: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("stdin")).unwrap()).unwrap();
    assert_eq!(seen, res);
}

#[test]
fn runtime_log_errors() {
    let log = "{\"level\":\"warning\",\"msg\":\"w\"}\n{\"level\":\"error\",\"msg\":\"boom\",\"time\":\"t\"}\n";
    assert_eq!(parse_runtime_log(log), "boom");
    assert_eq!(parse_runtime_log("plain text\n"), "plain text");
}

#[test]
fn missing_binary_is_a_spawn_error() {
    let rt = Runtime::new("/nonexistent/runc", "/tmp");
    assert!(matches!(rt.start("x"), Err(RuncError::Spawn { .. })));
}
