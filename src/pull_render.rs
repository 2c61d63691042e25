//! What `berth images pull` shows of the daemon's progress messages
//! (`berth.admin.v1.Images/Pull`): a bar per layer on a terminal
//! ([`Bars`], indicatif), one line per finished layer otherwise
//! ([`Lines`]). Both are fed the messages in order and know nothing of
//! gRPC or of stdout, so that they are tested alone.

use cri_api::admin::pull_progress::Event;
use cri_api::admin::{LayerState, PullDone, PullProgress, PullResolved};
use indicatif::{HumanBytes, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// `sha256:0123456789ab`: the digest's algorithm and 12 hex digits.
pub fn short_digest(digest: &str) -> &str {
    let end = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..end).unwrap_or(digest)
}

/// How a finished layer is told, or `None` while it is not finished.
fn done_word(state: LayerState) -> Option<&'static str> {
    match state {
        LayerState::Pulled => Some("pulled"),
        LayerState::Unpacked => Some("unpacked from the stored blob"),
        LayerState::AlreadyPresent => Some("already present"),
        _ => None,
    }
}

fn resolved_line(r: &PullResolved) -> String {
    let total: u64 = r.layers.iter().map(|l| l.size).sum();
    let n = r.layers.len();
    format!(
        "resolved {} to {}: {n} layer{}, {}",
        r.reference,
        r.digest,
        if n == 1 { "" } else { "s" },
        HumanBytes(total)
    )
}

fn done_lines(d: &PullDone) -> [String; 2] {
    [
        format!("image {}", d.image_id),
        format!("reference {}", d.repo_digest),
    ]
}

/// The plain output: one line when the image is resolved, one per layer
/// when it is finished (`layer sha256:0123456789ab 1.20 MiB pulled`), then
/// the image id and the reference with its digest.
#[derive(Debug, Default)]
pub struct Lines {
    /// (digest, size, told) per layer.
    layers: Vec<(String, u64, bool)>,
}

impl Lines {
    /// The lines `msg` adds.
    pub fn feed(&mut self, msg: &PullProgress) -> Vec<String> {
        match &msg.event {
            Some(Event::Resolved(r)) => {
                self.layers = r
                    .layers
                    .iter()
                    .map(|l| (l.digest.clone(), l.size, false))
                    .collect();
                vec![resolved_line(r)]
            }
            Some(Event::Layer(l)) => {
                let word = done_word(l.state());
                match (word, self.layers.get_mut(l.index as usize)) {
                    (Some(word), Some((digest, size, told))) if !*told => {
                        *told = true;
                        vec![format!(
                            "layer {} {} {word}",
                            short_digest(digest),
                            HumanBytes(*size)
                        )]
                    }
                    _ => Vec::new(),
                }
            }
            Some(Event::Pulled(d)) => done_lines(d).into(),
            None => Vec::new(),
        }
    }
}

/// The terminal output: a bar per layer (its digest, bytes received of
/// its size), ending with what became of it; then the image id and the
/// reference with its digest.
pub struct Bars {
    multi: MultiProgress,
    bars: Vec<ProgressBar>,
}

impl Bars {
    /// Bars drawn on `target` (stdout for the command).
    pub fn new(target: ProgressDrawTarget) -> Bars {
        Bars {
            multi: MultiProgress::with_draw_target(target),
            bars: Vec::new(),
        }
    }

    /// The bar of layer `index`, if there is one.
    #[cfg(test)]
    fn bar(&self, index: usize) -> Option<&ProgressBar> {
        self.bars.get(index)
    }

