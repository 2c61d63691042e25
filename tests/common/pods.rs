//! Pods for tests: a network of the test's own, a daemon on it, pod configs.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use cri_api::v1;

use super::Daemon;

static NEXT_NET: AtomicU32 = AtomicU32::new(0);

/// A test network of its own: bridge, subnet and CNI network name.
pub struct TestNet {
    pub bridge: String,
    pub subnet_prefix: String,
    pub name: String,
}

impl TestNet {
    pub fn new() -> TestNet {
        // Unique within this test binary (up to 200 networks); binaries run one at a time.
        let n =
            20 + ((std::process::id() % 25) * 8 + NEXT_NET.fetch_add(1, Ordering::SeqCst)) % 200;
        let net = TestNet {
            bridge: format!("btest{n}"),
            subnet_prefix: format!("10.199.{n}."),
            name: format!("berth-test-{n}"),
        };
        // Start clean even if an earlier, failed run left this network behind.
        net.clean();
        net
    }

    pub fn config(&self, extra: &str) -> String {
        format!(
            // hostport_snat is left at its default (on): the hostPort test
            // proves a hostPort answers on 127.0.0.1 as configured by default.
            "{extra}\n[cni]\nnetwork_name = {:?}\ndefault_subnet = \"{}0/24\"\ndefault_bridge = {:?}\n",
            self.name, self.subnet_prefix, self.bridge
        )
    }
}

impl TestNet {
    /// host-local's leases of this network (its IPs in use).
    pub fn leases(&self) -> Vec<String> {
        std::fs::read_dir(format!("/var/lib/cni/networks/{}", self.name))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&self.subnet_prefix))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes the bridge and the IPAM leases of this network.
    fn clean(&self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(format!("/var/lib/cni/networks/{}", self.name));
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        self.clean();
    }
}

/// Writes into `sandbox` the config of a daemon on `net`, with `extra`
/// (TOML sections) before its CNI section; the config file.
pub fn net_config(sandbox: &super::Sandbox, net: &TestNet, extra: &str) -> std::path::PathBuf {
    let cni = sandbox.cni_dir();
    sandbox.write_config(&format!("{}conf_dir = {cni:?}\n", net.config(extra)))
}

/// Starts a daemon with the default network on `net`.
pub async fn daemon(net: &TestNet) -> Daemon {
    daemon_with(net, "").await
}

/// [`daemon`] with `extra` config sections.
pub async fn daemon_with(net: &TestNet, extra: &str) -> Daemon {
    let sandbox = super::Sandbox::new();
    let config = net_config(&sandbox, net, extra);
    Daemon::start_in(sandbox, &config).await
}

pub fn pod_config(name: &str) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
            attempt: 0,
        }),
        hostname: name.into(),
        labels: [("app".to_string(), name.to_string())].into(),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: "/berth-test".into(),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(kubelet_namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What kubelet sends for a pod that does not share its process namespace:
/// network and IPC of the pod, a PID namespace per container. Such a pod
/// runs without a pause (its UTS and IPC namespaces pinned).
pub fn kubelet_namespaces() -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: v1::NamespaceMode::Pod as i32,
        pid: v1::NamespaceMode::Container as i32,
        ipc: v1::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// `pod_config(name)` with one PID namespace shared by its containers
/// (`shareProcessNamespace`): a pod with a pause process.
pub fn pod_config_with_pause(name: &str) -> v1::PodSandboxConfig {
    let mut config = pod_config(name);
    let linux = config.linux.get_or_insert_with(Default::default);
    let sc = linux.security_context.get_or_insert_with(Default::default);
    sc.namespace_options = Some(v1::NamespaceOption {
        pid: v1::NamespaceMode::Pod as i32,
        ..kubelet_namespaces()
    });
    config
}

/// `config` on the node's network, as kubelet sends such a pod: without a
/// hostname (the node's is the pod's).
pub fn on_host_network(mut config: v1::PodSandboxConfig) -> v1::PodSandboxConfig {
    config.hostname.clear();
    let linux = config.linux.get_or_insert_with(Default::default);
    let sc = linux.security_context.get_or_insert_with(Default::default);
    sc.namespace_options
        .get_or_insert_with(kubelet_namespaces)
        .network = v1::NamespaceMode::Node as i32;
    config
}
