//! Tests of mount assembly: mountinfo parsing, propagation and the mounts a container gets.

use super::*;

const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 27 0:40 / /mnt/shared rw,relatime shared:5 - tmpfs tmpfs rw
31 27 0:41 / /mnt/slave rw,relatime master:5 - tmpfs tmpfs rw
32 27 0:42 / /mnt/with\\040space rw,relatime shared:9 - tmpfs tmpfs rw
";

#[test]
fn clean_paths() {
    assert_eq!(clean_path("/a//b/./c/"), "/a/b/c");
    assert_eq!(clean_path("/a/../../b"), "/b");
    assert_eq!(clean_path("data"), "/data");
    assert_eq!(clean_path("/"), "/");
    assert_eq!(depth("/"), 0);
    assert_eq!(depth("/a"), 1);
    assert_eq!(depth("/a/b"), 2);
}

#[test]
fn mountinfo_propagation() {
    let p = propagation_of(MOUNTINFO, Path::new("/mnt/shared/x/y")).unwrap();
    assert_eq!(p.mount_point, PathBuf::from("/mnt/shared"));
    assert!(p.is_shared() && !p.is_slave());
    let p = propagation_of(MOUNTINFO, Path::new("/mnt/slave")).unwrap();
    assert!(p.is_slave() && !p.is_shared());
    let p = propagation_of(MOUNTINFO, Path::new("/mnt/sharedness")).unwrap();
    assert_eq!(p.mount_point, PathBuf::from("/"));
    assert!(!p.is_shared() && !p.is_slave());
    let p = propagation_of(MOUNTINFO, Path::new("/mnt/with space/a")).unwrap();
    assert!(p.is_shared());
}

fn inputs<'a>(
    config: &'a v1::ContainerConfig,
    sandbox: &'a SandboxInfo,
    image_mounts: &'a BTreeMap<String, PathBuf>,
    mountinfo: &'a str,
) -> MountInputs<'a> {
    static NO_IDMAPS: BTreeMap<usize, PathBuf> = BTreeMap::new();
    MountInputs {
        id: "c",
        config,
        sandbox,
        volumes: &[],
        image_mounts,
        idmapped: &NO_IDMAPS,
        userns: None,
        privileged: false,
        readonly_rootfs: false,
        rro_supported: true,
        selinux_enabled: false,
        mountinfo: Some(mountinfo),
    }
}

fn host_mount(host: &Path, dest: &str, prop: v1::MountPropagation) -> v1::Mount {
    v1::Mount {
        container_path: dest.into(),
        host_path: host.to_str().unwrap().into(),
        propagation: prop as i32,
        ..Default::default()
    }
}

/// A mountinfo where `dir` is a mount point with `tag` (shared:N, master:N or nothing).
fn mountinfo_with(dir: &Path, tag: &str) -> String {
    format!(
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n40 27 0:50 / {} rw {tag} - tmpfs tmpfs rw\n",
        dir.display()
    )
}

fn at<'a>(mounts: &'a [Mount], dest: &str) -> &'a Mount {
    mounts
        .iter()
        .find(|m| m.destination() == Path::new(dest))
        .unwrap_or_else(|| panic!("no mount at {dest}"))
}

fn options_of(mounts: &[Mount], dest: &str) -> Vec<String> {
    at(mounts, dest).options().clone().unwrap()
}

#[test]
fn propagation_modes_and_rootfs_propagation() {
    let dir = tempfile::tempdir().unwrap();
    let sb = SandboxInfo::default();
    let none = BTreeMap::new();
    let cfg = |prop| v1::ContainerConfig {
        mounts: vec![host_mount(dir.path(), "/data", prop)],
        ..Default::default()
    };
    let shared = mountinfo_with(dir.path(), "shared:3");
    let slave = mountinfo_with(dir.path(), "master:3");
    let private = mountinfo_with(dir.path(), "");

    let c = cfg(v1::MountPropagation::PropagationPrivate);
    let (m, p) = mounts(&inputs(&c, &sb, &none, &private)).unwrap();
    assert_eq!(options_of(&m, "/data"), vec!["rbind", "rprivate", "rw"]);
    assert_eq!(p, None);

    let c = cfg(v1::MountPropagation::PropagationHostToContainer);
    let (m, p) = mounts(&inputs(&c, &sb, &none, &slave)).unwrap();
    assert_eq!(options_of(&m, "/data"), vec!["rbind", "rslave", "rw"]);
    assert_eq!(p.as_deref(), Some("rslave"));
    assert!(mounts(&inputs(&c, &sb, &none, &shared)).is_ok());
    let e = mounts(&inputs(&c, &sb, &none, &private)).unwrap_err();
    assert!(e.to_string().contains("shared or slave"), "{e}");

    let c = cfg(v1::MountPropagation::PropagationBidirectional);
    let (m, p) = mounts(&inputs(&c, &sb, &none, &shared)).unwrap();
    assert_eq!(options_of(&m, "/data"), vec!["rbind", "rshared", "rw"]);
    assert_eq!(p.as_deref(), Some("rshared"));
    let e = mounts(&inputs(&c, &sb, &none, &slave)).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);

    // rshared wins over rslave whatever the order.
    let c = v1::ContainerConfig {
        mounts: vec![
            host_mount(
                dir.path(),
                "/a",
                v1::MountPropagation::PropagationBidirectional,
            ),
            host_mount(
                dir.path(),
                "/b",
                v1::MountPropagation::PropagationHostToContainer,
            ),
        ],
        ..Default::default()
    };
    let (_, p) = mounts(&inputs(&c, &sb, &none, &shared)).unwrap();
    assert_eq!(p.as_deref(), Some("rshared"));
}

