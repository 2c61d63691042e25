//! Unit tests of `config`.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new("/etc/berth/config.toml"))
}

#[test]
fn default_toml_round_trips() {
    let text = Config::default_toml();
    assert_eq!(parse(&text).unwrap(), Config::default());
}

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
}

#[test]
fn values_override_defaults() {
    let cfg = parse("root = \"/srv/berth\"\n[runtime]\ndefault_handler = \"crun\"\n").unwrap();
    assert_eq!(cfg.root, PathBuf::from("/srv/berth"));
    assert_eq!(cfg.runtime.default_handler, "crun");
    assert_eq!(cfg.state, PathBuf::from("/run/berth"));
    cfg.validate().unwrap();
}

#[test]
fn unknown_key_is_named() {
    let err = parse("[runtime]\nno_such_key = 1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no_such_key"), "{err}");
}

#[test]
fn bad_value_names_the_key() {
    let err = parse("[runtime]\ncgroup_driver = \"cgroupv3\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("runtime.cgroup_driver"), "{err}");
    let err = parse("socket = 5\n").unwrap_err().to_string();
    assert!(err.contains("`socket`"), "{err}");
}

#[test]
fn registry_mirrors_in_the_operators_shape() {
    let cfg =
        parse("[registry.mirrors.\"registry.k8s.io\"]\nendpoints = [\"http://127.0.0.1:5000\"]\n")
            .unwrap();
    assert_eq!(
        cfg.registry.mirrors["registry.k8s.io"].endpoints,
        vec!["http://127.0.0.1:5000".to_string()]
    );
    cfg.validate().unwrap();
}

#[test]
fn validate_names_the_key() {
    let mut cfg = Config::default();
    cfg.runtime.default_handler = "kata".into();
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("runtime.default_handler"), "{err}");

    let cfg = Config {
        root: PathBuf::from("relative"),
        ..Config::default()
    };
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("`root`"), "{err}");
}

#[test]
fn metrics_endpoint_is_off_by_default_and_checked() {
    assert_eq!(Config::default().metrics.address, "");
    let cfg = parse("[metrics]\naddress = \"127.0.0.1:9090\"\n").unwrap();
    assert_eq!(cfg.metrics.address, "127.0.0.1:9090");
    cfg.validate().unwrap();
    let cfg = parse("[metrics]\naddress = \"localhost\"\n").unwrap();
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("metrics.address"), "{err}");
}

#[test]
fn streaming_defaults_and_checks() {
    let server = Config::default().streaming.server_config().unwrap();
    assert_eq!(server.addr, "127.0.0.1:0".parse().unwrap());
    assert_eq!(server.token_ttl, std::time::Duration::from_secs(60));
    assert_eq!(
        server.idle_timeout,
        std::time::Duration::from_secs(4 * 3600)
    );
    assert_eq!(
        (server.max_connections, server.max_connections_per_peer),
        (256, 16)
    );
    assert_eq!(server.header_timeout, std::time::Duration::from_secs(10));
    assert_eq!(server.keepalive_timeout, std::time::Duration::from_secs(10));
    let limits = "[streaming]\nmax_connections = 8\nmax_connections_per_peer = 64\nheader_timeout = \"3s\"\nkeepalive_timeout = \"500ms\"\n";
    let server = parse(limits).unwrap().streaming.server_config().unwrap();
    assert_eq!(
        (server.max_connections, server.max_connections_per_peer),
        (8, 64)
    );
    assert_eq!(server.header_timeout, std::time::Duration::from_secs(3));
    assert_eq!(
        server.keepalive_timeout,
        std::time::Duration::from_millis(500)
    );
    let cfg = parse("[streaming]\naddress = \"::1\"\nport = 10010\ntoken_ttl = \"30s\"\n").unwrap();
    cfg.validate().unwrap();
    assert_eq!(
        cfg.streaming.server_config().unwrap().addr,
        "[::1]:10010".parse().unwrap()
    );
    let tls =
        "[streaming]\nenable_tls = true\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n";
    parse(tls).unwrap().validate().unwrap();
    parse("[streaming]\nenable_tls = true\n")
        .unwrap()
        .validate()
        .unwrap();
    for (text, key) in [
        ("address = \"localhost\"", "streaming.address"),
        ("token_ttl = \"soon\"", "streaming.token_ttl"),
        ("idle_timeout = \"0s\"", "streaming.idle_timeout"),
        ("token_ttl = \"0s\"", "streaming.token_ttl"),
        ("max_connections = 0", "streaming.max_connections"),
        ("max_connections = 65537", "streaming.max_connections"),
        (
            "max_connections_per_peer = 0",
            "streaming.max_connections_per_peer",
        ),
        ("header_timeout = \"0s\"", "streaming.header_timeout"),
        ("header_timeout = \"soon\"", "streaming.header_timeout"),
        ("keepalive_timeout = \"0s\"", "streaming.keepalive_timeout"),
        (
            "enable_tls = true\ntls_cert_file = \"/c.pem\"",
            "streaming.tls_key_file",
        ),
        (
            "enable_tls = true\ntls_key_file = \"/k.pem\"",
            "streaming.tls_cert_file",
        ),
        (
            "tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"",
            "streaming.enable_tls",
        ),
        (
            "enable_tls = true\ntls_cert_file = \"c.pem\"\ntls_key_file = \"/k.pem\"",
            "streaming.tls_cert_file",
        ),
    ] {
        let cfg = parse(&format!("[streaming]\n{text}\n")).unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{err}");
    }
}

