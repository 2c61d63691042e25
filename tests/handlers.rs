//! The runc handlers berth is run with: the one on PATH (runc 1.5.3 in
//! hack/test.sh, as today's nodes run) and Debian's 1.1.5 as a handler of
//! its own, each through a container's whole life. Root only.

use crate::common;

use std::time::Duration;

use common::cri::{container_status, pull, remove_pod, start};
use common::faults::assert_clean;
use common::pods::{daemon_with, pod_config, pod_config_with_pause, TestNet};
use common::registry;
use cri_api::v1;

/// The version line `binary --version` prints first.
fn version(binary: &str) -> String {
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{binary}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn each_runc_handler_runs_a_containers_whole_life() {
    require_root!();
    assert!(
        version("/usr/sbin/runc").starts_with("runc version 1.1."),
        "Debian's runc: {}",
        version("/usr/sbin/runc")
    );
    let net = TestNet::new();
    let daemon = daemon_with(
        &net,
        "[runtime.handlers.runc]\nbinary = \"runc\"\n[runtime.handlers.runc-debian]\nbinary = \"/usr/sbin/runc\"\n",
    )
    .await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    for handler in ["runc", "runc-debian"] {
        let config = pod_config(&format!("h-{handler}"));
        let pod = cri.run_pod_on(&config, handler).await.unwrap();
        let status = cri.pod_status(&pod, true).await.unwrap();
        let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
        assert_eq!(info["runtimeHandler"], handler);
        let id = cri
            .create_container(
                &pod,
                &config,
                common::cri::container("c", &["sh", "-c", "echo up; exec sleep 3600"]),
            )
            .await
            .unwrap();
        start(&daemon, &id).await;
        let ok = cri
            .exec_sync(&id, &["sh", "-c", "id -u; exit 5"], 30)
            .await
            .unwrap();
        assert_eq!(ok.exit_code, 5, "{handler}");
        assert_eq!(String::from_utf8_lossy(&ok.stdout), "0\n", "{handler}");
        // sleep as PID 1 ignores SIGTERM: killed at the end of the timeout.
        cri.stop_container(&id, 1).await.unwrap();
        let st = container_status(&daemon, &id).await;
        assert_eq!(
            st.state,
            v1::ContainerState::ContainerExited as i32,
            "{handler}"
        );
        assert_eq!(st.exit_code, 137, "{handler}");
        cri.remove_container(&id).await.unwrap();
        remove_pod(&daemon, &pod).await;
    }
    tokio::time::timeout(Duration::from_secs(30), assert_clean(&daemon, &net))
        .await
        .unwrap();
}

/// The options of the sysfs mounted on `/sys` in the container, and what a
/// write to a file there (the pod's own loopback) answers.
async fn sysfs_of(cri: &common::cri::Cri, id: &str) -> (String, String) {
    let mounts = cri
        .exec_sync(id, &["cat", "/proc/mounts"], 30)
        .await
        .unwrap();
    let mounts = String::from_utf8_lossy(&mounts.stdout).to_string();
    let options = mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[1] == "/sys" && f[2] == "sysfs")
        .unwrap_or_else(|| panic!("no sysfs on /sys in {mounts}"))[3]
        .to_string();
    let f = "/sys/class/net/lo/tx_queue_len";
    let write = format!("v=$(cat {f}) && echo $v > {f} && echo written");
    let out = cri.exec_sync(id, &["sh", "-c", &write], 30).await.unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (options, said.trim().to_string())
}

/// A privileged container's `/sys` is read-write and a plain one's
/// read-only in a privileged pod, with a pause (a shared PID namespace) and
/// without, whichever of the two starts first, with each runc handler: the
/// kernel keeps one sysfs superblock per network namespace, and its first
/// mount (the pause's, or the first container's) made it read-only for all.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_privileged_pods_sysfs_is_writable_in_both_pod_shapes() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon_with(
        &net,
        "[runtime.handlers.runc]\nbinary = \"runc\"\n[runtime.handlers.runc-debian]\nbinary = \"/usr/sbin/runc\"\n",
    )
    .await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let privileged = |name: &str, on: bool| {
        let mut c = common::cri::container(name, &["sleep", "3600"]);
        c.linux = Some(v1::LinuxContainerConfig {
            security_context: Some(v1::LinuxContainerSecurityContext {
                privileged: on,
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    };
    for handler in ["runc", "runc-debian"] {
        for (shape, mut config) in [
            ("pause", pod_config_with_pause(&format!("sys-p-{handler}"))),
            ("pauseless", pod_config(&format!("sys-n-{handler}"))),
        ] {
            let sc = config
                .linux
                .as_mut()
                .unwrap()
                .security_context
                .as_mut()
                .unwrap();
            sc.privileged = true;
            let pod = cri.run_pod_on(&config, handler).await.unwrap();
            for first in [false, true] {
                let what = format!("{handler}, {shape}, privileged first: {first}");
                let a = common::cri::run_container(&daemon, &pod, &config, privileged("a", first))
                    .await;
                let b = common::cri::run_container(&daemon, &pod, &config, privileged("b", !first))
                    .await;
                let (privileged_id, plain_id) = if first { (&a, &b) } else { (&b, &a) };
                let (options, wrote) = sysfs_of(&cri, privileged_id).await;
                assert!(
                    options.starts_with("rw,"),
                    "{what}: privileged /sys {options}"
                );
                assert_eq!(wrote, "written", "{what}");
                let (options, wrote) = sysfs_of(&cri, plain_id).await;
                assert!(options.starts_with("ro,"), "{what}: plain /sys {options}");
                assert!(wrote.contains("Read-only file system"), "{what}: {wrote}");
                for id in [a, b] {
                    cri.stop_container(&id, 0).await.unwrap();
                    cri.remove_container(&id).await.unwrap();
                }
            }
            remove_pod(&daemon, &pod).await;
        }
    }
    tokio::time::timeout(Duration::from_secs(30), assert_clean(&daemon, &net))
        .await
        .unwrap();
}
