//! The calls kubelet makes all the time, on the socket: its relist
//! (ListContainers and ListPodSandbox) and the status calls
//! (ContainerStatus, PodSandboxStatus) are served here, before the
//! generated RuntimeService, with the wire twins of their answers
//! (`cri_api::prepacked`) made of cached bytes: the list entries
//! (`list_containers.rs`, `list_pod_sandbox.rs`) and the statuses
//! (`container_status.rs`, `pod_sandbox_status.rs`), each encoded once per
//! change. Every other method goes to the generated service. These calls go
//! through the instrument layer as every RPC does (the gate, the deadline,
//! the log line, the metrics, a panic as Internal) and keep the message
//! size limits.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::http;
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic_prost::ProstCodec;

use super::grpc::MAX_MESSAGE_SIZE;
use super::instrument::{self, RequestIds};
use super::{deadline, Cri};

const LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";
const LIST_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/ListPodSandbox";
const CONTAINER_STATUS: &str = "/runtime.v1.RuntimeService/ContainerStatus";
const POD_SANDBOX_STATUS: &str = "/runtime.v1.RuntimeService/PodSandboxStatus";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The RuntimeService `S` (the generated server), with the two list calls
/// of the relist served from cached entries.
#[derive(Clone)]
pub struct Relist<S> {
    inner: S,
    cri: Arc<Cri>,
}

impl<S> Relist<S> {
    pub fn new(inner: S, cri: Arc<Cri>) -> Relist<S> {
        Relist { inner, cri }
    }
}

impl<S: NamedService> NamedService for Relist<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for Relist<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let cri = self.cri.clone();
        match req.uri().path() {
            LIST_CONTAINERS => serve(cri, "ListContainers", req, |cri, r| {
                Box::pin(async move { cri.list_containers_packed(r).await })
            }),
            LIST_POD_SANDBOX => serve(cri, "ListPodSandbox", req, |cri, r| {
                Box::pin(async move { cri.list_pod_sandbox_packed(r).await })
            }),
            CONTAINER_STATUS => serve(cri, "ContainerStatus", req, |cri, r| {
                Box::pin(async move { cri.container_status_packed(r).await })
            }),
            POD_SANDBOX_STATUS => serve(cri, "PodSandboxStatus", req, |cri, r| {
                Box::pin(async move { cri.pod_sandbox_status_packed(r).await })
            }),
            _ => Box::pin(self.inner.call(req)),
        }
    }
}

/// Serves `req` as the call `rpc` with the core's `answer` (see [`Packed`]).
fn serve<Req, Resp>(
    cri: Arc<Cri>,
    rpc: &'static str,
    req: http::Request<Body>,
    answer: fn(Arc<Cri>, Req) -> BoxFuture<Result<Resp, crate::error::Error>>,
) -> BoxFuture<Result<http::Response<Body>, Infallible>>
where
    Req: prost::Message + Default + RequestIds + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    let method = Packed { cri, rpc, answer };
    Box::pin(async move { Ok(grpc().unary(method, req).await) })
}

/// The gRPC server side of one call, with the services' message limits.
fn grpc<T, U>() -> Grpc<ProstCodec<T, U>>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    Grpc::new(ProstCodec::default())
        .apply_max_message_size_config(Some(MAX_MESSAGE_SIZE), Some(MAX_MESSAGE_SIZE))
}

/// One of the relist's two calls: its name, and the core's answer to it
/// (an `async fn` of [`Cri`], boxed).
struct Packed<Req, Resp> {
    cri: Arc<Cri>,
    rpc: &'static str,
    answer: fn(Arc<Cri>, Req) -> BoxFuture<Result<Resp, crate::error::Error>>,
}

