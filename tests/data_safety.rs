//! Nothing lost: removing an image never takes the layers of a container
//! that uses it. Against the real daemon, runc, CNI and a local registry.
//! Root only.

use crate::common;

use std::time::Duration;

use common::cri::{container_status, pull, remove_pod, start, wait_exited};
use common::pods::{daemon, pod_config, TestNet};
use common::{registry, Daemon};
use cri_api::v1;

fn snapshots(daemon: &Daemon) -> usize {
    std::fs::read_dir(daemon.sandbox.path("root/images/snapshots"))
        .unwrap()
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count()
}

fn zstd_container(image: &str, name: &str, command: &[&str]) -> v1::ContainerConfig {
    v1::ContainerConfig {
        image: Some(v1::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..common::cri::container(name, command)
    }
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn removing_an_image_keeps_the_layers_its_containers_use() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    // busybox shares its one layer with the zstd image; the zstd image's
    // marker layer is its own.
    pull(&daemon, &registry().busybox()).await;
    let image = format!("{}/berth-test/zstd:latest", registry().addr);
    pull(&daemon, &image).await;
    assert_eq!(snapshots(&daemon), 2);
    let config = pod_config("keep-layers");
    let pod = cri.run_pod(&config).await.unwrap();
    let running = cri
        .create_container(
            &pod,
            &config,
            zstd_container(&image, "running", &["sleep", "3600"]),
        )
        .await
        .unwrap();
    start(&daemon, &running).await;
    let created = cri
        .create_container(
            &pod,
            &config,
            zstd_container(&image, "created", &["cat", "/etc/zstd-marker"]),
        )
        .await
        .unwrap();

    cri.remove_image(&image).await.unwrap();
    // The image is gone; its layer is not.
    assert_eq!(
        snapshots(&daemon),
        2,
        "a snapshot a container uses was removed"
    );
    let out = cri
        .exec_sync(&running, &["cat", "/etc/zstd-marker"], 10)
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "zstd\n");
    start(&daemon, &created).await;
    let st = wait_exited(&daemon, &created, Duration::from_secs(20)).await;
    assert_eq!(st.exit_code, 0, "{st:?}");
    // A restart keeps them too (its start-up collection knows the containers).
    daemon.restart().await;
    assert_eq!(snapshots(&daemon), 2);
    assert_eq!(
        container_status(&daemon, &running).await.state,
        v1::ContainerState::ContainerRunning as i32
    );
    // Once the containers are gone, so is the layer only they used.
    remove_pod(&daemon, &pod).await;
    assert_eq!(snapshots(&daemon), 1);
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn container_status_says_who_the_process_is_and_how_it_stops() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    pull(&daemon, &registry().busybox()).await;
    let config = pod_config("statuses");
    let pod = cri.run_pod(&config).await.unwrap();
    let mut c = common::cri::container("app", &["sleep", "3600"]);
    c.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            run_as_user: Some(v1::Int64Value { value: 1234 }),
            run_as_group: Some(v1::Int64Value { value: 5678 }),
            supplemental_groups: vec![42],
            ..Default::default()
        }),
        ..Default::default()
    });
    c.stop_signal = v1::Signal::Sigint as i32;
    let id = cri.create_container(&pod, &config, c).await.unwrap();
    let st = container_status(&daemon, &id).await;
    let user = st.user.and_then(|u| u.linux).expect("ContainerStatus.user");
    assert_eq!((user.uid, user.gid), (1234, 5678));
    assert!(user.supplemental_groups.contains(&42), "{user:?}");
    assert_eq!(st.stop_signal, v1::Signal::Sigint as i32);
    // What the process really runs as, inside.
    start(&daemon, &id).await;
    let out = cri.exec_sync(&id, &["id"], 10).await.unwrap();
    let id_out = String::from_utf8_lossy(&out.stdout);
    assert!(
        id_out.contains("uid=1234") && id_out.contains("gid=5678") && id_out.contains("42"),
        "{id_out}"
    );
    remove_pod(&daemon, &pod).await;
}
