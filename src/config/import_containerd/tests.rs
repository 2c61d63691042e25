//! Unit tests of `berth config import-containerd`: containerd configs written
//! here (as containerd 1.6/1.7 and 2.x write them), imported, and the output
//! loaded as `berth config show` loads a config file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_containerd_import::{dotted, leaves};

use super::*;
use crate::config::{systemd_is_running, CgroupDriver, Config};

const PATH: &str = "/etc/containerd/config.toml";

fn import(text: &str) -> String {
    import_toml(text, Path::new(PATH)).unwrap_or_else(|e| panic!("{e}"))
}

/// The output loaded as `berth config show` loads it: written to a file,
/// merged on the embedded defaults, validated. The systemd cgroup driver is
/// refused where systemd is not init (as here, maybe): then that must be the
/// only complaint.
fn load(output: &str) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, output).unwrap();
    let mut layers = Layers::new();
    layers
        .add_file(&file)
        .unwrap_or_else(|e| panic!("{e}\n{output}"));
    let loaded = layers.finish(|_| {}).unwrap();
    match loaded.validate() {
        Ok(()) => {}
        Err(e)
            if loaded.config.runtime.cgroup_driver == CgroupDriver::Systemd
                && !systemd_is_running()
                && e.to_string().contains("runtime.cgroup_driver") => {}
        Err(e) => panic!("{e}\n{output}"),
    }
    loaded.config
}

/// Every key of `input` is either cited as the source of a berth key
/// (`# from KEY`) or listed as not carried over (`# containerd KEY = `),
/// never both, never neither.
fn assert_every_key_accounted_for(input: &str, output: &str) {
    let doc: toml::Table = input.parse().unwrap();
    let cited: Vec<String> = output
        .lines()
        .filter_map(|l| l.split_once("  # from ").map(|(_, rest)| rest))
        .flat_map(|rest| {
            let keys = rest.split(": ").next().unwrap_or("");
            keys.split(", ").map(String::from).collect::<Vec<_>>()
        })
        .collect();
    for (path, _) in leaves(&doc) {
        if path == ["version"] {
            continue;
        }
        let key = dotted(&path);
        let noted = output.contains(&format!("\n# containerd {key} = "));
        let mapped = cited.contains(&key);
        assert!(
            noted || mapped,
            "{key} is neither carried over nor listed:\n{output}"
        );
        assert!(
            !(noted && mapped),
            "{key} is both carried over and listed:\n{output}"
        );
    }
}

/// The comment line of containerd key `key`, from the "check these" list
/// (`check`) or the "nothing to do" one.
fn note_of<'a>(output: &'a str, key: &str, check: bool) -> &'a str {
    let (check_part, nothing_part) = output
        .split_once("\n# Not carried over, nothing to do")
        .unwrap_or((output, ""));
    let part = if check { check_part } else { nothing_part };
    let prefix = format!("# containerd {key} = ");
    part.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| {
            panic!(
                "no note for {key} under {}:\n{output}",
                if check {
                    "check these"
                } else {
                    "nothing to do"
                }
            )
        })
}

/// A version 2 config as an operator of containerd 1.6/1.7 writes it:
/// mirrors, registry TLS and credentials, runc and crun handlers with
/// SystemdCgroup, a kata handler, CNI dirs, streaming with TLS, NRI.
const V2: &str = r#"
version = 2
root = "/data/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[debug]
  level = "debug"

[metrics]
  address = "127.0.0.1:1338"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    max_concurrent_downloads = 5
    image_pull_progress_timeout = "2m"
    stream_server_address = "0.0.0.0"
    stream_server_port = "10010"
    stream_idle_timeout = "30m"
    enable_tls_streaming = true
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = false
    device_ownership_from_security_context = true
    restrict_oom_score_adj = true
    max_container_log_line_size = 16384
    drain_exec_sync_io_timeout = "10s"
    cdi_spec_dirs = ["/etc/cdi"]

    [plugins."io.containerd.grpc.v1.cri".x509_key_pair_streaming]
      tls_cert_file = "/etc/containerd/stream.crt"
      tls_key_file = "/etc/containerd/stream.key"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/local/sbin/runc"
          SystemdCgroup = true
          Root = "/run/containerd/runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
        runtime_type = "io.containerd.runc.v2"
        pod_annotations = ["run.oci.*"]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
          BinaryName = "crun"
          SystemdCgroup = true

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
        runtime_type = "io.containerd.kata.v2"
        privileged_without_host_devices = true

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
        endpoint = ["https://mirror.gcr.io", "http://10.0.0.5:5000"]
      [plugins."io.containerd.grpc.v1.cri".registry.configs."reg.internal:5000".tls]
        ca_file = "/etc/certs/reg-ca.pem"
        cert_file = "/etc/certs/node.crt"
        key_file = "/etc/certs/node.key"
        insecure_skip_verify = true
      [plugins."io.containerd.grpc.v1.cri".registry.configs."reg.internal:5000".auth]
        username = "puller"
        password = "s3cr3t-pa55"

  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = "/var/run/nri/nri.sock"
    plugin_path = "/opt/nri/plugins"
    plugin_config_path = "/etc/nri/conf.d"
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
    disable_connections = true