fn layered(files: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    let mut layers = Layers::new();
    for (path, text) in files {
        layers.add_toml(text, Path::new(path))?;
    }
    layers.finish(|_| {})
}

const MAIN: &str = "/etc/berth/config.toml";
const DROP_10: &str = "/etc/berth/config.d/10-registry.toml";
const DROP_20: &str = "/etc/berth/config.d/20-debug.toml";

#[test]
fn drop_ins_merge_tables_key_by_key_and_later_files_win() {
    let loaded = layered(&[
        (
            MAIN,
            "log_level = \"warn\"\n[cni]\nconf_dir = \"/etc/cni/other\"\ntimeout_secs = 30\n\
             [registry.mirrors.\"docker.io\"]\nendpoints = [\"http://127.0.0.1:5000\"]\n",
        ),
        (
            DROP_10,
            "[registry.mirrors.\"registry.k8s.io\"]\nendpoints = [\"http://127.0.0.1:5001\"]\n\
             [cni]\ntimeout_secs = 90\n",
        ),
        (DROP_20, "log_level = \"debug\"\n"),
    ])
    .unwrap();
    let cfg = &loaded.config;
    assert_eq!(cfg.log_level, "debug");
    // The drop-in changed one key of [cni]; the main file's other key stays.
    assert_eq!(cfg.cni.timeout_secs, 90);
    assert_eq!(cfg.cni.conf_dir, PathBuf::from("/etc/cni/other"));
    // Both mirrors: maps are merged too.
    assert_eq!(cfg.registry.mirrors.len(), 2);
    // Untouched keys are the embedded defaults.
    assert_eq!(cfg.socket, Config::default().socket);
    loaded.validate().unwrap();

    let origin = |k: &str| loaded.origins.get(k).map(|o| o.to_string());
    assert_eq!(origin("log_level").as_deref(), Some(DROP_20));
    assert_eq!(origin("cni.timeout_secs").as_deref(), Some(DROP_10));
    assert_eq!(origin("cni.conf_dir").as_deref(), Some(MAIN));
    assert_eq!(
        origin("registry.mirrors.\"docker.io\".endpoints").as_deref(),
        Some(MAIN)
    );
    assert_eq!(
        origin("registry.mirrors.\"registry.k8s.io\".endpoints").as_deref(),
        Some(DROP_10)
    );
    assert_eq!(origin("socket"), None);
    assert_eq!(
        loaded.files,
        vec![
            PathBuf::from(MAIN),
            PathBuf::from(DROP_10),
            PathBuf::from(DROP_20)
        ]
    );
}

#[test]
fn arrays_are_replaced_whole() {
    let loaded = layered(&[
        (MAIN, "[cni]\nbin_dirs = [\"/a\", \"/b\"]\n"),
        (DROP_10, "[cni]\nbin_dirs = [\"/c\"]\n"),
    ])
    .unwrap();
    assert_eq!(loaded.config.cni.bin_dirs, vec![PathBuf::from("/c")]);
}

