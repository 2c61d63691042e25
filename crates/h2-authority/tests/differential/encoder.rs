//! The encoder-level rounds: random header lists encoded by loona-hpack's
//! encoder (indexing, indexed names, dynamic-table hits and evictions), with
//! the representations it never writes added here (literals without
//! indexing, never-indexed literals, dynamic table size updates, one or two
//! at the start of a block); framed with random CONTINUATION splits,
//! padding and priority fields; interleaved with DATA and other frames on
//! several streams; the server's SETTINGS (with a random header table size)
//! shown to the rewriter at random points, the client following them and
//! acknowledging them later. The bytes go through a `Rewriter` in chunks of
//! random sizes (some delivered straight, as `AuthorityFix` does with
//! payloads) and the oracle compares both sides.

use berth_h2_authority::{Rewriter, MAX_HEADER_TABLE_SIZE, PREFACE};
use loona_hpack::encoder::encode_integer_into;

use crate::headers::{self, Fields};
use crate::rng::Rng;
use crate::wire::TYPE_SETTINGS;
use crate::wire::{self, frame, Tally, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED};
use crate::wire::{FLAG_ACK, FLAG_PRIORITY, TYPE_CONTINUATION, TYPE_DATA, TYPE_HEADERS};

/// Largest frame payload the client writes (the server's default
/// SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: usize = 16_384;

/// Table sizes the server sets, around the edges that matter.
const SERVER_TABLE_SIZES: [usize; 12] = [
    0,
    1,
    31,
    64,
    100,
    1000,
    4095,
    4096,
    4097,
    8192,
    65_536,
    MAX_HEADER_TABLE_SIZE,
];

/// The client's HPACK encoder.
struct Client {
    encoder: loona_hpack::Encoder<'static>,
    /// Its table size, as signalled.
    table: usize,
    /// The largest table the server allows, as far as the client read.
    allowed: usize,
}

impl Client {
    fn new() -> Client {
        Client {
            encoder: loona_hpack::Encoder::new(),
            table: 4096,
            allowed: 4096,
        }
    }

    /// Size updates (when the table no longer fits, or at random), then
    /// every field in a representation drawn at random.
    fn encode(&mut self, rng: &mut Rng, fields: &Fields) -> Vec<u8> {
        let mut out = Vec::new();
        let mut updates = Vec::new();
        if self.table > self.allowed || rng.chance(12) {
            if rng.chance(25) {
                updates.push(rng.range(0, self.allowed.min(200)));
            }
            let size = if rng.chance(50) {
                self.allowed
            } else {
                rng.range(0, self.allowed)
            };
            updates.push(size);
        }
        for size in updates {
            let _ = encode_integer_into(size, 5, 0x20, &mut out);
            self.encoder.set_max_table_size(size);
            self.table = size;
        }
        for (name, value, sensitive) in fields {
            let first = if *sensitive {
                0x10
            } else if rng.chance(15) {
                0x00
            } else {
                let _ = self.encoder.encode_header_into((name, value), &mut out);
                continue;
            };
            // A literal that touches no table, its name from the static
            // table when it is there.
            match headers::static_name(name) {
                Some(index) if rng.chance(70) => {
                    let _ = encode_integer_into(index, 4, first, &mut out);
                }
                _ => {
                    out.push(first);
                    string(name, &mut out);
                }
            }
            string(value, &mut out);
        }
        out
    }
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    let _ = encode_integer_into(s.len(), 7, 0, out);
    out.extend_from_slice(s);
}

