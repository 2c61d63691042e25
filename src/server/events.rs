//! Container events (GetContainerEvents, whose handler is in
//! `get_container_events.rs`): every life-cycle change of a container or a
//! pod sandbox that the core reports ([`CoreEvents`], its `EventSink`)
//! becomes a `ContainerEventResponse` broadcast to every subscriber, as
//! kubelet's evented PLEG expects. Part of the CRI layer, as containerd
//! keeps it (`internal/cri/server/events.go`): the events carry encoded
//! statuses.
//!
//! Sandboxes are reported with their own id as the container id, as
//! containerd does. Every event carries the pod's status and the statuses of
//! its containers as they are when the event is sent.
//!
//! The runtime never waits for a subscriber: events go into a bounded
//! broadcast buffer, and a subscriber that falls behind by more than the
//! buffer loses its stream (it ends with `ResourceExhausted`, and the client
//! subscribes again and relists). Statuses are only built when someone
//! listens.

use berth_lock::MutexExt;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use cri_api::v1;
use tokio::sync::{broadcast, mpsc};
use tonic::Status;

use super::encode::Statuses;
use super::BoxStream;
use crate::core::mechanisms::{EventKind, EventSink};

/// Events kept for subscribers that are behind; more lost is a dropped subscriber.
const BUFFER: usize = 1024;

/// Events handed from a subscriber's forwarding task to its gRPC stream.
const STREAM_BUFFER: usize = 16;

/// The broadcast hub.
pub struct Events {
    tx: broadcast::Sender<v1::ContainerEventResponse>,
    /// Ids whose STOPPED event went out: exits are seen on several paths
    /// (the exit watcher, StopContainer, StopPodSandbox) but reported once.
    stopped: Mutex<HashSet<String>>,
    /// Held from the dedup check to the send, so that events go out in the
    /// order the changes were reported.
    order: tokio::sync::Mutex<()>,
}

impl Default for Events {
    fn default() -> Self {
        Events::new()
    }
}

impl Events {
    pub fn new() -> Events {
        Events {
            tx: broadcast::channel(BUFFER).0,
            stopped: Mutex::new(HashSet::new()),
            order: tokio::sync::Mutex::new(()),
        }
    }

    /// How many subscribers listen now.
    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Whether an event of `kind` about `id` should go out (each id is
    /// STOPPED once, until it is DELETED).
    fn first(&self, id: &str, kind: v1::ContainerEventType) -> bool {
        let mut stopped = self.stopped.lock_unpoisoned();
        match kind {
            v1::ContainerEventType::ContainerStoppedEvent => stopped.insert(id.to_string()),
            v1::ContainerEventType::ContainerDeletedEvent => {
                stopped.remove(id);
                true
            }
            _ => true,
        }
    }

    /// A new subscriber's stream: every event from now on, in order.
    pub fn subscribe(&self) -> BoxStream<v1::ContainerEventResponse> {
        let mut rx = self.tx.subscribe();
        let (tx, out) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    item = rx.recv() => item,
                    // The client went away while no event came.
                    _ = tx.closed() => return,
                };
                match item {
                    Ok(event) => {
                        // Waits while the client does not read; the broadcast
                        // buffer keeps filling meanwhile and nobody else waits.
                        if tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(
                            missed,
                            "dropping a container event subscriber that fell behind"
                        );
                        crate::counters::subscriber_dropped();
                        let _ = tx.try_send(Err(Status::resource_exhausted(format!(
                            "container event subscriber fell behind and missed {missed} events; subscribe again"
                        ))));
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(out))
    }
}

impl Events {
    /// Reports a change of container (or sandbox) `id` in pod `sandbox_id`,
    /// with the statuses as `statuses` has them now.
    pub async fn emit(
        &self,
        statuses: &Statuses,
        id: &str,
        sandbox_id: &str,
        kind: v1::ContainerEventType,
    ) {
        let _order = self.order.lock().await;
        if !self.first(id, kind) || self.subscribers() == 0 {
            return;
        }
        let event = v1::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or_default(),
            pod_sandbox_status: statuses.pod(sandbox_id),
            containers_statuses: statuses.pod_containers(sandbox_id),
        };
        // No subscriber left since the check: nobody to tell.
        let _ = self.tx.send(event);
    }
}

/// The core's [`EventSink`]: the hub, and the stores the events' statuses
/// are read from.
pub struct CoreEvents {
    pub hub: Arc<Events>,
    pub statuses: Statuses,
}

#[tonic::async_trait]
impl EventSink for CoreEvents {
    async fn emit(&self, kind: EventKind, id: &str, sandbox_id: &str) {
        let kind = match kind {
            EventKind::Created => v1::ContainerEventType::ContainerCreatedEvent,
            EventKind::Started => v1::ContainerEventType::ContainerStartedEvent,
            EventKind::Stopped => v1::ContainerEventType::ContainerStoppedEvent,
            EventKind::Deleted => v1::ContainerEventType::ContainerDeletedEvent,
        };
        self.hub.emit(&self.statuses, id, sandbox_id, kind).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    fn event(id: &str) -> v1::ContainerEventResponse {
        v1::ContainerEventResponse {
            container_id: id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn stopped_once_until_deleted() {
        let events = Events::new();
        let stopped = v1::ContainerEventType::ContainerStoppedEvent;
        assert!(events.first("a", v1::ContainerEventType::ContainerStartedEvent));
        assert!(events.first("a", stopped));
        assert!(!events.first("a", stopped));
        assert!(events.first("b", stopped));
        assert!(events.first("a", v1::ContainerEventType::ContainerDeletedEvent));
        assert!(events.first("a", stopped));
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_event_in_order() {
        let events = Events::new();
        let mut one = events.subscribe();
        let mut two = events.subscribe();
        assert_eq!(events.subscribers(), 2);
        for id in ["a", "b", "c"] {
            events.tx.send(event(id)).unwrap();
        }
        for stream in [&mut one, &mut two] {
            for id in ["a", "b", "c"] {
                assert_eq!(stream.next().await.unwrap().unwrap().container_id, id);
            }
        }
    }

    #[tokio::test]
    async fn a_stalled_subscriber_never_blocks_and_is_dropped() {
        let events = Events::new();
        let mut stalled = events.subscribe();
        let mut live = events.subscribe();
        let total = BUFFER + STREAM_BUFFER + 100;
        let started = std::time::Instant::now();
        for i in 0..total {
            // send never waits; the live subscriber keeps up.
            events.tx.send(event(&i.to_string())).unwrap();
            assert_eq!(
                live.next().await.unwrap().unwrap().container_id,
                i.to_string()
            );
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // The stalled one gets what its buffers held, then an error, then the end.
        let mut got = 0;
        let mut failed = None;
        while let Some(item) = stalled.next().await {
            match item {
                Ok(_) => got += 1,
                Err(status) => failed = Some(status),
            }
        }
        assert!(got < total, "{got}");
        let status = failed.expect("an error ends the stream");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    }

    #[tokio::test]
    async fn closing_the_stream_unsubscribes() {
        let events = Events::new();
        let stream = events.subscribe();
        assert_eq!(events.subscribers(), 1);
        drop(stream);
        for _ in 0..100 {
            if events.subscribers() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the forwarding task kept its subscription");
    }
}