impl<Req, Resp> UnaryService<Req> for Packed<Req, Resp>
where
    Req: RequestIds + Send + 'static,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<tonic::Response<Resp>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        let (cri, rpc, answer) = (self.cri.clone(), self.rpc, self.answer);
        Box::pin(async move {
            let deadline = deadline::of(&request);
            let req = request.into_inner();
            let ids = req.ids();
            let body = answer(cri.clone(), req);
            instrument::call(&cri.gate, rpc, ids, deadline, body).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use cri_api::{prepacked, v1};

    use prost::Message;

    use super::super::encode;
    use super::super::list_containers::pack_containers;
    use super::super::list_pod_sandbox::pack_sandboxes;
    use super::*;
    use crate::container::{
        Container, ContainerMeta, ContainerState, ContainerStatus, ContainerStore,
    };
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
            listed: Default::default(),
            status_memo: Default::default(),
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
            netns: None,
            created_at: if n == 7 {
                0
            } else {
                1_700_000_000_000_000_000 + n as i64
            },
            facts: None,
            decoded: Default::default(),
            listed: Default::default(),
            status_memo: Default::default(),
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
        let cached = prepacked::ListContainersResponse {
            containers: Vec::new(),
            encoded: pack_containers(&selected),
        };
        assert_eq!(cached.encode_to_vec(), uncached.encode_to_vec(), "{when}");
        assert_eq!(cached.encoded_len(), uncached.encoded_len(), "{when}");
        let decoded =
            v1::ListContainersResponse::decode(cached.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded, uncached, "{when}");
        let twin =
            prepacked::ListContainersResponse::decode(cached.encode_to_vec().as_slice()).unwrap();
        assert_eq!(twin.containers, uncached.containers, "{when}");
    }

    fn assert_sandboxes_identical(store: &SandboxStore, when: &str) {
        let selected = sandboxes_now(store);
        let uncached = v1::ListPodSandboxResponse {
            items: selected
                .iter()
                .map(|(s, st)| encode::sandbox(&s.meta, *st))
                .collect(),
        };
        let cached = prepacked::ListPodSandboxResponse {
            items: Vec::new(),
            encoded: pack_sandboxes(&selected),
        };
        assert_eq!(cached.encode_to_vec(), uncached.encode_to_vec(), "{when}");
        let decoded =
            v1::ListPodSandboxResponse::decode(cached.encode_to_vec().as_slice()).unwrap();
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
                let kept = statuses.container_encoded(c);
                assert_eq!(kept.1, statuses.container(c).encode_to_vec(), "{when}");
            }
            let kept = statuses.pod_encoded(&pod);
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

    #[test]
    fn a_memo_is_made_again_only_when_its_key_changes() {
        let memo: crate::objects::Memo<u32, String> = Default::default();
        let mut made = 0;
        let mut get = |key: u32| {
            memo.get(
                |k| *k == key,
                || {
                    made += 1;
                    (key, format!("v{key}"))
                },
            )
            .1
            .clone()
        };
        assert_eq!(get(1), "v1");
        assert_eq!(get(1), "v1");
        assert_eq!(get(2), "v2");
        assert_eq!(get(2), "v2");
        assert_eq!(get(1), "v1");
        assert_eq!(made, 3);
        let copy = memo.clone();
        let mut again = false;
        copy.get(
            |_| true,
            || {
                again = true;
                (0, String::new())
            },
        );
        assert!(again, "a clone starts empty");
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
        let core = crate::core::Core::new(
            config,
            layout,
            stores,
            crate::core::fake::Fake::mechanisms(&fake),
            options,
        );
        let images =
            berth_oci_image::ImageStore::open(&dir.path().join("images"), Default::default())
                .await
                .unwrap();
        let cri = Cri::new(
            core.clone(),
            berth_cni::Cni::new(Default::default()),
            Arc::new(images),
            Arc::new(super::super::events::Events::new()),
        );
        cri.gate.open();
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
                config: pod_config,
                runtime_handler: String::new(),
            })
            .await
            .unwrap();
        let mut ids = Vec::new();
        for name in ["app", "sidecar"] {
            let mut config =
                v1::ContainerConfig::decode(container_meta(3).config.as_slice()).unwrap();
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
    }
}
