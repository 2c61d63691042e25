//! Local users cannot read what berth keeps: after a pod with a container
//! holding a secret in its environment, an unprivileged uid walks the root
//! and state trees and finds nothing it can read or enter below them (the
//! socket stays 0660 root:root). Root only.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::cri::{pull, remove_pod, start};
use common::pods::{daemon, pod_config, TestNet};
use common::registry;
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
