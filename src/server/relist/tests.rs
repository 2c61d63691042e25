use std::collections::HashMap;

use cri_api::v1;

use prost::Message;

use super::super::encode;
use super::super::list_containers::containers_message;
use super::super::list_pod_sandbox::sandboxes_message;
use super::*;
use crate::container::{Container, ContainerMeta, ContainerState, ContainerStatus, ContainerStore};
use crate::sandbox::{Sandbox, SandboxMeta, SandboxState, SandboxStatus, SandboxStore};

/// Labels and annotations of object `n`: none, a few, many, long and
/// non-ASCII ones.
fn labels(n: usize, what: &str) -> HashMap<String, String> {
    (0..(n * 7) % 23)
        .map(|i| {
            (
                format!("{what}.example.io/k{i}-{}", "x".repeat((n + i) % 40)),
                format!("v{i}-é-{}", "y".repeat((n * i) % 200)),
            )
        })
        .collect()
}

fn container_meta(n: usize) -> ContainerMeta {
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: format!("c{n}"),
            attempt: (n % 3) as u32,
        }),
        image: Some(v1::ImageSpec {
            image: format!("sha256:{}", format!("{n:02x}").repeat(32)),
            user_specified_image: if n % 2 == 0 {
                format!("busybox:{n}")
            } else {
                String::new()
            },
            ..Default::default()
        }),
        labels: labels(n, "label"),
        annotations: labels(n + 5, "annotation"),
        ..Default::default()
    };
    ContainerMeta {
        id: format!("{n:064x}"),
        name: format!("c{n}_p_ns_uid_0"),
        sandbox_id: format!("{:064x}", n / 2),
        config: config.encode_to_vec(),
        image_name: format!("busybox:{n}"),
        image_id: format!("sha256:{}", format!("{n:02x}").repeat(32)),
        rootfs_snapshots: Vec::new(),
        volume_snapshots: Vec::new(),
        log_path: format!("/logs/{n}.log").into(),
        runtime: "runc".into(),
        stop_signal: 15,
        // Some created at the same time: the order falls back to the id.
        created_at: 1_700_000_000_000_000_000 + (n / 3) as i64,
        decoded: Default::default(),
    }
}

fn sandbox_meta(n: usize) -> SandboxMeta {
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: format!("pod{n}"),
            uid: format!("uid-{n}"),
            namespace: "default".into(),
            attempt: (n % 2) as u32,
        }),
        labels: labels(n, "label"),
        annotations: labels(n + 3, "annotation"),
        ..Default::default()
    };
    SandboxMeta {
        id: format!("{n:064x}"),
        name: format!("pod{n}_default_uid-{n}_0"),
        config: config.encode_to_vec(),
        runtime_handler: if n % 4 == 0 {
            String::new()
        } else {
            "runc".into()
        },
        requested_handler: None,
        netns: None,
        created_at: if n == 7 {
            0
        } else {
            1_700_000_000_000_000_000 + n as i64
        },
        facts: None,
        decoded: Default::default(),
        derived: Default::default(),
    }
}

fn containers_now(store: &ContainerStore) -> Vec<(Arc<Container>, ContainerState)> {
    let mut all: Vec<_> = store
        .list()
        .into_iter()
        .map(|c| {
            let state = c.with_status(|s| s.state);
            (c, state)
        })
        .collect();
    all.sort_by(|(a, _), (b, _)| {
        b.meta
            .created_at
            .cmp(&a.meta.created_at)
            .then(a.meta.id.cmp(&b.meta.id))
    });
    all
}

fn sandboxes_now(store: &SandboxStore) -> Vec<(Arc<Sandbox>, SandboxState)> {
    let mut all: Vec<_> = store
        .list()
        .into_iter()
        .map(|s| {
            let state = s.with_status(|st| st.state);
            (s, state)
        })
        .collect();
    all.sort_by(|(a, _), (b, _)| {
        b.meta
            .created_at
            .cmp(&a.meta.created_at)
            .then(a.meta.id.cmp(&b.meta.id))
    });
    all
}

/// A gRPC message's prefix: not compressed, and the length that follows.
fn assert_grpc_prefix(message: &[u8], when: &str) {
    let len = u32::from_be_bytes(message[1..5].try_into().unwrap()) as usize;
    assert_eq!((message[0], len), (0, message.len() - 5), "{when}");
}

