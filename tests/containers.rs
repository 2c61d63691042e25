//! Containers against the real daemon, runc, CNI and a local registry:
//! output and exit codes, logs, ExecSync, stop with grace and SIGKILL,
//! user/env/workdir, listing, removal and bad requests. Root only.

mod common;

use std::time::{Duration, Instant};

use common::pods::{daemon, pod_config, run, TestNet};
use common::{registry, Daemon};
use cri_api::v1;
use tonic::Code;

async fn pull(daemon: &Daemon, image: &str) -> String {
    daemon
        .images()
        .await
        .pull_image(v1::PullImageRequest {
            image: Some(v1::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .image_ref
}

/// A pod with a log directory, and the busybox image pulled.
async fn pod(daemon: &Daemon, name: &str) -> (String, v1::PodSandboxConfig, std::path::PathBuf) {
    let mut config = pod_config(name);
    let logs = daemon.sandbox.path(&format!("logs/{name}"));
    config.log_directory = logs.display().to_string();
    let id = run(daemon, config.clone()).await.unwrap();
    pull(daemon, &registry().busybox()).await;
    (id, config, logs)
}

fn container(name: &str, command: &[&str]) -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: registry().busybox(),
            ..Default::default()
        }),
        command: command.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}.log"),
        labels: [("name".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

async fn create(
    daemon: &Daemon,
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    config: v1::ContainerConfig,
) -> Result<String, tonic::Status> {
    daemon
        .runtime()
        .await
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(config),
            sandbox_config: Some(pod_config.clone()),
        })
        .await
        .map(|r| r.into_inner().container_id)
}

async fn start(daemon: &Daemon, id: &str) {
    daemon
        .runtime()
        .await
        .start_container(v1::StartContainerRequest {
            container_id: id.into(),
        })
        .await
        .unwrap();
}

