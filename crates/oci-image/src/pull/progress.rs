//! What a pull is doing, for whoever watches it (`berth images pull`).
//!
//! A pull keeps one small [`PullState`] (the image, its layers with their
//! sizes, bytes received and state) in a `tokio::sync::watch` channel, and
//! each watcher turns the changes it sees into [`PullEvent`]s. The channel
//! holds one state, not a queue: a watcher that reads slowly, or never,
//! costs the pull nothing and holds no more than the one state; it skips the
//! byte counts it missed and still gets every layer's end, since a state
//! only moves forward. A watcher that joins a pull under way (a second
//! caller of the same image) gets the state so far, then the rest.
//!
//! Byte counts are published at most every [`BYTES_EVERY`] per layer, so
//! watching costs the download a lock and a wake-up per layer ten times a
//! second, not one per chunk.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How often a layer's byte count is published while it downloads.
pub const BYTES_EVERY: Duration = Duration::from_millis(100);

/// Where one layer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LayerState {
    /// Not started (waiting for a download slot, or for another pull of the
    /// same layer).
    Waiting,
    /// Bytes arriving.
    Downloading,
    /// Every byte arrived; the unpack is finishing.
    Downloaded,
    /// Downloaded and unpacked by this pull.
    Pulled,
    /// Its blob was stored already: unpacked from it, nothing downloaded.
    Unpacked,
    /// Its snapshot was there already: nothing to do.
    AlreadyPresent,
}

impl LayerState {
    /// Whether the layer is finished.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            LayerState::Pulled | LayerState::Unpacked | LayerState::AlreadyPresent
        )
    }
}

/// One layer of the image being pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerProgress {
    /// Digest of the compressed blob, from the manifest.
    pub digest: String,
    /// Its size, from the manifest.
    pub size: u64,
    /// Bytes received so far (at most [`BYTES_EVERY`] old while downloading).
    pub received: u64,
    pub state: LayerState,
}

/// The image a pull resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// The reference, normalised (`docker.io/library/busybox:latest`).
    pub reference: String,
    /// Digest of the document the reference names (index or manifest).
    pub digest: String,
    /// The image id (digest of its config).
    pub id: String,
}

/// Everything known about one pull.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullState {
    /// Set once the manifest and the config are fetched.
    pub image: Option<ResolvedImage>,
    /// The layers, bottom first (empty until `image` is set).
    pub layers: Vec<LayerProgress>,
    /// The pull ended (the image is recorded, or the pull failed).
    pub ended: bool,
}

/// What a watcher is told, in order: `Resolved` once, then per layer any
/// number of `Bytes` and one `Layer` for each change of state (the last
/// one done), then `Ended` once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullEvent {
    Resolved {
        image: ResolvedImage,
        /// (digest, size) of each layer, bottom first.
        layers: Vec<(String, u64)>,
    },
    /// Bytes received of layer `index`.
    Bytes {
        index: usize,
        received: u64,
        size: u64,
    },
    /// Layer `index` changed state.
    Layer {
        index: usize,
        digest: String,
        size: u64,
        state: LayerState,
    },
    /// The pull ended; its outcome is the pull's result.
    Ended,
}

/// The pull's side: publishes its state.
#[derive(Debug)]
pub(crate) struct Reporter {
    tx: watch::Sender<PullState>,
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter {
            tx: watch::Sender::new(PullState::default()),
        }
    }
}

impl Reporter {
    /// A new watcher of this pull, from the state it is in.
    pub(crate) fn watch(&self) -> PullWatcher {
        PullWatcher::new(self.tx.subscribe())
    }

    /// The manifest and config are in: the image and its layers.
    pub(crate) fn resolved(&self, image: ResolvedImage, layers: Vec<(String, u64)>) {
        self.tx.send_modify(|s| {
            s.image = Some(image);
            s.layers = layers
                .into_iter()
                .map(|(digest, size)| LayerProgress {
                    digest,
                    size,
                    received: 0,
                    state: LayerState::Waiting,
                })
                .collect();
        });
    }

