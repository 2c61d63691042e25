//! Records → CRI messages: the container summary and status, the sandbox
//! summary and status, and the image, shared by the RPC files and by the
//! container events.
//!
//! The image fields follow containerd (`internal/cri/server/container_list.go`
//! and `container_status.go`): a `Container` (ListContainers) carries the
//! image id in both `image_ref` and `image_id`; a `ContainerStatus` carries
//! the image's first repo digest in `image_ref` when the store still has the
//! image with one (else the image id), and the image id in `image_id`.

use std::sync::Arc;

use cri_api::prepacked::Entry;
use cri_api::v1;
use prost::Message;

use super::wire_cache::{ContainerStatusBytes, PerRecord, SandboxStatusBytes};
use super::Cri;
use crate::container::{Container, ContainerMeta, ContainerState, ContainerStatus, ContainerStore};
use crate::objects::StoreExt;
use crate::sandbox::{Sandbox, SandboxMeta, SandboxState, SandboxStatus, SandboxStore};

/// The CRI state of a container.
pub fn container_state(state: ContainerState) -> v1::ContainerState {
    match state {
        ContainerState::Created => v1::ContainerState::ContainerCreated,
        ContainerState::Running => v1::ContainerState::ContainerRunning,
        ContainerState::Exited => v1::ContainerState::ContainerExited,
        ContainerState::Unknown => v1::ContainerState::ContainerUnknown,
    }
}

/// The CRI state of a sandbox (a half-made one is not ready).
pub fn sandbox_state(state: SandboxState) -> v1::PodSandboxState {
    match state {
        SandboxState::Ready => v1::PodSandboxState::SandboxReady,
        SandboxState::NotReady | SandboxState::Unknown => v1::PodSandboxState::SandboxNotready,
    }
}

/// The ListContainers entry of a container in `state`: the image id is
/// both its `image_ref` and its `image_id`, as containerd lists it.
pub fn container(meta: &ContainerMeta, state: ContainerState) -> v1::Container {
    let config = meta.config();
    v1::Container {
        id: meta.id.clone(),
        pod_sandbox_id: meta.sandbox_id.clone(),
        metadata: config.metadata.clone(),
        image: config.image.clone(),
        image_ref: meta.image_id.clone(),
        state: container_state(state) as i32,
        created_at: meta.created_at,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        image_id: meta.image_id.clone(),
    }
}

/// The key of `Container.state` (field 6, varint).
pub const CONTAINER_STATE_KEY: u8 = 6 << 3;

/// The key of `PodSandbox.state` (field 3, varint).
pub const SANDBOX_STATE_KEY: u8 = 3 << 3;

/// The ListContainers entry of a container, all but its state (its
/// metadata never changes; the list writes the state as it is at each
/// call): the bytes of [`container`] for every state. Kept by the server
/// (`wire_cache.rs`).
pub fn container_entry(meta: &ContainerMeta) -> Entry {
    {
        // The state left at 0, the default prost does not write: the
        // fields before it, then those after it.
        let full = container(meta, ContainerState::Created);
        let tail = v1::Container {
            created_at: full.created_at,
            labels: full.labels,
            annotations: full.annotations,
            image_id: full.image_id,
            ..Default::default()
        };
        let head = v1::Container {
            id: full.id,
            pod_sandbox_id: full.pod_sandbox_id,
            metadata: full.metadata,
            image: full.image,
            image_ref: full.image_ref,
            ..Default::default()
        };
        Entry::new(&head.encode_to_vec(), &tail.encode_to_vec())
    }
}

/// The ListPodSandbox entry of a sandbox, all but its state (see
/// [`container_entry`]): the bytes of [`sandbox`] for every state.
pub fn sandbox_entry(meta: &SandboxMeta) -> Entry {
    {
        let full = sandbox(meta, SandboxState::Ready);
        let tail = v1::PodSandbox {
            created_at: full.created_at,
            labels: full.labels,
            annotations: full.annotations,
            runtime_handler: full.runtime_handler,
            ..Default::default()
        };
        let head = v1::PodSandbox {
            id: full.id,
            metadata: full.metadata,
            ..Default::default()
        };
        Entry::new(&head.encode_to_vec(), &tail.encode_to_vec())
    }
}

