use super::*;
use crate::config::Mirror;

fn cfg_with_dir(dir: &Path) -> RegistryConfig {
    RegistryConfig {
        config_path: dir.to_path_buf(),
        ..Default::default()
    }
}

fn write(dir: &Path, host: &str, text: &str) {
    std::fs::create_dir_all(dir.join(host)).unwrap();
    std::fs::write(dir.join(host).join("hosts.toml"), text).unwrap();
}

fn summary(hosts: &[HostSpec]) -> Vec<String> {
    hosts
        .iter()
        .map(|h| {
            format!(
                "{}{}{}{}",
                h.origin(),
                h.path,
                if h.upstream { " upstream" } else { "" },
                match (h.pull, h.resolve) {
                    (true, true) => "",
                    (true, false) => " pull",
                    (false, true) => " resolve",
                    (false, false) => " none",
                }
            )
        })
        .collect()
}

#[test]
fn no_configuration_means_the_registry_itself() {
    let cfg = RegistryConfig::default();
    assert_eq!(
        summary(&hosts_for(&cfg, "docker.io").unwrap()),
        ["https://registry-1.docker.io/v2 upstream"]
    );
    assert_eq!(
        summary(&hosts_for(&cfg, "127.0.0.1:5000").unwrap()),
        ["http://127.0.0.1:5000/v2 upstream"]
    );
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        summary(&hosts_for(&cfg_with_dir(dir.path()), "quay.io").unwrap()),
        ["https://quay.io/v2 upstream"]
    );
}

#[test]
fn hosts_in_file_order_then_server_or_upstream() {
    let dir = tempfile::tempdir().unwrap();
    // Written z before a: the file's order wins, not the alphabet.
    write(
        dir.path(),
        "docker.io",
        r#"
        [host."https://z-mirror.example"]
          capabilities = ["pull"]
        [host."http://a-mirror.example:5000"]
          capabilities = ["pull", "resolve"]
          ca = "ca.pem"
          client = [["c.pem", "k.pem"], "both.pem"]
          skip_verify = true
          [host."http://a-mirror.example:5000".header]
            x-one = "1"
            x-many = ["a", "b"]
        "#,
    );
    let cfg = cfg_with_dir(dir.path());
    let hosts = hosts_for(&cfg, "docker.io").unwrap();
    assert_eq!(
        summary(&hosts),
        [
            "https://z-mirror.example/v2 pull",
            "http://a-mirror.example:5000/v2",
            "https://registry-1.docker.io/v2 upstream",
        ]
    );
    let a = &hosts[1];
    let d = dir.path().join("docker.io");
    assert_eq!(a.ca, [d.join("ca.pem")]);
    assert_eq!(
        a.client,
        [
            (d.join("c.pem"), Some(d.join("k.pem"))),
            (d.join("both.pem"), None)
        ]
    );
    assert!(a.skip_verify && !hosts[0].skip_verify);
    assert_eq!(
        a.header,
        [
            ("x-many".to_string(), "a".to_string()),
            ("x-many".to_string(), "b".to_string()),
            ("x-one".to_string(), "1".to_string())
        ]
    );
}

#[test]
fn a_server_replaces_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "gcr.io",
        "server = \"https://mirror.local:8443\"\nca = \"/etc/ca.pem\"\n",
    );
    let hosts = hosts_for(&cfg_with_dir(dir.path()), "gcr.io").unwrap();
    assert_eq!(summary(&hosts), ["https://mirror.local:8443/v2"]);
    assert_eq!(hosts[0].ca, [PathBuf::from("/etc/ca.pem")]);
    // The documented docker.io example: server and host are both Hub.
    write(
        dir.path(),
        "docker.io",
        "server = \"https://docker.io\"\n[host.\"https://registry-1.docker.io\"]\ncapabilities = [\"pull\", \"resolve\"]\n",
    );
    assert_eq!(
        summary(&hosts_for(&cfg_with_dir(dir.path()), "docker.io").unwrap()),
        [
            "https://registry-1.docker.io/v2 upstream",
            "https://docker.io/v2 upstream"
        ]
    );
}

#[test]
fn root_settings_without_server_go_to_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "reg.local_5000_",
        "ca = \"ca.pem\"\ncapabilities = [\"pull\"]\n",
    );
    let hosts = hosts_for(&cfg_with_dir(dir.path()), "reg.local:5000").unwrap();
    assert_eq!(summary(&hosts), ["https://reg.local:5000/v2 upstream"]);
    assert_eq!(hosts[0].ca, [dir.path().join("reg.local_5000_/ca.pem")]);
}

#[test]
fn directory_lookup_order_and_default() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "_default",
        "server = \"https://catch-all.local\"\n",
    );
    write(
        dir.path(),
        "reg.local:5000",
        "server = \"https://colon.local\"\n",
    );
    let cfg = cfg_with_dir(dir.path());
    assert_eq!(
        summary(&hosts_for(&cfg, "reg.local:5000").unwrap()),
        ["https://colon.local/v2"]
    );
    write(
        dir.path(),
        "reg.local_5000_",
        "server = \"https://under.local\"\n",
    );
    assert_eq!(
        summary(&hosts_for(&cfg, "reg.local:5000").unwrap()),
        ["https://under.local/v2"]
    );
    assert_eq!(
        summary(&hosts_for(&cfg, "quay.io").unwrap()),
        ["https://catch-all.local/v2"]
    );
    // A directory of its own (even an empty one) hides _default.
    std::fs::create_dir(dir.path().join("ghcr.io")).unwrap();
    assert_eq!(
        summary(&hosts_for(&cfg, "ghcr.io").unwrap()),
        ["https://ghcr.io/v2 upstream"]
    );
}