/// The answer from the cached entries is byte for byte the answer
/// encoded now from messages, and decodes to the same messages.
fn assert_containers_identical(store: &ContainerStore, when: &str) {
    let selected = containers_now(store);
    let uncached = v1::ListContainersResponse {
        containers: selected
            .iter()
            .map(|(c, s)| encode::container(&c.meta, *s))
            .collect(),
    };
    let message = containers_message(&Default::default(), &selected).unwrap();
    assert_grpc_prefix(&message, when);
    let cached = &message[GRPC_PREFIX_LEN..];
    assert_eq!(cached, uncached.encode_to_vec(), "{when}");
    assert_eq!(cached.len(), uncached.encoded_len(), "{when}");
    let decoded = v1::ListContainersResponse::decode(cached).unwrap();
    assert_eq!(decoded, uncached, "{when}");
}

fn assert_sandboxes_identical(store: &SandboxStore, when: &str) {
    let selected = sandboxes_now(store);
    let uncached = v1::ListPodSandboxResponse {
        items: selected
            .iter()
            .map(|(s, st)| encode::sandbox(&s.meta, *st))
            .collect(),
    };
    let message = sandboxes_message(&Default::default(), &selected).unwrap();
    assert_grpc_prefix(&message, when);
    let cached = &message[GRPC_PREFIX_LEN..];
    assert_eq!(cached, uncached.encode_to_vec(), "{when}");
    let decoded = v1::ListPodSandboxResponse::decode(cached).unwrap();
    assert_eq!(decoded, uncached, "{when}");
}

#[test]
fn cached_container_entries_are_the_uncached_bytes_after_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let (store, broken) = ContainerStore::open(dir.path()).unwrap();
    assert!(broken.is_empty());
    assert_containers_identical(&store, "empty");
    for n in 0..120 {
        let status = ContainerStatus {
            state: ContainerState::Created,
            ..Default::default()
        };
        store.create(container_meta(n), status).unwrap();
    }
    assert_containers_identical(&store, "all created");
    // Every state, each entry listed (and so cached) before it changes.
    for (step, state) in [
        ContainerState::Running,
        ContainerState::Exited,
        ContainerState::Unknown,
        ContainerState::Created,
    ]
    .into_iter()
    .enumerate()
    {
        for (i, (c, _)) in containers_now(&store).into_iter().enumerate() {
            if i % 4 <= step {
                c.update_volatile(|s| s.state = state).unwrap();
            }
        }
        assert_containers_identical(&store, &format!("after the change to {state:?}"));
    }
    // UpdateContainerResources and an exit's details change the status
    // but not the entry.
    for (c, _) in containers_now(&store).into_iter().step_by(3) {
        c.update(|s| {
            s.resources = v1::LinuxContainerResources {
                cpu_shares: 512,
                ..Default::default()
            }
            .encode_to_vec();
            s.exit_code = 137;
            s.reason = "OOMKilled".into();
            s.state = ContainerState::Exited;
        })
        .unwrap();
    }
    assert_containers_identical(&store, "after updates");
    // Removals, and new containers (a restart's next attempt: new
    // labels and annotations are a new object's).
    for (c, _) in containers_now(&store).into_iter().step_by(2) {
        store.delete(&c).unwrap();
    }
    assert_containers_identical(&store, "after removals");
    for n in 200..260 {
        store
            .create(
                container_meta(n),
                ContainerStatus {
                    state: ContainerState::Running,
                    ..Default::default()
                },
            )
            .unwrap();
    }
    assert_containers_identical(&store, "after new ones");
    // A daemon restart: records loaded again, nothing cached.
    drop(store);
    let (store, _) = ContainerStore::open(dir.path()).unwrap();
    assert_containers_identical(&store, "after a restart");
}

#[test]
fn cached_sandbox_entries_are_the_uncached_bytes_after_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = SandboxStore::open(dir.path()).unwrap();
    assert_sandboxes_identical(&store, "empty");
    for n in 0..80 {
        let status = SandboxStatus {
            state: if n % 5 == 0 {
                SandboxState::Unknown
            } else {
                SandboxState::Ready
            },
            ..Default::default()
        };
        store.create(sandbox_meta(n), status).unwrap();
    }
    assert_sandboxes_identical(&store, "all created");
    for (i, (s, _)) in sandboxes_now(&store).into_iter().enumerate() {
        if i % 2 == 0 {
            s.update(|st| {
                st.state = SandboxState::NotReady;
                st.ips = vec!["10.0.0.1".into()];
            })
            .unwrap();
        }
    }
    assert_sandboxes_identical(&store, "after stops");
    for (s, _) in sandboxes_now(&store).into_iter().step_by(3) {
        store.delete(&s).unwrap();
    }
    assert_sandboxes_identical(&store, "after removals");
    drop(store);
    let (store, _) = SandboxStore::open(dir.path()).unwrap();
    assert_sandboxes_identical(&store, "after a restart");
}