/// The image a container's status names: the image as the user specified
/// it (kubelet's `user_specified_image`, the pod spec's image) when given,
/// else the image as CreateContainer named it. kubelet creates containers
/// from the image's id and shows this name as the pod's
/// `containerStatuses[].image`; containerd shows the image's first tag,
/// which for an image of several tags need not be the one the pod named.
fn status_image(image: Option<&v1::ImageSpec>) -> Option<v1::ImageSpec> {
    let mut image = image?.clone();
    if !image.user_specified_image.is_empty() {
        image.image.clone_from(&image.user_specified_image);
    }
    Some(image)
}

/// The CRI status of a container. `repo_digest` is the first repo digest
/// of its image as the store has it now (`None`: the image is gone or has
/// none), which becomes `image_ref`; `image_id` is always the image id.
pub fn container_status(
    meta: &ContainerMeta,
    status: &ContainerStatus,
    repo_digest: Option<String>,
) -> v1::ContainerStatus {
    let config = meta.config();
    v1::ContainerStatus {
        id: meta.id.clone(),
        metadata: config.metadata.clone(),
        state: container_state(status.state) as i32,
        created_at: meta.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        image: status_image(config.image.as_ref()),
        image_ref: repo_digest.unwrap_or_else(|| meta.image_id.clone()),
        reason: status.reason.clone(),
        message: status.message.clone(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        mounts: config.mounts.clone(),
        log_path: meta.log_path.display().to_string(),
        image_id: meta.image_id.clone(),
        resources: status.resources(meta).map(|linux| v1::ContainerResources {
            linux: Some(linux),
            windows: None,
        }),
        user: status.user.as_ref().map(|u| v1::ContainerUser {
            linux: Some(v1::LinuxContainerUser {
                uid: u.uid.into(),
                gid: u.gid.into(),
                supplemental_groups: u.groups.iter().map(|g| i64::from(*g)).collect(),
            }),
        }),
        stop_signal: berth_spec::cri_signal(meta.stop_signal) as i32,
    }
}

/// The ListPodSandbox entry of a sandbox in `state`.
pub fn sandbox(meta: &SandboxMeta, state: SandboxState) -> v1::PodSandbox {
    let config = meta.config();
    v1::PodSandbox {
        id: meta.id.clone(),
        metadata: config.metadata.clone(),
        state: sandbox_state(state) as i32,
        created_at: meta.created_at,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: meta.reported_handler().to_string(),
    }
}

/// The CRI status of a sandbox.
pub fn sandbox_status(meta: &SandboxMeta, status: &SandboxStatus) -> v1::PodSandboxStatus {
    let config = meta.config();
    let namespace_options = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone());
    let network = (!status.ips.is_empty()).then(|| v1::PodSandboxNetworkStatus {
        ip: status.ips[0].clone(),
        additional_ips: status.ips[1..]
            .iter()
            .map(|ip| v1::PodIp { ip: ip.clone() })
            .collect(),
    });
    v1::PodSandboxStatus {
        id: meta.id.clone(),
        metadata: config.metadata.clone(),
        state: sandbox_state(status.state) as i32,
        created_at: meta.created_at,
        network,
        linux: Some(v1::LinuxPodSandboxStatus {
            namespaces: Some(v1::Namespace {
                options: namespace_options,
            }),
        }),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: meta.reported_handler().to_string(),
    }
}

/// The CRI view of a stored image.
pub fn image(image: &berth_oci_image::Image) -> v1::Image {
    v1::Image {
        id: image.id.clone(),
        repo_tags: image.repo_tags.clone(),
        repo_digests: image.repo_digests.clone(),
        size: image.size,
        uid: image.uid.map(|value| v1::Int64Value { value }),
        username: image.username.clone(),
        spec: Some(v1::ImageSpec {
            image: image.id.clone(),
            ..Default::default()
        }),
        pinned: image.pinned,
    }
}

/// What the statuses a client sees are read from: the stores, and the image
/// store for the images' repo digests. Shared by the RPCs and the events.
#[derive(Clone)]
pub struct Statuses {
    pub sandboxes: Arc<SandboxStore>,
    pub containers: Arc<ContainerStore>,
    pub images: Arc<berth_oci_image::ImageStore>,
}

/// A container's `ContainerStatus` encoded, kept ([`ContainerStatusBytes`]).
pub type EncodedContainerStatus = Arc<ContainerStatusBytes>;

/// A sandbox's `PodSandboxStatus` encoded, kept ([`SandboxStatusBytes`]).
pub type EncodedSandboxStatus = Arc<SandboxStatusBytes>;