#[test]
fn a_bad_key_in_a_drop_in_names_the_file_and_the_key() {
    let err = layered(&[
        (MAIN, "log_level = \"info\"\n"),
        (DROP_20, "[cni]\nconf_dri = \"/x\"\n"),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains(DROP_20), "{err}");
    assert!(err.contains("conf_dri"), "{err}");

    let err = layered(&[(DROP_10, "[cni]\ntimeout_secs = \"soon\"\n")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(DROP_10) && err.contains("cni.timeout_secs"),
        "{err}"
    );

    let err = layered(&[(DROP_10, "[cni\n")]).unwrap_err().to_string();
    assert!(err.contains(DROP_10), "{err}");
}

#[test]
fn a_value_that_does_not_validate_names_the_file_that_set_it() {
    let loaded = layered(&[
        (MAIN, "[cni]\ndefault_subnet = \"10.1.0.0/16\"\n"),
        (DROP_20, "[cni]\ndefault_subnet = \"not-a-net\"\n"),
    ])
    .unwrap();
    let err = loaded.validate().unwrap_err().to_string();
    assert!(
        err.contains("cni.default_subnet") && err.contains(DROP_20),
        "{err}"
    );

    // A key checked as a whole (`registry`) finds the file of a key below it.
    let loaded = layered(&[(DROP_10, "[registry]\nmax_concurrent_downloads = 0\n")]).unwrap();
    if let Err(e) = loaded.validate() {
        assert!(e.to_string().contains(DROP_10), "{e}");
    }
}

#[test]
fn flags_are_origins_too() {
    let mut layers = Layers::new();
    layers
        .add_toml("socket = \"/run/a.sock\"\n", Path::new(MAIN))
        .unwrap();
    layers.flag("socket", "--socket");
    let loaded = layers
        .finish(|c| c.socket = PathBuf::from("relative.sock"))
        .unwrap();
    assert_eq!(loaded.origins["socket"], Origin::Flag("--socket"));
    let err = loaded.validate().unwrap_err().to_string();
    assert!(err.contains("--socket"), "{err}");
}

#[test]
fn drop_in_dir_is_read_in_lexical_order_and_skips_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("20-b.toml"), "log_level = \"debug\"\n").unwrap();
    std::fs::write(
        d.join("10-a.toml"),
        "log_level = \"warn\"\nroot = \"/srv/berth\"\n",
    )
    .unwrap();
    std::fs::write(d.join("README"), "not toml at all [").unwrap();
    std::fs::write(d.join(".30-hidden.toml"), "log_level = \"trace\"\n").unwrap();
    std::fs::write(d.join("99-z.toml.dpkg-old"), "log_level = \"trace\"\n").unwrap();
    std::fs::create_dir(d.join("40-dir.toml")).unwrap();
    let mut layers = Layers::new();
    layers.add_dir(d, true).unwrap();
    let loaded = layers.finish(|_| {}).unwrap();
    assert_eq!(loaded.config.log_level, "debug");
    assert_eq!(loaded.config.root, PathBuf::from("/srv/berth"));
    assert_eq!(loaded.files, vec![d.join("10-a.toml"), d.join("20-b.toml")]);

    // Missing: nothing, unless the directory was asked for.
    let mut layers = Layers::new();
    layers.add_dir(&d.join("none"), false).unwrap();
    let err = layers
        .add_dir(&d.join("none"), true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("none"), "{err}");
}

#[test]
fn an_oversized_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.toml");
    let line = "# padding padding padding padding padding padding padding padding\n";
    std::fs::write(
        &path,
        line.repeat((MAX_FILE_BYTES as usize / line.len()) + 2),
    )
    .unwrap();
    let err = Layers::new().add_file(&path).unwrap_err();
    assert!(matches!(err, ConfigError::TooLarge { .. }), "{err}");
}

#[test]
fn commented_defaults_parse_to_the_defaults_and_show_every_key() {
    let text = Config::commented_default_toml();
    assert_eq!(parse(&text).unwrap(), Config::default());
    assert!(
        text.contains("# socket = \"/run/berth/berth.sock\""),
        "{text}"
    );
    assert!(text.contains("# [runtime.handlers.runc]"), "{text}");
    assert!(
        text.lines().all(|l| l.is_empty() || l.starts_with('#')),
        "{text}"
    );
    // Uncommenting the body gives back the default TOML.
    let body = text.strip_prefix(COMMENTED_HEADER).unwrap();
    let uncommented: String = body
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or(l)))
        .collect();
    assert_eq!(uncommented, Config::default_toml());
}