/// The status answers from kept encodings are byte for byte the
/// answers encoded now, after every kind of change of the container
/// and of its pod (ContainerStatus, PodSandboxStatus's pod and
/// containers).
#[tokio::test]
async fn kept_status_encodings_are_the_uncached_bytes_after_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let (containers, _) = ContainerStore::open(&dir.path().join("c")).unwrap();
    let (sandboxes, _) = SandboxStore::open(&dir.path().join("s")).unwrap();
    let images = berth_oci_image::ImageStore::open(&dir.path().join("i"), Default::default())
        .await
        .unwrap();
    let statuses = encode::Statuses {
        sandboxes: Arc::new(sandboxes),
        containers: Arc::new(containers),
        images: Arc::new(images),
    };
    let wire = super::super::wire_cache::WireCache::default();
    let pod = statuses
        .sandboxes
        .create(sandbox_meta(1), SandboxStatus::default())
        .unwrap();
    let mut made = Vec::new();
    for n in 0..3 {
        let mut meta = container_meta(n);
        meta.sandbox_id = pod.meta.id.clone();
        let status = ContainerStatus {
            state: ContainerState::Created,
            ..Default::default()
        };
        made.push(statuses.containers.create(meta, status).unwrap());
    }
    let same = |when: &str| {
        for c in &made {
            let kept = statuses.container_encoded(&wire.container_statuses, c);
            assert_eq!(kept.1, statuses.container(c).encode_to_vec(), "{when}");
        }
        let kept = statuses.pod_encoded(&wire.sandbox_statuses, &pod);
        let status = encode::sandbox_status(&pod.meta, &pod.status());
        assert_eq!(kept.1, status.encode_to_vec(), "{when}");
    };
    same("created");
    same("asked again (kept)");
    made[0]
        .update_volatile(|s| s.state = ContainerState::Running)
        .unwrap();
    made[1]
        .update(|s| {
            s.state = ContainerState::Exited;
            s.exit_code = 137;
            s.reason = "OOMKilled".into();
            s.message = "killed".into();
            s.finished_at = 42;
        })
        .unwrap();
    made[2]
        .update(|s| {
            s.resources = v1::LinuxContainerResources {
                cpu_shares: 512,
                ..Default::default()
            }
            .encode_to_vec();
            s.user = Some(crate::container::RunAs {
                uid: 7,
                gid: 8,
                groups: vec![9],
            });
        })
        .unwrap();
    pod.update(|s| {
        s.state = SandboxState::Ready;
        s.ips = vec!["10.0.0.2".into(), "fd00::2".into()];
    })
    .unwrap();
    same("after the changes");
    pod.update(|s| s.state = SandboxState::NotReady).unwrap();
    same("pod not ready");
}

/// The CRI layer over a core with fake mechanisms (an image of the
/// registry's as the store's are), open for calls.
async fn fake_cri() -> (tempfile::TempDir, Arc<crate::core::Core>, Arc<Cri>) {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::config::Config {
        root: dir.path().join("root"),
        state: dir.path().join("state"),
        ..Default::default()
    };
    let layout = crate::layout::Layout::new(&config.root, &config.state);
    let stores = crate::core::Stores::open(&layout).unwrap();
    let fake = crate::core::fake::Fake::new();
    // An image id as the store's are (the fake's own is short).
    let image_id = format!("sha256:{}", "ab".repeat(32));
    fake.add_image("registry.example/app:1.2.3", &image_id);
    let options = berth_spec::SpecOptions {
        oom_score_adj_floor: Some(-1000),
        all_capabilities: Some(Vec::new()),
        ..Default::default()
    };
    let (sandboxes, containers) = (stores.sandboxes.clone(), stores.containers.clone());
    let core = crate::core::Core::new(
        config.clone(),
        layout.clone(),
        stores,
        crate::core::fake::Fake::mechanisms(&fake),
        options,
    );
    let images = berth_oci_image::ImageStore::open(&dir.path().join("images"), Default::default())
        .await
        .unwrap();
    let statuses = super::super::encode::Statuses {
        sandboxes,
        containers,
        images: Arc::new(images),
    };
    let cri = Cri::new(
        core.clone(),
        config,
        layout,
        statuses,
        Arc::new(super::super::events::Events::new()),
        Arc::new(super::super::stats::Collector::new(core.clone())),
        None,
    );
    cri.gate.open();
    (dir, core, cri)
}

