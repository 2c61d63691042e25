//! The runc handlers berth is run with: the one on PATH (runc 1.5.3 in
//! hack/test.sh, as today's nodes run) and Debian's 1.1.5 as a handler of
//! its own, each through a container's whole life. Root only.

use crate::common;

use std::time::Duration;

use common::cri::{container_status, pull, remove_pod, start};
use common::faults::assert_clean;
use common::pods::{daemon_with, pod_config, TestNet};
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
