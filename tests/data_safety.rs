//! Nothing lost: removing an image never takes the layers of a container
//! that uses it. Against the real daemon, runc, CNI and a local registry.
//! Root only.

mod common;

use std::time::Duration;

use common::cri::{container_status, create, exec_sync, pull, remove_pod, start, wait_exited};
use common::pods::{daemon, pod_config, run, TestNet};
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
async fn removing_an_image_keeps_the_layers_its_containers_use() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    // busybox shares its one layer with the zstd image; the zstd image's
    // marker layer is its own.
    pull(&daemon, &registry().busybox()).await;
    let image = format!("{}/berth-test/zstd:latest", registry().addr);
    pull(&daemon, &image).await;
    assert_eq!(snapshots(&daemon), 2);
    let config = pod_config("keep-layers");
    let pod = run(&daemon, config.clone()).await.unwrap();
    let running = create(
        &daemon,
        &pod,
        &config,
        zstd_container(&image, "running", &["sleep", "3600"]),
    )
    .await
    .unwrap();
    start(&daemon, &running).await;
    let created = create(
        &daemon,
        &pod,
        &config,
        zstd_container(&image, "created", &["cat", "/etc/zstd-marker"]),
    )
    .await
    .unwrap();

    daemon
        .images()
        .await
        .remove_image(v1::RemoveImageRequest {
            image: Some(v1::ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    // The image is gone; its layer is not.
    assert_eq!(
        snapshots(&daemon),
        2,
        "a snapshot a container uses was removed"
    );
    let out = exec_sync(&daemon, &running, &["cat", "/etc/zstd-marker"], 10)
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
