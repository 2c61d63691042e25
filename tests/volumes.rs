//! An image's VOLUMEs (anonymous volumes), through the real daemon, runc
//! and the test registry, with images the tests build: each volume holds
//! what the image has at its path, with its owners, modes and symlinks
//! (containerd's copy-up), writable by the non-root user that owns it; a
//! volume path that is a symlink out of the image copies only the image's
//! files. Root only.

use std::path::{Path, PathBuf};

use crate::common;

use common::cri::{container, exec};
use common::images::{busybox_layer, layer, push_image, Entry};
use common::pods::{daemon, pod_config, TestNet};
use common::Daemon;
use cri_api::v1;

/// Stdout of `cmd` in container `id`, which must succeed.
async fn run(daemon: &Daemon, id: &str, cmd: &[&str]) -> String {
    String::from_utf8_lossy(&exec(daemon, id, cmd).await.stdout).into_owned()
}

/// `container(name, command)` of `image`, run as `uid` when given.
fn of_image(name: &str, image: &str, uid: Option<i64>) -> v1::ContainerConfig {
    let mut c = container(name, &["sleep", "1000"]);
    c.image.as_mut().unwrap().image = image.into();
    c.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            run_as_user: uid.map(|value| v1::Int64Value { value }),
            ..Default::default()
        }),
        ..Default::default()
    });
    c
}

/// The host dir of container `id`'s volume at `path` (they are named
/// `NN-<path with - for />`).
pub fn volume_dir(daemon: &Daemon, id: &str, path: &str) -> PathBuf {
    let dir = daemon
        .sandbox
        .path("root/containers")
        .join(id)
        .join("volumes");
    let suffix = path.replace('/', "-");
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy()[2..] == suffix)
        .collect();
    assert_eq!(found.len(), 1, "{path} in {}: {found:?}", dir.display());
    found.into_iter().next().unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// An image with VOLUMEs `/test_dir` (nobody's, a file, a nested dir of
/// uid 1000, a symlink), `/:colon_prefixed` and `/not_in_image`; pushed
/// once per test binary. Its name.
pub fn content_image() -> String {
    static IMAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let content = layer(&[
                Entry::Dir("test_dir", 0o755, (65534, 65534)),
                Entry::File(
                    "test_dir/test_file",
                    0o644,
                    (65534, 65534),
                    b"from the image\n",
                ),
                Entry::Dir("test_dir/nested", 0o750, (1000, 1000)),
                Entry::File("test_dir/nested/deep.conf", 0o600, (1000, 1000), b"deep\n"),
                Entry::Symlink("test_dir/link", "test_file"),
                Entry::Dir(":colon_prefixed", 0o700, (0, 0)),
                Entry::File(":colon_prefixed/conf", 0o640, (0, 0), b"colon\n"),
            ]);
            push_image(
                "berth-test/volumes:content",
                serde_json::json!({
                    "Env": ["PATH=/bin"],
                    "Volumes": {"/test_dir": {}, "/:colon_prefixed": {}, "/not_in_image": {}},
                }),
                &[busybox_layer(), content],
            )
        })
        .clone()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_images_volume_holds_its_content_owners_and_modes_and_its_owner_writes_to_it() {
    require_root!();
    let image = content_image();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    cri.pull(&image).await.unwrap();
    let config = pod_config("volumes");
    let pod = cri.run_pod(&config).await.unwrap();

    let root = cri
        .create_container(&pod, &config, of_image("root", &image, None))
        .await
        .unwrap();
    cri.start_container(&root).await.unwrap();
    assert_eq!(
        run(&daemon, &root, &["cat", "/test_dir/test_file"]).await,
        "from the image\n"
    );
    let stat = |p: &str| format!("stat -c '%n %u:%g %a' {p}");
    let cmd = [
        stat("/test_dir"),
        stat("/test_dir/test_file"),
        stat("/test_dir/nested"),
        stat("/test_dir/nested/deep.conf"),
        stat("/:colon_prefixed"),
        stat("/:colon_prefixed/conf"),
        stat("/not_in_image"),
    ]
    .join("; ");
    assert_eq!(
        run(&daemon, &root, &["sh", "-c", &cmd]).await,
        "/test_dir 65534:65534 755\n\
         /test_dir/test_file 65534:65534 644\n\
         /test_dir/nested 1000:1000 750\n\
         /test_dir/nested/deep.conf 1000:1000 600\n\
         /:colon_prefixed 0:0 700\n\
         /:colon_prefixed/conf 0:0 640\n\
         /not_in_image 0:0 755\n"
    );
    assert_eq!(
        run(&daemon, &root, &["readlink", "/test_dir/link"]).await,
        "test_file\n"
    );
    assert_eq!(
        run(&daemon, &root, &["cat", "/test_dir/nested/deep.conf"]).await,
        "deep\n"
    );
    assert_eq!(
        run(&daemon, &root, &["cat", "/:colon_prefixed/conf"]).await,
        "colon\n"
    );
    // A volume, not the rootfs: the container's writes land in its dir.
    run(
        &daemon,
        &root,
        &["sh", "-c", "echo root > /test_dir/by-root"],
    )
    .await;
    let dir = volume_dir(&daemon, &root, "/test_dir");
    assert_eq!(
        std::fs::read_to_string(dir.join("by-root")).unwrap(),
        "root\n"
    );

    // The image's non-root owner of the volume writes to it.
    let nobody = cri
        .create_container(&pod, &config, of_image("nobody", &image, Some(65534)))
        .await
        .unwrap();
    cri.start_container(&nobody).await.unwrap();
    assert_eq!(run(&daemon, &nobody, &["id", "-u"]).await, "65534\n");
    let writes = "echo mine > /test_dir/new && echo more >> /test_dir/test_file \
                  && cat /test_dir/new /test_dir/test_file && stat -c '%u' /test_dir/new";
    assert_eq!(
        run(&daemon, &nobody, &["sh", "-c", writes]).await,
        "mine\nfrom the image\nmore\n65534\n"
    );
    // Its own copy: the first container's write is not in it.
    assert_eq!(
        run(&daemon, &nobody, &["ls", "/test_dir"]).await,
        "link\nnested\nnew\ntest_file\n"
    );
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_volume_path_symlinked_out_of_the_image_copies_only_the_images_files() {
    require_root!();
    let escape = layer(&[
        Entry::Dir("etc", 0o755, (0, 0)),
        Entry::File("etc/image-only", 0o644, (0, 0), b"image\n"),
        Entry::Symlink("esc", "/etc"),
        Entry::Dir("a", 0o755, (0, 0)),
        Entry::Dir("a/b", 0o755, (0, 0)),
        Entry::Symlink("a/b/up", "../../../../../../etc"),
    ]);
    let image = push_image(
        "berth-test/volumes:escape",
        serde_json::json!({
            "Env": ["PATH=/bin"],
            "Volumes": {"/esc": {}, "/a/b/up": {}},
        }),
        &[busybox_layer(), escape],
    );
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    cri.pull(&image).await.unwrap();
    let config = pod_config("escape");
    let pod = cri.run_pod(&config).await.unwrap();
    let id = cri
        .create_container(&pod, &config, of_image("c", &image, None))
        .await
        .unwrap();
    // Before runc adds its mount points: exactly the image's /etc.
    for path in ["/esc", "/a/b/up"] {
        let dir = volume_dir(&daemon, &id, path);
        assert_eq!(names(&dir), vec!["image-only".to_string()], "{path}");
    }
    cri.start_container(&id).await.unwrap();
    assert_eq!(
        run(&daemon, &id, &["cat", "/etc/image-only"]).await,
        "image\n"
    );
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
}
