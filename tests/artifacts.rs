//! OCI artifacts as image volumes (KEP-4639, issue #31), through the real
//! daemon, runc and the test registry: artifacts the tests build (an OCI
//! layout of blobs and a manifest, pushed with skopeo) are pulled, listed,
//! mounted read-only in a container that reads every file byte for byte,
//! kept over a restart and after a RemoveImage while mounted; bad ones are
//! refused with the expected code and leave nothing. Root only.

use std::path::Path;

use crate::common;

use common::artifacts::{self, artifact_mount, model, BIN, EMPTY, MODEL_CONFIG, MODEL_TYPE, VOCAB};
use common::cri::{container, container_status, exec, start};
use common::pods::{daemon_with, pod_config, TestNet};
use common::{registry, Daemon};
use cri_api::v1;
use tonic::Code;

/// Stdout of `cmd` in container `id`, which must succeed.
async fn run(daemon: &Daemon, id: &str, cmd: &[&str]) -> Vec<u8> {
    let r = exec(daemon, id, cmd).await;
    assert_eq!(
        r.exit_code,
        0,
        "{cmd:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    r.stdout
}

/// Checks every file of the model under `dir` in container `id`: byte for
/// byte, read-only, root's and readable by all.
async fn assert_model_at(daemon: &Daemon, id: &str, dir: &str) {
    let weights = artifacts::digest(&artifacts::weights(256 << 10));
    let sum = run(daemon, id, &["sha256sum", &format!("{dir}/model.bin")]).await;
    assert_eq!(
        String::from_utf8_lossy(&sum[..64]),
        weights["sha256:".len()..],
        "{dir}/model.bin"
    );
    assert_eq!(
        run(daemon, id, &["cat", &format!("{dir}/tok/vocab.txt")]).await,
        VOCAB
    );
    assert_eq!(
        run(daemon, id, &["cat", &format!("{dir}/data/a.txt")]).await,
        b"from a tar\n"
    );
    let st = run(
        daemon,
        id,
        &["stat", "-c", "%a %u %g", &format!("{dir}/model.bin")],
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&st), "444 0 0\n");
    // Writes fail: the file system is read-only (EROFS), for root too.
    let writes = format!("echo x > {dir}/new; echo x >> {dir}/model.bin; mkdir {dir}/d");
    let w = daemon
        .cri()
        .await
        .exec_sync(id, &["sh", "-c", &writes], 10)
        .await
        .unwrap();
    assert_ne!(w.exit_code, 0);
    let err = String::from_utf8_lossy(&w.stderr);
    assert_eq!(err.matches("Read-only file system").count(), 3, "{err}");
}

