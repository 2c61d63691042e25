//! The exec protocol against fake plugins: small shell scripts that record
//! their environment and stdin, then print a canned result or error. No root
//! needed (the "namespace" is /proc/self/ns/net; the fakes never enter it).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_cni::{
    Attachment, Bandwidth, CapabilityArgs, CheckOutcome, Cni, CniOptions, CniResult, DnsCapability,
    Error, PluginCall, PodArgs, PortMapping, SpecVersion,
};
use serde_json::{json, Value};

const NETNS: &str = "/proc/self/ns/net";

struct Harness {
    dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Harness {
        let h = Harness {
            dir: tempfile::tempdir().unwrap(),
        };
        for d in ["bin1", "bin2", "conf", "log"] {
            std::fs::create_dir_all(h.path(d)).unwrap();
        }
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn options(&self) -> CniOptions {
        CniOptions {
            conf_dirs: vec![self.path("conf")],
            bin_dirs: vec![self.path("bin1"), self.path("bin2")],
            cache_dir: self.path("cache"),
            network_name: None,
            timeout: Duration::from_secs(20),
        }
    }

    fn cni(&self) -> Cni {
        Cni::new(self.options())
    }

    /// A plugin that records its call, runs `extra` (shell), and on ADD prints
    /// `result`.
    fn plugin(&self, bin: &str, name: &str, result: &Value, extra: &str) {
        let log = self.path("log");
        let log = log.display();
        let script = format!(
            "#!/bin/sh\n\
             echo \"{name} $CNI_COMMAND\" >> {log}/calls\n\
             env | grep '^CNI_' | sort > {log}/{name}-$CNI_COMMAND.env\n\
             cat > {log}/{name}-$CNI_COMMAND.stdin\n\
             {extra}\n\
             if [ \"$CNI_COMMAND\" = ADD ]; then\ncat <<'EOF'\n{result}\nEOF\nfi\n"
        );
        let path = self.path(bin).join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn conf(&self, file: &str, conf: &Value) {
        std::fs::write(self.path("conf").join(file), conf.to_string()).unwrap();
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("log/calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.path("log/calls"));
    }

    fn env(&self, name: &str, command: &str) -> BTreeMap<String, String> {
        std::fs::read_to_string(self.path(&format!("log/{name}-{command}.env")))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn stdin(&self, name: &str, command: &str) -> Value {
        let text =
            std::fs::read_to_string(self.path(&format!("log/{name}-{command}.stdin"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn cache_files(&self) -> Vec<String> {
        match std::fs::read_dir(self.path("cache")) {
            Ok(d) => d
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn result(version: &str, ip: &str) -> Value {
    json!({
        "cniVersion": version,
        "interfaces": [{"name": "br0"}, {"name": "eth0", "mac": "c2:00:00:00:00:01", "sandbox": NETNS}],
        "ips": [{"address": ip, "gateway": "10.9.0.1", "interface": 1}],
        "routes": [],
        "dns": {}
    })
}

fn pod() -> PodArgs {
    PodArgs {
        namespace: "ns1".into(),
        name: "web".into(),
        uid: "uid-1".into(),
        infra_container_id: "sb1".into(),
    }
}

fn attachment(id: &str) -> Attachment {
    Attachment::new(id, NETNS, pod())
}

/// Three plugins over two bin dirs; a declares portMappings, b bandwidth.
fn three_plugins(h: &Harness, version: &str) {
    h.plugin("bin1", "a", &result(version, "10.9.0.2/24"), "");
    h.plugin("bin1", "b", &result(version, "10.9.0.3/24"), "");
    h.plugin("bin2", "c", &result(version, "10.9.0.4/24"), "");
    h.conf(
        "10-net.conflist",
        &json!({
            "cniVersion": version, "name": "net",
            "plugins": [
                {"type": "a", "capabilities": {"portMappings": true}, "own": "x"},
                {"type": "b", "capabilities": {"bandwidth": true, "dns": false}},
                {"type": "c"}
            ]
        }),
    );
}

fn caps() -> CapabilityArgs {
    CapabilityArgs {
        port_mappings: vec![PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: "tcp".into(),
            host_ip: String::new(),
        }],
        bandwidth: Some(Bandwidth {
            ingress_rate: 1_000_000,
            ingress_burst: 2_000_000,
            egress_rate: 1_000_000,
            egress_burst: 2_000_000,
        }),
        dns: Some(DnsCapability {
            servers: vec!["10.0.0.10".into()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn add_chains_results_and_filters_capabilities() {
    let h = Harness::new();
    three_plugins(&h, "1.0.0");
    let cni = h.cni();
    let mut att = attachment("sb1");
    att.capabilities = caps();
    let got = cni.add(&att).await.unwrap();

    assert_eq!(h.calls(), ["a ADD", "b ADD", "c ADD"]);
    let env = h.env("a", "ADD");
    let expect = |k: &str, v: &str| assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
    expect("CNI_COMMAND", "ADD");
    expect("CNI_CONTAINERID", "sb1");
    expect("CNI_NETNS", NETNS);
    expect("CNI_IFNAME", "eth0");
    expect(
        "CNI_PATH",
        &format!("{}:{}", h.path("bin1").display(), h.path("bin2").display()),
    );
    expect(
        "CNI_ARGS",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=uid-1",
    );

    let a = h.stdin("a", "ADD");
    assert_eq!(a["name"], "net");
    assert_eq!(a["cniVersion"], "1.0.0");
    assert_eq!(a["type"], "a");
    assert_eq!(a["own"], "x");
    assert!(a.get("capabilities").is_none());
    assert!(
        a.get("prevResult").is_none(),
        "first plugin got a prevResult"
    );
    assert_eq!(
        a["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    );
    let b = h.stdin("b", "ADD");
    assert_eq!(b["prevResult"], result("1.0.0", "10.9.0.2/24"));
    assert_eq!(
        b["runtimeConfig"],
        json!({"bandwidth": {"ingressRate": 1_000_000, "ingressBurst": 2_000_000, "egressRate": 1_000_000, "egressBurst": 2_000_000}})
    );
    let c = h.stdin("c", "ADD");
    assert_eq!(c["prevResult"], result("1.0.0", "10.9.0.3/24"));
    assert!(c.get("runtimeConfig").is_none());

    let last = CniResult::parse(&result("1.0.0", "10.9.0.4/24"), SpecVersion::V1_0_0).unwrap();
    assert_eq!(got, last);
    assert_eq!(
        got.sandbox_ips("eth0"),
        ["10.9.0.4".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(h.cache_files(), ["net+sb1+eth0.json"]);
    assert_eq!(
        cni.cached_result("sb1", "eth0").unwrap(),
        Some(last.clone())
    );

    // A second ADD for the same attachment runs nothing and changes nothing.
    h.clear_calls();
    let err = cni.add(&att).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyAttached { .. }), "{err}");
    assert!(h.calls().is_empty());
    assert_eq!(cni.cached_result("sb1", "eth0").unwrap(), Some(last));
}

#[tokio::test]
async fn del_uses_the_cache_after_restart_and_config_removal() {
    let h = Harness::new();
    three_plugins(&h, "1.0.0");
    let mut att = attachment("sb1");
    att.capabilities = caps();
    h.cni().add(&att).await.unwrap();
    h.clear_calls();

    // A new client (daemon restart), the config gone, the namespace gone, and
    // no capability arguments given: DEL still has everything it needs.
    std::fs::remove_file(h.path("conf/10-net.conflist")).unwrap();
    let cni = h.cni();
    let gone = Attachment::new("sb1", "/run/berth/netns/gone", pod());
    cni.del(&gone).await.unwrap();
    assert_eq!(h.calls(), ["c DEL", "b DEL", "a DEL"]);
    let final_result = result("1.0.0", "10.9.0.4/24");
    for p in ["a", "b", "c"] {
        assert_eq!(h.stdin(p, "DEL")["prevResult"], final_result, "{p}");
        assert_eq!(
            h.env(p, "DEL").get("CNI_NETNS").map(String::as_str),
            Some("")
        );
    }
    assert_eq!(
        h.stdin("a", "DEL")["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    assert!(h.cache_files().is_empty());
    assert_eq!(cni.cached_result("sb1", "eth0").unwrap(), None);

    // Nothing cached and no configuration: nothing to run DEL with.
    assert!(matches!(cni.del(&gone).await, Err(Error::NoNetwork { .. })));
    // With a configuration again, DEL runs without prevResult.
    three_plugins(&h, "1.0.0");
    h.clear_calls();
    cni.del(&gone).await.unwrap();
    assert_eq!(h.calls(), ["c DEL", "b DEL", "a DEL"]);
    assert!(h.stdin("a", "DEL").get("prevResult").is_none());
}

#[tokio::test]
async fn version_0_3_1_has_no_prev_result_on_del_and_no_check() {
    let h = Harness::new();
    three_plugins(&h, "0.3.1");
    let cni = h.cni();
    let att = attachment("sb1");
    let got = cni.add(&att).await.unwrap();
    assert_eq!(got.cni_version, SpecVersion::V0_3_1);
    assert_eq!(h.stdin("b", "ADD")["prevResult"]["cniVersion"], "0.3.1");
    assert!(matches!(
        cni.check(&att).await.unwrap(),
        CheckOutcome::Skipped(_)
    ));
    cni.del(&att).await.unwrap();
    assert!(h.stdin("a", "DEL").get("prevResult").is_none());
}

#[tokio::test]
async fn check_runs_in_order_with_the_cached_result() {
    let h = Harness::new();
    three_plugins(&h, "0.4.0");
    let cni = h.cni();
    let att = attachment("sb1");
    assert!(matches!(
        cni.check(&att).await,
        Err(Error::NotAttached { .. })
    ));
    cni.add(&att).await.unwrap();
    h.clear_calls();
    assert_eq!(cni.check(&att).await.unwrap(), CheckOutcome::Passed);
    assert_eq!(h.calls(), ["a CHECK", "b CHECK", "c CHECK"]);
    assert_eq!(
        h.stdin("a", "CHECK")["prevResult"],
        result("0.4.0", "10.9.0.4/24")
    );

    // A failing CHECK reports the plugin's error.
    h.plugin("bin1", "b", &json!({}), "[ \"$CNI_COMMAND\" = CHECK ] && { echo '{\"code\": 100, \"msg\": \"veth missing\"}'; exit 1; }");
    let err = cni.check(&att).await.unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { call, failure } if call.plugin == "b" && call.command == berth_cni::Command::Check && failure.code == Some(100) && failure.msg == "veth missing"),
        "{err}"
    );

    // disableCheck: skipped (read from the cached configuration).
    cni.del(&att).await.unwrap();
    h.conf(
        "10-net.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "disableCheck": true, "plugins": [{"type": "c"}]}),
    );
    cni.add(&att).await.unwrap();
    assert!(matches!(
        cni.check(&att).await.unwrap(),
        CheckOutcome::Skipped(_)
    ));
}

#[tokio::test]
async fn plugin_error_is_parsed_and_add_is_undone() {
    let h = Harness::new();
    three_plugins(&h, "1.0.0");
    h.plugin(
        "bin1",
        "b",
        &json!({}),
        "if [ \"$CNI_COMMAND\" = ADD ]; then echo '{\"cniVersion\": \"1.0.0\", \"code\": 7, \"msg\": \"Invalid Configuration\", \"details\": \"Network 192.168.0.0/31 too small\"}'; echo 'some log' >&2; exit 1; fi",
    );
    let cni = h.cni();
    let err = cni.add(&attachment("sb1")).await.unwrap_err();
    match &err {
        Error::Plugin { call, failure } => {
            assert_eq!(
                **call,
                PluginCall {
                    network: "net".into(),
                    plugin: "b".into(),
                    command: berth_cni::Command::Add,
                    container_id: "sb1".into(),
                }
            );
            assert_eq!(failure.code, Some(7));
            assert_eq!(failure.msg, "Invalid Configuration");
            assert_eq!(failure.details, "Network 192.168.0.0/31 too small");
            assert_eq!(failure.stderr, "some log");
            assert!(failure.status.contains('1'), "{}", failure.status);
        }
        other => panic!("unexpected error: {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("b ADD") && text.contains("Invalid Configuration") && text.contains("code 7"),
        "{text}"
    );
    // The whole list was undone, in reverse, with the partial result.
    assert_eq!(h.calls(), ["a ADD", "b ADD", "c DEL", "b DEL", "a DEL"]);
    assert_eq!(
        h.stdin("a", "DEL")["prevResult"],
        result("1.0.0", "10.9.0.2/24")
    );
    assert!(h.cache_files().is_empty(), "{:?}", h.cache_files());
}

#[tokio::test]
async fn unstructured_errors_and_bad_results() {
    let h = Harness::new();
    h.plugin(
        "bin1",
        "a",
        &json!({}),
        "[ \"$CNI_COMMAND\" = ADD ] && { echo boom >&2; exit 3; }",
    );
    h.conf(
        "10-net.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "a"}]}),
    );
    let cni = h.cni();
    let err = cni.add(&attachment("sb1")).await.unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { failure, .. } if failure.code.is_none() && failure.msg == "boom" && failure.status.contains('3')),
        "{err}"
    );

    // Exit 0 with something that is not a result.
    h.plugin("bin1", "a", &json!({"ips": [{"address": "not-an-ip"}]}), "");
    let err = cni.add(&attachment("sb1")).await.unwrap_err();
    assert!(
        matches!(&err, Error::BadResult { call, .. } if call.plugin == "a"),
        "{err}"
    );
    assert!(h.cache_files().is_empty());

    // A plugin that is not there.
    h.conf(
        "10-net.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "nope"}]}),
    );
    let err = cni.add(&attachment("sb1")).await.unwrap_err();
    assert!(
        matches!(&err, Error::PluginNotFound { plugin, .. } if plugin == "nope"),
        "{err}"
    );
}

fn process_is_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie has been killed; only its parent's reaping is pending.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn timeout_kills_the_plugin_and_its_children() {
    let h = Harness::new();
    let log = h.path("log");
    h.plugin(
        "bin1",
        "slow",
        &json!({}),
        &format!(
            "if [ \"$CNI_COMMAND\" = ADD ]; then sleep 300 & echo $! > {l}/child; echo $$ > {l}/pid; wait; fi",
            l = log.display()
        ),
    );
    h.conf(
        "10-net.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "slow"}]}),
    );
    let mut opts = h.options();
    opts.timeout = Duration::from_millis(700);
    let cni = Cni::new(opts);
    let start = Instant::now();
    let err = cni.add(&attachment("sb1")).await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        matches!(&err, Error::Timeout { call, .. } if call.plugin == "slow" && call.command == berth_cni::Command::Add),
        "{err}"
    );
    let pid = std::fs::read_to_string(log.join("pid")).unwrap();
    let child = std::fs::read_to_string(log.join("child")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(process_is_gone(pid.trim()) && process_is_gone(child.trim())) {
        assert!(
            Instant::now() < deadline,
            "plugin {pid} or its child {child} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The undo (DEL) ran and succeeded, so nothing is cached.
    assert_eq!(h.calls(), ["slow ADD", "slow DEL"]);
    assert!(h.cache_files().is_empty());
}

#[tokio::test]
async fn status_runs_only_for_1_1_0() {
    let h = Harness::new();
    h.plugin("bin1", "a", &json!({}), "");
    h.plugin("bin2", "ipam", &json!({}), "");
    h.conf(
        "10-net.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "a", "ipam": {"type": "ipam"}}]}),
    );
    let cni = h.cni();
    let info = cni.status().await.unwrap();
    assert_eq!(info.name, "net");
    assert_eq!(info.plugins, ["a"]);
    assert_eq!(info.source, Some(h.path("conf/10-net.conflist")));
    assert!(h.calls().is_empty(), "STATUS ran for 1.0.0");

    h.conf(
        "10-net.conflist",
        &json!({"cniVersion": "1.1.0", "name": "net", "plugins": [{"type": "a", "ipam": {"type": "ipam"}}]}),
    );
    let info = cni.status().await.unwrap();
    assert_eq!(info.cni_version, SpecVersion::V1_1_0);
    assert_eq!(h.calls(), ["a STATUS"]);
    let env = h.env("a", "STATUS");
    assert_eq!(env.get("CNI_COMMAND").map(String::as_str), Some("STATUS"));
    assert!(env.contains_key("CNI_PATH"));
    assert!(!env.contains_key("CNI_CONTAINERID") && !env.contains_key("CNI_NETNS"));
    assert_eq!(h.stdin("a", "STATUS")["name"], "net");

    h.plugin(
        "bin1",
        "a",
        &json!({}),
        "echo '{\"code\": 50, \"msg\": \"not ready\"}'; exit 1",
    );
    let err = cni.status().await.unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { failure, .. } if failure.code == Some(50)),
        "{err}"
    );

    // A missing IPAM plugin makes the network not ready.
    std::fs::remove_file(h.path("bin2/ipam")).unwrap();
    let err = cni.network_ready().unwrap_err();
    assert!(
        matches!(&err, Error::PluginNotFound { plugin, .. } if plugin == "ipam"),
        "{err}"
    );
}

#[tokio::test]
async fn configs_are_picked_and_reloaded() {
    let h = Harness::new();
    let cni = h.cni();
    assert!(matches!(cni.network(), Err(Error::NoNetwork { .. })));

    let list =
        |name: &str| json!({"cniVersion": "1.0.0", "name": name, "plugins": [{"type": "a"}]});
    h.conf("20-b.conflist", &list("b"));
    h.conf(
        "05-bad.conflist",
        &json!({"cniVersion": "1.0.0", "name": "bad", "plugins": []}),
    );
    h.conf("README.md", &list("ignored"));
    assert_eq!(cni.network().unwrap().name, "b");

    // A new file, earlier in lexical order, wins: the dir change is noticed.
    h.conf(
        "10-a.conf",
        &json!({"cniVersion": "0.4.0", "name": "a", "type": "a"}),
    );
    let a = cni.network().unwrap();
    assert_eq!(
        (a.name.as_str(), a.cni_version, a.plugins.len()),
        ("a", SpecVersion::V0_4_0, 1)
    );
    // Edited in place.
    h.conf(
        "10-a.conf",
        &json!({"cniVersion": "1.0.0", "name": "a2", "type": "a", "x": "longer now"}),
    );
    assert_eq!(cni.network().unwrap().name, "a2");
    // .json files count too.
    h.conf("00-z.json", &list("z"));
    assert_eq!(cni.network().unwrap().name, "z");
    std::fs::remove_file(h.path("conf/00-z.json")).unwrap();
    std::fs::remove_file(h.path("conf/10-a.conf")).unwrap();
    assert_eq!(cni.network().unwrap().name, "b");

    // By name.
    let mut opts = h.options();
    opts.network_name = Some("b".into());
    h.conf("01-first.conflist", &list("first"));
    assert_eq!(Cni::new(opts.clone()).network().unwrap().name, "b");
    opts.network_name = Some("missing".into());
    let err = Cni::new(opts).network().unwrap_err();
    assert!(matches!(&err, Error::NetworkNotFound { .. }), "{err}");
    assert!(
        err.to_string().contains("05-bad.conflist"),
        "problems not reported: {err}"
    );
}

#[tokio::test]
async fn bad_requests_run_nothing() {
    let h = Harness::new();
    three_plugins(&h, "1.0.0");
    let cni = h.cni();
    let mut att = attachment("sb1");
    att.netns = h.path("conf/10-net.conflist");
    assert!(matches!(
        cni.add(&att).await,
        Err(Error::InvalidAttachment { .. })
    ));
    let mut att = attachment("sb1");
    att.ifname = "way-too-long-ifname".into();
    assert!(matches!(
        cni.add(&att).await,
        Err(Error::InvalidAttachment { .. })
    ));
    assert!(matches!(
        cni.del(&attachment("-bad")).await,
        Err(Error::InvalidAttachment { .. })
    ));
    assert!(h.calls().is_empty());
    assert!(h.cache_files().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_attachments() {
    let h = Harness::new();
    three_plugins(&h, "1.0.0");
    let cni = h.cni();
    let ids: Vec<String> = (0..16).map(|i| format!("pod{i}")).collect();
    let adds = ids.iter().map(|id| {
        let cni = cni.clone();
        let att = attachment(id);
        async move { cni.add(&att).await }
    });
    for r in futures_join_all(adds).await {
        r.unwrap();
    }
    assert_eq!(h.cache_files().len(), 16);
    let dels = ids.iter().map(|id| {
        let cni = cni.clone();
        let att = attachment(id);
        async move { cni.del(&att).await }
    });
    for r in futures_join_all(dels).await {
        r.unwrap();
    }
    assert!(h.cache_files().is_empty());
    assert_eq!(h.calls().len(), 16 * 6);
}

/// Runs futures concurrently as tokio tasks and collects their outputs in order.
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
