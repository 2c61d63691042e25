//! The list-streaming RPCs (cri-api v0.36, KEP-5825) against the real
//! daemon: on a node with 500 containers, each stream gives exactly the
//! items of its unary twin (same filters), in messages no larger than the
//! bound, also to a client that reads slowly. Root only.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cri::{container, pull};
use common::pods::{daemon, on_host_network, pod_config, TestNet};
use common::{registry, Daemon};
use cri_api::v1;
use prost::Message;
use tokio_stream::StreamExt;

/// berth's bound on the items of one stream message (`MAX_BATCH_BYTES`).
const MAX_BATCH_BYTES: usize = 1024 * 1024;

const PODS: usize = 5;
const PER_POD: usize = 100;

/// A host-network pod (no netns, no CNI: quick to make many).
fn host_pod(name: &str) -> v1::PodSandboxConfig {
    on_host_network(pod_config(name))
}

/// PODS pods with PER_POD created containers each, every container with a
/// 4 KiB annotation (so that the answers need several messages).
async fn fill(daemon: &Daemon) -> Vec<String> {
    pull(daemon, &registry().busybox()).await;
    let cri = daemon.cri().await;
    let mut pods = Vec::new();
    for p in 0..PODS {
        let config = host_pod(&format!("many{p}"));
        let pod = cri.run_pod(&config).await.expect("RunPodSandbox");
        for c in 0..PER_POD {
            let mut cfg = container(&format!("c{c}"), &["true"]);
            cfg.annotations = [("blob".to_string(), "x".repeat(4096))].into();
            if c % 2 == 0 {
                cfg.labels.insert("even".into(), "yes".into());
            }
            cri.create_container(&pod, &config, cfg)
                .await
                .expect("CreateContainer");
        }
        pods.push(pod);
    }
    pods
}

/// Reads a whole stream, sleeping `pause` between messages; each message's
/// encoded size and its items.
async fn drain<T: Message, I>(
    mut stream: tonic::Streaming<T>,
    pause: Duration,
    items: impl Fn(T) -> Vec<I>,
) -> (Vec<usize>, Vec<I>) {
    let (mut sizes, mut all) = (Vec::new(), Vec::new());
    while let Some(message) = stream.next().await {
        let message = message.expect("no error midway");
        sizes.push(message.encoded_len());
        all.extend(items(message));
        tokio::time::sleep(pause).await;
    }
    (sizes, all)
}

fn ids<'a>(ids: impl Iterator<Item = &'a String>) -> Vec<String> {
    ids.cloned().collect()
}

#[tokio::test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
async fn streams_agree_with_the_unary_lists_in_bounded_messages() {
    require_root!();
    let net = TestNet::new();
    let daemon = daemon(&net).await;
    let pods = fill(&daemon).await;
    let mut rt = daemon.cri().await.runtime();
    let filters = [
        None,
        Some(v1::ContainerFilter {
            pod_sandbox_id: pods[2][..12].to_string(),
            ..Default::default()
        }),
        Some(v1::ContainerFilter {
            label_selector: [("even".to_string(), "yes".to_string())].into(),
            ..Default::default()
        }),
        Some(v1::ContainerFilter {
            state: Some(v1::ContainerStateValue {
                state: v1::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }),
    ];
    let expected_counts = [PODS * PER_POD, PER_POD, PODS * PER_POD / 2, 0];
    for (filter, expected) in filters.into_iter().zip(expected_counts) {
        let unary = rt
            .list_containers(v1::ListContainersRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .containers;
        let stream = rt
            .stream_containers(v1::StreamContainersRequest { filter })
            .await
            .unwrap()
            .into_inner();
        let (sizes, streamed) = drain(stream, Duration::ZERO, |m| m.containers).await;
        assert_eq!(unary.len(), expected);
        assert_eq!(streamed, unary, "the same items, in the same order");
        let unique: BTreeSet<_> = streamed.iter().map(|c| &c.id).collect();
        assert_eq!(unique.len(), streamed.len(), "each item once");
        assert!(
            sizes.iter().all(|s| *s <= MAX_BATCH_BYTES + 16),
            "{sizes:?}"
        );
        if expected == PODS * PER_POD {
            assert!(sizes.len() >= 2, "2 MiB of containers in {sizes:?}");
        }
    }

    // A client that reads slowly still gets everything, once.
    let stream = rt
        .stream_containers(v1::StreamContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    let (_, slow) = drain(stream, Duration::from_millis(300), |m| m.containers).await;
    assert_eq!(slow.len(), PODS * PER_POD);

    let unary = rt
        .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    let stream = rt
        .stream_pod_sandboxes(v1::StreamPodSandboxesRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    let (_, streamed) = drain(stream, Duration::ZERO, |m| m.pod_sandboxes).await;
    assert_eq!(streamed, unary);
    assert_eq!(streamed.len(), PODS);

    // Stats and metrics change between two calls: the same objects.
    let unary = rt
        .list_container_stats(v1::ListContainerStatsRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .stats;
    let stream = rt
        .stream_container_stats(v1::StreamContainerStatsRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    let (_, streamed) = drain(stream, Duration::ZERO, |m| m.container_stats).await;
    let of = |s: &[v1::ContainerStats]| {
        ids(s
            .iter()
            .filter_map(|s| s.attributes.as_ref())
            .map(|a| &a.id))
    };
    assert_eq!(of(&streamed), of(&unary));
    assert_eq!(streamed.len(), PODS * PER_POD);

    let unary = rt
        .list_pod_sandbox_stats(v1::ListPodSandboxStatsRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .stats;
    let stream = rt
        .stream_pod_sandbox_stats(v1::StreamPodSandboxStatsRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    let (_, streamed) = drain(stream, Duration::ZERO, |m| m.pod_sandbox_stats).await;
    let of = |s: &[v1::PodSandboxStats]| {
        ids(s
            .iter()
            .filter_map(|s| s.attributes.as_ref())
            .map(|a| &a.id))
    };
    assert_eq!(of(&streamed), of(&unary));

    let unary = rt
        .list_pod_sandbox_metrics(v1::ListPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pod_metrics;
    let stream = rt
        .stream_pod_sandbox_metrics(v1::StreamPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner();
    let (_, streamed) = drain(stream, Duration::ZERO, |m| m.pod_sandbox_metrics).await;
    let of = |s: &[v1::PodSandboxMetrics]| ids(s.iter().map(|m| &m.pod_sandbox_id));
    assert_eq!(of(&streamed), of(&unary));

    let mut images = daemon.cri().await.images();
    let unary = images
        .list_images(v1::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .images;
    let stream = images
        .stream_images(v1::StreamImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    let (_, streamed) = drain(stream, Duration::ZERO, |m| m.images).await;
    assert_eq!(streamed, unary);
    assert!(!streamed.is_empty());

    for pod in pods {
        common::cri::remove_pod(&daemon, &pod).await;
    }
}
