//! ImageService against the real daemon and a local registry: pull by tag,
//! digest and through a mirror, status, list, remove, fs info. Root only.

mod common;

use common::{registry, Daemon, Sandbox};
use cri_api::v1;
use tonic::Code;

fn spec(image: &str) -> Option<v1::ImageSpec> {
    Some(v1::ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

async fn pull(daemon: &Daemon, image: &str) -> Result<String, tonic::Status> {
    daemon
        .images()
        .await
        .pull_image(v1::PullImageRequest {
            image: spec(image),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().image_ref)
}

async fn status(daemon: &Daemon, image: &str) -> Option<v1::Image> {
    daemon
        .images()
        .await
        .image_status(v1::ImageStatusRequest {
            image: spec(image),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
}

#[tokio::test]
async fn pull_status_list_remove() {
    require_root!();
    let reg = registry();
    // registry.k8s.io names come from the local registry through a mirror.
    let sandbox = Sandbox::new();
    let config = sandbox.write_test_config(&format!(
        "[registry.mirrors.\"registry.k8s.io\"]\nendpoints = [\"http://{}\"]\n",
        reg.addr
    ));
    let daemon = Daemon::start_in(sandbox, &config).await;

    assert!(
        status(&daemon, &reg.busybox()).await.is_none(),
        "absent image: empty answer"
    );
    let id = pull(&daemon, &reg.busybox()).await.unwrap();
    assert!(id.starts_with("sha256:"), "{id}");
    let mirrored = pull(&daemon, "registry.k8s.io/e2e-test-images/busybox:1.29-2")
        .await
        .unwrap();
    assert_eq!(mirrored, id, "same content, same image id");

    let image = status(&daemon, &reg.busybox()).await.unwrap();
    assert_eq!(image.id, id);
    assert!(image.size > 0);
    assert!(image.repo_tags.contains(&reg.busybox()));
    assert!(image
        .repo_tags
        .contains(&"registry.k8s.io/e2e-test-images/busybox:1.29-2".to_string()));
    // By id, id prefix and digest too.
    assert_eq!(status(&daemon, &id).await.unwrap().id, id);
    assert_eq!(
        status(&daemon, &id["sha256:".len()..][..12])
            .await
            .unwrap()
            .id,
        id
    );
    let digest = image.repo_digests.first().unwrap().clone();
    assert_eq!(status(&daemon, &digest).await.unwrap().id, id);
    assert_eq!(pull(&daemon, &digest).await.unwrap(), id);

    // Users from the image config.
    let uid_image = format!("{}/berth-test/user-uid:latest", reg.addr);
    pull(&daemon, &uid_image).await.unwrap();
    assert_eq!(
        status(&daemon, &uid_image)
            .await
            .unwrap()
            .uid
            .unwrap()
            .value,
        1000
    );
    let name_image = format!("{}/berth-test/user-name:latest", reg.addr);
    pull(&daemon, &name_image).await.unwrap();
    assert_eq!(status(&daemon, &name_image).await.unwrap().username, "app");

    let mut images = daemon.images().await;
    let all = images
        .list_images(v1::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .images;
    assert!(all.len() >= 2);
    let filtered = images
        .list_images(v1::ListImagesRequest {
            filter: Some(v1::ImageFilter {
                image: spec(&uid_image),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(filtered.len(), 1);

    let fs = images
        .image_fs_info(v1::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(fs.image_filesystems[0].used_bytes.as_ref().unwrap().value > 0);

    // Removing by one tag removes every tag of that image; twice is fine.
    for _ in 0..2 {
        images
            .remove_image(v1::RemoveImageRequest {
                image: spec(&reg.busybox()),
            })
            .await
            .unwrap();
    }
    assert!(status(&daemon, &id).await.is_none());
    assert!(
        status(&daemon, "registry.k8s.io/e2e-test-images/busybox:1.29-2")
            .await
            .is_none()
    );

    // Bad and unknown references.
    assert_eq!(
        pull(&daemon, "").await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        pull(&daemon, "UPPER/Case:x").await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        pull(&daemon, &format!("{}/berth-test/absent:latest", reg.addr))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
}