/// A header block as HEADERS and CONTINUATION frames cut at random, with
/// padding and priority at random.
fn frame_block(rng: &mut Rng, stream: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
    let mut prefix = Vec::new();
    let mut flags = if end_stream { FLAG_END_STREAM } else { 0 };
    let mut pad = 0;
    if rng.chance(20) {
        flags |= FLAG_PADDED;
        pad = rng.range(0, 255);
        prefix.push(pad as u8);
    }
    if rng.chance(20) {
        flags |= FLAG_PRIORITY;
        prefix.extend(rng.bytes(5));
    }
    // The fragments: the first in the HEADERS frame, CONTINUATION frames
    // for the rest (some of them empty).
    let room = MAX_FRAME - prefix.len() - pad;
    let first = if rng.chance(60) {
        block.len().min(room)
    } else {
        rng.range(0, block.len().min(room))
    };
    let (first, mut rest) = block.split_at(first);
    let mut fragments = vec![first];
    while !rest.is_empty() {
        let n = if rng.chance(50) {
            rest.len().min(MAX_FRAME)
        } else {
            rng.range(0, rest.len().min(MAX_FRAME))
        };
        let (chunk, tail) = rest.split_at(n);
        fragments.push(chunk);
        rest = tail;
    }
    if rng.chance(5) {
        fragments.push(&[]);
    }
    if fragments.len() == 1 {
        flags |= FLAG_END_HEADERS;
    }
    let mut payload = prefix;
    payload.extend_from_slice(fragments[0]);
    payload.extend(std::iter::repeat_n(0, pad));
    let mut out = frame(TYPE_HEADERS, flags, stream, &payload);
    for (i, fragment) in fragments.iter().enumerate().skip(1) {
        let last = i + 1 == fragments.len();
        let flags = if last { FLAG_END_HEADERS } else { 0 };
        out.extend(frame(TYPE_CONTINUATION, flags, stream, fragment));
    }
    out
}

/// A frame that is no header block: DATA on an open stream, or another
/// type (the rewriter passes any of them as they are).
fn other_frame(rng: &mut Rng, open: &mut Vec<u32>) -> Vec<u8> {
    let stream = if open.is_empty() { 1 } else { *rng.pick(open) };
    match rng.below(8) {
        0..=3 => {
            let len = if rng.chance(80) {
                rng.size(2000)
            } else {
                rng.range(0, MAX_FRAME)
            };
            let end = rng.chance(20);
            if end {
                open.retain(|&s| s != stream);
            }
            let mut payload = rng.bytes(len);
            let mut flags = if end { FLAG_END_STREAM } else { 0 };
            if rng.chance(10) && !payload.is_empty() {
                flags |= FLAG_PADDED;
                payload[0] = rng.below(payload.len()) as u8;
            }
            frame(TYPE_DATA, flags, stream, &payload)
        }
        4 => frame(0x2, 0, stream, &rng.bytes(5)), // PRIORITY
        5 => frame(0x8, 0, rng.below(2) as u32 * stream, &[0, 0, 0x10, 0]), // WINDOW_UPDATE
        6 => frame(0x6, 0, 0, &rng.bytes(8)),      // PING
        _ => {
            // A client SETTINGS (not the server's: the server's decoder is untouched).
            let n = rng.range(0, 3);
            frame(TYPE_SETTINGS, 0, 0, &rng.bytes(6 * n))
        }
    }
}

/// A SETTINGS frame of the server, maybe with a header table size.
fn server_settings(rng: &mut Rng, table_size: Option<usize>) -> Vec<u8> {
    let mut payload = Vec::new();
    if rng.chance(50) {
        payload.extend([0, 3, 0, 0, 0, 100]); // SETTINGS_MAX_CONCURRENT_STREAMS
    }
    if let Some(size) = table_size {
        if rng.chance(20) {
            payload.extend([0, 1, 0, 0, 0x10, 0]); // a first value, overridden
        }
        payload.extend([0, 1]);
        payload.extend(u32::try_from(size).unwrap().to_be_bytes());
    }
    let mut out = frame(TYPE_SETTINGS, 0, 0, &payload);
    if rng.chance(50) {
        // Other frames of the server, skipped by the rewriter.
        out.extend(frame(TYPE_SETTINGS, FLAG_ACK, 0, &[]));
        out.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &rng.bytes(30)));
        out.extend({
            let n = rng.size(20_000);
            frame(TYPE_DATA, 0, 1, &rng.bytes(n))
        });
    }
    out
}

/// One connection: the client's octets and the server's, with where in the
/// client's octets the rewriter sees each of the server's writes.
struct Script {
    input: Vec<u8>,
    server: Vec<(usize, Vec<u8>)>,
}