impl Statuses {
    /// The first repo digest of image `image_id` as the store has it now.
    fn repo_digest(&self, image_id: &str) -> Option<String> {
        self.images
            .with(image_id, |i| i.repo_digests.first().cloned())
            .flatten()
    }

    /// The CRI status of a container, its image's repo digest looked up now.
    pub fn container(&self, container: &Container) -> v1::ContainerStatus {
        let repo_digest = self.repo_digest(&container.meta.image_id);
        container_status(&container.meta, &container.status(), repo_digest)
    }

    /// [`Statuses::container`], encoded: kept in `kept` and encoded again
    /// only once the container's status or its image's repo digest has
    /// changed (the status calls kubelet makes all the time then cost a
    /// comparison, not a copy of every label, annotation and mount).
    pub(super) fn container_encoded(
        &self,
        kept: &PerRecord<Container, ContainerStatusBytes>,
        container: &Arc<Container>,
    ) -> EncodedContainerStatus {
        let image_id = &container.meta.image_id;
        kept.get(
            container,
            |((status, digest), _)| {
                // The image gone: no digest.
                let same_digest = self
                    .images
                    .with(image_id, |i| {
                        i.repo_digests.first().map(String::as_str) == digest.as_deref()
                    })
                    .unwrap_or(digest.is_none());
                same_digest && container.with_status(|s| s == status)
            },
            || {
                let (status, digest) = (container.status(), self.repo_digest(image_id));
                let bytes =
                    container_status(&container.meta, &status, digest.clone()).encode_to_vec();
                ((status, digest), bytes)
            },
        )
    }

    /// A sandbox's `PodSandboxStatus`, encoded: kept in `kept` and encoded
    /// again only once its state or IPs (all of its status that is in it)
    /// have changed.
    pub(super) fn pod_encoded(
        &self,
        kept: &PerRecord<Sandbox, SandboxStatusBytes>,
        sandbox: &Arc<Sandbox>,
    ) -> EncodedSandboxStatus {
        kept.get(
            sandbox,
            |((state, ips), _)| sandbox.with_status(|s| s.state == *state && s.ips == *ips),
            || {
                let status = sandbox.status();
                let bytes = sandbox_status(&sandbox.meta, &status).encode_to_vec();
                ((status.state, status.ips), bytes)
            },
        )
    }

    /// The statuses of a sandbox's containers, oldest first.
    pub fn pod_containers(&self, sandbox_id: &str) -> Vec<v1::ContainerStatus> {
        crate::container::oldest_first(self.containers.in_group(sandbox_id))
            .iter()
            .map(|c| self.container(c))
            .collect()
    }

    /// The sandbox's status; `None` once it is gone (a DELETED event).
    pub fn pod(&self, sandbox_id: &str) -> Option<v1::PodSandboxStatus> {
        let sandbox = self.sandboxes.lookup(sandbox_id).ok()?;
        Some(sandbox_status(&sandbox.meta, &sandbox.status()))
    }
}

