//! berth run as a node component: logs a file or journald can take (no ANSI
//! escapes off a terminal; JSON with the documented fields), systemd's
//! readiness notification once recovery is done (and no NOTIFY_SOCKET for
//! the shims), drop-in config files, `berth check`, and the completions and
//! man page the package ships. The package itself is tested by
//! `hack/package.sh test` (dpkg, systemd-analyze).

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::pods::TestNet;
use common::{Daemon, Sandbox};

#[tokio::test]
async fn logs_to_a_file_have_no_ansi_escapes() {
    let mut daemon = Daemon::start("").await;
    daemon.version().await;
    let status = daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20))
        .await;
    assert!(status.success());
    let log = std::fs::read(daemon.sandbox.log_file()).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("berth is serving CRI v1"), "{text}");
    assert!(
        !log.contains(&0x1b),
        "ESC byte in a log written to a file:\n{text}"
    );
}

#[tokio::test]
async fn json_logs_have_the_documented_fields() {
    let mut daemon = Daemon::start("log_format = \"json\"\n").await;
    daemon.version().await;
    daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20))
        .await;
    let text = daemon.stderr();
    let mut in_rpc_span = 0;
    for line in text.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let timestamp = value["timestamp"].as_str().expect("timestamp");
        assert!(
            timestamp.len() >= 20 && timestamp.ends_with('Z') && timestamp.as_bytes()[10] == b'T',
            "timestamp is not RFC 3339 UTC: {line}"
        );
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&value["level"].as_str().unwrap()),
            "{line}"
        );
        assert!(value["target"].as_str().is_some(), "{line}");
        assert!(value["fields"]["message"].as_str().is_some(), "{line}");
        assert!(value.get("spans").is_none(), "{line}");
        if value["span"]["name"] == "rpc" && value["span"]["rpc"] == "Version" {
            in_rpc_span += 1;
        }
    }
    assert!(text.contains("\"berth is serving CRI v1\""), "{text}");
    assert!(
        in_rpc_span > 0,
        "no event in the Version RPC's span:\n{text}"
    );
}

/// Kills the daemon when the test ends, passing or not.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The pids of berth-shim processes whose command line mentions `needle`
/// (this test's sandbox dir: the shims of its daemon).
fn shims_of(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == "berth-shim") && cmdline.contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn ready_is_notified_once_serving_and_shims_do_not_get_notify_socket() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let cni = sandbox.cni_dir();
    let config = sandbox.write_config(&format!("{}conf_dir = {cni:?}\n", net.config("")));
    let notify_path = sandbox.path("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let log = std::fs::File::create(sandbox.log_file()).unwrap();
    let child = sandbox
        .command(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let _guard = Guard(child);

    let started = Instant::now();
    let mut buf = [0u8; 256];
    let n = tokio::task::spawn_blocking(move || notify.recv(&mut buf).map(|n| buf[..n].to_vec()))
        .await
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "no notification in {:?} ({e}): {}",
                started.elapsed(),
                std::fs::read_to_string(sandbox.log_file()).unwrap_or_default()
            )
        });
    assert_eq!(n, b"READY=1");

    // READY means serving: the first call after it answers, gate open.
    let cri = common::cri::Cri::connect(&sandbox.socket()).await.unwrap();
    cri.version().await.unwrap();
    let status = cri.status(false).await.expect("Status right after READY=1");
    assert!(status.status.is_some());

    // The pod's shim (started by berth after READY) did not inherit
    // NOTIFY_SOCKET: a pod with a pause (a shared PID namespace), so that it
    // has a shim of its own.
    let id = cri
        .run_pod(&common::pods::pod_config_with_pause("notify"))
        .await
        .expect("RunPodSandbox");
    let shims = shims_of(sandbox.dir.path().to_str().unwrap());
    let mut environs = Vec::new();
    for pid in &shims {
        // The standby shim started after the pod's may be between its two
        // processes (the first one gone, or a zombie, when it is read):
        // skipped.
        match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(environ) if !environ.is_empty() => environs.push(environ),
            _ => {}
        }
    }
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    assert!(!environs.is_empty(), "no berth-shim found for the pod");
    for environ in environs {
        let environ = String::from_utf8_lossy(&environ);
        assert!(
            !environ.split('\0').any(|v| v.starts_with("NOTIFY_SOCKET=")),
            "a shim inherited NOTIFY_SOCKET: {environ}"
        );
    }
}

