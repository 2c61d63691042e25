//! `berth config import-containerd FILE` run as an operator runs it: the real
//! binary on a containerd config file, its output installed as berth's config
//! file and read back with `berth config show`. Needs no root.

use std::process::{Command, Stdio};

use crate::common::{berth_bin, Sandbox};

/// A containerd 1.6/1.7 config (version 2) with what a node sets.
const CONTAINERD_V2: &str = r#"
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  stream_server_port = "10010"
  enable_unprivileged_ports = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "crun"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
        BinaryName = "/usr/bin/crun"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
      runtime_type = "io.containerd.kata.v2"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"

  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
    endpoint = ["http://127.0.0.1:5000"]
"#;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(berth_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `berth config show` with `imported` installed as the main file (an empty
/// drop-in dir beside it), as is.
fn show_installed(sandbox: &Sandbox, imported: &str) -> toml::Table {
    let config = sandbox.path("config.toml");
    std::fs::write(&config, imported).unwrap();
    std::fs::create_dir(sandbox.path("config.d")).unwrap();
    let (ok, shown, err) = run(&["--config", config.to_str().unwrap(), "config", "show"]);
    assert!(ok, "{err}\n{imported}");
    shown.parse().unwrap()
}

#[test]
fn an_imported_containerd_config_is_loaded_by_config_show_unchanged() {
    let sandbox = Sandbox::new();
    let containerd = sandbox.path("containerd.toml");
    std::fs::write(&containerd, CONTAINERD_V2).unwrap();
    let (ok, imported, err) = run(&["config", "import-containerd", containerd.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        imported.contains(
            "# containerd plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata.\
             runtime_type = \"io.containerd.kata.v2\": not mapped: "
        ),
        "{imported}"
    );
    assert!(
        imported.contains(
            "# containerd plugins.\"io.containerd.grpc.v1.cri\".enable_unprivileged_ports = \
             true: not mapped: "
        ),
        "{imported}"
    );

    let shown = show_installed(&sandbox, &imported);
    let runtime = &shown["runtime"];
    assert_eq!(runtime["default_handler"].as_str(), Some("crun"));
    assert_eq!(
        runtime["handlers"]["crun"]["binary"].as_str(),
        Some("/usr/bin/crun")
    );
    assert_eq!(runtime["handlers"]["runc"]["binary"].as_str(), Some("runc"));
    assert!(runtime["handlers"].get("kata").is_none());
    assert_eq!(runtime["cgroup_driver"].as_str(), Some("cgroupfs"));
    assert_eq!(shown["cni"]["bin_dirs"][0].as_str(), Some("/usr/lib/cni"));
    assert_eq!(shown["cni"]["write_default_network"].as_bool(), Some(false));
    assert_eq!(
        shown["registry"]["mirrors"]["docker.io"]["endpoints"][0].as_str(),
        Some("http://127.0.0.1:5000")
    );
    assert_eq!(shown["streaming"]["port"].as_integer(), Some(10010));
    assert_eq!(shown["nri"]["enable"].as_bool(), Some(false));
}

#[test]
fn import_containerd_fails_naming_a_file_it_cannot_use() {
    let sandbox = Sandbox::new();
    let missing = sandbox.path("missing.toml");
    let (ok, out, err) = run(&["config", "import-containerd", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains(missing.to_str().unwrap()), "{err}");

    let unknown = sandbox.path("v9.toml");
    std::fs::write(&unknown, "version = 9\n").unwrap();
    let (ok, out, err) = run(&["config", "import-containerd", unknown.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains(unknown.to_str().unwrap()), "{err}");
    assert!(err.contains("unknown `version = 9`"), "{err}");
}

/// containerd 2.4.2's `containerd config default` (version 4), imported by
/// the binary and loaded by `berth config show`.
#[test]
fn containerd_2_4s_default_config_imports_and_loads() {
    let sandbox = Sandbox::new();
    let containerd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/containerd-import/testdata/containerd-2.4.2-default.toml"
    );
    let (ok, imported, err) = run(&["config", "import-containerd", containerd]);
    assert!(ok, "{err}");
    assert!(
        imported.contains(
            "# containerd plugins.\"io.containerd.server.v1.grpc\".address = \
             \"/run/containerd/containerd.sock\": not mapped: berth serves CRI on its own socket"
        ),
        "{imported}"
    );
    let shown = show_installed(&sandbox, &imported);
    assert_eq!(shown["runtime"]["default_handler"].as_str(), Some("runc"));
    assert_eq!(shown["cni"]["bin_dirs"][0].as_str(), Some("/opt/cni/bin"));
    assert_eq!(shown["nri"]["enable"].as_bool(), Some(true));
}