/// kubelet's relist answers are kept, and the kept one is the answer
/// made now after every change of the life cycle (a state, a new or a
/// removed object); a filtered list is never the kept answer.
#[tokio::test]
async fn kept_relist_answers_follow_every_change() {
    use crate::core::{ContainerRequest, SandboxRequest};
    let (_dir, core, cri) = fake_cri().await;
    let all_containers = || v1::ListContainersRequest {
        filter: Some(Default::default()),
    };
    let all_pods = || v1::ListPodSandboxRequest { filter: None };
    let lists = || async {
        let containers = cri.list_containers_wire(all_containers()).await.unwrap();
        let fresh =
            containers_message(&cri.wire, &cri.select_containers(&Default::default())).unwrap();
        assert_eq!(
            containers, fresh,
            "the kept ListContainers answer is current"
        );
        let pods = cri.list_pod_sandbox_wire(all_pods()).await.unwrap();
        let fresh =
            sandboxes_message(&cri.wire, &cri.select_sandboxes(&Default::default())).unwrap();
        assert_eq!(pods, fresh, "the kept ListPodSandbox answer is current");
        let containers =
            v1::ListContainersResponse::decode(&containers[GRPC_PREFIX_LEN..]).unwrap();
        let pods = v1::ListPodSandboxResponse::decode(&pods[GRPC_PREFIX_LEN..]).unwrap();
        let states = |c: &[v1::Container]| c.iter().map(|c| c.state).collect::<Vec<_>>();
        (
            states(&containers.containers),
            pods.items.iter().map(|p| p.state).collect::<Vec<_>>(),
        )
    };
    use v1::ContainerState as C;
    use v1::PodSandboxState as P;
    assert_eq!(lists().await, (vec![], vec![]));
    let pod_config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "web".into(),
            namespace: "default".into(),
            uid: "u1".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let pod = core
        .run_pod_sandbox(SandboxRequest {
            config: pod_config,
            runtime_handler: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(lists().await, (vec![], vec![P::SandboxReady as i32]));
    let id = core
        .create_container(ContainerRequest {
            sandbox_id: pod.clone(),
            config: v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(v1::ImageSpec {
                    image: "registry.example/app:1.2.3".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        })
        .await
        .unwrap();
    let ready = vec![P::SandboxReady as i32];
    assert_eq!(
        lists().await,
        (vec![C::ContainerCreated as i32], ready.clone())
    );
    // Asked again with nothing changed: the kept bytes themselves.
    let kept = cri.list_containers_wire(all_containers()).await.unwrap();
    let again = cri.list_containers_wire(all_containers()).await.unwrap();
    assert_eq!(kept.as_ptr(), again.as_ptr(), "the same kept answer");
    core.start_container(&id).await.unwrap();
    assert_eq!(
        lists().await,
        (vec![C::ContainerRunning as i32], ready.clone())
    );
    let exited_only = v1::ListContainersRequest {
        filter: Some(v1::ContainerFilter {
            state: Some(v1::ContainerStateValue {
                state: C::ContainerExited as i32,
            }),
            ..Default::default()
        }),
    };
    let none = cri.list_containers_wire(exited_only).await.unwrap();
    assert_eq!(&none[..], [0, 0, 0, 0, 0], "a filtered answer is its own");
    core.stop_container(&id, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(lists().await, (vec![C::ContainerExited as i32], ready));
    core.remove_container(&id).await.unwrap();
    assert_eq!(lists().await, (vec![], vec![P::SandboxReady as i32]));
    core.stop_pod_sandbox(&pod).await.unwrap();
    assert_eq!(lists().await, (vec![], vec![P::SandboxNotready as i32]));
    core.remove_pod_sandbox(&pod).await.unwrap();
    assert_eq!(lists().await, (vec![], vec![]));
}

/// The request of a list call is read as tonic's server reads one: the
/// same codes for what is missing, cut short, compressed or too long.
#[tokio::test]
async fn list_requests_are_read_as_tonic_reads_them() {
    let read = |bytes: Vec<u8>| async move {
        let body = Body::new(http_body_util::Full::new(Bytes::from(bytes)));
        read_request::<v1::ListContainersRequest>(body).await
    };
    let framed = |flag: u8, message: &[u8]| {
        let mut b = vec![flag];
        b.extend_from_slice(&(message.len() as u32).to_be_bytes());
        b.extend_from_slice(message);
        b
    };
    let req = v1::ListContainersRequest {
        filter: Some(v1::ContainerFilter {
            id: "abc".into(),
            ..Default::default()
        }),
    };
    assert_eq!(read(framed(0, &req.encode_to_vec())).await.unwrap(), req);
    assert_eq!(
        read(framed(0, &[])).await.unwrap(),
        Default::default(),
        "an empty message is the default request"
    );
    let code = |r: Result<v1::ListContainersRequest, tonic::Status>| r.unwrap_err().code();
    assert_eq!(code(read(Vec::new()).await), tonic::Code::Internal);
    assert_eq!(code(read(vec![0, 0]).await), tonic::Code::Internal);
    let mut cut = framed(0, &req.encode_to_vec());
    cut.pop();
    assert_eq!(code(read(cut).await), tonic::Code::Internal);
    let compressed = framed(1, &req.encode_to_vec());
    assert_eq!(code(read(compressed).await), tonic::Code::Unimplemented);
    let mut long = vec![0];
    long.extend_from_slice(&((MAX_MESSAGE_SIZE + 1) as u32).to_be_bytes());
    assert_eq!(code(read(long).await), tonic::Code::OutOfRange);
    let too_much = vec![0; GRPC_PREFIX_LEN + MAX_MESSAGE_SIZE + 1];
    assert_eq!(code(read(too_much).await), tonic::Code::OutOfRange);
    assert_eq!(
        code(read(framed(0, &[0xff, 0xff])).await),
        tonic::Code::Internal,
        "not protobuf"
    );
}

/// A kept answer is given while its count holds, and an older one never
/// replaces a newer.
#[test]
fn a_kept_answer_holds_for_its_count_only() {
    let kept = KeptAnswer::default();
    let made = std::cell::Cell::new(0);
    let make = |b: &'static [u8]| {
        made.set(made.get() + 1);
        Ok::<_, ()>(Bytes::from_static(b))
    };
    assert_eq!(kept.get(1, || make(b"one")).unwrap(), &b"one"[..]);
    assert_eq!(kept.get(1, || make(b"other")).unwrap(), &b"one"[..]);
    assert_eq!(made.get(), 1);
    assert_eq!(kept.get(3, || make(b"three")).unwrap(), &b"three"[..]);
    // A call that read the count before the change that made it 3.
    assert_eq!(kept.get(2, || make(b"two")).unwrap(), &b"two"[..]);
    assert_eq!(kept.get(3, || make(b"again")).unwrap(), &b"three"[..]);
    assert_eq!(made.get(), 3);
    assert!(kept.get(4, || Err::<Bytes, ()>(())).is_err());
    assert_eq!(kept.get(3, || make(b"x")).unwrap(), &b"three"[..]);
}

/// What the status calls kubelet makes all the time cost inside berth,
/// as the socket serves them (through the instrument layer, with the
/// daemon's kind of subscriber), on a core with fake mechanisms: a pod
/// with two running containers. Run by hand, it prints figures.
/// `cargo test --release --bin berth relist::tests::status_calls_cost -- --ignored --nocapture`
#[tokio::test(flavor = "current_thread")]
#[ignore = "a measurement, run by hand"]
async fn status_calls_cost() {
    use crate::core::{ContainerRequest, SandboxRequest};
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (_dir, core, cri) = fake_cri().await;
    let pod_config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: "web".into(),
            namespace: "default".into(),
            uid: "0f5c7a3e-8d1b-4b2a-9c6e-2f7d3a1b5c9e".into(),
            attempt: 0,
        }),
        labels: labels(3, "label"),
        annotations: labels(4, "annotation"),
        ..Default::default()
    };
    let pod = core
        .run_pod_sandbox(SandboxRequest {
            config: pod_config.clone(),
            runtime_handler: String::new(),
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for name in ["app", "sidecar"] {
        let mut config = v1::ContainerConfig::decode(container_meta(3).config.as_slice()).unwrap();
        config.metadata = Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        });
        config.image = Some(v1::ImageSpec {
            image: "registry.example/app:1.2.3".into(),
            ..Default::default()
        });
        let id = core
            .create_container(ContainerRequest {
                sandbox_id: pod.clone(),
                config,
            })
            .await
            .unwrap();
        core.start_container(&id).await.unwrap();
        ids.push(id);
    }
    const N: u32 = 100_000;
    async fn time<F: std::future::Future<Output = ()>>(what: &str, mut f: impl FnMut() -> F) {
        for _ in 0..N / 10 {
            f().await;
        }
        let started = std::time::Instant::now();
        for _ in 0..N {
            f().await;
        }
        let ns = started.elapsed().as_nanos() as f64 / f64::from(N);
        println!("{what}: {ns:.0} ns per call");
    }
    let (c, p) = (ids[0].clone(), pod.clone());
    time("ContainerStatus", || {
        let (cri, c) = (cri.clone(), c.clone());
        async move {
            let req = v1::ContainerStatusRequest {
                container_id: c,
                verbose: false,
            };
            let ids = req.ids();
            let c = cri.clone();
            let body = async move { c.container_status_packed(req).await };
            instrument::call(&cri.gate, "ContainerStatus", ids, None, body)
                .await
                .unwrap();
        }
    })
    .await;
    time("PodSandboxStatus (two containers)", || {
        let (cri, p) = (cri.clone(), p.clone());
        async move {
            let req = v1::PodSandboxStatusRequest {
                pod_sandbox_id: p,
                verbose: false,
            };
            let ids = req.ids();
            let c = cri.clone();
            let body = async move { c.pod_sandbox_status_packed(req).await };
            instrument::call(&cri.gate, "PodSandboxStatus", ids, None, body)
                .await
                .unwrap();
        }
    })
    .await;
    time("ContainerStatus, the unpacked message", || {
        let (cri, c) = (cri.clone(), c.clone());
        async move {
            let req = v1::ContainerStatusRequest {
                container_id: c,
                verbose: false,
            };
            cri.container_status(req).await.unwrap();
        }
    })
    .await;
    // kubelet's relist at 250 pods and 500 containers (the bench's
    // scale): each call through the instrument layer.
    for n in 1..250 {
        let mut config = pod_config.clone();
        config.metadata.as_mut().unwrap().name = format!("web-{n}");
        config.metadata.as_mut().unwrap().uid = format!("uid-{n}");
        let pod = core
            .run_pod_sandbox(SandboxRequest {
                config: config.clone(),
                runtime_handler: String::new(),
            })
            .await
            .unwrap();
        for name in ["app", "sidecar"] {
            let mut config =
                v1::ContainerConfig::decode(container_meta(n).config.as_slice()).unwrap();
            config.metadata = Some(v1::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            });
            config.image = Some(v1::ImageSpec {
                image: "registry.example/app:1.2.3".into(),
                ..Default::default()
            });
            core.create_container(ContainerRequest {
                sandbox_id: pod.clone(),
                config,
            })
            .await
            .unwrap();
        }
    }
    let started = std::time::Instant::now();
    const LISTS: u32 = 2000;
    for _ in 0..LISTS {
        let req = v1::ListContainersRequest::default();
        let c = cri.clone();
        let body = async move { c.list_containers_wire(req).await };
        instrument::call(&cri.gate, "ListContainers", Default::default(), None, body)
            .await
            .unwrap();
        let req = v1::ListPodSandboxRequest::default();
        let c = cri.clone();
        let body = async move { c.list_pod_sandbox_wire(req).await };
        instrument::call(&cri.gate, "ListPodSandbox", Default::default(), None, body)
            .await
            .unwrap();
    }
    println!(
        "relist (ListContainers + ListPodSandbox), 500 containers in 250 pods, kept answers: {:.0} µs",
        started.elapsed().as_secs_f64() * 1e6 / f64::from(LISTS)
    );
    let started = std::time::Instant::now();
    for _ in 0..LISTS {
        let all = cri.select_containers(&Default::default());
        std::hint::black_box(containers_message(&cri.wire, &all).unwrap());
        let all = cri.select_sandboxes(&Default::default());
        std::hint::black_box(sandboxes_message(&cri.wire, &all).unwrap());
    }
    println!(
        "the same answers made again each time (select and pack): {:.0} µs",
        started.elapsed().as_secs_f64() * 1e6 / f64::from(LISTS)
    );
}
