//! Root tests with real network namespaces and real mounts. Each is ignored
//! by a plain `cargo test` and fails, saying so, when included (with
//! `--include-ignored`) but not run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

use berth_netns::{is_namespace, remove_path, run_in, Error, NetNs};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Fails the test unless it runs as root. Every test that calls it is also
/// `#[ignore = "needs root..."]`: left out (and said to be) by a plain
/// `cargo test`, and failing, never passing, when included by another user.
fn require_root() {
    assert!(
        is_root(),
        "needs root: run it as root (hack/test.sh runs every test with --include-ignored)"
    );
}

/// A temp dir that is unmounted (it becomes a bind mount of itself) before it
/// is deleted, even when a test fails half-way.
struct NsDir {
    dir: tempfile::TempDir,
}

impl NsDir {
    fn new() -> NsDir {
        NsDir {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for NsDir {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Mount points listed in /proc/self/mountinfo, with their optional fields.
fn mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let end = fields.iter().position(|f| *f == "-").unwrap();
            (PathBuf::from(fields[4]), fields[6..end].join(" "))
        })
        .collect()
}

fn is_mounted(path: &Path) -> bool {
    mounts().iter().any(|(p, _)| p == path)
}

fn own_netns() -> PathBuf {
    std::fs::read_link("/proc/thread-self/ns/net").unwrap()
}

/// Index and flags of an interface in the calling thread's namespace.
fn interface(name: &str) -> Option<(i32, i16)> {
    // SAFETY: plain socket/ioctl calls on values we own; results checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *dst = *src as libc::c_char;
        }
        let found = libc::ioctl(fd, libc::SIOCGIFINDEX, &mut req) == 0;
        let index = req.ifr_ifru.ifru_ifindex;
        let flags_ok = found && libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0;
        libc::close(fd);
        flags_ok.then_some((index, req.ifr_ifru.ifru_flags))
    }
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn create_run_in_remove() {
    require_root();
    let dir = NsDir::new();
    let outside = own_netns();

    let ns = NetNs::create(dir.path(), "pod1").unwrap();
    assert_eq!(ns.path(), dir.path().join("pod1"));
    assert!(is_namespace(ns.path()).unwrap());
    assert!(is_mounted(ns.path()));
    let dir_opts = mounts()
        .into_iter()
        .find(|(p, _)| p == dir.path())
        .map(|(_, o)| o)
        .expect("namespace dir is a mount point");
    assert!(dir_opts.contains("shared:"), "dir not shared: {dir_opts}");

    let (inside, lo, links, addrs) = ns
        .run_in(|| {
            let links = Command::new("ip").args(["-o", "link", "show"]).output();
            let addrs = Command::new("ip")
                .args(["-o", "addr", "show", "lo"])
                .output();
            (own_netns(), interface("lo"), links, addrs)
        })
        .unwrap();
    assert_ne!(inside, outside, "closure did not run in the new namespace");
    assert_eq!(own_netns(), outside, "caller's namespace changed");

    let (_, flags) = lo.expect("no lo inside");
    assert!(flags & libc::IFF_UP as i16 != 0, "lo is not up");
    let links = String::from_utf8(links.unwrap().stdout).unwrap();
    let names: Vec<&str> = links.lines().filter_map(|l| l.split(": ").nth(1)).collect();
    assert_eq!(names, ["lo"], "interfaces inside: {links}");
    let addrs = String::from_utf8(addrs.unwrap().stdout).unwrap();
    assert!(addrs.contains("127.0.0.1/8"), "lo addresses: {addrs}");

    // The same namespace is found again through open().
    let again = NetNs::open(ns.path()).unwrap();
    assert_eq!(again.run_in(own_netns).unwrap(), inside);

    let path = ns.path().to_owned();
    ns.remove().unwrap();
    assert!(!path.exists());
    assert!(!is_mounted(&path));
    remove_path(&path).unwrap();
    again.remove().unwrap();
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn same_name_twice_is_refused() {
    require_root();
    let dir = NsDir::new();
    let ns = NetNs::create(dir.path(), "dup").unwrap();
    let err = NetNs::create(dir.path(), "dup").unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert!(is_namespace(ns.path()).unwrap(), "first one damaged");

    // A stale plain file (e.g. after a crash) blocks creation until removed.
    std::fs::write(dir.path().join("stale"), b"").unwrap();
    assert!(matches!(
        NetNs::create(dir.path(), "stale"),
        Err(Error::AlreadyExists { .. })
    ));
    remove_path(&dir.path().join("stale")).unwrap();
    NetNs::create(dir.path(), "stale")
        .unwrap()
        .remove()
        .unwrap();
    ns.remove().unwrap();
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn many_concurrent_creations() {
    require_root();
    const N: usize = 32;
    let dir = NsDir::new();
    let created: Vec<NetNs> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let dir = dir.path();
                s.spawn(move || NetNs::create(dir, &format!("c{i}")).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ids: Vec<PathBuf> = created
        .iter()
        .map(|ns| ns.run_in(own_netns).unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "namespaces are not distinct");
    // Only the directory itself is mounted once, not once per creation.
    assert_eq!(mounts().iter().filter(|(p, _)| p == dir.path()).count(), 1);

    std::thread::scope(|s| {
        for ns in created.clone() {
            s.spawn(move || ns.remove().unwrap());
        }
    });
    for ns in &created {
        assert!(!is_mounted(ns.path()));
        assert!(!ns.path().exists());
    }
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn run_in_survives_a_panic_and_bad_paths() {
    require_root();
    let dir = NsDir::new();
    let ns = NetNs::create(dir.path(), "p").unwrap();
    let outside = own_netns();
    let err = ns.run_in(|| panic!("inside")).unwrap_err();
    assert!(matches!(err, Error::Panicked { .. }), "{err}");
    assert_eq!(own_netns(), outside);

    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    assert!(matches!(run_in(&plain, || ()), Err(Error::Os { .. })));
    assert!(matches!(
        run_in(&dir.path().join("missing"), || ()),
        Err(Error::Os { .. })
    ));
    ns.remove().unwrap();
}

/// The hostname and IPC namespace seen by a thread that joins the pins.
fn seen_from(pinned: &berth_netns::pin::Pinned) -> (String, PathBuf) {
    let (uts, ipc) = (pinned.uts.clone().unwrap(), pinned.ipc.clone().unwrap());
    std::thread::spawn(move || {
        use nix::sched::{setns, CloneFlags};
        let u = std::fs::File::open(&uts).unwrap();
        let i = std::fs::File::open(&ipc).unwrap();
        setns(&u, CloneFlags::CLONE_NEWUTS).unwrap();
        setns(&i, CloneFlags::CLONE_NEWIPC).unwrap();
        (
            nix::unistd::gethostname()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
            std::fs::read_link("/proc/thread-self/ns/ipc").unwrap(),
        )
    })
    .join()
    .unwrap()
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn pinned_uts_and_ipc_namespaces() {
    use berth_netns::pin::{is_pinned, pin, unpin, PinRequest};
    require_root();
    let root = NsDir::new();
    let dir = root.path().join("podns").join("pod-1");
    let host = nix::unistd::gethostname().unwrap();
    let own_ipc = std::fs::read_link("/proc/thread-self/ns/ipc").unwrap();
    let req = PinRequest {
        uts_hostname: Some("web-0".into()),
        ipc: true,
        sysfs_of: None,
    };
    let pinned = pin(&dir, &req).unwrap();
    assert!(is_pinned(&pinned).unwrap());
    assert!(is_mounted(pinned.uts.as_ref().unwrap()));
    let (name, ipc) = seen_from(&pinned);
    assert_eq!(name, "web-0");
    assert_ne!(ipc, own_ipc, "the pinned IPC namespace is the host's");
    // The host is untouched.
    assert_eq!(nix::unistd::gethostname().unwrap(), host);
    // Pinning again into the same dir is refused, and leaves the first.
    assert!(matches!(pin(&dir, &req), Err(Error::AlreadyExists { .. })));
    assert!(is_pinned(&pinned).unwrap());
    // A pin that is not a namespace any more (a reboot, a stray umount).
    unpin(&dir).unwrap();
    assert!(!dir.exists());
    assert!(!is_pinned(&pinned).unwrap());
    unpin(&dir).unwrap();
    // The parent was made a shared mount point.
    let parent = root.path().join("podns");
    assert!(mounts()
        .iter()
        .any(|(p, opts)| *p == parent && opts.contains("shared:")));
    let _ = nix::mount::umount2(&parent, nix::mount::MntFlags::MNT_DETACH);
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn pinned_ipc_only_for_host_network_pods() {
    use berth_netns::pin::{pin, unpin, PinRequest};
    require_root();
    let root = NsDir::new();
    let dir = root.path().join("podns").join("pod-2");
    let req = PinRequest {
        uts_hostname: None,
        ipc: true,
        sysfs_of: None,
    };
    let pinned = pin(&dir, &req).unwrap();
    assert!(pinned.uts.is_none() && pinned.ipc.is_some());
    assert!(!dir.join("uts").exists());
    unpin(&dir).unwrap();
    assert!(!dir.exists());
    let _ = nix::mount::umount2(&root.path().join("podns"), nix::mount::MntFlags::MNT_DETACH);
}

/// A privileged pod's sysfs: held read-write on `dir/sys`, of the pod's
/// network namespace (its interfaces, not the host's); unpin unmounts it.
#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn held_sysfs_of_a_pods_netns() {
    use berth_netns::pin::{pin, unpin, PinRequest};
    require_root();
    let root = NsDir::new();
    let ns = NetNs::create(root.path(), "net").unwrap();
    let dir = root.path().join("podns").join("pod-3");
    let req = PinRequest {
        uts_hostname: Some("web-3".into()),
        ipc: true,
        sysfs_of: Some(ns.path().to_path_buf()),
    };
    let pinned = pin(&dir, &req).unwrap();
    let sys = pinned.sysfs.clone().unwrap();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mountinfo
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| Path::new(f[4]) == sys)
        .expect("sysfs held");
    assert!(
        line[5].starts_with("rw,") && line.contains(&"sysfs"),
        "{line:?}"
    );
    let links: Vec<String> = std::fs::read_dir(sys.join("class/net"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(links, ["lo"]);
    unpin(&dir).unwrap();
    assert!(!is_mounted(&sys) && !dir.exists());
    ns.remove().unwrap();
    let _ = nix::mount::umount2(&root.path().join("podns"), nix::mount::MntFlags::MNT_DETACH);
}