    /// Layer `index` moved to `state` (never backwards).
    pub(crate) fn layer(&self, index: usize, state: LayerState) {
        self.tx.send_if_modified(|s| match s.layers.get_mut(index) {
            Some(l) if state > l.state => {
                l.state = state;
                if state == LayerState::Downloaded || state == LayerState::Pulled {
                    l.received = l.size;
                }
                true
            }
            _ => false,
        });
    }

    /// `received` bytes of layer `index` arrived (the caller throttles).
    pub(crate) fn bytes(&self, index: usize, received: u64) {
        self.tx.send_if_modified(|s| match s.layers.get_mut(index) {
            Some(l) if received > l.received && !l.state.is_done() => {
                l.received = received;
                if l.state < LayerState::Downloading {
                    l.state = LayerState::Downloading;
                }
                true
            }
            _ => false,
        });
    }

    /// The pull ended (either way).
    pub(crate) fn ended(&self) {
        self.tx.send_modify(|s| s.ended = true);
    }
}

/// Throttles one layer's byte counts to one per [`BYTES_EVERY`].
pub(crate) struct ByteTicker {
    last: Option<Instant>,
}

impl ByteTicker {
    pub(crate) fn new() -> ByteTicker {
        ByteTicker { last: None }
    }

    /// Whether to publish now.
    pub(crate) fn due(&mut self) -> bool {
        let now = Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < BYTES_EVERY => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

/// A watcher's side: the events between the states it has seen.
#[derive(Debug)]
pub struct PullWatcher {
    rx: watch::Receiver<PullState>,
    /// What was told already.
    told: PullState,
    /// Events of the last state seen, not handed out yet (at most two per
    /// layer and two more).
    pending: VecDeque<PullEvent>,
    done: bool,
}

impl PullWatcher {
    fn new(mut rx: watch::Receiver<PullState>) -> PullWatcher {
        rx.mark_changed();
        PullWatcher {
            rx,
            told: PullState::default(),
            pending: VecDeque::new(),
            done: false,
        }
    }

    /// The next event; `None` after [`PullEvent::Ended`] (or when the pull
    /// went away without ending, which it does not).
    pub async fn next(&mut self) -> Option<PullEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            if self.rx.changed().await.is_err() {
                // The pull is gone: what it left is all there is.
                let state = self.rx.borrow().clone();
                self.diff(&state);
                if !state.ended {
                    self.pending.push_back(PullEvent::Ended);
                }
                self.done = true;
                continue;
            }
            let state = self.rx.borrow_and_update().clone();
            self.diff(&state);
        }
    }

    /// Queues the events from what was told to `state`.
    fn diff(&mut self, state: &PullState) {
        if self.told.image.is_none() {
            if let Some(image) = &state.image {
                self.pending.push_back(PullEvent::Resolved {
                    image: image.clone(),
                    layers: state
                        .layers
                        .iter()
                        .map(|l| (l.digest.clone(), l.size))
                        .collect(),
                });
                self.told.image = Some(image.clone());
                self.told.layers = state
                    .layers
                    .iter()
                    .map(|l| LayerProgress {
                        received: 0,
                        state: LayerState::Waiting,
                        ..l.clone()
                    })
                    .collect();
            }
        }
        for (index, (told, now)) in self.told.layers.iter_mut().zip(&state.layers).enumerate() {
            if now.received > told.received && now.state == LayerState::Downloading {
                self.pending.push_back(PullEvent::Bytes {
                    index,
                    received: now.received,
                    size: now.size,
                });
            }
            told.received = now.received;
            if now.state != told.state {
                self.pending.push_back(PullEvent::Layer {
                    index,
                    digest: now.digest.clone(),
                    size: now.size,
                    state: now.state,
                });
                told.state = now.state;
            }
        }
        if state.ended && !self.told.ended {
            self.pending.push_back(PullEvent::Ended);
            self.told.ended = true;
            self.done = true;
        }
    }

