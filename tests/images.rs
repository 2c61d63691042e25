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

/// A TCP proxy to `upstream` that holds every blob request (the config,
/// then the layers: the manifest has been fetched, the pull is under way)
/// until `release` is told; `held` is told when it first holds one.
async fn blob_holding_proxy(
    upstream: &str,
) -> (
    String,
    tokio::sync::mpsc::Receiver<()>,
    tokio::sync::watch::Sender<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (held_tx, held) = tokio::sync::mpsc::channel(64);
    let (release, released) = tokio::sync::watch::channel(false);
    let upstream = upstream.to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (upstream, held_tx, mut released) =
                (upstream.clone(), held_tx.clone(), released.clone());
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match from_client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let chunk = &buf[..n];
                    if chunk.windows(7).any(|w| w == b"/blobs/") && !*released.borrow() {
                        let _ = held_tx.try_send(());
                        if released.wait_for(|r| *r).await.is_err() {
                            return;
                        }
                    }
                    if to_server.write_all(chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, held, release)
}

/// ListImages and ImageStatus never wait for a pull (issue #29): with a
/// pull held in the middle (its manifest fetched, its blobs held by the
/// registry) and a RemoveImage (with its garbage collection) done meanwhile,
/// both answer at once, within a 2 s deadline; the pull then finishes.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn list_and_status_answer_while_a_pull_is_held() {
    require_root!();
    let reg = registry();
    let daemon = Daemon::start("").await;
    let cri = daemon.cri().await;
    let name_image = format!("{}/berth-test/user-name:latest", reg.addr);
    let kept = cri.pull(&name_image).await.unwrap();
    let gone = cri.pull(&reg.busybox()).await.unwrap();

    let (proxy, mut held, release) = blob_holding_proxy(&reg.addr).await;
    let proxied = format!("{proxy}/berth-test/busybox:latest");
    let pull = {
        let (cri, proxied) = (cri.clone(), proxied.clone());
        tokio::spawn(async move { cri.pull(&proxied).await })
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), held.recv())
        .await
        .expect("the pull reached its blobs");

    // The bound says "not blocked"; it is no timing figure.
    let prompt = cri.with_deadline(std::time::Duration::from_secs(2));
    let ids = |images: Vec<v1::Image>| images.into_iter().map(|i| i.id).collect::<Vec<_>>();
    let listed = ids(prompt
        .list_images(None)
        .await
        .expect("ListImages during a pull"));
    assert!(
        listed.contains(&kept) && listed.contains(&gone),
        "{listed:?}"
    );
    let status = prompt
        .image_status(&name_image)
        .await
        .expect("ImageStatus during a pull");
    assert_eq!(status.map(|i| i.id), Some(kept.clone()));
    assert!(
        prompt.image_status(&proxied).await.unwrap().is_none(),
        "not pulled yet"
    );

    // A removal (and its collection) while the pull holds leases on the
    // same content; the readers still answer at once.
    prompt
        .remove_image(&reg.busybox())
        .await
        .expect("RemoveImage during a pull");
    let listed = ids(prompt.list_images(None).await.unwrap());
    assert_eq!(listed, vec![kept.clone()]);
    assert!(!pull.is_finished(), "the pull was not held");

    release.send(true).unwrap();
    let pulled = tokio::time::timeout(std::time::Duration::from_secs(60), pull)
        .await
        .expect("the pull finished once released")
        .unwrap()
        .expect("PullImage");
    assert_eq!(pulled, gone, "same content, same id");
    let status = prompt
        .image_status(&proxied)
        .await
        .unwrap()
        .expect("pulled");
    assert_eq!(status.id, pulled);
}