#[test]
fn selinux_relabel_is_refused_where_selinux_labels_apply() {
    let dir = tempfile::tempdir().unwrap();
    let sb = SandboxInfo::default();
    let none = BTreeMap::new();
    let mut m = host_mount(
        dir.path(),
        "/data",
        v1::MountPropagation::PropagationPrivate,
    );
    m.selinux_relabel = true;
    let c = v1::ContainerConfig {
        mounts: vec![m],
        ..Default::default()
    };
    // Without SELinux, relabelling is nothing to do (as containerd).
    assert!(mounts(&inputs(&c, &sb, &none, "")).is_ok());
    let mut inp = inputs(&c, &sb, &none, "");
    inp.selinux_enabled = true;
    let e = mounts(&inp).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("mounts[0].selinux_relabel"), "{e}");
}

#[test]
fn mount_options_tighten_the_bind_and_others_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sb = SandboxInfo::default();
    let none = BTreeMap::new();
    let with = |opts: &[&str]| {
        let mut m = host_mount(
            dir.path(),
            "/data",
            v1::MountPropagation::PropagationPrivate,
        );
        m.mount_options = opts.iter().map(|o| o.to_string()).collect();
        v1::ContainerConfig {
            mounts: vec![m],
            ..Default::default()
        }
    };
    let c = with(&["noexec", "nosuid", "nodev", "noexec"]);
    let (ms, _) = mounts(&inputs(&c, &sb, &none, "")).unwrap();
    assert_eq!(
        options_of(&ms, "/data"),
        vec!["rbind", "rprivate", "rw", "noexec", "nosuid", "nodev"]
    );
    for bad in ["exec", "suid", "rw", "remount", "size=1", "", "noexec\0"] {
        let c = with(&["nodev", bad]);
        let e = mounts(&inputs(&c, &sb, &none, "")).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{bad}: {e}");
        assert!(e.to_string().contains("mounts[0].mount_options[1]"), "{e}");
    }
    let c = with(&["nodev"; 17]);
    let e = mounts(&inputs(&c, &sb, &none, "")).unwrap_err();
    assert!(e.to_string().contains("more than 16"), "{e}");
}

#[test]
fn readonly_and_recursive_readonly() {
    let dir = tempfile::tempdir().unwrap();
    let sb = SandboxInfo::default();
    let none = BTreeMap::new();
    let mut m = host_mount(
        dir.path(),
        "/data",
        v1::MountPropagation::PropagationPrivate,
    );
    m.readonly = true;
    let c = v1::ContainerConfig {
        mounts: vec![m.clone()],
        ..Default::default()
    };
    let (ms, _) = mounts(&inputs(&c, &sb, &none, "")).unwrap();
    assert_eq!(options_of(&ms, "/data"), vec!["rbind", "rprivate", "ro"]);

    m.recursive_read_only = true;
    let c = v1::ContainerConfig {
        mounts: vec![m.clone()],
        ..Default::default()
    };
    let (ms, _) = mounts(&inputs(&c, &sb, &none, "")).unwrap();
    assert_eq!(options_of(&ms, "/data"), vec!["rbind", "rprivate", "rro"]);
    let mut inp = inputs(&c, &sb, &none, "");
    inp.rro_supported = false;
    assert!(mounts(&inp)
        .unwrap_err()
        .to_string()
        .contains("not supported"));

    m.readonly = false;
    let c = v1::ContainerConfig {
        mounts: vec![m.clone()],
        ..Default::default()
    };
    assert!(mounts(&inputs(&c, &sb, &none, ""))
        .unwrap_err()
        .to_string()
        .contains("needs readonly"));

    m.readonly = true;
    m.propagation = v1::MountPropagation::PropagationHostToContainer as i32;
    let c = v1::ContainerConfig {
        mounts: vec![m],
        ..Default::default()
    };
    let slave = mountinfo_with(dir.path(), "master:1");
    assert!(mounts(&inputs(&c, &sb, &none, &slave))
        .unwrap_err()
        .to_string()
        .contains("private propagation"));
}

