//! Builds the images a Kubernetes node's tests and the node e2e suite use,
//! under the names and tags of Kubernetes v1.37.2's
//! `test/utils/image/manifest.go`, and pushes them to a local registry:
//! `build_kube_images ADDR GOTOOLS_BIN KUBE_DIR` (GOTOOLS_BIN holds agnhost
//! and nnp as hack/gotools.sh builds them, KUBE_DIR is the k8s.io/kubernetes
//! module's source). The node (`hack/kube.sh`) maps `registry.k8s.io` and
//! `docker.io` to ADDR, so pods name them as upstream does. Prints
//! `ADDR/repo:tag@digest` for each name.
//!
//! - `e2e-test-images/agnhost:2.66.1`: busybox plus the agnhost binary
//!   built from `k8s.io/kubernetes/test/images/agnhost` (entrypoint
//!   `/agnhost`, command `pause`, as upstream's image), with upstream's
//!   `/agnhost-2` link, porter's `/localhost.crt` and `.key` (read from the
//!   module), stand-ins for `curl` ([`CURL`]) and `bash` ([`BASH`]); `agnhost:2.55`
//!   (the suite's previous agnhost) the same with a marker file, so its
//!   digest differs;
//! - `e2e-test-images/kitten:1.8`, `nautilus:1.8`: agnhost plus the files of
//!   upstream's `test/images/kitten` and `nautilus` (`html/`), command
//!   `test-webserver`;
//! - `e2e-test-images/nginx:1.27.0-2`, `1.28.0-2`: stand-ins serving
//!   `/usr/share/nginx/html` on port 80 with busybox's httpd;
//! - `e2e-test-images/nonewprivs:1.4`: busybox plus upstream's `nnp`
//!   (`test/images/nonewprivs`), setuid root, as upstream's;
//! - `e2e-test-images/busybox:1.36.1-1`: busybox with a marker file;
//! - both e2e busyboxes with a stand-in for the `nmeter` applet Debian's
//!   busybox lacks ([`NMETER`]);
//! - `pause:3.10.2`: the same layers, entrypoint `/agnhost pause` (the
//!   sandbox image kubelet pins and containerd runs);
//! - `e2e-test-images/busybox:1.37.0-2`, `library/busybox:1.37`: busybox;
//! - `e2e-test-images/glibc-dns-testing:2.1.1`: busybox (the specs run
//!   `hostname` and `hostname -f`);
//! - `e2e-test-images/nonroot:1.5`: busybox with user 1234, as upstream's;
//! - `berth-kube-tests/groups:1`: busybox whose /etc/group makes `app`
//!   (1000) a member of group 50000 (supplementalGroupsPolicy's tests).

#[path = "../tests/support/images.rs"]
mod images;

use std::path::Path;

use images::{Entry, Pushed, Pusher};

const OCI_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Upstream's agnhost image has curl, which the lifecycle hook specs run
/// as `curl http://HOST:PORT/PATH`: this fetches the URL (the last
/// argument not an option) with busybox's wget, failing as curl -f would.
const CURL: &str = r#"#!/bin/sh
url=
for a in "$@"; do case $a in -*) ;; *) url=$a ;; esac; done
[ -n "$url" ] || { echo "curl stand-in: no URL" >&2; exit 2; }
exec wget -q -O - "$url"
"#;

/// Upstream's agnhost image has bash (the probe specs run `/bin/bash -c`):
/// busybox's sh runs what they give it.
const BASH: &str = "#!/bin/sh\nexec /bin/sh \"$@\"\n";

/// Debian's busybox has no `nmeter`, which the node e2e suite runs as
/// `nmeter -d0 '%3t' | head -n1` for a time with milliseconds: this prints
/// that line until its reader is gone.
const NMETER: &str = r#"#!/bin/sh
while :; do
  adjtimex | awk '/time.tv_sec/ { s = $2 } /time.tv_usec/ { u = $2 }
    END { printf "%s.%03d\n", strftime("%H:%M:%S", s, 1), u / 1000 }' || exit 1
done
"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    berth_oci_image::install_crypto_provider();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, bin, kube] = args.as_slice() else {
        eprintln!("usage: build_kube_images ADDR GOTOOLS_BIN KUBE_DIR");
        return std::process::ExitCode::from(2);
    };
    match build(addr, Path::new(bin), Path::new(kube)).await {
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

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A layer holding the files of upstream's `test/images/NAME/html` at `/`.
fn html_layer(kube: &Path, name: &str) -> Result<images::Layer, String> {
    let dir = kube.join("test/images").join(name).join("html");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        files.push((name, read(&e.path())?));
    }
    files.sort();
    let entries: Vec<Entry> = files
        .iter()
        .map(|(n, b)| Entry::File(n, 0o644, 0, b))
        .collect();
    Ok(images::layer(images::tar_of(&entries), OCI_GZIP))
}

