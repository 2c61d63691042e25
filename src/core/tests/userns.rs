//! Pods with their own user namespace.

use super::*;

fn userns_map(host: u32) -> v1::IdMapping {
    v1::IdMapping {
        container_id: 0,
        host_id: host,
        length: 65536,
    }
}

/// A pod as kubelet asks for one with `hostUsers: false`.
fn userns_pod(name: &str, host: u32) -> SandboxRequest {
    let mut req = pod(name);
    req.config.linux = Some(v1::LinuxPodSandboxConfig {
        security_context: Some(v1::LinuxSandboxSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                pid: v1::NamespaceMode::Container as i32,
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Pod as i32,
                    uids: vec![userns_map(host)],
                    gids: vec![userns_map(host)],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    req
}

/// A container with an idmapped host path (the pod's mappings).
fn idmapped_container(pod_id: &str, name: &str, host: &std::path::Path) -> ContainerRequest {
    std::fs::create_dir_all(host).unwrap();
    let mut req = container(pod_id, name);
    req.config.mounts = vec![v1::Mount {
        container_path: "/data".into(),
        host_path: host.display().to_string(),
        uid_mappings: vec![userns_map(100000)],
        gid_mappings: vec![userns_map(100000)],
        ..Default::default()
    }];
    req
}

const USERNS_RUN_STEPS: [&str; 9] = [
    "netns.create",
    "cni.add",
    "files.pod",
    "files.idmapped_bind",
    "files.idmapped_bind",
    "files.pause_bundle",
    "files.bind",
    "runtime.create",
    "task.start",
];

#[tokio::test]
async fn a_userns_pod_pins_its_namespace_and_maps_its_files_and_rootfs() {
    let r = rig();
    let id = r
        .core
        .run_pod_sandbox(userns_pod("web", 100000))
        .await
        .unwrap();
    assert_eq!(r.fake.steps()[..USERNS_RUN_STEPS.len()], USERNS_RUN_STEPS);
    let tree = r.core.layout.pod_userns(&id);
    {
        let w = r.fake.world.lock().unwrap();
        let mapping = w.userns[&tree.ns()];
        assert_eq!(
            (mapping.host_root_uid(), mapping.host_root_gid()),
            (100000, 100000)
        );
        assert_eq!(w.binds[&tree.files()], Some(tree.ns()));
        assert_eq!(w.binds[&tree.shm()], Some(tree.ns()));
        assert_eq!(w.binds[&tree.pause_rootfs()], None);
    }
    let host = r._dir.path().join("data");
    let c = r
        .core
        .create_container(idmapped_container(&id, "app", &host))
        .await
        .unwrap();
    {
        let w = r.fake.world.lock().unwrap();
        let idmap = &w.rootfs_idmaps[&c];
        assert_eq!(
            (idmap.userns.clone(), idmap.uid, idmap.gid),
            (tree.ns(), 100000, 100000)
        );
        assert_eq!(w.binds[&r.core.layout.userns_rootfs(&c)], None);
        assert_eq!(w.binds[&r.core.layout.userns_mount(&c, 0)], Some(tree.ns()));
    }
    r.core.start_container(&c).await.unwrap();
    r.core.stop_pod_sandbox(&id).await.unwrap();
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn each_failing_step_of_a_userns_run_pod_sandbox_leaves_nothing() {
    for step in USERNS_RUN_STEPS {
        let r = rig();
        r.fake.fail(step);
        let e = r
            .core
            .run_pod_sandbox(userns_pod("web", 100000))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        r.assert_empty();
    }
}

#[tokio::test]
async fn each_failing_step_of_a_userns_create_container_leaves_nothing_of_it() {
    for step in [
        "files.mount_rootfs",
        "files.bind",
        "files.create_dirs",
        "files.idmapped_bind",
        "files.write_spec",
    ] {
        let r = rig();
        let pod_id = r
            .core
            .run_pod_sandbox(userns_pod("web", 100000))
            .await
            .unwrap();
        let before = r.fake.world.lock().unwrap().binds.clone();
        r.fake.fail(step);
        let host = r._dir.path().join("data");
        let e = r
            .core
            .create_container(idmapped_container(&pod_id, "app", &host))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        assert!(r.core.containers.list().is_empty(), "{step}: record left");
        let w = r.fake.world.lock().unwrap();
        assert!(w.rootfs_mounted.is_empty(), "{step}: rootfs left");
        assert_eq!(w.binds, before, "{step}: a container bind left");
    }
}

/// A userns pod on the host's network (KEP-5607).
fn host_network_userns_pod(name: &str, host: u32) -> SandboxRequest {
    let mut req = userns_pod(name, host);
    req.config.hostname.clear();
    let linux = req.config.linux.as_mut().unwrap();
    let sc = linux.security_context.as_mut().unwrap();
    sc.namespace_options.as_mut().unwrap().network = v1::NamespaceMode::Node as i32;
    req
}

const HOST_NETWORK_USERNS_RUN_STEPS: [&str; 8] = [
    "userns.create",
    "files.pod",
    "files.idmapped_bind",
    "files.idmapped_bind",
    "files.pause_bundle",
    "files.bind",
    "runtime.create",
    "task.start",
];

#[tokio::test]
async fn a_host_network_userns_pod_pins_a_user_namespace_without_a_netns() {
    let r = rig();
    let id = r
        .core
        .run_pod_sandbox(host_network_userns_pod("web", 100000))
        .await
        .unwrap();
    assert_eq!(
        r.fake.steps()[..HOST_NETWORK_USERNS_RUN_STEPS.len()],
        HOST_NETWORK_USERNS_RUN_STEPS
    );
    let tree = r.core.layout.pod_userns(&id);
    {
        let w = r.fake.world.lock().unwrap();
        assert!(w.netns.is_empty() && w.attached.is_empty());
        let mapping = w.userns[&tree.ns()];
        assert_eq!(mapping.host_root_uid(), 100000);
        assert_eq!(w.binds[&tree.files()], Some(tree.ns()));
    }
    r.core.stop_pod_sandbox(&id).await.unwrap();
    r.core.remove_pod_sandbox(&id).await.unwrap();
    r.assert_empty();
}

#[tokio::test]
async fn each_failing_step_of_a_host_network_userns_pod_leaves_nothing() {
    for step in HOST_NETWORK_USERNS_RUN_STEPS {
        let r = rig();
        r.fake.fail(step);
        let e = r
            .core
            .run_pod_sandbox(host_network_userns_pod("web", 100000))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(step), "{step}: {e}");
        r.assert_empty();
    }
}

#[tokio::test]
async fn bad_userns_requests_make_nothing() {
    let r = rig();
    let mut bad = Vec::new();
    let mut two = userns_pod("a", 100000);
    let ns = |req: &mut SandboxRequest| -> v1::UserNamespace {
        req.config
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap()
            .namespace_options
            .as_ref()
            .unwrap()
            .userns_options
            .clone()
            .unwrap()
    };
    let mut u = ns(&mut two);
    u.uids.push(userns_map(300000));
    bad.push(u.clone());
    let mut u2 = ns(&mut two);
    u2.mode = v1::NamespaceMode::Container as i32;
    bad.push(u2);
    let mut u3 = ns(&mut two);
    u3.gids = vec![v1::IdMapping {
        container_id: 0,
        host_id: 0,
        length: 65536,
    }];
    bad.push(u3);
    for u in bad {
        let mut req = userns_pod("bad", 100000);
        req.config
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .namespace_options
            .as_mut()
            .unwrap()
            .userns_options = Some(u);
        let e = r.core.run_pod_sandbox(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    }
    assert!(r.fake.steps().is_empty(), "{:?}", r.fake.steps());
    // A container asking for an idmapped mount in a pod without a userns,
    // or for another range than its pod's: refused before anything.
    let plain = r.core.run_pod_sandbox(pod("plain")).await.unwrap();
    let userns = r
        .core
        .run_pod_sandbox(userns_pod("u", 200000))
        .await
        .unwrap();
    let steps = r.fake.steps().len();
    let host = r._dir.path().join("data");
    for pod_id in [&plain, &userns] {
        let e = r
            .core
            .create_container(idmapped_container(pod_id, "app", &host))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    }
    // A container asking for the host's user namespace in a userns pod.
    let mut req = container(&userns, "host-userns");
    req.config.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            namespace_options: Some(v1::NamespaceOption {
                userns_options: Some(v1::UserNamespace {
                    mode: v1::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = r.core.create_container(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    assert_eq!(
        r.fake.steps().len(),
        steps,
        "{:?}",
        &r.fake.steps()[steps..]
    );
}
