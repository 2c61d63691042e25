//! Image volumes: pinned at CreateContainer to the exact image (KEP-5365's
//! `ImageSpec.image_ref`, else what the name resolves to then), recorded
//! so, and refused when asked for read-write.

use super::*;

/// A container of `pod_id` with an image volume of `image` (and
/// `image_ref`), read-only as asked.
fn with_volume(pod_id: &str, image: &str, image_ref: &str, readonly: bool) -> ContainerRequest {
    let mut req = container(pod_id, "app");
    req.config.mounts = vec![v1::Mount {
        container_path: "/models".into(),
        image: Some(v1::ImageSpec {
            image: image.into(),
            image_ref: image_ref.into(),
            ..Default::default()
        }),
        readonly,
        ..Default::default()
    }];
    req
}

/// The `image_ref` of the recorded config's first mount.
fn recorded_ref(r: &Rig, id: &str) -> String {
    let c = r.core.containers.get(id).unwrap();
    c.meta.config().mounts[0]
        .image
        .as_ref()
        .unwrap()
        .image_ref
        .clone()
}

#[tokio::test]
async fn a_read_write_image_volume_is_refused_before_anything_is_made() {
    let r = rig();
    r.fake.add_image("model", "sha256:aaaa");
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let e = r
        .core
        .create_container(with_volume(&pod_id, "model", "", false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("readonly"), "{e}");
    assert!(r.core.containers.list().is_empty());
    assert_eq!(r.fake.count("files.mount_rootfs"), 0);
}

#[tokio::test]
async fn an_image_volume_is_pinned_to_the_image_it_named_at_creation() {
    let r = rig();
    r.fake.add_image("model", "sha256:aaaa");
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(with_volume(&pod_id, "model", "", true))
        .await
        .unwrap();
    assert_eq!(recorded_ref(&r, &id), "sha256:aaaa");
}

#[tokio::test]
async fn image_ref_wins_over_what_the_name_resolves_to_now() {
    let r = rig();
    r.fake.add_image("model", "sha256:aaaa");
    // The tag moved on after kubelet pulled: the name resolves elsewhere.
    r.fake.add_image("model", "sha256:bbbb");
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let id = r
        .core
        .create_container(with_volume(&pod_id, "model", "sha256:aaaa", true))
        .await
        .unwrap();
    assert_eq!(recorded_ref(&r, &id), "sha256:aaaa");
    // An image_ref the store does not have: NotFound, nothing made.
    let mut req = with_volume(&pod_id, "model", "sha256:cccc", true);
    req.config.metadata.as_mut().unwrap().name = "other".into();
    let e = r.core.create_container(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    assert!(e.to_string().contains("sha256:cccc"), "{e}");
    assert_eq!(r.core.containers.list().len(), 1);
}

#[tokio::test]
async fn an_artifact_named_as_the_container_image_is_refused_before_anything_is_made() {
    let r = rig();
    r.fake.add_artifact("model", "sha256:aaaa");
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let mut req = container(&pod_id, "app");
    req.config.image = Some(v1::ImageSpec {
        image: "model".into(),
        ..Default::default()
    });
    let e = r.core.create_container(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("OCI artifact") && msg.contains("application/vnd.lab.model.v1"),
        "{msg}"
    );
    assert!(r.core.containers.list().is_empty());
    assert_eq!(r.fake.count("files.mount_rootfs"), 0);
}

#[tokio::test]
async fn an_artifact_volume_records_its_snapshot_and_is_mounted_once_for_two_mounts() {
    let r = rig();
    r.fake.add_artifact("model", "sha256:aaaa");
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let mut req = with_volume(&pod_id, "model", "", true);
    let mut again = req.config.mounts[0].clone();
    again.container_path = "/again".into();
    req.config.mounts.push(again);
    let id = r.core.create_container(req).await.unwrap();
    assert_eq!(recorded_ref(&r, &id), "sha256:aaaa");
    let c = r.core.containers.get(&id).unwrap();
    // GC keeps the artifact's snapshot while the container lives.
    assert!(
        c.meta
            .volume_snapshots
            .contains(&"sha256:aaaa-files".to_string()),
        "{:?}",
        c.meta.volume_snapshots
    );
    assert_eq!(r.fake.count("files.mount_image_volume"), 1);
}

#[tokio::test]
async fn removing_a_container_whose_volume_image_is_gone_collects_its_snapshots() {
    let r = rig();
    r.fake.add_artifact("model", "sha256:aaaa");
    let pod_id = r.core.run_pod_sandbox(pod("web")).await.unwrap();
    let keep = r
        .core
        .create_container(with_volume(&pod_id, "model", "", true))
        .await
        .unwrap();
    let mut req = with_volume(&pod_id, "model", "", true);
    req.config.metadata.as_mut().unwrap().name = "other".into();
    let gone = r.core.create_container(req).await.unwrap();
    // Its image stays: no collection for a container whose images all are.
    r.core.remove_container(&keep).await.unwrap();
    assert_eq!(r.fake.count("images.gc"), 0);
    // RemoveImage of the volume's artifact while the container lives.
    r.fake.images.lock().unwrap().clear();
    r.fake.add_image("busybox", "sha256:1111");
    r.core.remove_container(&gone).await.unwrap();
    assert_eq!(r.fake.count("images.gc"), 1);
}
