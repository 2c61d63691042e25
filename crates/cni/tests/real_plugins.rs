//! Root tests with the real plugins from /usr/lib/cni and real namespaces
//! (berth-netns): berth's default network (bridge + host-local + portmap) on
//! test-only subnets (10.99.x.0/24) and bridges (berthtestN). Traffic goes only
//! to the test pod's own address. Each test is ignored by a plain `cargo test`
//! and fails, saying why, when included (`--include-ignored`) but not run as
//! root or without the plugins; it removes its bridge, leases and rules.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use berth_cni::{
    write_default_network, Attachment, CapabilityArgs, CheckOutcome, Cni, CniOptions,
    DefaultNetwork, PodArgs, PortMapping,
};
use berth_netns::NetNs;
use serde_json::json;

const PLUGINS: &str = "/usr/lib/cni";
const LEASES: &str = "/var/lib/cni/networks";

/// Fails the test unless it runs as root with the CNI plugins installed.
/// Every test that calls it is also `#[ignore = "needs root and the CNI
/// plugins..."]`: left out (and said to be) by a plain `cargo test`, and
/// failing, never passing, when included where it cannot run.
fn require_root_and_plugins() {
    // SAFETY: geteuid has no preconditions.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
    );
    assert!(
        Path::new(PLUGINS).join("bridge").exists(),
        "needs the CNI plugins in {PLUGINS} (hack/install-deps.sh)"
    );
}