async fn status(daemon: &Daemon, id: &str) -> v1::ContainerStatus {
    daemon
        .runtime()
        .await
        .container_status(v1::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
}

async fn wait_exited(daemon: &Daemon, id: &str) -> v1::ContainerStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status(daemon, id).await;
        if st.state == v1::ContainerState::ContainerExited as i32 {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "container {id} did not exit: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn exec(
    daemon: &Daemon,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<v1::ExecSyncResponse, tonic::Status> {
    daemon
        .runtime()
        .await
        .exec_sync(v1::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        })
        .await
        .map(|r| r.into_inner())
}

async fn remove_pod(daemon: &Daemon, id: &str) {
    let mut rt = daemon.runtime().await;
    rt.stop_pod_sandbox(v1::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(v1::RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn container_output_exit_code_and_log() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let (pod, pod_config, logs) = pod(&daemon, "out").await;
    let id = create(
        &daemon,
        &pod,
        &pod_config,
        container(
            "printer",
            &["sh", "-c", "echo hello; echo oops >&2; exit 3"],
        ),
    )
    .await
    .unwrap();
    let st = status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerCreated as i32);
    start(&daemon, &id).await;
    let st = wait_exited(&daemon, &id).await;
    assert_eq!(st.exit_code, 3);
    assert_eq!(st.reason, "Error");
    assert!(st.started_at > 0 && st.finished_at >= st.started_at);
    let log = std::fs::read_to_string(logs.join("printer.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    for (line, stream, text) in [
        (
            lines.iter().find(|l| l.contains(" stdout ")).unwrap(),
            "stdout",
            "hello",
        ),
        (
            lines.iter().find(|l| l.contains(" stderr ")).unwrap(),
            "stderr",
            "oops",
        ),
    ] {
        let parts: Vec<&str> = line.splitn(4, ' ').collect();
        assert!(parts[0].ends_with('Z') && parts[0].contains('T'), "{line}");
        assert_eq!(parts[1], stream);
        assert_eq!(parts[2], "F");
        assert_eq!(parts[3], text);
    }
    remove_pod(&daemon, &pod).await;
    assert_eq!(
        daemon
            .runtime()
            .await
            .container_status(v1::ContainerStatusRequest {
                container_id: id,
                verbose: false
            })
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
}

#[tokio::test]
async fn exec_sync_env_user_workdir_and_stop() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let (pod, pod_config, _) = pod(&daemon, "exec").await;
    let mut config = container("sleeper", &["sh", "-c", "trap '' TERM; sleep 1000"]);
    config.envs = vec![v1::KeyValue {
        key: "FOO".into(),
        value: "bar".into(),
    }];
    config.working_dir = "/tmp".into();
    config.linux = Some(v1::LinuxContainerConfig {
        security_context: Some(v1::LinuxContainerSecurityContext {
            run_as_user: Some(v1::Int64Value { value: 1000 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = create(&daemon, &pod, &pod_config, config).await.unwrap();
    start(&daemon, &id).await;
    assert_eq!(
        status(&daemon, &id).await.state,
        v1::ContainerState::ContainerRunning as i32
    );

    let out = exec(
        &daemon,
        &id,
        &["sh", "-c", "echo $FOO; pwd; id -u; hostname"],
        10,
    )
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "bar\n/tmp\n1000\nexec\n"
    );
    assert_eq!(out.exit_code, 0);
    let out = exec(&daemon, &id, &["sh", "-c", "echo bad >&2; exit 5"], 10)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 5);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "bad\n");
    let started = Instant::now();
    let err = exec(&daemon, &id, &["sleep", "30"], 1).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Listing.
    let mut rt = daemon.runtime().await;
    let listed = rt
        .list_containers(v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter {
                pod_sandbox_id: pod[..10].to_string(),
                state: Some(v1::ContainerStateValue {
                    state: v1::ContainerState::ContainerRunning as i32,
                }),
                label_selector: [("name".to_string(), "sleeper".to_string())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);

    // TERM is ignored: the grace period runs out and SIGKILL ends it.
    let started = Instant::now();
    rt.stop_container(v1::StopContainerRequest {
        container_id: id.clone(),
        timeout: 1,
    })
    .await
    .unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(15),
        "{elapsed:?}"
    );
    let st = status(&daemon, &id).await;
    assert_eq!(st.state, v1::ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 137);
    // Stop again, remove twice: all fine.
    rt.stop_container(v1::StopContainerRequest {
        container_id: id.clone(),
        timeout: 1,
    })
    .await
    .unwrap();
    for _ in 0..2 {
        rt.remove_container(v1::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(&id), "rootfs still mounted");
    remove_pod(&daemon, &pod).await;
}

#[tokio::test]
async fn bad_container_requests() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let (pod, pod_config, _) = pod(&daemon, "bad").await;
    let mut missing_image = container("c", &["true"]);
    missing_image.image = Some(v1::ImageSpec {
        image: format!("{}/berth-test/none:latest", registry().addr),
        ..Default::default()
    });
    assert_eq!(
        create(&daemon, &pod, &pod_config, missing_image)
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        create(
            &daemon,
            "no-such-pod",
            &pod_config,
            container("c", &["true"])
        )
        .await
        .unwrap_err()
        .code(),
        Code::NotFound
    );
    let mut no_meta = container("c", &["true"]);
    no_meta.metadata = None;
    assert_eq!(
        create(&daemon, &pod, &pod_config, no_meta)
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let id = create(&daemon, &pod, &pod_config, container("c", &["true"]))
        .await
        .unwrap();
    assert_eq!(
        create(&daemon, &pod, &pod_config, container("c", &["true"]))
            .await
            .unwrap_err()
            .code(),
        Code::AlreadyExists
    );
    assert_eq!(
        exec(&daemon, &id, &["true"], 5).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    // A stopped pod takes no new containers; removing it removes its containers.
    daemon
        .runtime()
        .await
        .stop_pod_sandbox(v1::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        create(&daemon, &pod, &pod_config, container("d", &["true"]))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    remove_pod(&daemon, &pod).await;
    let left = daemon
        .runtime()
        .await
        .list_containers(v1::ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert!(left.is_empty());
    let n = std::fs::read_dir(daemon.sandbox.path("state/containers"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(n, 0, "container bundles left");
}

#[tokio::test]
async fn reopen_log_and_update_resources() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let (pod, pod_config, logs) = pod(&daemon, "upd").await;
    let id = create(
        &daemon,
        &pod,
        &pod_config,
        container("ticker", &["sh", "-c", "i=0; while true; do echo tick$i; i=$((i+1)); sleep 0.1; done"]),
    )
    .await
    .unwrap();
    start(&daemon, &id).await;
    let log = logs.join("ticker.log");
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::rename(&log, logs.join("ticker.log.1")).unwrap();
    let mut rt = daemon.runtime().await;
    rt.reopen_container_log(v1::ReopenContainerLogRequest { container_id: id.clone() })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fresh = std::fs::read_to_string(&log).unwrap();
    assert!(fresh.contains(" stdout F tick"), "{fresh}");

    rt.update_container_resources(v1::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(v1::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let out = exec(
        &daemon,
        &id,
        &["sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"],
        10,
    )
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), (64u64 << 20).to_string());
    remove_pod(&daemon, &pod).await;
}
