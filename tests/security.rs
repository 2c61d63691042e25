//! Local users cannot read what berth keeps: after a pod with a container
//! holding a secret in its environment, an unprivileged uid walks the root
//! and state trees and finds nothing it can read or enter below them (the
//! socket stays 0660 root:root). Whoever can write to the pods' log
//! directories cannot turn a container's output into a write elsewhere. A
//! daemon started with `umask 000` makes nothing others may write. Root
//! only.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cri::{container_status, pull, remove_pod, start};
use common::pods::{daemon, net_config, pod_config, TestNet};
use common::{registry, Daemon, Sandbox};
use cri_api::v1;

/// Runs `args` as uid/gid 65534 (nobody) with no supplementary groups.
fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .output()
        .expect("setpriv")
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn local_users_read_nothing_under_root_and_state() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    // Only berth's own modes count: the test's temp dir is opened up.
    std::fs::set_permissions(
        daemon.sandbox.dir.path(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    pull(&daemon, &registry().busybox()).await;
    let config = pod_config("secrets");
    let pod = cri.run_pod(&config).await.unwrap();
    let mut c = common::cri::container("app", &["sleep", "3600"]);
    c.envs = vec![v1::KeyValue {
        key: "DB_PASSWORD".into(),
        value: "hunter2".into(),
    }];
    // crun acts on run.oci.* annotations: none reaches the runtime unless
    // the handler allows it.
    c.annotations = [("run.oci.keep_original_groups".to_string(), "1".to_string())].into();
    let id = cri.create_container(&pod, &config, c).await.unwrap();
    start(&daemon, &id).await;

    let root = daemon.sandbox.path("root");
    let state = daemon.sandbox.path("state");
    let spec = state.join(format!("containers/{id}/config.json"));
    let spec_text = std::fs::read_to_string(&spec).unwrap();
    assert!(spec_text.contains("hunter2"));
    assert!(
        !spec_text.contains("run.oci.keep_original_groups"),
        "a client's annotation reached the runtime"
    );
    assert!(spec_text.contains("io.kubernetes.cri.container-type"));
    // The tried attack: grep the bundle as nobody.
    let out = as_nobody(&["cat", &spec.display().to_string()]);
    assert!(!out.status.success(), "nobody read {}", spec.display());
    let out = as_nobody(&[
        "grep",
        "-rs",
        "hunter2",
        &root.display().to_string(),
        &state.display().to_string(),
    ]);
    assert!(
        out.stdout.is_empty(),
        "nobody found the secret: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Nothing below root and state is readable or enterable by nobody.
    let out = as_nobody(&[
        "find",
        &root.display().to_string(),
        &state.display().to_string(),
        "-mindepth",
        "1",
        "(",
        "-readable",
        "-o",
        "-executable",
        ")",
        "-print",
    ]);
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.trim().is_empty(), "readable by nobody:\n{seen}");
    // Every subtree is 0700, the top dirs 0711.
    for dir in [&root, &state] {
        assert_eq!(
            std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
            0o711,
            "{}",
            dir.display()
        );
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", entry.path().display());
        }
    }
    // The socket: 0660, root's.
    let socket = std::fs::metadata(daemon.sandbox.socket()).unwrap();
    assert_eq!(socket.permissions().mode() & 0o777, 0o660);
    remove_pod(&daemon, &pod).await;
}

