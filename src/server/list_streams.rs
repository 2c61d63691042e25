//! The list-streaming RPCs of cri-api v0.36 (KEP-5825, kubelet's feature
//! gate `CRIListStreaming`): `StreamPodSandboxes`, `StreamContainers`,
//! `StreamContainerStats`, `StreamPodSandboxStats`, `StreamPodSandboxMetrics`
//! and `StreamImages`.
//!
//! Each one runs its unary twin (the same filters, the same items in the
//! same order: one code path; for pods and containers, the twins' shared
//! selection, `select_sandboxes` and `select_containers`, whose items are
//! encoded here as messages) and sends the answer in batches. Every error
//! happens before the stream is handed back, so a stream that has sent an
//! item never ends in an error: it ends with EOF once every item was sent
//! exactly once (kubelet throws away a stream that fails midway, and only
//! falls back to the unary call on `Unimplemented`). A client that reads
//! slowly is paced by HTTP/2 flow control: batches are handed to the
//! transport one at a time as it takes them.
//!
//! Batches are bounded by size, not count: a message carries at most
//! [`MAX_BATCH_BYTES`] of encoded items (or one item, when that item alone
//! is larger: it came in a request under the 16 MiB gRPC limit). containerd
//! sends up to 5,000 items a message, which bounds nothing (5,000 pods with
//! large annotations exceed kubelet's 16 MiB receive limit); CRI-O sends one
//! item a message, which pays a gRPC frame per item. A byte bound keeps every
//! message far under the kubelet's limit whatever the node holds, with about
//! a thousand typical containers per message.

use cri_api::v1;
use prost::Message;

use super::{BoxStream, Cri};
use crate::error::Error;

/// The most encoded item bytes one stream message carries.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// The bytes `item` takes in a message's repeated field: its tag (field
/// numbers below 16 take one byte), its length, and itself.
fn field_len<T: Message>(item: &T) -> usize {
    let len = item.encoded_len();
    1 + prost::length_delimiter_len(len) + len
}

