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

/// What an image runs, beside busybox's `sh` as root of the plain config:
/// entrypoint, command and user.
#[derive(Clone, Copy)]
enum Runs {
    Sh,
    This(
        &'static [&'static str],
        &'static [&'static str],
        &'static str,
    ),
}

const AGNHOST_PAUSE: Runs = Runs::This(&["/agnhost"], &["pause"], "");
const WEBSERVER: Runs = Runs::This(&["/agnhost"], &["test-webserver"], "");
const HTTPD: Runs = Runs::This(
    &["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"],
    &[],
    "",
);

impl Runs {
    /// The config of an image of `layers` that runs this.
    fn config(self, arch: &str, layers: &[&images::Layer]) -> Vec<u8> {
        let plain = images::config(arch, "", layers);
        match self {
            Runs::Sh => plain,
            Runs::This(entrypoint, cmd, user) => config_with(plain, entrypoint, cmd, user),
        }
    }
}

/// The layers the images are made of.
struct Layers {
    busybox: images::Layer,
    /// agnhost, its link, porter's certificate, curl and bash stand-ins.
    agnhost: images::Layer,
    /// The marker that sets agnhost:2.55 apart.
    agnhost_2_55: images::Layer,
    nnp: images::Layer,
    /// The marker of busybox:1.36.1-1, with the nmeter stand-in.
    busybox_1_36: images::Layer,
    nmeter: images::Layer,
    kitten: images::Layer,
    nautilus: images::Layer,
    nginx_1_27: images::Layer,
    nginx_1_28: images::Layer,
    groups: images::Layer,
}

/// Builds every layer, reading the binaries from `bin` and upstream's files
/// from `kube`.
fn layers(bin: &Path, kube: &Path) -> Result<Layers, String> {
    let busybox = images::busybox_layer(OCI_GZIP)?;
    let agnhost = agnhost_layer(bin, kube)?;
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
    let agnhost_2_55 = images::marker_layer("agnhost-2.55", "a stand-in\n", OCI_GZIP);
    let busybox_1_36 = images::layer(
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
    Ok(Layers {
        busybox,
        agnhost,
        agnhost_2_55,
        nnp,
        busybox_1_36,
        nmeter,
        kitten: html_layer(kube, "kitten")?,
        nautilus: html_layer(kube, "nautilus")?,
        nginx_1_27: nginx_html_layer("1.27.0-2"),
        nginx_1_28: nginx_html_layer("1.28.0-2"),
        groups: groups_layer(),
    })
}

/// agnhost with upstream's `/agnhost-2` link, porter's certificate and key,
/// and the curl and bash stand-ins.
fn agnhost_layer(bin: &Path, kube: &Path) -> Result<images::Layer, String> {
    let binary = read(&bin.join("agnhost"))?;
    let porter = kube.join("test/images/agnhost/porter");
    let (crt, key) = (
        read(&porter.join("localhost.crt"))?,
        read(&porter.join("localhost.key"))?,
    );
    Ok(images::layer(
        images::tar_of(&[
            Entry::File("agnhost", 0o755, 0, &binary),
            Entry::Symlink("agnhost-2", "agnhost"),
            Entry::File("localhost.crt", 0o644, 0, &crt),
            Entry::File("localhost.key", 0o644, 0, &key),
            Entry::File("bin/curl", 0o755, 0, CURL.as_bytes()),
            Entry::File("bin/bash", 0o755, 0, BASH.as_bytes()),
        ]),
        OCI_GZIP,
    ))
}

/// The page an nginx stand-in of version `v` serves.
fn nginx_html_layer(v: &str) -> images::Layer {
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
}

/// An /etc/group that makes `app` (1000) a member of group 50000.
fn groups_layer() -> images::Layer {
    images::layer(
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
    )
}

/// Every image: repository, tag, layers and what it runs.
fn table(l: &Layers) -> Vec<(&'static str, &'static str, Vec<&images::Layer>, Runs)> {
    let busybox = &l.busybox;
    let agnhost = &l.agnhost;
    vec![
        (
            "e2e-test-images/agnhost",
            "2.66.1",
            vec![busybox, agnhost],
            AGNHOST_PAUSE,
        ),
        (
            "pause",
            "3.10.2",
            vec![busybox, agnhost],
            Runs::This(&["/agnhost", "pause"], &[], ""),
        ),
        (
            "e2e-test-images/busybox",
            "1.37.0-2",
            vec![busybox, &l.nmeter],
            Runs::Sh,
        ),
        ("library/busybox", "1.37", vec![busybox], Runs::Sh),
        (
            "e2e-test-images/glibc-dns-testing",
            "2.1.1",
            vec![busybox],
            Runs::Sh,
        ),
        (
            "e2e-test-images/nonroot",
            "1.5",
            vec![busybox],
            Runs::This(&[], &["sh"], "1234"),
        ),
        (
            "berth-kube-tests/groups",
            "1",
            vec![busybox, &l.groups],
            Runs::Sh,
        ),
        (
            "e2e-test-images/agnhost",
            "2.55",
            vec![busybox, agnhost, &l.agnhost_2_55],
            AGNHOST_PAUSE,
        ),
        (
            "e2e-test-images/kitten",
            "1.8",
            vec![busybox, agnhost, &l.kitten],
            WEBSERVER,
        ),
        (
            "e2e-test-images/nautilus",
            "1.8",
            vec![busybox, agnhost, &l.nautilus],
            WEBSERVER,
        ),
        (
            "e2e-test-images/nginx",
            "1.27.0-2",
            vec![busybox, &l.nginx_1_27],
            HTTPD,
        ),
        (
            "e2e-test-images/nginx",
            "1.28.0-2",
            vec![busybox, &l.nginx_1_28],
            HTTPD,
        ),
        (
            "e2e-test-images/nonewprivs",
            "1.4",
            vec![busybox, &l.nnp],
            Runs::This(&[], &["nnp"], ""),
        ),
        (
            "e2e-test-images/busybox",
            "1.36.1-1",
            vec![busybox, &l.busybox_1_36],
            Runs::Sh,
        ),
    ]
}

async fn build(addr: &str, bin: &Path, kube: &Path) -> Result<Pushed, String> {
    let p = Pusher::new(addr, None);
    let arch = images::host_arch();
    let layers = layers(bin, kube)?;
    let mut pushed = Pushed::new();
    for (repo, tag, layers, runs) in table(&layers) {
        let cfg = runs.config(arch, &layers);
        let (d, _) = p.image(repo, Some(tag), false, &cfg, &layers).await?;
        pushed.insert(format!("{repo}:{tag}"), d);
    }
    Ok(pushed)
}
