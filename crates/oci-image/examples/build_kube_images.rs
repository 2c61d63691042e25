//! Builds the images a Kubernetes node's tests use, under the names and tags
//! of Kubernetes v1.37.2's `test/utils/image/manifest.go`, and pushes them to
//! a local registry: `build_kube_images ADDR AGNHOST_BINARY`. The node
//! (`hack/kube.sh`) maps `registry.k8s.io` and `docker.io` to ADDR, so pods
//! name them as upstream does. Prints `ADDR/repo:tag@digest` for each name.
//!
//! - `e2e-test-images/agnhost:2.66.1`: busybox plus the agnhost binary
//!   built from `k8s.io/kubernetes/test/images/agnhost` (entrypoint
//!   `/agnhost`, command `pause`, as upstream's image);
//! - `pause:3.10.2`: the same layers, entrypoint `/agnhost pause` (the
//!   sandbox image kubelet pins and containerd runs);
//! - `e2e-test-images/busybox:1.37.0-2`, `library/busybox:1.37`: busybox;
//! - `e2e-test-images/nonroot:1.5`: busybox with user 1234, as upstream's;
//! - `berth-kube-tests/groups:1`: busybox whose /etc/group makes `app`
//!   (1000) a member of group 50000 (supplementalGroupsPolicy's tests).

#[path = "../tests/support/images.rs"]
mod images;

use images::{Entry, Pushed, Pusher};

const OCI_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    berth_oci_image::install_crypto_provider();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, agnhost] = args.as_slice() else {
        eprintln!("usage: build_kube_images ADDR AGNHOST_BINARY");
        return std::process::ExitCode::from(2);
    };
    match build(addr, agnhost).await {
        Ok(pushed) => {
            for (name, digest) in pushed {
                println!("{addr}/{name}@{digest}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("build_kube_images: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// An image config whose entrypoint and command are set.
fn config_with(cfg: Vec<u8>, entrypoint: &[&str], cmd: &[&str], user: &str) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&cfg).expect("config json");
    v["config"]["Entrypoint"] = serde_json::json!(entrypoint);
    v["config"]["Cmd"] = serde_json::json!(cmd);
    if !user.is_empty() {
        v["config"]["User"] = serde_json::json!(user);
    }
    serde_json::to_vec(&v).expect("json")
}

async fn build(addr: &str, agnhost: &str) -> Result<Pushed, String> {
    let p = Pusher::new(addr, None);
    let arch = images::host_arch();
    let mut pushed = Pushed::new();
    let busybox = images::busybox_layer(OCI_GZIP)?;
    let binary = std::fs::read(agnhost).map_err(|e| format!("{agnhost}: {e}"))?;
    let agn = images::layer(
        images::tar_of(&[Entry::File("agnhost", 0o755, 0, &binary)]),
        OCI_GZIP,
    );
    let both = [&busybox, &agn];
    let groups = images::layer(
        images::tar_of(&[
            Entry::Dir("etc", 0o755),
            Entry::File(
                "etc/group",
                0o644,
                0,
                b"root:x:0:\napp:x:1000:\ngroup-defined-in-image:x:50000:app\n",
            ),
        ]),
        OCI_GZIP,
    );
    let with_groups = [&busybox, &groups];
    let base = images::config(arch, "", &both);
    let plain = images::config(arch, "", &[&busybox]);
    let list: [(&str, &str, Vec<u8>, &[&images::Layer]); 6] = [
        (
            "e2e-test-images/agnhost",
            "2.66.1",
            config_with(base.clone(), &["/agnhost"], &["pause"], ""),
            &both,
        ),
        (
            "pause",
            "3.10.2",
            config_with(base, &["/agnhost", "pause"], &[], ""),
            &both,
        ),
        (
            "e2e-test-images/busybox",
            "1.37.0-2",
            plain.clone(),
            &[&busybox],
        ),
        ("library/busybox", "1.37", plain.clone(), &[&busybox]),
        (
            "e2e-test-images/nonroot",
            "1.5",
            config_with(plain, &[], &["sh"], "1234"),
            &[&busybox],
        ),
        (
            "berth-kube-tests/groups",
            "1",
            images::config(arch, "", &with_groups),
            &with_groups,
        ),
    ];
    for (repo, tag, cfg, layers) in list {
        let (d, _) = p.image(repo, Some(tag), false, &cfg, layers).await?;
        pushed.insert(format!("{repo}:{tag}"), d);
    }
    Ok(pushed)
}