    /// Draws `msg`; returns the lines to print after the bars (at the end).
    pub fn feed(&mut self, msg: &PullProgress) -> Vec<String> {
        match &msg.event {
            Some(Event::Resolved(r)) => {
                let _ = self.multi.println(resolved_line(r));
                let style = ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {bytes:>10} / {total_bytes:<10} {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> ");
                for l in &r.layers {
                    let bar = self.multi.add(ProgressBar::new(l.size));
                    bar.set_style(style.clone());
                    bar.set_prefix(format!("layer {}", short_digest(&l.digest)));
                    bar.set_message("waiting");
                    self.bars.push(bar);
                }
                Vec::new()
            }
            Some(Event::Layer(l)) => {
                if let Some(bar) = self.bars.get(l.index as usize) {
                    if bar.is_finished() {
                        return Vec::new();
                    }
                    let state = l.state();
                    if let Some(word) = done_word(state) {
                        bar.set_position(bar.length().unwrap_or(0));
                        bar.finish_with_message(word);
                    } else {
                        bar.set_position(l.received);
                        bar.set_message(match state {
                            LayerState::Downloaded => "unpacking",
                            LayerState::Waiting => "waiting",
                            _ => "downloading",
                        });
                    }
                }
                Vec::new()
            }
            Some(Event::Pulled(d)) => {
                for bar in &self.bars {
                    if !bar.is_finished() {
                        bar.finish();
                    }
                }
                done_lines(d).into()
            }
            None => Vec::new(),
        }
    }
}

/// Bars or lines.
pub enum Render {
    Bars(Bars),
    Lines(Lines),
}

impl Render {
    /// Draws `msg`; returns the lines to print.
    pub fn feed(&mut self, msg: &PullProgress) -> Vec<String> {
        match self {
            Render::Bars(b) => b.feed(msg),
            Render::Lines(l) => l.feed(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::admin::{LayerProgress, PullLayer};

    fn resolved() -> PullProgress {
        PullProgress {
            event: Some(Event::Resolved(PullResolved {
                reference: "example.com/a:1".into(),
                digest: "sha256:".to_string() + &"d".repeat(64),
                image_id: "sha256:".to_string() + &"c".repeat(64),
                layers: vec![
                    PullLayer {
                        digest: "sha256:".to_string() + &"0".repeat(64),
                        size: 2048,
                    },
                    PullLayer {
                        digest: "sha256:".to_string() + &"1".repeat(64),
                        size: 1 << 20,
                    },
                ],
            })),
        }
    }

    fn layer(index: u32, received: u64, state: LayerState) -> PullProgress {
        PullProgress {
            event: Some(Event::Layer(LayerProgress {
                index,
                received,
                state: state.into(),
            })),
        }
    }

    fn pulled() -> PullProgress {
        PullProgress {
            event: Some(Event::Pulled(PullDone {
                image_id: "sha256:".to_string() + &"c".repeat(64),
                repo_digest: "example.com/a@sha256:".to_string() + &"d".repeat(64),
                repo_tags: vec!["example.com/a:1".into()],
                size: 3,
            })),
        }
    }

    #[test]
    fn short_digests() {
        assert_eq!(
            short_digest(&("sha256:".to_string() + &"ab".repeat(32))),
            "sha256:abababababab"
        );
        assert_eq!(short_digest("sha256:abc"), "sha256:abc");
        assert_eq!(short_digest("x"), "x");
    }

    /// One line per layer, once, when it is finished; none for byte counts.
    #[test]
    fn lines_tell_each_layer_once_when_finished() {
        let mut r = Lines::default();
        let mut out = Vec::new();
        for msg in [
            resolved(),
            layer(1, 10, LayerState::Downloading),
            layer(1, 500, LayerState::Downloading),
            layer(0, 0, LayerState::AlreadyPresent),
            layer(1, 1 << 20, LayerState::Downloaded),
            layer(1, 1 << 20, LayerState::Pulled),
            layer(1, 1 << 20, LayerState::Pulled),
            layer(7, 0, LayerState::Pulled),
            pulled(),
        ] {
            out.extend(r.feed(&msg));
        }
        let d = "d".repeat(64);
        assert_eq!(
            out,
            vec![
                format!("resolved example.com/a:1 to sha256:{d}: 2 layers, 1.00 MiB"),
                "layer sha256:000000000000 2.00 KiB already present".to_string(),
                "layer sha256:111111111111 1.00 MiB pulled".to_string(),
                format!("image sha256:{}", "c".repeat(64)),
                format!("reference example.com/a@sha256:{d}"),
            ]
        );
    }

    /// The bars follow the bytes, and end with what became of the layer.
    #[test]
    fn bars_follow_bytes_and_end_with_the_layers_fate() {
        let mut b = Bars::new(ProgressDrawTarget::hidden());
        assert!(b.feed(&resolved()).is_empty());
        assert_eq!(b.bar(1).unwrap().length(), Some(1 << 20));
        assert!(b.feed(&layer(1, 4096, LayerState::Downloading)).is_empty());
        assert_eq!(b.bar(1).unwrap().position(), 4096);
        assert_eq!(b.bar(1).unwrap().message(), "downloading");
        b.feed(&layer(0, 0, LayerState::AlreadyPresent));
        assert!(b.bar(0).unwrap().is_finished());
        assert_eq!(b.bar(0).unwrap().message(), "already present");
        assert_eq!(b.bar(0).unwrap().position(), 2048);
        b.feed(&layer(1, 1 << 20, LayerState::Pulled));
        assert_eq!(b.bar(1).unwrap().message(), "pulled");
        // A late byte count does not move a finished bar.
        b.feed(&layer(1, 5, LayerState::Downloading));
        assert_eq!(b.bar(1).unwrap().position(), 1 << 20);
        let end = b.feed(&pulled());
        assert_eq!(end.len(), 2);
        assert!(end[0].starts_with("image sha256:"));
    }
}