#[test]
fn nri_defaults_and_checks() {
    let nri = Config::default().nri;
    assert!(nri.enable);
    let cfg = nri.nri_config().unwrap();
    assert_eq!(cfg.socket_path, PathBuf::from("/var/run/nri/nri.sock"));
    assert_eq!(cfg.plugin_path, PathBuf::from("/opt/nri/plugins"));
    assert_eq!(cfg.plugin_config_path, PathBuf::from("/etc/nri/conf.d"));
    assert_eq!(cfg.registration_timeout, std::time::Duration::from_secs(5));
    assert_eq!(cfg.request_timeout, std::time::Duration::from_secs(2));
    assert!(!cfg.disable_connections);
    let cfg = parse("[nri]\nenable = false\nplugin_request_timeout = \"500ms\"\n").unwrap();
    cfg.validate().unwrap();
    assert!(!cfg.nri.enable);
    for (text, key) in [
        ("socket_path = \"nri.sock\"", "nri.socket_path"),
        ("plugin_path = \"plugins\"", "nri.plugin_path"),
        (
            "plugin_request_timeout = \"0s\"",
            "nri.plugin_request_timeout",
        ),
        (
            "plugin_registration_timeout = \"soon\"",
            "nri.plugin_registration_timeout",
        ),
    ] {
        let err = parse(&format!("[nri]\n{text}\n"))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}

#[test]
fn nri_default_validator_parsed_and_checked() {
    let cfg = Config::default().nri.nri_config().unwrap();
    assert!(!cfg.validator.enable, "off by default, as in containerd");
    let cfg = parse(
        "[nri.default_validator]\nenable = true\nreject_oci_hook_adjustment = true\n\
         reject_namespace_adjustment = true\nreject_custom_seccomp_adjustment = true\n\
         required_plugins = [\"10-resmgr\", \"topology\"]\n\
         tolerate_missing_plugins_annotation = \"tolerate-missing.example.com\"\n",
    )
    .unwrap();
    cfg.validate().unwrap();
    let v = cfg.nri.nri_config().unwrap().validator;
    assert!(v.enable && v.reject_oci_hook_adjustment && v.reject_namespace_adjustment);
    assert!(v.reject_custom_seccomp_adjustment && !v.reject_unconfined_seccomp_adjustment);
    assert_eq!(v.required_plugins, ["10-resmgr", "topology"]);
    assert_eq!(
        v.tolerate_missing_plugins_annotation,
        "tolerate-missing.example.com"
    );
    for (text, key) in [
        (
            "required_plugins = [\"a b\"]",
            "nri.default_validator.required_plugins",
        ),
        (
            "tolerate_missing_plugins_annotation = \"a key\"",
            "nri.default_validator.tolerate_missing_plugins_annotation",
        ),
    ] {
        let err = parse(&format!("[nri.default_validator]\n{text}\n"))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
    let err = parse("[nri.default_validator]\nreject_oci_hooks = true\n").unwrap_err();
    assert!(err.to_string().contains("reject_oci_hooks"), "{err}");
}

/// The `[nri.default_validator]` section is written as it always was (it is
/// berth-nri's `ValidatorConfig` now): the same keys, in the same order.
#[test]
fn nri_default_validator_section_keeps_its_format() {
    let mut cfg = Config::default();
    let v = &mut cfg.nri.default_validator;
    v.enable = true;
    v.reject_sysctl_adjustment = true;
    v.required_plugins = vec!["10-resmgr".into()];
    let text = toml::to_string(&cfg).unwrap();
    let section = text
        .split("[nri.default_validator]\n")
        .nth(1)
        .and_then(|s| s.split("\n[").next())
        .unwrap();
    assert_eq!(
        section.trim_end(),
        "enable = true\n\
         reject_oci_hook_adjustment = false\n\
         reject_runtime_default_seccomp_adjustment = false\n\
         reject_unconfined_seccomp_adjustment = false\n\
         reject_custom_seccomp_adjustment = false\n\
         reject_namespace_adjustment = false\n\
         reject_sysctl_adjustment = true\n\
         required_plugins = [\"10-resmgr\"]\n\
         tolerate_missing_plugins_annotation = \"\""
    );
    assert_eq!(parse(&text).unwrap(), cfg);
}