/// Runs berth with `args` and returns (success, stdout, stderr).
fn berth(sandbox: &Sandbox, config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = sandbox.command(config).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn drop_ins_beside_the_config_file_and_from_config_dir() {
    let sandbox = Sandbox::new();
    let config = sandbox.write_config("");
    let dropins = sandbox.path("config.d");
    std::fs::create_dir(&dropins).unwrap();
    std::fs::write(dropins.join("20-level.toml"), "log_level = \"warn\"\n").unwrap();
    std::fs::write(
        dropins.join("10-cni.toml"),
        "log_level = \"trace\"\n[cni]\ntimeout_secs = 7\n",
    )
    .unwrap();

    let (ok, out, err) = berth(&sandbox, &config, &["config", "show"]);
    assert!(ok, "{err}");
    let shown: toml::Value = toml::from_str(&out).unwrap();
    // The main file says debug; the drop-ins come after it, 20- after 10-.
    assert_eq!(shown["log_level"].as_str(), Some("warn"));
    assert_eq!(shown["cni"]["timeout_secs"].as_integer(), Some(7));
    let level_from = format!(
        "#   log_level  <-  {}",
        dropins.join("20-level.toml").display()
    );
    assert!(out.lines().any(|l| l == level_from), "{out}");
    assert!(
        out.contains(&format!("#   root  <-  {}", config.display())),
        "{out}"
    );

    // A flag beats them all and is named as such.
    let (ok, out, _) = berth(
        &sandbox,
        &config,
        &["--log-level", "error", "config", "show"],
    );
    assert!(ok);
    assert!(
        out.lines().any(|l| l == "#   log_level  <-  --log-level"),
        "{out}"
    );

    // --config-dir points elsewhere; it must then exist.
    let other = sandbox.path("other.d");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("x.toml"), "[cni]\ntimeout_secs = 9\n").unwrap();
    let (ok, out, err) = berth(
        &sandbox,
        &config,
        &["--config-dir", other.to_str().unwrap(), "config", "show"],
    );
    assert!(ok, "{err}");
    let shown: toml::Value = toml::from_str(&out).unwrap();
    assert_eq!(shown["cni"]["timeout_secs"].as_integer(), Some(9));
    assert_eq!(shown["log_level"].as_str(), Some("debug"));
    let missing = sandbox.path("missing.d");
    let (ok, _, err) = berth(
        &sandbox,
        &config,
        &["--config-dir", missing.to_str().unwrap(), "config", "show"],
    );
    assert!(!ok && err.contains("missing.d"), "{err}");

    // A bad key in a drop-in names the file and the key, and the daemon refuses to start.
    std::fs::write(dropins.join("30-bad.toml"), "[streaming]\nportt = 1\n").unwrap();
    let (ok, _, err) = berth(&sandbox, &config, &["config", "show"]);
    assert!(!ok);
    assert!(
        err.contains("30-bad.toml") && err.contains("portt"),
        "{err}"
    );
    let (ok, _, err) = berth(&sandbox, &config, &[]);
    assert!(!ok && err.contains("30-bad.toml"), "{err}");
}

/// This machine has what berth needs (hack/install-deps.sh); as root,
/// since some checks (cgroup delegation, mounts) need it.
#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn check_passes_here() {
    require_root!();
    let sandbox = Sandbox::new();
    // The default CNI settings: berth writes its own network when there is none.
    let config = sandbox.write_config("");
    let (ok, out, err) = berth(&sandbox, &config, &["check"]);
    assert!(ok, "berth check failed here:\n{out}{err}");
    assert!(
        out.lines().any(|l| l.starts_with("ok       runtime runc")),
        "{out}"
    );
    assert!(out.contains("cgroup mode"), "{out}");
}

#[test]
fn check_fails_without_the_runtime() {
    let sandbox = Sandbox::new();
    let config =
        sandbox.write_test_config("[runtime.handlers.runc]\nbinary = \"/nonexistent/runc\"\n");
    let (ok, out, _) = berth(&sandbox, &config, &["check"]);
    assert!(!ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("runtime runc"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.starts_with("missing"), "{out}");
    assert!(out.contains("fix: install it"), "{out}");

    // A configuration that does not validate is reported, not a crash.
    let config = sandbox.write_test_config("[runtime]\ndefault_handler = \"kata\"\n");
    let (ok, out, _) = berth(&sandbox, &config, &["check"]);
    assert!(!ok);
    assert!(
        out.lines().any(|l| l.starts_with("missing  config")),
        "{out}"
    );
}

#[test]
fn completions_and_man_page() {
    let bin = common::berth_bin();
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(bin)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("config-dir"), "{shell}: {text}");
        assert!(text.contains("check"), "{shell}");
    }
    let out = std::process::Command::new(bin).arg("man").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(".ie") || text.contains(".TH berth 8"),
        "{text}"
    );
    assert!(text.contains("config\\-dir"), "{text}");
    // The hidden helpers stay out of --help.
    let out = std::process::Command::new(bin)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("check") && !help.contains("completions"),
        "{help}"
    );
}

#[test]
fn the_commented_default_config_is_the_defaults() {
    let out = std::process::Command::new(common::berth_bin())
        .args(["config", "default-commented"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let sandbox = Sandbox::new();
    let path = sandbox.path("config.toml");
    std::fs::write(&path, &text).unwrap();
    let (ok, shown, err) = berth(&sandbox, &path, &["config", "show"]);
    assert!(ok, "{err}");
    let (_, defaults, _) = berth(&sandbox, &path, &["config", "default"]);
    let shown: toml::Value = toml::from_str(&shown).unwrap();
    let defaults: toml::Value = toml::from_str(&defaults).unwrap();
    assert_eq!(shown, defaults);
}
