//! ImageService against the real daemon and a local registry: pull by tag,
//! digest and through a mirror, status, list, remove, fs info. Root only.

use crate::common;

use common::{registry, Daemon, Sandbox};
use cri_api::v1;
use tonic::Code;

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
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
    let cri = daemon.cri().await;

    assert!(
        cri.image_status(&reg.busybox()).await.unwrap().is_none(),
        "absent image: empty answer"
    );
    let id = cri.pull(&reg.busybox()).await.unwrap();
    assert!(id.starts_with("sha256:"), "{id}");
    let mirrored = cri
        .pull("registry.k8s.io/e2e-test-images/busybox:1.29-2")
        .await
        .unwrap();
    assert_eq!(mirrored, id, "same content, same image id");

    let image = cri.image_status(&reg.busybox()).await.unwrap().unwrap();
    assert_eq!(image.id, id);
    assert!(image.size > 0);
    assert!(image.repo_tags.contains(&reg.busybox()));
    assert!(image
        .repo_tags
        .contains(&"registry.k8s.io/e2e-test-images/busybox:1.29-2".to_string()));
    // By id, id prefix and digest too.
    assert_eq!(cri.image_status(&id).await.unwrap().unwrap().id, id);
    assert_eq!(
        cri.image_status(&id["sha256:".len()..][..12])
            .await
            .unwrap()
            .unwrap()
            .id,
        id
    );
    let digest = image.repo_digests.first().unwrap().clone();
    assert_eq!(cri.image_status(&digest).await.unwrap().unwrap().id, id);
    assert_eq!(cri.pull(&digest).await.unwrap(), id);

    // Users from the image config.
    let uid_image = format!("{}/berth-test/user-uid:latest", reg.addr);
    cri.pull(&uid_image).await.unwrap();
    assert_eq!(
        cri.image_status(&uid_image)
            .await
            .unwrap()
            .unwrap()
            .uid
            .unwrap()
            .value,
        1000
    );
    let name_image = format!("{}/berth-test/user-name:latest", reg.addr);
    cri.pull(&name_image).await.unwrap();
    assert_eq!(
        cri.image_status(&name_image)
            .await
            .unwrap()
            .unwrap()
            .username,
        "app"
    );

    let all = cri.list_images(None).await.unwrap();
    assert!(all.len() >= 2);
    let filtered = cri
        .list_images(Some(v1::ImageFilter {
            image: Some(v1::ImageSpec {
                image: uid_image.clone(),
                ..Default::default()
            }),
        }))
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);

    let fs = cri.image_fs_info().await.unwrap();
    assert!(fs.image_filesystems[0].used_bytes.as_ref().unwrap().value > 0);

    // Removing by one tag removes every tag of that image; twice is fine.
    for _ in 0..2 {
        cri.remove_image(&reg.busybox()).await.unwrap();
    }
    assert!(cri.image_status(&id).await.unwrap().is_none());
    assert!(cri
        .image_status("registry.k8s.io/e2e-test-images/busybox:1.29-2")
        .await
        .unwrap()
        .is_none());

    // Bad and unknown references.
    assert_eq!(
        cri.pull("").await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        cri.pull("UPPER/Case:x").await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        cri.pull(&format!("{}/berth-test/absent:latest", reg.addr))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
}