/// Runs skopeo with `args`; its stdout.
fn skopeo(args: &[&str]) -> String {
    let out = std::process::Command::new("skopeo")
        .args(args)
        .output()
        .expect("skopeo (hack/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Archives made by skopeo from the test registry are loaded with the
/// registry out of reach (mirror-only, no mirror): a docker archive from
/// `images.import_dir` at start-up, an OCI archive with `berth images
/// import`; a container runs from each. `berth images export` writes an OCI
/// archive that skopeo reads, with the image's manifest digest. A bad
/// archive is refused with the reason and records nothing.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn archives_import_run_and_export() {
    require_root!();
    let reg = registry();
    let work = tempfile::tempdir().unwrap();
    let import_dir = work.path().join("import");
    std::fs::create_dir(&import_dir).unwrap();
    let src = format!("docker://{}", reg.busybox());
    let docker_tar = import_dir.join("10-busybox.tar");
    let oci_tar = work.path().join("busybox-oci.tar");
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &src,
        &format!(
            "docker-archive:{}:example.com/archived/busybox:docker",
            docker_tar.display()
        ),
    ]);
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &src,
        &format!(
            "oci-archive:{}:example.com/archived/busybox:oci",
            oci_tar.display()
        ),
    ]);
    // A broken archive in the import dir is logged, not fatal.
    std::fs::write(import_dir.join("20-broken.tar"), b"not a tar").unwrap();

    let net = common::pods::TestNet::new();
    let daemon = common::pods::daemon_with(
        &net,
        &format!(
            "[registry]\nmirror_only = true\n[images]\nimport_dir = {:?}\n",
            import_dir
        ),
    )
    .await;
    let cri = daemon.cri().await;
    // Nothing can be pulled.
    assert!(cri.pull(&reg.busybox()).await.is_err());
    let docker_image = cri
        .image_status("example.com/archived/busybox:docker")
        .await
        .unwrap()
        .expect("imported from the import dir at start-up");
    assert!(
        daemon.stderr().contains("20-broken.tar"),
        "the broken archive is logged by name"
    );

    let cli = |args: &[&str]| berth_images(&daemon, args);
    let out = cli(&["import", oci_tar.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("example.com/archived/busybox:oci"));
    let oci_image = cri
        .image_status("example.com/archived/busybox:oci")
        .await
        .unwrap()
        .expect("imported by the CLI");
    // skopeo rewrites the config for a docker archive: two images.
    assert_ne!(oci_image.id, docker_image.id);

    // A container from each name.
    let pod_config = common::pods::pod_config("archived");
    let pod = cri.run_pod(&pod_config).await.unwrap();
    for (n, image) in [
        "example.com/archived/busybox:docker",
        "example.com/archived/busybox:oci",
    ]
    .iter()
    .enumerate()
    {
        let mut config = common::cri::container(&format!("c{n}"), &["sh", "-c", "exit 7"]);
        config.image = Some(v1::ImageSpec {
            image: image.to_string(),
            ..Default::default()
        });
        let id = common::cri::run_container(&daemon, &pod, &pod_config, config).await;
        let st = common::cri::wait_exited(&daemon, &id, std::time::Duration::from_secs(20)).await;
        assert_eq!(st.exit_code, 7, "{image}");
    }

    // Hostile: a path escape. Refused with the reason; nothing recorded.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    h.as_old_mut().name[..4].copy_from_slice(b"../x");
    h.set_cksum();
    b.append(&h, &b"x"[..]).unwrap();
    let bad = work.path().join("bad.tar");
    std::fs::write(&bad, b.into_inner().unwrap()).unwrap();
    let before = cri.list_images(None).await.unwrap().len();
    let out = cli(&["import", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("escapes the archive"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cri.list_images(None).await.unwrap().len(), before);

    // Export, read back by skopeo: the same manifest digest.
    let exported = work.path().join("exported.tar");
    let out = cli(&[
        "export",
        "-o",
        exported.to_str().unwrap(),
        "example.com/archived/busybox:oci",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspect: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        &format!("oci-archive:{}", exported.display()),
    ]))
    .unwrap();
    let digest = inspect["Digest"].as_str().unwrap().to_string();
    assert!(
        oci_image.repo_digests.iter().any(|d| d.ends_with(&digest)),
        "{digest} in {:?}",
        oci_image.repo_digests
    );
    let copied = work.path().join("copied");
    skopeo(&[
        "copy",
        &format!("oci-archive:{}", exported.display()),
        &format!("dir:{}", copied.display()),
    ]);
    let manifest = std::fs::read(copied.join("manifest.json")).unwrap();
    assert_eq!(format!("sha256:{}", sha256_hex(&manifest)), digest);
    assert!(
        copied.join(&oci_image.id["sha256:".len()..]).exists(),
        "the config blob"
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// `berth images ARGS --socket` of `daemon`, run to its end.
fn berth_images(daemon: &Daemon, args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::berth_bin())
        .arg("images")
        .args(args)
        .arg("--socket")
        .arg(daemon.sandbox.socket())
        .output()
        .unwrap()
}

/// The layer digests of `image`'s manifest in the test registry (for
/// linux/amd64 when it is an index), bottom first.
fn manifest_layers(image: &str) -> Vec<String> {
    let raw: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{image}"),
    ]))
    .unwrap();
    assert!(raw["layers"].is_array(), "{image}: not an image manifest");
    raw["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect()
}