"#;

#[test]
fn a_containerd_1_x_config_becomes_the_berth_config_that_does_the_same() {
    let out = import(V2);
    let cfg = load(&out);
    assert_every_key_accounted_for(V2, &out);

    // Handlers: runc and crun, with their binaries; kata refused.
    let handlers: Vec<&String> = cfg.runtime.handlers.keys().collect();
    assert_eq!(handlers, ["crun", "runc"]);
    assert_eq!(cfg.runtime.handlers["runc"].binary, "/usr/local/sbin/runc");
    assert_eq!(cfg.runtime.handlers["crun"].binary, "crun");
    assert_eq!(cfg.runtime.handlers["crun"].pod_annotations, ["run.oci.*"]);
    assert_eq!(cfg.runtime.default_handler, "runc");
    assert_eq!(cfg.runtime.cgroup_driver, CgroupDriver::Systemd);
    assert_eq!(cfg.runtime.cdi_spec_dirs, [PathBuf::from("/etc/cdi")]);
    let kata = note_of(
        &out,
        "plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata.runtime_type",
        true,
    );
    assert!(
        kata.contains("not mapped: berth runs runc-compatible runtimes only"),
        "{kata}"
    );
    note_of(
        &out,
        "plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options.Root",
        true,
    );

    // CNI, and no network of berth's own written before the cluster's.
    assert_eq!(cfg.cni.conf_dir, PathBuf::from("/etc/cni/net.d"));
    assert_eq!(cfg.cni.bin_dirs, [PathBuf::from("/usr/lib/cni")]);
    assert!(!cfg.cni.write_default_network);
    note_of(
        &out,
        "plugins.\"io.containerd.grpc.v1.cri\".cni.max_conf_num",
        false,
    );

    // Registry: mirrors, downloads, progress timeout; TLS and credentials
    // said where to go, the secret never printed.
    assert_eq!(
        cfg.registry.mirrors["docker.io"].endpoints,
        ["https://mirror.gcr.io", "http://10.0.0.5:5000"]
    );
    assert_eq!(cfg.registry.max_concurrent_downloads, 5);
    assert_eq!(cfg.registry.progress_timeout, Duration::from_secs(120));
    let configs = "plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"reg.internal:5000\"";
    let ca = note_of(&out, &format!("{configs}.tls.ca_file"), true);
    assert!(ca.contains("put `ca = \"/etc/certs/reg-ca.pem\"`"), "{ca}");
    let client = note_of(&out, &format!("{configs}.tls.cert_file"), true);
    assert!(
        client.contains("client = [[\"/etc/certs/node.crt\", \"/etc/certs/node.key\"]]"),
        "{client}"
    );
    let password = note_of(&out, &format!("{configs}.auth.password"), true);
    assert!(password.contains("= \"<redacted>\""), "{password}");
    assert!(password.contains("registry.auth_file"), "{password}");
    assert!(!out.contains("s3cr3t"), "{out}");

    // Streaming, logging, metrics.
    assert_eq!(cfg.streaming.address, "0.0.0.0");
    assert_eq!(cfg.streaming.port, 10010);
    assert_eq!(cfg.streaming.idle_timeout, "30m");
    assert!(cfg.streaming.enable_tls);
    assert_eq!(
        cfg.streaming.tls_cert_file,
        PathBuf::from("/etc/containerd/stream.crt")
    );
    assert_eq!(
        cfg.streaming.tls_key_file,
        PathBuf::from("/etc/containerd/stream.key")
    );
    assert_eq!(cfg.log_level, "debug");
    assert_eq!(cfg.metrics.address, "127.0.0.1:1338");

    // NRI as the file says.
    assert!(cfg.nri.enable);
    assert!(cfg.nri.disable_connections);
    assert_eq!(cfg.nri.plugin_request_timeout, "2s");

    // Behaviour berth does not have is listed to check; what berth does
    // anyway, or has no use for, under nothing to do.
    let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
    for key in [
        "enable_unprivileged_ports",
        "device_ownership_from_security_context",
        "drain_exec_sync_io_timeout",
    ] {
        let line = note_of(&out, &format!("{cri}.{key}"), true);
        assert!(line.contains(": not mapped: "), "{line}");
    }
    for key in [
        "enable_unprivileged_icmp",
        "restrict_oom_score_adj",
        "max_container_log_line_size",
        "sandbox_image",
    ] {
        note_of(&out, &format!("{cri}.{key}"), false);
    }
    let root = note_of(&out, "root", true);
    assert!(root.contains("set root = \"/data/berth\""), "{root}");
    let socket = note_of(&out, "grpc.address", true);
    assert!(socket.contains("--container-runtime-endpoint"), "{socket}");
}