/// The snapshot dirs of the store of `daemon`, but its temp ones.
fn snapshots(daemon: &Daemon) -> Vec<String> {
    names(&daemon.sandbox.path("root/images/snapshots"))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_artifact_volume_is_read_only_and_survives_a_restart_and_a_remove_image() {
    require_root!();
    let reg = registry();
    let (model, digest) = model();
    let dataset_name = format!("{}/berth-test/artifact-dataset:v1", reg.addr);
    let dataset_digest = artifacts::push(
        &reg.addr,
        "berth-test/artifact-dataset:v1",
        Some("application/vnd.lab.dataset.v1"),
        (EMPTY, b"{}"),
        &[(BIN, b"a,b\n1,2\n", Some("rows.csv"))],
    );
    let net = TestNet::new();
    let mut daemon = daemon_with(&net, "").await;
    let cri = daemon.cri().await;

    // Pulled, listed and shown with its type; known by its manifest.
    assert_eq!(cri.pull(&model).await.unwrap(), digest);
    assert_eq!(cri.pull(&dataset_name).await.unwrap(), dataset_digest);
    cri.pull(&reg.busybox()).await.unwrap();
    let status = cri.image_status(&model).await.unwrap().expect("an image");
    assert_eq!(status.id, digest);
    assert!(status.repo_tags.contains(&model));
    let info = cri.image_info(&model).await.unwrap();
    assert_eq!(info["artifactType"], MODEL_TYPE, "{info}");
    let model_snapshots: Vec<String> = info["chainIDs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap()["sha256:".len()..].to_string())
        .collect();
    assert_eq!(model_snapshots.len(), 2, "{info}");
    let listed: Vec<String> = cri
        .list_images(None)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert!(listed.contains(&digest) && listed.contains(&dataset_digest));

    let pod_config = pod_config("artifacts");
    let pod = cri.run_pod(&pod_config).await.unwrap();
    // An artifact is not a container image: refused, nothing made.
    let mut as_image = container("as-image", &["true"]);
    as_image.image = Some(v1::ImageSpec {
        image: model.clone(),
        ..Default::default()
    });
    let e = cri
        .create_container(&pod, &pod_config, as_image)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("OCI artifact"), "{e:?}");
    // A volume of it asked for read-write: refused.
    let mut rw = container("rw", &["true"]);
    rw.mounts = vec![artifact_mount("/models", &model, "")];
    rw.mounts[0].readonly = false;
    let e = cri
        .create_container(&pod, &pod_config, rw)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(cri.list_containers(None).await.unwrap().is_empty());

    // Two artifacts, one of them twice and by sub paths (a directory and
    // a file), for a user that is not root.
    let mut config = container("reader", &["sleep", "1000"]);
    config.mounts = vec![
        artifact_mount("/models", &model, ""),
        artifact_mount("/again", &model, ""),
        artifact_mount("/data", &dataset_name, ""),
        artifact_mount("/tok", &model, "tok"),
        artifact_mount("/vocab.txt", &model, "tok/vocab.txt"),
    ];
    config.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            run_as_user: Some(v1::Int64Value { value: 1000 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = cri
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap();
    start(&daemon, &id).await;
    // The status names the exact artifact mounted (KEP-5365).
    let st = container_status(&daemon, &id).await;
    let mounted = st.mounts.iter().find(|m| m.container_path == "/models");
    let image_ref = mounted.and_then(|m| m.image.as_ref()).map(|i| &i.image_ref);
    assert_eq!(image_ref, Some(&digest), "{:?}", st.mounts);
    assert_eq!(run(&daemon, &id, &["id", "-u"]).await, b"1000\n");
    for dir in ["/models", "/again"] {
        assert_model_at(&daemon, &id, dir).await;
    }
    assert_eq!(
        run(&daemon, &id, &["cat", "/data/rows.csv"]).await,
        b"a,b\n1,2\n"
    );
    assert_eq!(run(&daemon, &id, &["cat", "/tok/vocab.txt"]).await, VOCAB);
    assert_eq!(run(&daemon, &id, &["cat", "/vocab.txt"]).await, VOCAB);
    // A sub path the artifact does not have: refused.
    let mut missing = container("missing", &["true"]);
    missing.mounts = vec![artifact_mount("/x", &model, "no/such")];
    let e = cri
        .create_container(&pod, &pod_config, missing)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // A restart keeps the artifact, and the mounted container.
    daemon.restart().await;
    let cri = daemon.cri().await;
    assert_eq!(cri.image_status(&model).await.unwrap().unwrap().id, digest);
    assert_model_at(&daemon, &id, "/models").await;
    let mut later = container("later", &["sleep", "1000"]);
    later.mounts = vec![artifact_mount("/models", &model, "")];
    let later = cri
        .create_container(&pod, &pod_config, later)
        .await
        .unwrap();
    start(&daemon, &later).await;
    assert_model_at(&daemon, &later, "/models").await;

    // RemoveImage while it is mounted: the image goes, the files stay.
    cri.remove_image(&model).await.unwrap();
    assert!(cri.image_status(&model).await.unwrap().is_none());
    for c in [&id, &later] {
        assert_model_at(&daemon, c, "/models").await;
    }
    let left = snapshots(&daemon);
    assert!(model_snapshots.iter().all(|s| left.contains(s)), "{left:?}");
    // A restart now keeps the snapshots the containers hold.
    daemon.restart().await;
    assert_model_at(&daemon, &later, "/models").await;
    // Once the last container using them is gone, so are they.
    common::cri::remove_pod(&daemon, &pod).await;
    let left = snapshots(&daemon);
    assert!(
        model_snapshots.iter().all(|s| !left.contains(s)),
        "{left:?}"
    );
}

/// An artifact of 100 tar layers (a snapshot each: 100 lowerdirs of some
/// 100 bytes, more than the page of options a mount takes) mounts as an
/// image volume and shows every layer's file; before, the mount got its
/// options cut short and CreateContainer failed (ENOENT).
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_artifact_of_a_hundred_tar_layers_mounts_whole() {
    require_root!();
    let reg = registry();
    let tars: Vec<Vec<u8>> = (0..100)
        .map(|n| artifacts::tar_of(&[(&format!("l{n:03}"), n.to_string().as_bytes())]))
        .collect();
    let layers: Vec<artifacts::Layer<'_>> = tars
        .iter()
        .map(|t| (artifacts::TAR, &t[..], None))
        .collect();
    let repo = "berth-test/artifact-layers:v1";
    artifacts::push(&reg.addr, repo, Some(MODEL_TYPE), (EMPTY, b"{}"), &layers);
    let name = format!("{}/{repo}", reg.addr);

    let net = TestNet::new();
    let daemon = daemon_with(&net, "").await;
    let cri = daemon.cri().await;
    cri.pull(&name).await.unwrap();
    cri.pull(&reg.busybox()).await.unwrap();
    let pod_config = pod_config("many-layers");
    let pod = cri.run_pod(&pod_config).await.unwrap();
    let mut config = container("reader", &["sleep", "1000"]);
    config.mounts = vec![artifact_mount("/layers", &name, "")];
    let id = cri
        .create_container(&pod, &pod_config, config)
        .await
        .unwrap();
    start(&daemon, &id).await;
    let listed = run(&daemon, &id, &["ls", "/layers"]).await;
    let listed = String::from_utf8_lossy(&listed);
    let want: Vec<String> = (0..100).map(|n| format!("l{n:03}")).collect();
    assert_eq!(listed.lines().collect::<Vec<_>>(), want);
    assert_eq!(run(&daemon, &id, &["cat", "/layers/l000"]).await, b"0");
    assert_eq!(run(&daemon, &id, &["cat", "/layers/l099"]).await, b"99");
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn bad_artifacts_are_refused_and_leave_nothing() {
    require_root!();
    let reg = registry();
    let push = |tag: &str, layers: &[artifacts::Layer<'_>]| {
        let name = format!("berth-test/artifact-bad:{tag}");
        artifacts::push(
            &reg.addr,
            &name,
            Some(MODEL_TYPE),
            (MODEL_CONFIG, b"{}"),
            layers,
        );
        format!("{}/{name}", reg.addr)
    };
    let titles: Vec<String> = (0..1000).map(|n| format!("f{n}")).collect();
    let thousand: Vec<artifacts::Layer<'_>> = titles
        .iter()
        .map(|t| (BIN, &b"x"[..], Some(t.as_str())))
        .collect();
    let big = vec![1u8; (1 << 20) + 1];
    let cases = [
        (
            push("thousand", &thousand),
            Code::DataLoss,
            "1000 layers, more than the limit of 128",
        ),
        (
            push("escape", &[(BIN, b"x", Some("../../../etc/cron.d/x"))]),
            Code::DataLoss,
            "\"..\" component",
        ),
        (
            push("big", &[(BIN, &big, Some("big.bin"))]),
            Code::DataLoss,
            "max_layer_bytes",
        ),
    ];
    // A manifest naming a blob the registry does not have.
    let gone = artifacts::digest(b"gone");
    let missing = push(
        "missing",
        &[
            (BIN, b"here", Some("here.bin")),
            (BIN, b"gone", Some("gone.bin")),
        ],
    );
    artifacts::delete_blob(&reg.addr, "berth-test/artifact-bad", &gone);

    let net = TestNet::new();
    let mut daemon = daemon_with(&net, "[registry.unpack]\nmax_layer_bytes = 1048576\n").await;
    let cri = daemon.cri().await;
    let store = daemon.sandbox.path("root/images");
    for (name, code, why) in &cases {
        let e = cri.pull(name).await.unwrap_err();
        assert_eq!(e.code(), *code, "{name}: {e:?}");
        assert!(e.message().contains(why), "{name}: {e:?}");
        // Refused before a blob was fetched: not even the manifest is kept.
        for sub in ["blobs/sha256", "snapshots", "images", "ingest"] {
            assert!(names(&store.join(sub)).is_empty(), "{name}: {sub}");
        }
    }
    let e = cri.pull(&missing).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains(&gone), "{e:?}");
    // No image, no snapshot, nothing under a temp name.
    assert!(cri.list_images(None).await.unwrap().is_empty());
    assert!(names(&store.join("snapshots")).is_empty());
    assert!(names(&store.join("ingest")).is_empty());
    assert!(names(&store.join("images")).is_empty());
    // What it did fetch (manifest, config, one blob) no image holds: the
    // collection at the next start takes it.
    daemon.restart().await;
    assert!(names(&store.join("blobs/sha256")).is_empty());
}