#[test]
fn docker_cert_files_without_hosts_toml() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("reg.local");
    std::fs::create_dir(&d).unwrap();
    for f in ["ca.crt", "client.cert", "client.key", "other.cert"] {
        std::fs::write(d.join(f), "x").unwrap();
    }
    let hosts = hosts_for(&cfg_with_dir(dir.path()), "reg.local").unwrap();
    assert_eq!(summary(&hosts), ["https://reg.local/v2 upstream"]);
    assert_eq!(hosts[0].ca, [d.join("ca.crt")]);
    assert_eq!(
        hosts[0].client,
        [
            (d.join("client.cert"), Some(d.join("client.key"))),
            (d.join("other.cert"), None)
        ]
    );
}

#[test]
fn paths_and_override_path() {
    for (server, override_path, want) in [
        ("mirror.local", false, (false, "mirror.local", "/v2")),
        ("http://m:5000/", false, (true, "m:5000", "/v2")),
        ("https://m/v2", false, (false, "m", "/v2")),
        (
            "https://m/proxy/docker//",
            false,
            (false, "m", "/proxy/docker/v2"),
        ),
        (
            "https://m/api/registry",
            true,
            (false, "m", "/api/registry"),
        ),
        ("https://m", true, (false, "m", "")),
        ("https://[::1]:5000", false, (false, "[::1]:5000", "/v2")),
    ] {
        let (p, h, path) = parse_server(server, override_path).unwrap();
        assert_eq!((p, h.as_str(), path.as_str()), want, "{server}");
    }
    for bad in ["ftp://m", "https://", "https://m?x=1", "https://u@m"] {
        assert!(parse_server(bad, false).is_err(), "{bad}");
    }
}

#[test]
fn bad_files_are_errors_that_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cfg_with_dir(dir.path());
    for (text, want) in [
        ("skip_verfy = true\n", "skip_verfy"),
        ("[host.\"https://m\"]\ncapabilities = [\"fly\"]\n", "fly"),
        (
            "[host.\"https://m\"]\nclient = [[\"a\", \"b\", \"c\"]]\n",
            "pair",
        ),
        ("server = \"ftp://x\"\n", "ftp"),
        (
            "[host.\"https://m\"]\ndial_timeout = \"soon\"\n",
            "dial_timeout",
        ),
        ("server = [\n", "hosts.toml"),
    ] {
        write(dir.path(), "bad.io", text);
        let e = hosts_for(&cfg, "bad.io").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(msg.contains("bad.io/hosts.toml"), "{msg}");
        assert!(msg.contains(want), "{text}: {msg}");
    }
}

#[test]
fn mirror_only_modes() {
    let mut cfg = RegistryConfig::default();
    cfg.mirrors.insert(
        "gcr.io".into(),
        Mirror {
            endpoints: vec!["http://127.0.0.1:5000".into()],
            mirror_only: false,
        },
    );
    assert_eq!(
        summary(&hosts_for(&cfg, "gcr.io").unwrap()),
        ["http://127.0.0.1:5000/v2", "https://gcr.io/v2 upstream"]
    );
    cfg.mirrors.get_mut("gcr.io").unwrap().mirror_only = true;
    assert_eq!(
        summary(&hosts_for(&cfg, "gcr.io").unwrap()),
        ["http://127.0.0.1:5000/v2"]
    );
    // Global: no implicit upstream anywhere.
    cfg.mirrors.get_mut("gcr.io").unwrap().mirror_only = false;
    cfg.mirror_only = true;
    assert_eq!(
        summary(&hosts_for(&cfg, "gcr.io").unwrap()),
        ["http://127.0.0.1:5000/v2"]
    );
    assert!(hosts_for(&cfg, "quay.io").unwrap().is_empty());
    // With hosts.toml: a file without server loses its upstream.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "quay.io", "[host.\"https://m.local\"]\n");
    let cfg = RegistryConfig {
        config_path: dir.path().to_path_buf(),
        mirror_only: true,
        ..Default::default()
    };
    assert_eq!(
        summary(&hosts_for(&cfg, "quay.io").unwrap()),
        ["https://m.local/v2"]
    );
}

#[test]
fn host_names_are_case_folded() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "registry.k8s.io",
        "server = \"https://m.local\"\n",
    );
    write(
        dir.path(),
        "_default",
        "server = \"https://catch-all.local\"\n",
    );
    assert_eq!(
        summary(&hosts_for(&cfg_with_dir(dir.path()), "REGISTRY.K8S.IO").unwrap()),
        ["https://m.local/v2"]
    );
    let mut cfg = RegistryConfig::default();
    cfg.mirrors.insert(
        "Registry.K8s.IO".into(),
        Mirror {
            endpoints: vec!["http://127.0.0.1:5000".into()],
            mirror_only: true,
        },
    );
    cfg.plain_http = vec!["Reg.Local".into()];
    for domain in ["registry.k8s.io", "REGISTRY.K8S.IO"] {
        assert_eq!(
            summary(&hosts_for(&cfg, domain).unwrap()),
            ["http://127.0.0.1:5000/v2"],
            "{domain}"
        );
    }
    assert_eq!(
        summary(&hosts_for(&cfg, "reg.local:5000").unwrap()),
        ["http://reg.local:5000/v2 upstream"]
    );
    assert!(is_registry_host("Registry-1.Docker.IO", "docker.io"));
    assert!(is_registry_host("GCR.io", "gcr.io"));
}

#[test]
fn registry_hosts() {
    assert!(is_registry_host("registry-1.docker.io", "docker.io"));
    assert!(is_registry_host("docker.io", "docker.io"));
    assert!(is_registry_host("gcr.io", "gcr.io"));
    assert!(!is_registry_host("mirror.gcr.io", "gcr.io"));
    assert!(!is_registry_host("registry-1.docker.io", "quay.io"));
}