/// The `layer …` lines of a plain `berth images pull`: (short digest, what
/// became of it).
fn layer_lines(stdout: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("layer "))
        .map(|l| {
            let (digest, rest) = l.split_once(' ').unwrap();
            // `1.20 MiB pulled`: the size's two words, then the outcome.
            let fate = rest.splitn(3, ' ').nth(2).unwrap_or_default();
            (digest.to_string(), fate.to_string())
        })
        .collect();
    out.sort();
    out
}

/// `berth images pull` without a terminal: a line per layer (the digests of
/// the manifest), then the image id and the reference with its digest,
/// which ImageStatus and ListImages then show; again, every layer is
/// "already present". A missing image and an unreachable registry exit
/// non-zero with the daemon's reason. A client that goes away mid-pull
/// leaves the pull to finish; a CRI PullImage of the same image at the same
/// time gets the same image.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn pull_with_progress_from_the_cli() {
    require_root!();
    let reg = registry();
    let daemon = Daemon::start("").await;
    let cri = daemon.cri().await;
    let socket = daemon.sandbox.socket();
    let cli = |args: &[&str]| berth_images(&daemon, args);
    let image = format!("{}/berth-test/layers:latest", reg.addr);
    let layers = manifest_layers(&image);
    assert_eq!(layers.len(), 3, "the test image has 3 layers");
    let short = |d: &str| d[.."sha256:".len() + 12].to_string();
    let mut want: Vec<String> = layers.iter().map(|d| short(d)).collect();
    want.sort();

    let out = cli(&["pull", &image]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = layer_lines(&stdout);
    assert_eq!(
        lines.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(),
        want,
        "one line per layer:\n{stdout}"
    );
    assert!(lines.iter().all(|(_, fate)| fate == "pulled"), "{stdout}");
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("image "))
        .expect("the image id")
        .to_string();
    let reference = stdout
        .lines()
        .find_map(|l| l.strip_prefix("reference "))
        .expect("the reference")
        .to_string();
    let status = cri.image_status(&image).await.unwrap().expect("pulled");
    assert_eq!(status.id, id);
    assert!(status.repo_tags.contains(&image));
    assert!(
        status.repo_digests.contains(&reference)
            && reference.starts_with(&format!("{}/berth-test/layers@sha256:", reg.addr)),
        "{reference} in {:?}",
        status.repo_digests
    );
    assert!(cri
        .list_images(None)
        .await
        .unwrap()
        .iter()
        .any(|i| i.id == id));

    // Again: nothing to fetch.
    let out = cli(&["pull", &image]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}");
    let lines = layer_lines(&stdout);
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines.iter().all(|(_, fate)| fate == "already present"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("image {id}")));

    // A missing image, an unreachable registry: the daemon's reason.
    let out = cli(&["pull", &format!("{}/berth-test/absent:latest", reg.addr)]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(
        stderr.contains("berth-test/absent:latest") && stderr.contains("not found"),
        "{stderr}"
    );
    let port = {
        // A port nobody listens on.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = cli(&["pull", &format!("127.0.0.1:{port}/nobody/here:1")]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")) && stderr.contains("connect"),
        "{stderr}"
    );

    // A client that reads the first message and goes: the pull finishes.
    let gone = format!("{}/berth-test/zstd:latest", reg.addr);
    let channel = common::channel(&socket).await.unwrap();
    let mut admin = cri_api::admin::images_client::ImagesClient::new(channel);
    let mut stream = admin
        .pull(cri_api::admin::PullRequest {
            image: gone.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("a first message");
    assert!(matches!(
        first.event,
        Some(cri_api::admin::pull_progress::Event::Resolved(_))
    ));
    drop(stream);
    drop(admin);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while cri.image_status(&gone).await.unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the pull its client left did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // The CLI and a CRI PullImage of one image at once: one image.
    let both = format!("{}/berth-test/user-uid:latest", reg.addr);
    let cli_pull = {
        let (socket, both) = (socket.clone(), both.clone());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(common::berth_bin())
                .args(["images", "pull", &both, "--socket"])
                .arg(&socket)
                .output()
                .unwrap()
        })
    };
    let cri_id = cri.pull(&both).await.unwrap();
    let out = cli_pull.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains(&format!("image {cri_id}")), "{stdout}");
}