fn script(rng: &mut Rng) -> Script {
    let mut client = Client::new();
    let mut recent = Vec::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0]));
    let mut server = Vec::new();
    // Server SETTINGS the client read but has not acknowledged.
    let mut unacked = Vec::new();
    let mut open: Vec<u32> = Vec::new();
    let mut next_stream = 1;
    let events = rng.range(2, 30);
    for event in 0..events {
        let kind = if event == 0 { 0 } else { rng.below(10) };
        match kind {
            0 | 1 => {
                // The server's SETTINGS; the client reads them at once.
                let size = rng.chance(75).then(|| *rng.pick(&SERVER_TABLE_SIZES));
                server.push((input.len(), server_settings(rng, size)));
                unacked.push(size);
                if let Some(size) = size {
                    client.allowed = size;
                }
            }
            2 if !unacked.is_empty() => {
                unacked.remove(0);
                input.extend(frame(TYPE_SETTINGS, FLAG_ACK, 0, &[]));
            }
            2..=5 => {
                let fields = headers::request(rng, &mut recent);
                let block = client.encode(rng, &fields);
                let end_stream = rng.chance(30);
                if !end_stream {
                    open.push(next_stream);
                }
                input.extend(frame_block(rng, next_stream, end_stream, &block));
                next_stream += 2;
            }
            6 if !open.is_empty() => {
                // Trailers (maybe empty: a block of size updates only).
                let stream = open.remove(rng.below(open.len()));
                let fields = headers::trailers(rng, &mut recent);
                let block = client.encode(rng, &fields);
                input.extend(frame_block(rng, stream, true, &block));
            }
            _ => input.extend(other_frame(rng, &mut open)),
        }
    }
    for _ in unacked {
        input.extend(frame(TYPE_SETTINGS, FLAG_ACK, 0, &[]));
    }
    Script { input, server }
}

/// Feeds the script through `rewriter` in random pieces: (what the server
/// reads, what it wrote).
fn run(rng: &mut Rng, rewriter: &mut Rewriter, script: &Script) -> (Vec<u8>, Vec<u8>) {
    let input = &script.input;
    let mut out = Vec::new();
    let mut server = Vec::new();
    let mut events = script.server.iter().peekable();
    let max_piece = *rng.pick(&[1, 7, 64, 1000, 20_000, 100_000]);
    let mut pos = 0;
    loop {
        while let Some((_, bytes)) = events.next_if(|(at, _)| *at <= pos) {
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let (piece, tail) = rest.split_at(rng.size(rest.len()));
                rewriter.observe_server(piece).unwrap();
                rest = tail;
            }
            server.extend_from_slice(bytes);
        }
        if pos == input.len() {
            break;
        }
        let until = events.peek().map_or(input.len(), |(at, _)| *at);
        let direct = rewriter.direct_len();
        if direct > 0 && rng.chance(50) {
            let n = rng.size(direct.min(until - pos));
            out.extend_from_slice(&input[pos..pos + n]);
            rewriter.consume_direct(n);
            pos += n;
            continue;
        }
        let n = rng.size(max_piece).min(until - pos);
        rewriter.feed(&input[pos..pos + n], &mut out).unwrap();
        pos += n;
    }
    (out, server)
}

#[test]
fn encoder_level_blocks_through_the_rewriter_in_random_pieces() {
    let seed = crate::rng::base_seed();
    let rounds = crate::rng::rounds(400);
    let mut tally = Tally::default();
    let start = std::time::Instant::now();
    for round in 0..rounds {
        let mut rng = Rng::new(seed ^ (round as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        eprintln!("round {round} (BERTH_DIFF_SEED={seed})");
        let script = script(&mut rng);
        let always_rewrite = rng.chance(75);
        let mut rewriter = if always_rewrite {
            Rewriter::always_rewrite()
        } else {
            Rewriter::new()
        };
        let (output, server) = run(&mut rng, &mut rewriter, &script);
        let connection = wire::Connection {
            input: &script.input,
            output: &output,
            server: &server,
            always_rewrite,
        };
        wire::check(&connection, &mut tally);
    }
    println!("{rounds} connections in {:?}: {tally:#?}", start.elapsed());
    crate::assert_covered(&tally, rounds);
    assert!(tally.padded_in > 0 && tally.multi_frame_in > 0);
    // The rewriter shrank its table for servers that allow less.
    assert!(tally.rewriter_updates > 0);
}