/// Waits until `path` holds `what`.
async fn wait_for_text(path: &Path, what: &str) -> String {
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A log agent that can write in `/var/log/pods` replaces a container's
/// log file with a symlink to a file elsewhere and waits for kubelet's
/// ReopenContainerLog, or links a directory of a container's log path
/// elsewhere before it starts: the shim refuses both (the call fails, the
/// container keeps running and logging where it did), and the file
/// elsewhere is never written.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn log_symlinks_do_not_redirect_container_output() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let outside = daemon.sandbox.path("etc");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("shadow");
    std::fs::write(&secret, "root:secret\n").unwrap();
    let untouched = || {
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root:secret\n");
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["shadow"],
            "something was made in {}",
            outside.display()
        );
    };
    let logs = daemon.sandbox.path("pods/default_links_uid");
    let mut config = pod_config("links");
    config.log_directory = logs.display().to_string();
    let pod = cri.run_pod(&config).await.unwrap();

    // At ReopenContainerLog: the log file is now a symlink.
    let mut ticker = common::cri::container(
        "ticker",
        &[
            "sh",
            "-c",
            "i=0; while true; do echo tick$i; i=$((i+1)); sleep 0.1; done",
        ],
    );
    ticker.log_path = "ticker/0.log".into();
    let id = cri.create_container(&pod, &config, ticker).await.unwrap();
    start(&daemon, &id).await;
    let log = logs.join("ticker/0.log");
    wait_for_text(&log, " stdout F tick").await;
    let rotated = logs.join("ticker/0.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    std::os::unix::fs::symlink(&secret, &log).unwrap();
    let e = cri.reopen_container_log(&id).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("symbolic link"), "{e:?}");
    // The container runs on and logs to the file it had.
    let before = std::fs::read_to_string(&rotated).unwrap().len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(std::fs::read_to_string(&rotated).unwrap().len() > before);
    assert_eq!(
        container_status(&daemon, &id).await.state,
        v1::ContainerState::ContainerRunning as i32
    );
    untouched();

    // At start: a directory of the log path links elsewhere.
    std::os::unix::fs::symlink(&outside, logs.join("printer")).unwrap();
    let mut printer = common::cri::container("printer", &["sh", "-c", "echo leaked"]);
    printer.log_path = "printer/shadow".into();
    let printer = cri.create_container(&pod, &config, printer).await.unwrap();
    let e = cri.start_container(&printer).await.unwrap_err();
    assert!(e.message().contains("symbolic link"), "{e:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    untouched();
    remove_pod(&daemon, &pod).await;
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Every file below `dir` is 0600 and every directory 0700.
fn assert_private(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            assert_eq!(mode(&path), 0o700, "{}", path.display());
            assert_private(&path);
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
}

/// berth sets its own umask: started with `umask 000` (as from a shell
/// that ran it), the host paths it makes are 0755 and root's (a CRI
/// mount's missing host path and its parents, the pod's log directories;
/// the log 0640), the container's `/` is 0755, the pod's /etc files 0644,
/// and its records stay 0600 in 0700 dirs.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_permissive_umask_reaches_nothing_berth_makes() {
    require_root!();
    let net = TestNet::new();
    let sandbox = Sandbox::new();
    let config = net_config(&sandbox, &net, "");
    let daemon = Daemon::start_with_umask(sandbox, &config, 0o000).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let logs = daemon.sandbox.path("pods/default_umask_uid");
    let mut pod_config = pod_config("umask");
    pod_config.log_directory = logs.display().to_string();
    let pod = cri.run_pod(&pod_config).await.unwrap();
    let host = daemon.sandbox.path("host");
    let data = host.join("a/data");
    let mut c = common::cri::container("app", &["sleep", "3600"]);
    c.log_path = "app/0.log".into();
    c.mounts = vec![v1::Mount {
        container_path: "/data".into(),
        host_path: data.display().to_string(),
        ..Default::default()
    }];
    let id = cri.create_container(&pod, &pod_config, c).await.unwrap();
    start(&daemon, &id).await;

    for dir in [&host, &host.join("a"), &data, &logs, &logs.join("app")] {
        assert_eq!(mode(dir), 0o755, "{}", dir.display());
        let meta = std::fs::metadata(dir).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{}", dir.display());
    }
    assert_eq!(mode(&logs.join("app/0.log")), 0o640);
    let out = common::cri::exec(
        &daemon,
        &id,
        &[
            "stat",
            "-c",
            "%n %a",
            "/",
            "/data",
            "/etc/hosts",
            "/etc/resolv.conf",
            "/etc/hostname",
        ],
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "/ 755\n/data 755\n/etc/hosts 644\n/etc/resolv.conf 644\n/etc/hostname 644\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // berth's own: records 0600 in 0700 dirs, the top dirs 0711.
    let root = daemon.sandbox.path("root");
    assert_eq!(mode(&root), 0o711);
    assert_eq!(mode(&daemon.sandbox.path("state")), 0o711);
    assert_private(&root.join("records"));
    remove_pod(&daemon, &pod).await;
}