fn sh(cmd: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(cmd).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A test network: temp dirs, the netns dir unmounted at the end, and the
/// registered attachments deleted, the bridge and lease dir removed and
/// ip_forward put back, even if the test fails.
struct TestNet {
    tmp: tempfile::TempDir,
    name: String,
    bridge: String,
    subnet: ipnet::IpNet,
    ip_forward: String,
    attached: Mutex<Vec<Attachment>>,
}

impl TestNet {
    fn new(n: u8) -> TestNet {
        let net = TestNet {
            tmp: tempfile::tempdir().unwrap(),
            name: format!("berthtest-{n}"),
            bridge: format!("berthtest{n}"),
            subnet: format!("10.99.{n}.0/24").parse().unwrap(),
            ip_forward: std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
            attached: Mutex::new(Vec::new()),
        };
        net.remove_leftovers();
        net
    }

    fn dir(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn options(&self) -> CniOptions {
        CniOptions {
            conf_dirs: vec![self.dir("conf")],
            bin_dirs: vec![self.dir("bin"), PathBuf::from(PLUGINS)],
            cache_dir: self.dir("cache"),
            network_name: None,
            timeout: Duration::from_secs(30),
        }
    }

    fn leases(&self) -> Vec<String> {
        match std::fs::read_dir(Path::new(LEASES).join(&self.name)) {
            Ok(d) => d
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.parse::<IpAddr>().is_ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn remove_leftovers(&self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
        let _ = std::fs::remove_dir_all(Path::new(LEASES).join(&self.name));
    }

    /// Registers the undo (a DEL at the end of the test) before an ADD.
    fn will_attach(&self, att: &Attachment) {
        self.attached.lock().unwrap().push(att.clone());
    }

    async fn netns(&self, name: &str) -> NetNs {
        let dir = self.dir("netns");
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || NetNs::create(&dir, &name))
            .await
            .unwrap()
            .unwrap()
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // DEL is idempotent: attachments already deleted by the test are fine.
        let atts = std::mem::take(&mut *self.attached.lock().unwrap());
        let cni = Cni::new(self.options());
        let undo = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            for att in atts {
                if let Err(e) = rt.block_on(cni.del(&att)) {
                    eprintln!("cleanup: {e}");
                }
            }
        });
        let _ = undo.join();
        self.remove_leftovers();
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", &self.ip_forward);
        let _ = nix::mount::umount2(&self.dir("netns"), nix::mount::MntFlags::MNT_DETACH);
    }
}

fn nat_rules() -> String {
    sh("iptables-save", &["-t", "nat"]).1
}

fn masquerade_rules() -> usize {
    nat_rules()
        .lines()
        .filter(|l| l.contains("MASQUERADE"))
        .count()
}

fn pod(name: &str) -> PodArgs {
    PodArgs {
        namespace: "berth-test".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        infra_container_id: name.into(),
    }
}

/// A process group killed and reaped when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group of our own child.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// What a TCP server at `addr` sends, retrying while it starts listening.
fn read_from(addr: String) -> String {
    use std::io::Read;
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut last = None;
    for _ in 0..30 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut conn) => {
                conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                let mut text = String::new();
                let _ = conn.read_to_string(&mut text);
                if !text.is_empty() {
                    return text;
                }
            }
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing read from {addr}: {last:?}");
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

#[tokio::test]
#[ignore = "needs root and the CNI plugins: hack/test.sh runs it (--include-ignored)"]
async fn default_network_add_check_del() {
    require_root_and_plugins();
    let t = TestNet::new(1);
    let written = write_default_network(
        &t.dir("conf"),
        &DefaultNetwork::new(&t.name, t.subnet, &t.bridge),
    )
    .unwrap()
    .unwrap();
    assert!(written.starts_with(t.dir("conf")));
    let cni = Cni::new(t.options());
    assert_eq!(cni.network_ready().unwrap().plugins, ["bridge", "portmap"]);
    cni.status().await.unwrap();

    let ns = t.netns("pod1").await;
    let masq_before = masquerade_rules();
    let mut att = Attachment::new("berthtestpod1", ns.path(), pod("pod1"));
    att.capabilities = CapabilityArgs {
        port_mappings: vec![PortMapping {
            host_port: 18081,
            container_port: 80,
            protocol: "tcp".into(),
            host_ip: String::new(),
        }],
        ..Default::default()
    };
    t.will_attach(&att);
    let result = cni.add(&att).await.unwrap();

    // The pod got an address from the subnet, on eth0 inside its namespace.
    let ips = result.sandbox_ips("eth0");
    assert_eq!(ips.len(), 1, "{result:?}");
    let ip = ips[0];
    assert!(t.subnet.contains(&ip), "{ip} not in {}", t.subnet);
    let gateway: IpAddr = "10.99.1.1".parse().unwrap();
    assert_eq!(result.ips[0].gateway, Some(gateway));
    let veth = result
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_none() && i.name != t.bridge)
        .map(|i| i.name.clone())
        .expect("host veth in the result");
    assert!(link_exists(&veth));
    assert_eq!(t.leases(), [ip.to_string()]);

    let (addr, routes) = ns
        .run_in(|| {
            (
                sh("ip", &["-o", "addr", "show", "eth0"]).1,
                sh("ip", &["route"]).1,
            )
        })
        .unwrap();
    assert!(addr.contains(&format!("{ip}/24")), "{addr}");
    assert!(
        !routes.contains("default"),
        "pod has a default route: {routes}"
    );

    // Reachable from the host, at its own address only.
    let (ok, out) = sh("busybox", &["ping", "-c", "1", "-W", "2", &ip.to_string()]);
    assert!(ok, "ping {ip}: {out}");

    // The hostPort answers on the node's gateway address (not on 127.0.0.1:
    // that needs portmap's SNAT, which the default network leaves off).
    let server = ns
        .run_in(|| {
            use std::os::unix::process::CommandExt;
            Command::new("busybox")
                .args(["sh", "-c", "echo hello | busybox nc -l -p 80"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap()
        })
        .unwrap();
    let server = KillOnDrop(server);
    let answer = tokio::task::spawn_blocking(move || read_from(format!("{gateway}:18081")))
        .await
        .unwrap();
    assert_eq!(answer.trim(), "hello");
    drop(server);

    // portmap forwarded the port without adding any masquerading.
    let nat = nat_rules();
    assert!(nat.contains(&format!("--to-destination {ip}:80")), "{nat}");
    assert_eq!(
        masquerade_rules(),
        masq_before,
        "masquerade rules added:\n{nat}"
    );

    cni.del(&att).await.unwrap();
    assert!(!link_exists(&veth), "veth {veth} left behind");
    assert!(t.leases().is_empty(), "leases left: {:?}", t.leases());
    assert!(
        !nat_rules().contains(&ip.to_string()),
        "DNAT rule left behind"
    );
    assert!(std::fs::read_dir(t.dir("cache")).unwrap().next().is_none());
    let inside = ns.run_in(|| sh("ip", &["-o", "link", "show"]).1).unwrap();
    assert!(!inside.contains("eth0"), "{inside}");
    cni.del(&att).await.unwrap();

    // CHECK, then DEL after the namespace is gone: the lease is released.
    // (No port mappings here: Debian's portmap 1.1.1 fails CHECK with port
    // mappings when ip6tables is usable, looking for an IPv6 chain it never made.)
    let ns2 = t.netns("pod2").await;
    let att2 = Attachment::new("berthtestpod2", ns2.path(), pod("pod2"));
    t.will_attach(&att2);
    let result2 = cni.add(&att2).await.unwrap();
    let ip2 = result2.sandbox_ips("eth0")[0];
    assert_eq!(t.leases(), [ip2.to_string()]);
    assert_eq!(cni.check(&att2).await.unwrap(), CheckOutcome::Passed);
    tokio::task::spawn_blocking(move || ns2.remove())
        .await
        .unwrap()
        .unwrap();
    cni.del(&att2).await.unwrap();
    assert!(t.leases().is_empty());

    tokio::task::spawn_blocking(move || ns.remove())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
#[ignore = "needs root and the CNI plugins: hack/test.sh runs it (--include-ignored)"]
async fn failing_plugin_leaves_nothing_behind() {
    require_root_and_plugins();
    let t = TestNet::new(2);
    // bridge + host-local, then a plugin that fails on ADD.
    std::fs::create_dir_all(t.dir("bin")).unwrap();
    let fail = t.dir("bin/berth-test-fail");
    std::fs::write(
        &fail,
        "#!/bin/sh\ncat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] || exit 0\necho '{\"code\": 100, \"msg\": \"injected failure\"}'\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fail, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut conflist = DefaultNetwork::new(&t.name, t.subnet, &t.bridge)
        .to_conflist()
        .unwrap();
    conflist["plugins"][1] = json!({"type": "berth-test-fail"});
    std::fs::create_dir_all(t.dir("conf")).unwrap();
    std::fs::write(t.dir("conf/10-test.conflist"), conflist.to_string()).unwrap();

    let cni = Cni::new(t.options());
    let ns = t.netns("pod").await;
    let att = Attachment::new("berthtestfail", ns.path(), pod("fail"));
    t.will_attach(&att);
    let err = cni.add(&att).await.unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");

    assert!(t.leases().is_empty(), "lease left: {:?}", t.leases());
    // Only the bridge may stay (it is shared by all pods), with no veth on it.
    let ports = sh("ip", &["-o", "link", "show", "master", &t.bridge]).1;
    assert!(
        ports.trim().is_empty(),
        "veth left on {}: {ports}",
        t.bridge
    );
    let inside = ns.run_in(|| sh("ip", &["-o", "link", "show"]).1).unwrap();
    assert!(!inside.contains("eth0"), "{inside}");
    assert!(std::fs::read_dir(t.dir("cache")).unwrap().next().is_none());
    tokio::task::spawn_blocking(move || ns.remove())
        .await
        .unwrap()
        .unwrap();
}