/// `items` in order, cut into batches of at most `max_bytes` encoded bytes
/// each (an item larger than that alone in its batch).
pub fn batches<T: Message>(items: Vec<T>, max_bytes: usize) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0;
    for item in items {
        let len = field_len(&item);
        if !batch.is_empty() && bytes + len > max_bytes {
            out.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += len;
        batch.push(item);
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// A stream of `items` in [`batches`], each wrapped by `wrap`.
fn stream_of<T, R>(items: Vec<T>, wrap: fn(Vec<T>) -> R) -> BoxStream<R>
where
    T: Message + Send + 'static,
    R: Send + 'static,
{
    let batches = batches(items, MAX_BATCH_BYTES);
    Box::pin(tokio_stream::iter(
        batches.into_iter().map(move |b| Ok(wrap(b))),
    ))
}

impl Cri {
    pub async fn stream_pod_sandboxes(
        &self,
        req: v1::StreamPodSandboxesRequest,
    ) -> Result<BoxStream<v1::StreamPodSandboxesResponse>, Error> {
        let items = self
            .select_sandboxes(&req.filter.unwrap_or_default())
            .iter()
            .map(|(s, state)| super::encode::sandbox(&s.meta, *state))
            .collect();
        Ok(stream_of(items, |pod_sandboxes| {
            v1::StreamPodSandboxesResponse { pod_sandboxes }
        }))
    }

    pub async fn stream_containers(
        &self,
        req: v1::StreamContainersRequest,
    ) -> Result<BoxStream<v1::StreamContainersResponse>, Error> {
        let containers = self
            .select_containers(&req.filter.unwrap_or_default())
            .iter()
            .map(|(c, state)| super::encode::container(&c.meta, *state))
            .collect();
        Ok(stream_of(containers, |containers| {
            v1::StreamContainersResponse { containers }
        }))
    }

    pub async fn stream_container_stats(
        self: &std::sync::Arc<Self>,
        req: v1::StreamContainerStatsRequest,
    ) -> Result<BoxStream<v1::StreamContainerStatsResponse>, Error> {
        let listed = self
            .list_container_stats(v1::ListContainerStatsRequest { filter: req.filter })
            .await?;
        Ok(stream_of(listed.stats, |container_stats| {
            v1::StreamContainerStatsResponse { container_stats }
        }))
    }

    pub async fn stream_pod_sandbox_stats(
        self: &std::sync::Arc<Self>,
        req: v1::StreamPodSandboxStatsRequest,
    ) -> Result<BoxStream<v1::StreamPodSandboxStatsResponse>, Error> {
        let listed = self
            .list_pod_sandbox_stats(v1::ListPodSandboxStatsRequest { filter: req.filter })
            .await?;
        Ok(stream_of(listed.stats, |pod_sandbox_stats| {
            v1::StreamPodSandboxStatsResponse { pod_sandbox_stats }
        }))
    }

    pub async fn stream_pod_sandbox_metrics(
        self: &std::sync::Arc<Self>,
        _req: v1::StreamPodSandboxMetricsRequest,
    ) -> Result<BoxStream<v1::StreamPodSandboxMetricsResponse>, Error> {
        let listed = self
            .list_pod_sandbox_metrics(v1::ListPodSandboxMetricsRequest {})
            .await?;
        Ok(stream_of(listed.pod_metrics, |pod_sandbox_metrics| {
            v1::StreamPodSandboxMetricsResponse {
                pod_sandbox_metrics,
            }
        }))
    }

    pub async fn stream_images(
        &self,
        req: v1::StreamImagesRequest,
    ) -> Result<BoxStream<v1::StreamImagesResponse>, Error> {
        let listed = self
            .list_images(v1::ListImagesRequest { filter: req.filter })
            .await?;
        Ok(stream_of(listed.images, |images| {
            v1::StreamImagesResponse { images }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(n: usize, annotation: usize) -> v1::Container {
        v1::Container {
            id: format!("{n:064x}"),
            pod_sandbox_id: "p".repeat(64),
            annotations: [("a".to_string(), "x".repeat(annotation))].into(),
            created_at: n as i64,
            ..Default::default()
        }
    }

    /// Every item exactly once, in order, and no message over the bound.
    fn check(items: Vec<v1::Container>, max: usize) -> Vec<Vec<v1::Container>> {
        let expected = items.clone();
        let out = batches(items, max);
        let flat: Vec<_> = out.iter().flatten().cloned().collect();
        assert_eq!(flat, expected);
        for batch in &out {
            assert!(!batch.is_empty());
            let message = v1::StreamContainersResponse {
                containers: batch.clone(),
            };
            assert!(
                message.encoded_len() <= max || batch.len() == 1,
                "{} bytes in {} items",
                message.encoded_len(),
                batch.len()
            );
        }
        out
    }

    #[test]
    fn thousands_of_items_each_once_in_bounded_messages() {
        let items: Vec<_> = (0..20_000).map(|n| container(n, n % 700)).collect();
        let out = check(items, MAX_BATCH_BYTES);
        assert!(out.len() > 1, "{}", out.len());
        // Full batches are close to the bound, not a few items each.
        let message = v1::StreamContainersResponse {
            containers: out[0].clone(),
        };
        assert!(message.encoded_len() > MAX_BATCH_BYTES * 9 / 10);
    }

    #[test]
    fn an_item_larger_than_the_bound_goes_alone_and_nothing_is_lost() {
        let items = vec![
            container(1, 10),
            container(2, 5000),
            container(3, 10),
            container(4, 10),
        ];
        let out = check(items, 2048);
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1, 2]);
    }

    #[test]
    fn nothing_to_send_is_an_empty_stream() {
        assert!(batches(Vec::<v1::Container>::new(), MAX_BATCH_BYTES).is_empty());
        assert_eq!(check(vec![container(0, 0)], 1).len(), 1);
    }

    #[test]
    fn the_field_length_is_what_the_message_adds() {
        for n in [0, 1, 100, 200, 20_000] {
            let c = container(1, n);
            let one = v1::StreamContainersResponse {
                containers: vec![c.clone()],
            };
            assert_eq!(field_len(&c), one.encoded_len());
        }
    }
}
