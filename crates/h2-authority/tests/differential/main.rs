//! Differential tests of the rewriter (issue #25): random header lists,
//! encoded by a real HPACK encoder, framed and interleaved at random, go
//! through the rewriter in pieces of random sizes; both sides are decoded
//! again and compared: every field equal and in order (never-indexed ones
//! still never-indexed) but an `:authority` the server would refuse, which
//! is the replacement; END_STREAM, END_HEADERS, stream ids and priority
//! fields kept; every other frame (DATA above all) byte for byte; the
//! rewriter's HPACK within the server's SETTINGS_HEADER_TABLE_SIZE.
//!
//! `encoder` drives the `Rewriter` directly with loona-hpack's encoder and
//! representations written here; `h2` puts an `AuthorityFix` between a real
//! h2 client and a real h2 server. Seeded: `BERTH_DIFF_SEED` and
//! `BERTH_DIFF_ROUNDS` replay or widen a run; a failing round prints its
//! number.

mod encoder;
mod h2;
mod headers;
mod rng;
mod wire;

/// What every run must have gone through, or it proves little.
fn assert_covered(tally: &wire::Tally, rounds: usize) {
    if rounds < 20 {
        return;
    }
    assert!(tally.transparent > 0, "{tally:?}");
    assert!(tally.blocks > rounds, "{tally:?}");
    assert!(tally.never_indexed > 0, "{tally:?}");
    assert!(tally.multi_frame_out > 0, "{tally:?}");
    assert!(tally.client_updates > 0, "{tally:?}");
    assert!(tally.data_frames > 0 && tally.other_frames > 0, "{tally:?}");
    assert!(tally.server_table_sizes.len() > 3, "{tally:?}");
}