/// A version 3 config as containerd 2.x writes it (`containerd config
/// default` of 2.1), changed where operators change it.
const V3: &str = r#"
version = 3
root = '/var/lib/containerd'
state = '/run/containerd'

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    disable_snapshot_annotations = true
    discard_unpacked_layers = false
    max_concurrent_downloads = 4
    image_pull_progress_timeout = '5m0s'
    image_pull_with_sync_fs = false
    stats_collect_period = 10
    use_local_image_pull = false

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10'

    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '/etc/containerd/certs.d'

    [plugins.'io.containerd.cri.v1.images'.image_decryption]
      key_model = 'node'

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    selinux_category_range = 1024
    max_container_log_line_size = 16384
    disable_apparmor = false
    restrict_oom_score_adj = false
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = true
    enable_cdi = true
    cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
    drain_exec_sync_io_timeout = '0s'
    stats_collect_period = '1s'
    enable_criu = true

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'crun'

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          runtime_path = ''
          pod_annotations = []
          container_annotations = []
          privileged_without_host_devices = false
          base_runtime_spec = ''
          sandboxer = 'podsandbox'
          io_type = ''

          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            BinaryName = ''
            Root = ''
            SystemdCgroup = false
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun]
          runtime_type = 'io.containerd.runc.v2'
          container_annotations = ['run.oci.*']
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun.options]
            BinaryName = '/usr/bin/crun'
            SystemdCgroup = true
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gvisor]
          runtime_type = 'io.containerd.runsc.v1'
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gvisor.options]
            TypeUrl = 'io.containerd.runsc.v1.options'

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dir = ''
      bin_dirs = ['/opt/cni/bin', '/usr/lib/cni']
      conf_dir = '/etc/cni/net.d'
      max_conf_num = 1
      setup_serially = false
      conf_template = ''
      ip_pref = ''
      use_internal_loopback = false

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
    stream_idle_timeout = '4h0m0s'
    enable_tls_streaming = false
    sandbox_image = 'registry.k8s.io/pause:3.8'

    [plugins.'io.containerd.grpc.v1.cri'.x509_key_pair_streaming]
      tls_cert_file = ''
      tls_key_file = ''

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = '/var/run/nri/nri.sock'
    plugin_path = '/opt/nri/plugins'
    plugin_config_path = '/etc/nri/conf.d'
    plugin_registration_timeout = '5s'
    plugin_request_timeout = '2s'
    disable_connections = false
    [plugins.'io.containerd.nri.v1.nri'.default_validator]
      enable = true
      reject_oci_hook_adjustment = true
      required_plugins = ['10-resource-policy']

  [plugins.'io.containerd.gc.v1.scheduler']
    pause_threshold = 0.02
    deletion_threshold = 0

  [plugins.'io.containerd.transfer.v1.local']
    config_path = '/etc/containerd/certs.d'
    max_concurrent_downloads = 3
    [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
      platform = 'linux/amd64'
      snapshotter = 'overlayfs'
"#;

#[test]
fn a_containerd_2_x_config_with_its_split_cri_plugins_becomes_the_same_berth_config() {
    let out = import(V3);
    let cfg = load(&out);
    assert_every_key_accounted_for(V3, &out);

    // Runtime plugin: handlers, default, one cgroup driver (the default
    // handler's), CDI, CNI.
    let handlers: Vec<&String> = cfg.runtime.handlers.keys().collect();
    assert_eq!(handlers, ["crun", "runc"]);
    assert_eq!(cfg.runtime.handlers["runc"].binary, "runc");
    assert_eq!(cfg.runtime.handlers["crun"].binary, "/usr/bin/crun");
    assert_eq!(
        cfg.runtime.handlers["crun"].container_annotations,
        ["run.oci.*"]
    );
    assert_eq!(cfg.runtime.default_handler, "crun");
    assert_eq!(cfg.runtime.cgroup_driver, CgroupDriver::Systemd);
    let runtime = "plugins.\"io.containerd.cri.v1.runtime\"";
    let disagrees = note_of(
        &out,
        &format!("{runtime}.containerd.runtimes.runc.options.SystemdCgroup"),
        true,
    );
    assert!(
        disagrees.contains("one cgroup driver for every handler"),
        "{disagrees}"
    );
    note_of(
        &out,
        &format!("{runtime}.containerd.runtimes.gvisor.runtime_type"),
        true,
    );
    note_of(
        &out,
        &format!("{runtime}.containerd.runtimes.gvisor.options.TypeUrl"),
        false,
    );
    assert_eq!(
        cfg.runtime.cdi_spec_dirs,
        [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")]
    );
    assert_eq!(
        cfg.cni.bin_dirs,
        [PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
    );
    assert!(!cfg.cni.write_default_network);
    // containerd 2.x's defaults that berth does not share are to check.
    note_of(&out, &format!("{runtime}.enable_unprivileged_ports"), true);
    note_of(&out, &format!("{runtime}.restrict_oom_score_adj"), true);

    // Images plugin: hosts.toml dir, downloads, timeout; the pause image
    // needs nothing.
    assert_eq!(
        cfg.registry.config_path,
        PathBuf::from("/etc/containerd/certs.d")
    );
    assert_eq!(cfg.registry.max_concurrent_downloads, 4);
    assert_eq!(cfg.registry.progress_timeout, Duration::from_secs(300));
    note_of(
        &out,
        "plugins.\"io.containerd.cri.v1.images\".pinned_images.sandbox",
        false,
    );

    // CRI (server) plugin: streaming; a version 2 key there was not in effect.
    assert_eq!(cfg.streaming.address, "127.0.0.1");
    assert_eq!(cfg.streaming.port, 0);
    assert_eq!(cfg.streaming.idle_timeout, "4h");
    assert!(!cfg.streaming.enable_tls);
    let stale = note_of(
        &out,
        "plugins.\"io.containerd.grpc.v1.cri\".sandbox_image",
        false,
    );
    assert!(
        stale.contains("containerd 2.x does not read this key"),
        "{stale}"
    );

    // NRI, with its validator.
    assert!(cfg.nri.enable);
    assert!(cfg.nri.default_validator.enable);
    assert!(cfg.nri.default_validator.reject_oci_hook_adjustment);
    assert_eq!(
        cfg.nri.default_validator.required_plugins,
        ["10-resource-policy"]
    );

    // Other plugins: listed, nothing to do, except what bears on pulls.
    note_of(
        &out,
        "plugins.\"io.containerd.gc.v1.scheduler\".pause_threshold",
        false,
    );
    let transfer = "plugins.\"io.containerd.transfer.v1.local\"";
    note_of(&out, &format!("{transfer}.config_path"), true);
    note_of(&out, &format!("{transfer}.max_concurrent_downloads"), false);
    let unpack = note_of(&out, &format!("{transfer}.unpack_config"), false);
    assert!(
        unpack.contains("= [{ platform = \"linux/amd64\", snapshotter = \"overlayfs\" }]"),
        "{unpack}"
    );
}

#[test]
fn values_berth_would_refuse_become_comments_and_the_output_still_loads() {
    let text = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = ""
  stream_idle_timeout = "0s"
  max_concurrent_downloads = 0
  image_pull_progress_timeout = "1500us"
  no_such_key = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "kata"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
    runtime_type = "io.containerd.kata.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "net.d"
    max_conf_num = 0
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."gcr.io"]
    endpoint = ["https://mirror.local/v2/gcr"]
  [plugins."io.containerd.grpc.v1.cri".x509_key_pair_streaming]
    tls_cert_file = "/etc/stream.crt"
"#;
    let out = import(text);
    let cfg = load(&out);
    assert_every_key_accounted_for(text, &out);
    let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
    for (key, why) in [
        ("stream_server_address", "berth needs an IP address"),
        ("stream_idle_timeout", "berth needs one above 0"),
        ("max_concurrent_downloads", "at least 1"),
        ("image_pull_progress_timeout", "finer than a millisecond"),
        ("no_such_key", "unknown to berth's importer"),
        (
            "containerd.default_runtime_name",
            "berth's default handler is \"runc\"",
        ),
        ("cni.conf_dir", "not an absolute path"),
        ("cni.max_conf_num", "one network only"),
        (
            "registry.config_path",
            "berth reads one hosts.toml directory",
        ),
        (
            "registry.mirrors.\"gcr.io\".endpoint",
            "endpoints may not have a path",
        ),
    ] {
        let line = note_of(&out, &format!("{cri}.{key}"), true);
        assert!(line.contains(why), "{key}: {line}");
    }
    // Without enable_tls_streaming containerd ignores the pair.
    note_of(
        &out,
        &format!("{cri}.x509_key_pair_streaming.tls_cert_file"),
        false,
    );
    // What could not be used keeps berth's defaults.
    let default = Config::default();
    assert_eq!(cfg.streaming.address, default.streaming.address);
    assert_eq!(cfg.streaming.idle_timeout, default.streaming.idle_timeout);
    assert_eq!(cfg.cni.conf_dir, default.cni.conf_dir);
    assert_eq!(cfg.registry.config_path, PathBuf::new());
    assert!(cfg.registry.mirrors.is_empty());
    assert_eq!(cfg.runtime.default_handler, "runc");
    assert_eq!(cfg.runtime.handlers.keys().collect::<Vec<_>>(), ["runc"]);
}

#[test]
fn mirrors_next_to_config_path_are_refused_as_containerd_refuses_them() {
    let text = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://mirror.gcr.io"]
"#;
    let out = import(text);
    let cfg = load(&out);
    assert_eq!(
        cfg.registry.config_path,
        PathBuf::from("/etc/containerd/certs.d")
    );
    assert!(cfg.registry.mirrors.is_empty());
    let line = note_of(
        &out,
        "plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"docker.io\".endpoint",
        true,
    );
    assert!(
        line.contains("refuses mirrors together with config_path"),
        "{line}"
    );
}

#[test]
fn nri_is_on_or_off_as_each_containerd_version_has_it() {
    // 1.x without an NRI section: off; 2.x: on; disabled_plugins: off.
    assert!(!load(&import("version = 2\n")).nri.enable);
    assert!(load(&import("version = 3\n")).nri.enable);
    let text = "version = 3\ndisabled_plugins = [\"io.containerd.nri.v1.nri\"]\n";
    assert!(!load(&import(text)).nri.enable);
    // No runtimes in the file: berth's embedded handlers stay.
    let cfg = load(&import("version = 3\n"));
    assert_eq!(cfg.runtime.handlers, Config::default().runtime.handlers);
}

#[test]
fn a_disabled_cri_plugin_is_said_at_the_top() {
    // Docker's packaged containerd config.
    let out = import("version = 2\ndisabled_plugins = [\"cri\"]\n");
    let (top, _) = out.split_once("\n\n").unwrap();
    assert!(top.contains("CRI plugin is disabled"), "{out}");
}

#[test]
fn an_unknown_version_is_an_error_naming_the_file() {
    for (text, says) in [
        ("version = 5\n", "unknown `version = 5`"),
        ("version = \"2\"\n", "unknown `version = \"2\"`"),
        ("version = 1\n", "a version 1 config"),
        ("root = \"/var/lib/containerd\"\n", "no `version` key"),
    ] {
        let e = import_toml(text, Path::new(PATH)).unwrap_err().to_string();
        assert!(e.contains(PATH), "{e}");
        assert!(e.contains(says), "{text}: {e}");
    }
    let e = import_toml("version = \n", Path::new(PATH))
        .unwrap_err()
        .to_string();
    assert!(e.contains(PATH) && e.contains("line 1"), "{e}");
}

/// What containerd 2.4.2's `containerd config default` writes (version 4).
const V4_DEFAULT: &str =
    include_str!("../../../crates/containerd-import/testdata/containerd-2.4.2-default.toml");

#[test]
fn containerd_2_4s_default_config_of_version_4_imports_and_loads() {
    let out = import(V4_DEFAULT);
    let cfg = load(&out);
    assert_every_key_accounted_for(V4_DEFAULT, &out);
    assert!(
        out.contains("(version 4, as containerd 2.4 writes it)"),
        "{out}"
    );
    // The CRI plugins are read as in version 3.
    assert_eq!(cfg.runtime.default_handler, "runc");
    assert_eq!(cfg.runtime.handlers["runc"].binary, "runc");
    assert_eq!(cfg.runtime.cgroup_driver, CgroupDriver::Cgroupfs);
    assert_eq!(cfg.cni.bin_dirs, [PathBuf::from("/opt/cni/bin")]);
    assert_eq!(cfg.registry.max_concurrent_downloads, 3);
    assert_eq!(cfg.streaming.idle_timeout, "4h");
    assert!(cfg.nri.enable);
    // The server plugins version 4 moved the top-level tables into: the
    // CRI socket is to check, what berth has no use for is not.
    let grpc = note_of(
        &out,
        "plugins.\"io.containerd.server.v1.grpc\".address",
        true,
    );
    assert!(
        grpc.contains("berth serves CRI on its own socket"),
        "{grpc}"
    );
    for key in [
        "plugins.\"io.containerd.server.v1.ttrpc\".address",
        "plugins.\"io.containerd.server.v1.grpc\".max_recv_message_size",
        "plugins.\"io.containerd.server.v1.grpc-tcp\".address",
        "plugins.\"io.containerd.server.v1.debug\".address",
        "plugins.\"io.containerd.server.v1.metrics\".address",
        "plugins.\"io.containerd.metrics.v1.grpc-prometheus\".grpc_histogram",
        "debug.log_trace_id",
    ] {
        note_of(&out, key, false);
    }
    assert!(cfg.metrics.address.is_empty());
}

#[test]
fn version_4_reads_the_metrics_address_from_its_plugin_not_the_top_level_table() {
    let text = r#"
version = 4
[metrics]
  address = "127.0.0.1:1338"
[plugins."io.containerd.server.v1.metrics"]
  address = "127.0.0.1:1339"
"#;
    let out = import(text);
    assert_every_key_accounted_for(text, &out);
    assert_eq!(load(&out).metrics.address, "127.0.0.1:1339");
    let stale = note_of(&out, "metrics.address", false);
    assert!(stale.contains("in version 4 it is plugins"), "{stale}");
    // Version 3 reads the top-level table (and containerd 2.4 the plugin's
    // when the file has it).
    let v3 = text.replace("version = 4", "version = 3");
    let out = import(&v3);
    assert_every_key_accounted_for(&v3, &out);
    assert_eq!(load(&out).metrics.address, "127.0.0.1:1339");
    let v3 = "version = 3\n[metrics]\n  address = \"127.0.0.1:1338\"\n";
    assert_eq!(load(&import(v3)).metrics.address, "127.0.0.1:1338");
}

#[test]
fn an_unreadable_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("config.toml");
    let e = import_file(&missing).unwrap_err().to_string();
    assert!(e.contains(&missing.display().to_string()), "{e}");
    assert!(e.contains("No such file"), "{e}");
    // A directory is no config file either.
    let e = import_file(dir.path()).unwrap_err().to_string();
    assert!(e.contains(&dir.path().display().to_string()), "{e}");
}

/// The config that the installed containerd writes by default (Debian's
/// containerd 1.6 here), imported whole.
#[test]
#[ignore = "needs containerd on PATH (hack/install-deps.sh installs it)"]
fn the_installed_containerds_default_config_imports() {
    let out = match std::process::Command::new("containerd")
        .args(["config", "default"])
        .output()
    {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!(
            "containerd config default failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("needs containerd on PATH (hack/install-deps.sh installs it): {e}"),
    };
    let text = String::from_utf8(out.stdout).unwrap();
    let output = import(&text);
    let cfg = load(&output);
    assert_every_key_accounted_for(&text, &output);
    // What every containerd 1.6/1.7/2.x default has.
    assert_eq!(cfg.runtime.default_handler, "runc");
    assert_eq!(cfg.runtime.handlers["runc"].binary, "runc");
    assert_eq!(cfg.runtime.cgroup_driver, CgroupDriver::Cgroupfs);
    assert_eq!(cfg.cni.conf_dir, PathBuf::from("/etc/cni/net.d"));
    assert_eq!(cfg.cni.bin_dirs, [PathBuf::from("/opt/cni/bin")]);
    assert_eq!(cfg.registry.max_concurrent_downloads, 3);
    assert_eq!(cfg.streaming.address, "127.0.0.1");
    assert_eq!(cfg.streaming.idle_timeout, "4h");
    assert!(
        output.contains("not mapped: berth pulls no pause image"),
        "{output}"
    );
}