#[test]
fn image_volumes_are_bound_read_only() {
    let img = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(img.path().join("share/data")).unwrap();
    std::os::unix::fs::symlink("/etc", img.path().join("escape")).unwrap();
    let mut image_mounts = BTreeMap::new();
    image_mounts.insert("sha256:abc".to_string(), img.path().to_owned());
    let sb = SandboxInfo::default();
    let vol = |sub: &str| v1::Mount {
        container_path: "/models".into(),
        image: Some(v1::ImageSpec {
            image: "sha256:abc".into(),
            ..Default::default()
        }),
        image_sub_path: sub.into(),
        ..Default::default()
    };
    let c = v1::ContainerConfig {
        mounts: vec![vol("")],
        ..Default::default()
    };
    let (ms, _) = mounts(&inputs(&c, &sb, &image_mounts, "")).unwrap();
    let m = at(&ms, "/models");
    assert_eq!(
        m.source().as_deref(),
        Some(std::fs::canonicalize(img.path()).unwrap().as_path())
    );
    assert_eq!(options_of(&ms, "/models"), vec!["rbind", "rprivate", "ro"]);

    let c = v1::ContainerConfig {
        mounts: vec![vol("share/data")],
        ..Default::default()
    };
    let (ms, _) = mounts(&inputs(&c, &sb, &image_mounts, "")).unwrap();
    let m = at(&ms, "/models");
    assert!(m.source().as_ref().unwrap().ends_with("share/data"));

    for bad in ["../x", "/abs", "escape", "missing"] {
        let c = v1::ContainerConfig {
            mounts: vec![vol(bad)],
            ..Default::default()
        };
        let e = mounts(&inputs(&c, &sb, &image_mounts, "")).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{bad}: {e}");
    }
    let mut other = vol("");
    other.image.as_mut().unwrap().image = "sha256:other".into();
    let c = v1::ContainerConfig {
        mounts: vec![other],
        ..Default::default()
    };
    assert!(mounts(&inputs(&c, &sb, &image_mounts, ""))
        .unwrap_err()
        .to_string()
        .contains("not prepared"));
}

#[test]
fn missing_host_paths_are_listed_for_the_caller_to_create() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("a/b");
    let there = dir.path().to_owned();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let m =
        |host: &Path, dest: &str| host_mount(host, dest, v1::MountPropagation::PropagationPrivate);
    let config = v1::ContainerConfig {
        mounts: vec![
            m(&missing, "/a"),
            m(&there, "/b"),
            m(&missing, "/c"),
            m(&dangling, "/d"),
            m(Path::new("relative/x"), "/e"),
        ],
        ..Default::default()
    };
    assert_eq!(host_paths_to_create(&config), vec![missing.clone()]);

    // The spec refuses what is missing, and takes it once it is made.
    let sb = SandboxInfo::default();
    let none = BTreeMap::new();
    let one = v1::ContainerConfig {
        mounts: vec![m(&missing, "/a")],
        ..Default::default()
    };
    let e = mounts(&inputs(&one, &sb, &none, "")).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    for p in host_paths_to_create(&one) {
        std::fs::create_dir_all(p).unwrap();
    }
    assert!(host_paths_to_create(&one).is_empty());
    let (ms, _) = mounts(&inputs(&one, &sb, &none, "")).unwrap();
    assert_eq!(at(&ms, "/a").source().as_deref(), Some(missing.as_path()));

    // A relative host path is refused, not resolved against berth's cwd.
    let rel = v1::ContainerConfig {
        mounts: vec![m(Path::new("relative/x"), "/e")],
        ..Default::default()
    };
    let e = mounts(&inputs(&rel, &sb, &none, "")).unwrap_err();
    assert!(e.to_string().contains("absolute"), "{e}");
}

#[test]
fn anonymous_volumes_skip_covered_paths() {
    let image = ImageInfo {
        volumes: vec![
            "/data".into(),
            "/var/lib/db/".into(),
            "logs".into(),
            "/data".into(),
        ],
        ..Default::default()
    };
    let config = v1::ContainerConfig {
        mounts: vec![v1::Mount {
            container_path: "/var/lib/db".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let v = anonymous_volumes(&config, &image, Path::new("/vols"));
    assert_eq!(
        v,
        vec![
            AnonymousVolume {
                container_path: "/data".into(),
                host_path: "/vols/00-data".into()
            },
            AnonymousVolume {
                container_path: "/logs".into(),
                host_path: "/vols/01-logs".into()
            },
        ]
    );
}