    /// Events waiting to be handed out (for the bound's test).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> ResolvedImage {
        ResolvedImage {
            reference: "example.com/a:1".into(),
            digest: "sha256:m".into(),
            id: "sha256:i".into(),
        }
    }

    async fn drain(w: &mut PullWatcher) -> Vec<PullEvent> {
        let mut out = Vec::new();
        while let Some(e) = w.next().await {
            out.push(e);
        }
        out
    }

    /// A watcher that never reads while a pull of 50 layers sends a
    /// million byte counts holds one state; read at the end, it gets the
    /// image, every layer's end, in order, and the end, and no more than
    /// one byte count a layer.
    #[tokio::test]
    async fn a_watcher_that_never_reads_holds_one_state_and_misses_no_end() {
        let reporter = Reporter::default();
        let mut w = reporter.watch();
        let layers: Vec<(String, u64)> = (0..50)
            .map(|i| (format!("sha256:{i}"), 1_000_000))
            .collect();
        reporter.resolved(image(), layers.clone());
        for i in 0..50 {
            for b in 0..20_000u64 {
                reporter.bytes(i, b * 50);
            }
            // Half end while the watcher sleeps mid-download: their bytes
            // are never told, their end is.
            if i % 2 == 0 {
                reporter.layer(i, LayerState::Downloaded);
                reporter.layer(i, LayerState::Pulled);
            }
        }
        assert_eq!(
            w.queued(),
            0,
            "nothing is queued for a watcher that does not read"
        );
        // Read the state so far: one Bytes per unfinished layer at most.
        let first = w.next().await.unwrap();
        assert_eq!(
            first,
            PullEvent::Resolved {
                image: image(),
                layers
            }
        );
        assert!(w.queued() <= 2 * 50 + 1, "{}", w.queued());
        for i in (1..50).step_by(2) {
            reporter.layer(i, LayerState::AlreadyPresent);
        }
        reporter.ended();
        drop(reporter);
        let rest = drain(&mut w).await;
        let bytes = rest
            .iter()
            .filter(|e| matches!(e, PullEvent::Bytes { .. }))
            .count();
        assert!(bytes <= 25, "{bytes} byte counts");
        let mut ends: Vec<(usize, LayerState)> = rest
            .iter()
            .filter_map(|e| match e {
                PullEvent::Layer { index, state, .. } if state.is_done() => Some((*index, *state)),
                _ => None,
            })
            .collect();
        ends.sort();
        let want: Vec<(usize, LayerState)> = (0..50)
            .map(|i| {
                let s = if i % 2 == 0 {
                    LayerState::Pulled
                } else {
                    LayerState::AlreadyPresent
                };
                (i, s)
            })
            .collect();
        assert_eq!(ends, want);
        assert_eq!(rest.last(), Some(&PullEvent::Ended));
    }

    /// A watcher reading along sees bytes grow, then the end of each layer.
    #[tokio::test]
    async fn a_watcher_reading_along_sees_each_step() {
        let reporter = Reporter::default();
        let mut w = reporter.watch();
        reporter.resolved(image(), vec![("sha256:a".into(), 10)]);
        assert!(matches!(w.next().await, Some(PullEvent::Resolved { .. })));
        reporter.bytes(0, 4);
        assert_eq!(
            w.next().await,
            Some(PullEvent::Bytes {
                index: 0,
                received: 4,
                size: 10
            })
        );
        assert!(matches!(
            w.next().await,
            Some(PullEvent::Layer {
                state: LayerState::Downloading,
                ..
            })
        ));
        reporter.layer(0, LayerState::Pulled);
        // Never backwards.
        reporter.layer(0, LayerState::Downloading);
        reporter.bytes(0, 5);
        reporter.ended();
        assert_eq!(
            drain(&mut w).await,
            vec![
                PullEvent::Layer {
                    index: 0,
                    digest: "sha256:a".into(),
                    size: 10,
                    state: LayerState::Pulled
                },
                PullEvent::Ended
            ]
        );
    }

    /// A pull that goes away without saying it ended still ends its
    /// watchers.
    #[tokio::test]
    async fn a_dropped_pull_ends_its_watchers() {
        let reporter = Reporter::default();
        let mut w = reporter.watch();
        drop(reporter);
        assert_eq!(drain(&mut w).await, vec![PullEvent::Ended]);
    }

    #[test]
    fn the_ticker_lets_one_through_per_period() {
        let mut t = ByteTicker::new();
        assert!(t.due());
        assert!(!t.due());
        std::thread::sleep(BYTES_EVERY);
        assert!(t.due());
    }
}