async fn build(addr: &str, bin: &Path, kube: &Path) -> Result<Pushed, String> {
    let p = Pusher::new(addr, None);
    let arch = images::host_arch();
    let mut pushed = Pushed::new();
    let busybox = images::busybox_layer(OCI_GZIP)?;
    let binary = read(&bin.join("agnhost"))?;
    let porter = kube.join("test/images/agnhost/porter");
    let (crt, key) = (
        read(&porter.join("localhost.crt"))?,
        read(&porter.join("localhost.key"))?,
    );
    let agn = images::layer(
        images::tar_of(&[
            Entry::File("agnhost", 0o755, 0, &binary),
            Entry::Symlink("agnhost-2", "agnhost"),
            Entry::File("localhost.crt", 0o644, 0, &crt),
            Entry::File("localhost.key", 0o644, 0, &key),
            Entry::File("bin/curl", 0o755, 0, CURL.as_bytes()),
            Entry::File("bin/bash", 0o755, 0, BASH.as_bytes()),
        ]),
        OCI_GZIP,
    );
    let nnp = read(&bin.join("nnp"))?;
    let nnp = images::layer(
        images::tar_of(&[
            Entry::Dir("usr", 0o755),
            Entry::Dir("usr/local", 0o755),
            Entry::Dir("usr/local/bin", 0o755),
            Entry::File("usr/local/bin/nnp", 0o4755, 0, &nnp),
        ]),
        OCI_GZIP,
    );
    let prev = images::marker_layer("agnhost-2.55", "a stand-in\n", OCI_GZIP);
    let old_busybox = images::layer(
        images::tar_of(&[
            Entry::File("busybox-1.36.1-1", 0o644, 0, b"a stand-in\n"),
            Entry::File("bin/nmeter", 0o755, 0, NMETER.as_bytes()),
        ]),
        OCI_GZIP,
    );
    let nmeter = images::layer(
        images::tar_of(&[Entry::File("bin/nmeter", 0o755, 0, NMETER.as_bytes())]),
        OCI_GZIP,
    );
    let e2e_busybox = [&busybox, &nmeter];
    let kitten = html_layer(kube, "kitten")?;
    let nautilus = html_layer(kube, "nautilus")?;
    let nginx_html = |v: &str| {
        images::layer(
            images::tar_of(&[
                Entry::Dir("usr", 0o755),
                Entry::Dir("usr/share", 0o755),
                Entry::Dir("usr/share/nginx", 0o755),
                Entry::Dir("usr/share/nginx/html", 0o755),
                Entry::File(
                    "usr/share/nginx/html/index.html",
                    0o644,
                    0,
                    format!("<html><body>nginx {v} stand-in</body></html>\n").as_bytes(),
                ),
            ]),
            OCI_GZIP,
        )
    };
    let (nginx_old, nginx_new) = (nginx_html("1.27.0-2"), nginx_html("1.28.0-2"));
    let httpd: &[&str] = &["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"];
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
    let prev_l = [&busybox, &agn, &prev];
    let kitten_l = [&busybox, &agn, &kitten];
    let nautilus_l = [&busybox, &agn, &nautilus];
    let nginx_old_l = [&busybox, &nginx_old];
    let nginx_new_l = [&busybox, &nginx_new];
    let nnp_l = [&busybox, &nnp];
    let old_busybox_l = [&busybox, &old_busybox];
    let webserver = |l: &[&images::Layer]| {
        config_with(
            images::config(arch, "", l),
            &["/agnhost"],
            &["test-webserver"],
            "",
        )
    };
    let list: [(&str, &str, Vec<u8>, &[&images::Layer]); 14] = [
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
            images::config(arch, "", &e2e_busybox),
            &e2e_busybox,
        ),
        ("library/busybox", "1.37", plain.clone(), &[&busybox]),
        (
            "e2e-test-images/glibc-dns-testing",
            "2.1.1",
            plain.clone(),
            &[&busybox],
        ),
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
        (
            "e2e-test-images/agnhost",
            "2.55",
            config_with(
                images::config(arch, "", &prev_l),
                &["/agnhost"],
                &["pause"],
                "",
            ),
            &prev_l,
        ),
        (
            "e2e-test-images/kitten",
            "1.8",
            webserver(&kitten_l),
            &kitten_l,
        ),
        (
            "e2e-test-images/nautilus",
            "1.8",
            webserver(&nautilus_l),
            &nautilus_l,
        ),
        (
            "e2e-test-images/nginx",
            "1.27.0-2",
            config_with(images::config(arch, "", &nginx_old_l), httpd, &[], ""),
            &nginx_old_l,
        ),
        (
            "e2e-test-images/nginx",
            "1.28.0-2",
            config_with(images::config(arch, "", &nginx_new_l), httpd, &[], ""),
            &nginx_new_l,
        ),
        (
            "e2e-test-images/nonewprivs",
            "1.4",
            config_with(images::config(arch, "", &nnp_l), &[], &["nnp"], ""),
            &nnp_l,
        ),
        (
            "e2e-test-images/busybox",
            "1.36.1-1",
            images::config(arch, "", &old_busybox_l),
            &old_busybox_l,
        ),
    ];
    for (repo, tag, cfg, layers) in list {
        let (d, _) = p.image(repo, Some(tag), false, &cfg, layers).await?;
        pushed.insert(format!("{repo}:{tag}"), d);
    }
    Ok(pushed)
}