impl Cri {
    /// The CRI status of a container, its image's repo digest looked up now.
    pub fn encode_container_status(&self, container: &Container) -> v1::ContainerStatus {
        self.statuses.container(container)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    const IMAGE_ID: &str =
        "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const DIGEST: &str = "127.0.0.1:5000/library/busybox@sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn meta() -> ContainerMeta {
        let config = v1::ContainerConfig {
            image: Some(v1::ImageSpec {
                image: IMAGE_ID.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        ContainerMeta {
            id: "c1".into(),
            name: "c_p_ns_uid_0".into(),
            sandbox_id: "p1".into(),
            config: config.encode_to_vec(),
            image_name: "127.0.0.1:5000/library/busybox:latest".into(),
            image_id: IMAGE_ID.into(),
            rootfs_snapshots: Vec::new(),
            volume_snapshots: Vec::new(),
            log_path: "/logs/c.log".into(),
            runtime: "runc".into(),
            stop_signal: 15,
            created_at: 7,
            decoded: Default::default(),
        }
    }

    #[test]
    fn listed_container_carries_the_image_id_as_containerd_does() {
        let status = ContainerStatus {
            state: ContainerState::Running,
            ..Default::default()
        };
        let listed = container(&meta(), status.state);
        assert_eq!(listed.image_ref, IMAGE_ID);
        assert_eq!(listed.image_id, IMAGE_ID);
        assert_eq!(listed.image.unwrap().image, IMAGE_ID);
        assert_eq!(listed.state, v1::ContainerState::ContainerRunning as i32);
    }

    #[test]
    fn container_status_carries_the_repo_digest_and_the_image_id() {
        let status = ContainerStatus::default();
        let with = container_status(&meta(), &status, Some(DIGEST.into()));
        assert_eq!(with.image_ref, DIGEST);
        assert_eq!(with.image_id, IMAGE_ID);
        // The image gone from the store (or without a digest): its id.
        let without = container_status(&meta(), &status, None);
        assert_eq!(without.image_ref, IMAGE_ID);
        assert_eq!(without.image_id, IMAGE_ID);
        assert_eq!(without.log_path, "/logs/c.log");
    }

    #[test]
    fn container_status_names_the_image_the_user_specified() {
        let status = ContainerStatus::default();
        // kubelet creates from the id and names the pod spec's image.
        let s = container_status(&kubelet_meta(), &status, None);
        let image = s.image.unwrap();
        assert_eq!(image.image, "registry.example/app:1.2.3");
        assert_eq!(image.user_specified_image, "registry.example/app:1.2.3");
        // Without one (crictl): the image as CreateContainer named it.
        let s = container_status(&meta(), &status, None);
        let asked = meta().config().image.clone().unwrap().image;
        assert_eq!(s.image.unwrap().image, asked);
    }

    /// A kubelet-like container: labels, annotations and mounts as kubelet
    /// sends them.
    fn kubelet_meta() -> ContainerMeta {
        let map = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let config = v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            image: Some(v1::ImageSpec {
                image: IMAGE_ID.into(),
                user_specified_image: "registry.example/app:1.2.3".into(),
                ..Default::default()
            }),
            labels: map(&[
                ("io.kubernetes.container.name", "app"),
                ("io.kubernetes.pod.name", "web-7d9c5b6f4-x2k8p"),
                ("io.kubernetes.pod.namespace", "default"),
                ("io.kubernetes.pod.uid", "0f5c7a3e-8d1b-4b2a-9c6e-2f7d3a1b5c9e"),
            ]),
            annotations: map(&[
                ("io.kubernetes.container.hash", "5e1c2a3b"),
                ("io.kubernetes.container.restartCount", "0"),
                ("io.kubernetes.container.terminationMessagePath", "/dev/termination-log"),
                ("io.kubernetes.container.terminationMessagePolicy", "File"),
                ("io.kubernetes.pod.terminationGracePeriod", "30"),
            ]),
            mounts: (0..4)
                .map(|i| v1::Mount {
                    container_path: format!("/var/run/secrets/kubernetes.io/serviceaccount{i}"),
                    host_path: format!("/var/lib/kubelet/pods/0f5c7a3e/volumes/kubernetes.io~projected/kube-api-access-{i}"),
                    readonly: true,
                    ..Default::default()
                })
                .collect(),
            linux: Some(v1::LinuxContainerConfig {
                resources: Some(v1::LinuxContainerResources {
                    cpu_shares: 102,
                    cpu_period: 100000,
                    memory_limit_in_bytes: 128 << 20,
                    oom_score_adj: 999,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        ContainerMeta {
            config: config.encode_to_vec(),
            ..meta()
        }
    }

    /// What building a ContainerStatus costs (the handler's work, before
    /// tonic encodes it), and encoding it: run by hand, it prints figures.
    /// `cargo test --release --bin berth encode::tests::container_status_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn container_status_cost() {
        let meta = kubelet_meta();
        let status = ContainerStatus {
            state: ContainerState::Running,
            pid: Some(4242),
            started_at: 1,
            ..Default::default()
        };
        const N: u32 = 200_000;
        let time = |what: &str, f: &mut dyn FnMut() -> usize| {
            let mut sink = 0;
            for _ in 0..N / 10 {
                sink += f();
            }
            let started = std::time::Instant::now();
            for _ in 0..N {
                sink += f();
            }
            let ns = started.elapsed().as_nanos() as f64 / f64::from(N);
            println!("{what}: {ns:.0} ns per call ({sink})");
        };
        time("container_status", &mut || {
            container_status(&meta, &status, Some(DIGEST.into()))
                .mounts
                .len()
        });
        let built = container_status(&meta, &status, Some(DIGEST.into()));
        time("its encoding", &mut || built.encode_to_vec().len());
        time("cri_signal", &mut || berth_spec::cri_signal(15) as usize);
    }
}
