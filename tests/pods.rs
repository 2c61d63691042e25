//! Pod sandboxes against the real daemon, real runc and real CNI plugins:
//! IPs, reachability, host network, hostPort, hostname and DNS, teardown,
//! failure rollback and bad requests. Root only.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use common::cri::remove_pod;
use common::faults::entries;
use common::pods::{daemon, pod_config, TestNet};
use common::Daemon;
use cri_api::v1;
use tonic::Code;

fn verbose_info(resp: &v1::PodSandboxStatusResponse) -> serde_json::Value {
    serde_json::from_str(&resp.info["info"]).unwrap()
}

fn ping(args: &[&str]) -> bool {
    Command::new("ping")
        .args(["-c", "1", "-W", "2"])
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn in_netns(netns: &str, cmd: &[&str]) -> std::process::Output {
    Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args(cmd)
        .output()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn pod_gets_an_ip_and_is_reachable_then_leaves_nothing_behind() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let a = cri.run_pod(&pod_config("pod-a")).await.unwrap();
    let b = cri.run_pod(&pod_config("pod-b")).await.unwrap();

    let sa = cri.pod_status(&a, true).await.unwrap();
    let st = sa.status.clone().unwrap();
    assert_eq!(st.state, v1::PodSandboxState::SandboxReady as i32);
    assert_eq!(st.metadata.as_ref().unwrap().name, "pod-a");
    assert_eq!(st.labels["app"], "pod-a");
    let ip_a = st.network.unwrap().ip;
    assert!(ip_a.starts_with(&net.subnet_prefix), "{ip_a}");
    let ip_b = cri
        .pod_status(&b, true)
        .await
        .unwrap()
        .status
        .unwrap()
        .network
        .unwrap()
        .ip;
    assert_ne!(ip_a, ip_b);

    // From the host, and from pod a to pod b.
    assert!(ping(&[&ip_a]), "host cannot ping {ip_a}");
    let netns_a = verbose_info(&sa)["netns"].as_str().unwrap().to_string();
    let out = in_netns(&netns_a, &["ping", "-c", "1", "-W", "2", &ip_b]);
    assert!(out.status.success(), "pod a cannot ping pod b: {out:?}");

    // No pause (kubelet's namespaces: nothing needs one): the pod's UTS
    // namespace is pinned, with the pod's hostname.
    let info = verbose_info(&sa);
    assert!(info["pid"].is_null(), "a pause runs: {info}");
    let uts = info["pinnedNamespaces"]["uts"]
        .as_str()
        .unwrap()
        .to_string();
    let out = Command::new("nsenter")
        .arg(format!("--uts={uts}"))
        .arg("hostname")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pod-a");

    // List with filters.
    let all = cri.list_pods(None).await.unwrap();
    assert_eq!(all.len(), 2);
    let by_label = cri
        .list_pods(Some(v1::PodSandboxFilter {
            label_selector: [("app".to_string(), "pod-b".to_string())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(by_label.len(), 1);
    assert_eq!(by_label[0].id, b);
    let by_prefix = cri
        .list_pods(Some(v1::PodSandboxFilter {
            id: a[..12].to_string(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(by_prefix.len(), 1);

    // Stop: not ready, network gone; twice is fine.
    for _ in 0..2 {
        cri.stop_pod(&a).await.unwrap();
    }
    let st = cri.pod_status(&a, true).await.unwrap().status.unwrap();
    assert_eq!(st.state, v1::PodSandboxState::SandboxNotready as i32);
    assert!(
        !std::path::Path::new(&netns_a).exists(),
        "netns left behind"
    );
    assert!(!ping(&[&ip_a]), "{ip_a} still answers after stop");
    let lease = format!("/var/lib/cni/networks/{}/{ip_a}", net.name);
    assert!(
        !std::path::Path::new(&lease).exists(),
        "IPAM lease left behind"
    );
    assert!(
        !std::path::Path::new(&uts).exists(),
        "pinned UTS namespace left behind"
    );
    let not_ready = cri
        .list_pods(Some(v1::PodSandboxFilter {
            state: Some(v1::PodSandboxStateValue {
                state: v1::PodSandboxState::SandboxNotready as i32,
            }),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(not_ready.len(), 1);

    // Remove: gone, twice is fine, status is NotFound.
    for _ in 0..2 {
        cri.remove_pod(&a).await.unwrap();
    }
    assert_eq!(
        cri.pod_status(&a, true).await.unwrap_err().code(),
        Code::NotFound
    );
    remove_pod(&daemon, &b).await;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(&a), "a mount of the sandbox is left");
    assert!(!mountinfo.contains(&b), "a mount of the sandbox is left");
    for leftover in ["state/netns", "state/sandboxes", "state/podns"] {
        let dir = daemon.sandbox.path(leftover);
        let n = entries(&dir).len();
        assert_eq!(n, 0, "{} is not empty", dir.display());
    }
    assert!(
        !std::path::Path::new(&format!("/sys/fs/cgroup/memory/berth-test/{a}")).exists(),
        "pause cgroup left"
    );
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn host_network_pod_has_no_netns_and_the_host_hostname() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let mut config = pod_config("hostnet");
    config.hostname.clear();
    config.linux.as_mut().unwrap().security_context = Some(v1::LinuxSandboxSecurityContext {
        namespace_options: Some(v1::NamespaceOption {
            network: v1::NamespaceMode::Node as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = cri.run_pod(&config).await.unwrap();
    let resp = cri.pod_status(&id, true).await.unwrap();
    let st = resp.status.clone().unwrap();
    assert_eq!(st.state, v1::PodSandboxState::SandboxReady as i32);
    assert!(st.network.is_none(), "host-network pods get no pod IP");
    assert!(verbose_info(&resp)["netns"].is_null());
    let options = st.linux.unwrap().namespaces.unwrap().options.unwrap();
    assert_eq!(options.network, v1::NamespaceMode::Node as i32);
    let pid = verbose_info(&resp)["pid"].as_u64().unwrap();
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let pod_net = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_eq!(host_net, pod_net);
    remove_pod(&daemon, &id).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn dns_config_and_hostport() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let mut config = pod_config("dns");
    config.dns_config = Some(v1::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let host_port = 30000 + (std::process::id() % 20000) as i32;
    config.port_mappings = vec![v1::PortMapping {
        protocol: v1::Protocol::Tcp as i32,
        container_port: 8080,
        host_port,
        host_ip: String::new(),
    }];
    let id = cri.run_pod(&config).await.unwrap();
    let resolv = std::fs::read_to_string(
        daemon
            .sandbox
            .path(&format!("root/sandboxes/{id}/resolv.conf")),
    )
    .unwrap();
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local"),
        "{resolv}"
    );
    assert!(resolv.contains("options ndots:5"), "{resolv}");

    // A server inside the pod's network namespace answers on the hostPort.
    let resp = cri.pod_status(&id, true).await.unwrap();
    let netns = verbose_info(&resp)["netns"].as_str().unwrap().to_string();
    let mut server = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args([
            "busybox",
            "sh",
            "-c",
            "echo hello-from-pod | busybox nc -l -p 8080",
        ])
        .spawn()
        .unwrap();
    // Connected once it listens (nc serves one connection): once in the
    // pod's namespace, port 8080 (1F90) in state LISTEN (0A), on v4 or v6.
    let pod_ns = format!("net:[{}]", std::fs::metadata(&netns).unwrap().ino());
    let proc = format!("/proc/{}", server.id());
    common::wait_until("nc listens in the pod", Duration::from_secs(10), || {
        let ns = std::fs::read_link(format!("{proc}/ns/net")).unwrap_or_default();
        let listens = ["tcp", "tcp6"].iter().any(|t| {
            let table = std::fs::read_to_string(format!("{proc}/net/{t}")).unwrap_or_default();
            table.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(":1F90") && f[3] == "0A"
            })
        });
        ns.to_string_lossy() == pod_ns && listens
    })
    .await;
    let got = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect_timeout(
            &format!("127.0.0.1:{host_port}").parse().unwrap(),
            Duration::from_secs(5),
        )?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok::<_, std::io::Error>(text)
    })
    .await
    .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(got.unwrap().trim(), "hello-from-pod");
    remove_pod(&daemon, &id).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn same_name_twice_is_already_exists() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let id = cri.run_pod(&pod_config("twice")).await.unwrap();
    let err = cri.run_pod(&pod_config("twice")).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    remove_pod(&daemon, &id).await;
    // Removed: the name is free again.
    let id = cri.run_pod(&pod_config("twice")).await.unwrap();
    remove_pod(&daemon, &id).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn bad_requests_are_invalid_argument() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    // Made wrong on purpose: the raw client.
    let mut rt = cri.runtime();
    let err = rt
        .run_pod_sandbox(v1::RunPodSandboxRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let mut no_meta = pod_config("x");
    no_meta.metadata = None;
    assert_eq!(
        cri.run_pod(&no_meta).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let err = cri.run_pod_on(&pod_config("y"), "kata").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("kata"));
    assert_eq!(
        cri.pod_status("no-such-pod", true)
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn cni_failure_leaves_nothing_and_frees_the_name() {
    require_root!();
    let net = TestNet::new();
    let sandbox = common::Sandbox::new();
    // A network whose second plugin fails.
    let bin = sandbox.path("cni-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let failer = bin.join("failer");
    std::fs::write(
        &failer,
        "#!/bin/sh\ncase \"$CNI_COMMAND\" in\n  ADD) echo '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"injected failure\"}'; exit 1;;\n  *) exit 0;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&failer, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cni = sandbox.cni_dir();
    let conflist = format!(
        r#"{{"cniVersion":"1.0.0","name":"{}","plugins":[{{"type":"bridge","bridge":"{}","isGateway":true,"ipMasq":false,"ipam":{{"type":"host-local","ranges":[[{{"subnet":"{}0/24"}}]]}}}},{{"type":"failer"}}]}}"#,
        net.name, net.bridge, net.subnet_prefix
    );
    std::fs::write(cni.join("10-fail.conflist"), conflist).unwrap();
    let config = sandbox.write_config(&format!(
        "[cni]\nconf_dir = {cni:?}\nbin_dirs = [{bin:?}, \"/usr/lib/cni\"]\nwrite_default_network = false\n"
    ));
    let daemon = Daemon::start_in(sandbox, &config).await;
    let cri = daemon.cri().await;
    let err = cri.run_pod(&pod_config("fails")).await.unwrap_err();
    assert!(err.message().contains("injected failure"), "{err:?}");
    let listed = cri.list_pods(None).await.unwrap();
    assert!(listed.is_empty(), "a failed sandbox is listed");
    for leftover in [
        "state/netns",
        "state/podns",
        "state/sandboxes",
        "root/records/sandboxes",
        "root/sandboxes",
    ] {
        let dir = daemon.sandbox.path(leftover);
        let n = entries(&dir).len();
        assert_eq!(n, 0, "{} is not empty", dir.display());
    }
    let leases: Vec<_> = std::fs::read_dir(format!("/var/lib/cni/networks/{}", net.name))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&net.subnet_prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(leases.is_empty(), "IPAM leases left: {leases:?}");

    // Fix the network: the same name works now.
    std::fs::remove_file(daemon.sandbox.cni_dir().join("10-fail.conflist")).unwrap();
    let good = format!(
        r#"{{"cniVersion":"1.0.0","name":"{}","plugins":[{{"type":"bridge","bridge":"{}","isGateway":true,"ipMasq":false,"ipam":{{"type":"host-local","ranges":[[{{"subnet":"{}0/24"}}]]}}}}]}}"#,
        net.name, net.bridge, net.subnet_prefix
    );
    std::fs::write(daemon.sandbox.cni_dir().join("20-good.conflist"), good).unwrap();
    let id = cri.run_pod(&pod_config("fails")).await.unwrap();
    remove_pod(&daemon, &id).await;
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn pod_with_kubelets_default_namespace_options_runs() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    // What kubelet sends for a pod that shares no process namespace: pid
    // CONTAINER (found by the benchmark, which sends it; the pause must get
    // a PID namespace of its own).
    let mut config = pod_config("kubelet-defaults");
    config.linux = Some(v1::LinuxPodSandboxConfig {
        security_context: Some(v1::LinuxSandboxSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                network: v1::NamespaceMode::Pod as i32,
                pid: v1::NamespaceMode::Container as i32,
                ipc: v1::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = cri.run_pod(&config).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn update_pod_sandbox_resources_is_checked_recorded_and_kept() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let id = cri.run_pod(&pod_config("resize")).await.unwrap();
    let overhead = Some(v1::LinuxContainerResources {
        cpu_shares: 25,
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    });
    let update = |pod: String, resources: v1::LinuxContainerResources| {
        let (cri, overhead) = (&cri, overhead.clone());
        async move {
            cri.update_pod_resources(&pod, overhead, Some(resources))
                .await
        }
    };
    let wanted = v1::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 150_000,
        cpu_shares: 1536,
        memory_limit_in_bytes: 256 << 20,
        ..Default::default()
    };
    update(id.clone(), wanted.clone()).await.unwrap();
    // Out of range values are refused, and the recorded ones stay.
    for bad in [
        v1::LinuxContainerResources {
            cpu_shares: -1,
            ..Default::default()
        },
        v1::LinuxContainerResources {
            memory_limit_in_bytes: -5,
            ..Default::default()
        },
        v1::LinuxContainerResources {
            cpu_period: 1,
            cpu_quota: 100,
            ..Default::default()
        },
    ] {
        let e = update(id.clone(), bad.clone()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}: {e}");
    }
    let e = update("no-such-pod".into(), wanted.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");

    // Shown in verbose status, and still there after a restart.
    for round in 0..2 {
        // A client of its own each round: the daemon restarts in between.
        let status = daemon.cri().await.pod_status(&id, true).await;
        let info = verbose_info(&status.unwrap());
        let r = &info["resources"];
        assert_eq!(
            r["resources"]["cpu_quota"], 150_000,
            "round {round}: {info}"
        );
        assert_eq!(r["resources"]["cpu_shares"], 1536, "{info}");
        assert_eq!(r["resources"]["memory_limit_in_bytes"], 256 << 20, "{info}");
        assert_eq!(r["overhead"]["cpu_shares"], 25, "{info}");
        if round == 0 {
            daemon.restart().await;
        }
    }
    daemon.cri().await.remove_pod(&id).await.unwrap();
}

/// A pod config named `name` in `namespace` with `uid`.
fn pod_named(name: &str, namespace: &str, uid: &str) -> v1::PodSandboxConfig {
    let mut config = pod_config("named");
    config.metadata = Some(v1::PodSandboxMetadata {
        name: name.into(),
        namespace: namespace.into(),
        uid: uid.into(),
        attempt: 0,
    });
    config
}

/// Pod and container names with `_` run, as with containerd and CRI-O (the
/// names crictl users and test suites give); pods and containers whose
/// metadata joined with `_` would read the same stay apart, and the same
/// metadata twice is still AlreadyExists. Only what is unsafe is refused.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn names_with_underscores_run_and_stay_apart() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    common::cri::pull(&daemon, &common::registry().busybox()).await;
    let events = pod_named("container_events_sandbox", "default", "uid-events");
    let mut pods = vec![cri.run_pod(&events).await.expect("a name with '_'")];
    let err = cri.run_pod(&events).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    // Each of these is "a_b_c_u_0" when joined as it is.
    let alike = [
        pod_named("a_b", "c", "u"),
        pod_named("a", "b_c", "u"),
        pod_named("a", "b", "c_u"),
    ];
    for config in &alike {
        let md = config.metadata.as_ref().unwrap();
        pods.push(
            cri.run_pod(config)
                .await
                .unwrap_or_else(|e| panic!("{md:?}: {e:?}")),
        );
    }
    // Container "x" in pod a_b and "x_a" in pod b: "x_a_b_c_u_0" both.
    let pod_b = pod_named("b", "c", "u");
    pods.push(cri.run_pod(&pod_b).await.unwrap());
    let x = common::cri::container("x", &["true"]);
    cri.create_container(&pods[1], &alike[0], x.clone())
        .await
        .expect("container x in pod a_b");
    cri.create_container(&pods[4], &pod_b, common::cri::container("x_a", &["true"]))
        .await
        .expect("container x_a in pod b");
    let err = cri
        .create_container(&pods[1], &alike[0], x)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert_eq!(cri.list_containers(None).await.unwrap().len(), 2);

    let long = "x".repeat(254);
    for (config, field) in [
        (pod_named("a/b", "c", "u"), "metadata.name"),
        (pod_named("a", "b\0", "u"), "metadata.namespace"),
        (pod_named("..", "c", "u"), "metadata.name"),
        (pod_named("a", "c", &long), "metadata.uid"),
    ] {
        let err = cri.run_pod(&config).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().contains(field), "{field}: {err:?}");
    }
    let err = cri
        .create_container(&pods[4], &pod_b, common::cri::container("x/y", &["true"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("container metadata.name"), "{err:?}");
    assert_eq!(cri.list_pods(None).await.unwrap().len(), pods.len());
    for pod in pods {
        remove_pod(&daemon, &pod).await;
    }
}

/// A host-network pod has the node's UTS namespace, so a hostname of its
/// own is refused, as containerd's runc refuses it (kubelet sends none for
/// such a pod); without one, its containers see the node's name both in
/// `/etc/hostname` and from `hostname`.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn a_host_network_pod_with_a_hostname_of_its_own_is_refused() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    common::cri::pull(&daemon, &common::registry().busybox()).await;
    let mut config = common::pods::on_host_network(pod_config("hostnet-named"));
    config.hostname = "custom-name".into();
    let err = cri.run_pod(&config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("hostname \"custom-name\"")
            && err.message().contains("network NODE"),
        "{err:?}"
    );
    assert!(cri.list_pods(None).await.unwrap().is_empty());

    config.hostname.clear();
    let pod = cri.run_pod(&config).await.unwrap();
    let c = common::cri::run_container(
        &daemon,
        &pod,
        &config,
        common::cri::container("c", &["sleep", "3600"]),
    )
    .await;
    let node = nix::unistd::gethostname().unwrap();
    let node = node.to_string_lossy();
    for cmd in [&["cat", "/etc/hostname"][..], &["hostname"]] {
        let out = common::cri::exec(&daemon, &c, cmd).await;
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), node, "{cmd:?}");
    }
    remove_pod(&daemon, &pod).await;
}

/// Checks each pod's (id, reported, resolved) runtime handler in its
/// status, its verbose info and ListPodSandbox.
async fn check_handlers(daemon: &Daemon, expect: [(&String, &str, &str); 2], when: &str) {
    let cri = daemon.cri().await;
    let listed = cri.list_pods(None).await.unwrap();
    for (pod, reported, resolved) in expect {
        let resp = cri.pod_status(pod, true).await.unwrap();
        let status = resp.status.as_ref().unwrap();
        assert_eq!(status.runtime_handler, reported, "{when}: status");
        let info = verbose_info(&resp);
        assert_eq!(info["runtimeHandler"], reported, "{when}: info");
        assert_eq!(info["runtimeHandlerResolved"], resolved, "{when}: info");
        let item = listed.iter().find(|p| &p.id == pod).unwrap();
        assert_eq!(item.runtime_handler, reported, "{when}: list");
    }
}

/// The runtime handler a pod reports is the one RunPodSandbox asked for
/// (empty for the default), as containerd; the handler it resolved to is in
/// the verbose info. After a restart the same; a record of an older berth
/// (which kept only the resolved handler) reports that one, as it did.
#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn the_runtime_handler_is_reported_as_asked() {
    require_root!();
    let net = TestNet::new();
    let mut daemon = daemon(&net).await;
    let cri = daemon.cri().await;
    let default = cri.run_pod(&pod_config("handler-default")).await.unwrap();
    let named = cri
        .run_pod_on(&pod_config("handler-named"), "runc")
        .await
        .unwrap();
    let expect = [(&default, "", "runc"), (&named, "runc", "runc")];
    check_handlers(&daemon, expect, "running").await;
    daemon.restart().await;
    check_handlers(&daemon, expect, "restarted").await;

    // The record as an older berth wrote it.
    daemon
        .signal_and_wait(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(10))
        .await;
    let path = daemon
        .sandbox
        .path(&format!("root/records/sandboxes/{default}.json"));
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let meta = record["record"]["meta"].as_object_mut().unwrap();
    assert_eq!(meta.remove("requested_handler"), Some("".into()));
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    daemon.restart().await;
    let expect = [(&default, "runc", "runc"), (&named, "runc", "runc")];
    check_handlers(&daemon, expect, "older record").await;
    remove_pod(&daemon, &default).await;
    remove_pod(&daemon, &named).await;
}