/// A containerd of its own (root, state and sockets in a temp dir, its CRI
/// plugin off), killed when dropped.
struct Containerd {
    child: std::process::Child,
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Containerd {
    /// Fails the test when containerd or ctr is not installed: a test
    /// that could not run must not pass.
    async fn start() -> Containerd {
        for cmd in ["containerd", "ctr"] {
            let installed = std::process::Command::new(cmd)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                installed,
                "needs {cmd} on PATH (hack/install-deps.sh installs it)"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        let socket = p("containerd.sock");
        std::fs::write(
            p("config.toml"),
            format!(
                "version = 2\nroot = {:?}\nstate = {:?}\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\naddress = {socket:?}\n[ttrpc]\naddress = {:?}\n",
                p("root"),
                p("state"),
                p("containerd.sock.ttrpc"),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(p("containerd.log")).unwrap();
        let child = std::process::Command::new("containerd")
            .arg("--config")
            .arg(p("config.toml"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let ctrd = Containerd {
            child,
            socket,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ctrd.socket.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "containerd did not start: {}",
                std::fs::read_to_string(ctrd._dir.path().join("containerd.log")).unwrap()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        ctrd
    }

    /// `ctr --address SOCKET -n berth-test ARGS`: its stdout.
    fn ctr(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", "berth-test"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctr {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// containerd's `ctr images import` reads what `berth images export`
/// writes (four images: one with a zstd layer, one pulled as an index, one
/// with a second name not asked for; the manifests berth pulled, unpacked
/// by containerd) and gets the names asked for, no other; `berth images
/// import` reads what `ctr images export` writes (the way a node's images
/// move from containerd to berth without a registry). Fails, saying so,
/// without containerd.
#[tokio::test]
#[ignore = "needs root and containerd: hack/test.sh runs it (--include-ignored)"]
async fn containerd_and_berth_read_each_others_archives() {
    require_root!();
    let ctrd = Containerd::start().await;
    let reg = registry();
    let daemon = Daemon::start("").await;
    let cri = daemon.cri().await;
    let cli = |args: &[&str]| {
        let out = berth_images(&daemon, args);
        assert!(
            out.status.success(),
            "berth images {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let layers = format!("{}/berth-test/layers:latest", reg.addr);
    let zstd = format!("{}/berth-test/zstd:latest", reg.addr);
    let busybox = reg.busybox();
    let multi = format!("{}/berth-test/multi:latest", reg.addr);
    let layers_id = cri.pull(&layers).await.unwrap();
    cri.pull(&zstd).await.unwrap();
    cri.pull(&busybox).await.unwrap();
    cri.pull(&format!("{}/e2e-test-images/busybox:1.29-2", reg.addr))
        .await
        .unwrap();
    cri.pull(&multi).await.unwrap();
    let index = cri
        .image_status(&multi)
        .await
        .unwrap()
        .unwrap()
        .repo_digests[0]
        .split_once('@')
        .unwrap()
        .1
        .to_string();
    let work = tempfile::tempdir().unwrap();

    // berth → containerd.
    let exported = work.path().join("berth.tar");
    cli(&[
        "export",
        "-o",
        exported.to_str().unwrap(),
        &layers,
        &zstd,
        &busybox,
        &multi,
    ]);
    ctrd.ctr(&["images", "import", exported.to_str().unwrap()]);
    let mut listed: Vec<String> = ctrd
        .ctr(&["images", "ls", "-q"])
        .lines()
        .map(str::to_string)
        .collect();
    listed.sort();
    let mut want = vec![layers.clone(), zstd.clone(), busybox.clone(), multi.clone()];
    want.sort();
    assert_eq!(listed, want, "the names asked for, no other");
    let check = ctrd.ctr(&["images", "check"]);
    for (name, digest) in [
        (&layers, manifest_digest(&layers)),
        (&zstd, manifest_digest(&zstd)),
        (&busybox, manifest_digest(&busybox)),
        (&multi, index),
    ] {
        let line = check
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not in ctr's images:\n{check}"));
        assert!(
            line.contains(&digest) && line.contains("complete") && line.ends_with("true"),
            "{name} {digest}: {line}"
        );
    }

    // containerd → berth.
    ctrd.ctr(&["images", "tag", &layers, "example.com/from/containerd:1"]);
    let from_ctr = work.path().join("containerd.tar");
    ctrd.ctr(&[
        "images",
        "export",
        from_ctr.to_str().unwrap(),
        "example.com/from/containerd:1",
    ]);
    let out = cli(&["import", from_ctr.to_str().unwrap()]);
    assert!(out.contains("example.com/from/containerd:1"), "{out}");
    let imported = cri
        .image_status("example.com/from/containerd:1")
        .await
        .unwrap()
        .expect("imported");
    assert_eq!(imported.id, layers_id);
}

/// The digest of `image`'s manifest in the test registry.
fn manifest_digest(image: &str) -> String {
    let inspect: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        &format!("docker://{image}"),
    ]))
    .unwrap();
    inspect["Digest"].as_str().unwrap().to_string()
}

/// The JSON file `name` of the tar archive at `path`, and its text.
fn archive_json(path: &std::path::Path, name: &str) -> (serde_json::Value, String) {
    use std::io::Read;
    let mut ar = tar::Archive::new(std::fs::File::open(path).unwrap());
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some(name) {
            let mut text = String::new();
            e.read_to_string(&mut text).unwrap();
            return (serde_json::from_str(&text).unwrap(), text);
        }
    }
    panic!("no {name} in {}", path.display());
}

/// `index.json`'s entries in the archive at `path`: their
/// `io.containerd.image.name`, `org.opencontainers.image.ref.name`.
fn archive_names(path: &std::path::Path) -> Vec<(String, String)> {
    let (index, _) = archive_json(path, "index.json");
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let a = |k: &str| e["annotations"][k].as_str().unwrap_or_default().to_string();
            (
                a("io.containerd.image.name"),
                a("org.opencontainers.image.ref.name"),
            )
        })
        .collect()
}

/// `berth images export` of one name of an image that has two writes that
/// name only, as `ctr images export` does: skopeo reads the archive as one
/// image, as `oci-archive:` (alone and by its tag) and as `docker-archive:`
/// (alone and by its name, from Docker's `manifest.json`), and nothing of
/// the other name is in it. skopeo copies it into the test registry, and a
/// container runs from the copy, pulled with the exported image gone.
/// (An OCI image: skopeo 1.9 finds an `oci-archive:` entry by its tag only
/// when it has an OCI media type.)
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn an_export_is_one_image_under_the_name_asked_for() {
    require_root!();
    let reg = registry();
    let net = common::pods::TestNet::new();
    let daemon = common::pods::daemon_with(&net, "").await;
    let cri = daemon.cri().await;
    let name = format!("{}/berth-test/layers:latest", reg.addr);
    let other = format!("{}/berth-test/layers-alias:export", reg.addr);
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{name}"),
        &format!("docker://{other}"),
    ]);
    let id = cri.pull(&name).await.unwrap();
    assert_eq!(cri.pull(&other).await.unwrap(), id, "one image, two names");
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("layers.tar");
    let run = berth_images(&daemon, &["export", "-o", out.to_str().unwrap(), &name]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let digest = manifest_digest(&name);
    let oci = format!("oci-archive:{}", out.display());
    for source in [oci.clone(), format!("{oci}:latest")] {
        let inspect: serde_json::Value =
            serde_json::from_str(&skopeo(&["inspect", &source])).unwrap();
        assert_eq!(inspect["Digest"], digest, "{source}");
    }
    let docker_archive = format!("docker-archive:{}", out.display());
    for source in [docker_archive.clone(), format!("{docker_archive}:{name}")] {
        let copied = work.path().join(format!("dir-{}", source.len()));
        skopeo(&["copy", &source, &format!("dir:{}", copied.display())]);
        assert!(
            copied.join(&id["sha256:".len()..]).exists(),
            "{source}: the config blob"
        );
    }

    // What skopeo read: the name asked for, nothing of the other.
    assert_eq!(archive_names(&out), [(name.clone(), "latest".to_string())]);
    let (docker, docker_text) = archive_json(&out, "manifest.json");
    assert_eq!(docker[0]["RepoTags"], serde_json::json!([name]));
    let (_, index_text) = archive_json(&out, "index.json");
    for text in [&index_text, &docker_text] {
        assert!(!text.contains("layers-alias"), "{text}");
    }

    let copy = format!("{}/berth-test/exported:copy", reg.addr);
    skopeo(&[
        "copy",
        "--dest-tls-verify=false",
        &oci,
        &format!("docker://{copy}"),
    ]);
    cri.remove_image(&id).await.unwrap();
    assert!(cri.image_status(&name).await.unwrap().is_none());
    assert_eq!(cri.pull(&copy).await.unwrap(), id);
    let pod_config = common::pods::pod_config("exported");
    let pod = cri.run_pod(&pod_config).await.unwrap();
    let mut config = common::cri::container("copy", &["sh", "-c", "exit 7"]);
    config.image = Some(v1::ImageSpec {
        image: copy.clone(),
        ..Default::default()
    });
    let c = common::cri::run_container(&daemon, &pod, &pod_config, config).await;
    let st = common::cri::wait_exited(&daemon, &c, std::time::Duration::from_secs(20)).await;
    assert_eq!(st.exit_code, 7);
}

/// Two images exported by name (one of them with a second name, not asked
/// for), removed, and imported again with `berth images import`: both come
/// back under the names exported, and the other name does not.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn two_named_images_go_round_through_an_archive() {
    require_root!();
    let reg = registry();
    let daemon = Daemon::start("").await;
    let cri = daemon.cri().await;
    let busybox = reg.busybox();
    let other = format!("{}/e2e-test-images/busybox:1.29-2", reg.addr);
    let layers = format!("{}/berth-test/layers:latest", reg.addr);
    let busybox_id = cri.pull(&busybox).await.unwrap();
    cri.pull(&other).await.unwrap();
    let layers_id = cri.pull(&layers).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("two.tar");
    let cli = |args: &[&str]| {
        let run = berth_images(&daemon, args);
        assert!(
            run.status.success(),
            "berth images {args:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        String::from_utf8(run.stdout).unwrap()
    };
    cli(&["export", "-o", out.to_str().unwrap(), &busybox, &layers]);
    for id in [&busybox_id, &layers_id] {
        cri.remove_image(id).await.unwrap();
    }
    assert!(cri.list_images(None).await.unwrap().is_empty());

    let stdout = cli(&["import", out.to_str().unwrap()]);
    assert!(
        stdout.contains(&busybox) && stdout.contains(&layers),
        "{stdout}"
    );
    let got = cri.image_status(&busybox).await.unwrap().expect("imported");
    assert_eq!(got.id, busybox_id);
    assert_eq!(got.repo_tags, std::slice::from_ref(&busybox));
    let got = cri.image_status(&layers).await.unwrap().expect("imported");
    assert_eq!(got.id, layers_id);
    assert!(cri.image_status(&other).await.unwrap().is_none());
    assert_eq!(
        archive_names(&out),
        [
            (busybox.clone(), "latest".to_string()),
            (layers.clone(), "latest".to_string())
        ]
    );
}

/// An export naming an image the store does not have fails with NotFound
/// before any byte is sent: the CLI says so and writes no file.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn exporting_an_unknown_image_is_not_found_and_writes_nothing() {
    require_root!();
    let reg = registry();
    let daemon = Daemon::start("").await;
    let cri = daemon.cri().await;
    let busybox = reg.busybox();
    cri.pull(&busybox).await.unwrap();
    let absent = format!("{}/berth-test/absent:1", reg.addr);
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out.tar");
    let run = berth_images(
        &daemon,
        &["export", "-o", out.to_str().unwrap(), &busybox, &absent],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        stderr.contains(&absent) && stderr.contains("not found"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(work.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");

    let channel = common::channel(&daemon.sandbox.socket()).await.unwrap();
    let status = cri_api::admin::images_client::ImagesClient::new(channel)
        .export(cri_api::admin::ExportRequest {
            images: vec![absent.clone()],
            all_tags: false,
        })
        .await
        .expect_err("NotFound");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
}
