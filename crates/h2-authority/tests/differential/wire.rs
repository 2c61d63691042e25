//! The oracle: the client's bytes (into the rewriter) and the server's view
//! (out of it) parsed into frames and header blocks, each block decoded in
//! its own HPACK context, and compared item by item. It also holds the
//! rewriter's encoder to the server's SETTINGS_HEADER_TABLE_SIZE as a
//! strict decoder would (RFC 7541 section 4.2), which h2's own decoder does
//! not check.

use std::collections::VecDeque;

use berth_h2_authority::{HEADER_TABLE_SIZE, OUT_FRAME_SIZE, PREFACE, REPLACEMENT_AUTHORITY};

pub const TYPE_DATA: u8 = 0x0;
pub const TYPE_HEADERS: u8 = 0x1;
pub const TYPE_SETTINGS: u8 = 0x4;
pub const TYPE_CONTINUATION: u8 = 0x9;
pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_ACK: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

/// A frame and its octets.
#[derive(Debug, Clone)]
pub struct Frame {
    pub ty: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
    pub raw: Vec<u8>,
}

/// A frame header and payload, as written on the wire.
pub fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = len[1..].to_vec();
    out.push(ty);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// All frames of `bytes`, which must end at a frame boundary.
pub fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 9, "a partial frame header at the end");
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        assert!(bytes.len() >= 9 + len, "a partial frame at the end");
        frames.push(Frame {
            ty: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
            payload: bytes[9..9 + len].to_vec(),
            raw: bytes[..9 + len].to_vec(),
        });
        bytes = &bytes[9 + len..];
    }
    frames
}

/// A header block: a HEADERS frame and its CONTINUATION frames.
#[derive(Debug, Clone)]
pub struct Block {
    pub stream: u32,
    pub end_stream: bool,
    pub priority: Option<[u8; 5]>,
    pub padded: bool,
    pub fragment: Vec<u8>,
    /// How many frames, and the largest payload among them.
    pub frames: usize,
    pub largest: usize,
}

/// What the server reads: header blocks and other frames.
#[derive(Debug, Clone)]
pub enum Item {
    Other(Frame),
    Block(Block),
}

/// Groups frames into header blocks (and checks the CONTINUATION rules).
pub fn items(frames: Vec<Frame>) -> Vec<Item> {
    let mut items = Vec::new();
    let mut open: Option<Block> = None;
    for f in frames {
        let done = f.flags & FLAG_END_HEADERS != 0;
        match f.ty {
            TYPE_HEADERS => {
                assert!(open.is_none(), "HEADERS inside a header block");
                let mut rest = &f.payload[..];
                let mut pad = 0;
                if f.flags & FLAG_PADDED != 0 {
                    pad = usize::from(rest[0]);
                    rest = &rest[1..];
                }
                let mut priority = None;
                if f.flags & FLAG_PRIORITY != 0 {
                    priority = Some(rest[..5].try_into().unwrap());
                    rest = &rest[5..];
                }
                open = Some(Block {
                    stream: f.stream,
                    end_stream: f.flags & FLAG_END_STREAM != 0,
                    priority,
                    padded: f.flags & FLAG_PADDED != 0,
                    fragment: rest[..rest.len() - pad].to_vec(),
                    frames: 1,
                    largest: f.payload.len(),
                });
            }
            TYPE_CONTINUATION => {
                let block = open.as_mut().expect("CONTINUATION outside a header block");
                assert_eq!(block.stream, f.stream, "CONTINUATION of another stream");
                block.fragment.extend_from_slice(&f.payload);
                block.frames += 1;
                block.largest = block.largest.max(f.payload.len());
            }
            _ => {
                assert!(open.is_none(), "frame type {} inside a header block", f.ty);
                items.push(Item::Other(f));
                continue;
            }
        }
        if done {
            items.push(Item::Block(open.take().unwrap()));
        }
    }
    assert!(
        open.is_none(),
        "a header block without END_HEADERS at the end"
    );
    items
}

/// A decoded field and whether it came as a never-indexed literal.
#[derive(Clone, PartialEq, Eq)]
pub struct Field {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
    pub never_indexed: bool,
}

impl std::fmt::Debug for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = &self.value[..self.value.len().min(60)];
        write!(
            f,
            "{:?}: {:?}{} ({} octets{})",
            String::from_utf8_lossy(&self.name),
            String::from_utf8_lossy(value),
            if value.len() < self.value.len() {
                "..."
            } else {
                ""
            },
            self.value.len(),
            if self.never_indexed {
                ", never indexed"
            } else {
                ""
            }
        )
    }
}

/// Where two field lists part.
fn first_difference(got: &[Field], want: &[Field]) -> String {
    let at = got.iter().zip(want).position(|(g, w)| g != w);
    let at = at.unwrap_or(got.len().min(want.len()));
    format!(
        "{} fields, {} wanted; field {at}: got {:?}, want {:?}",
        got.len(),
        want.len(),
        got.get(at),
        want.get(at)
    )
}

fn int(buf: &[u8], pos: &mut usize, prefix: u32) -> usize {
    let mask = (1usize << prefix) - 1;
    let mut value = usize::from(buf[*pos]) & mask;
    *pos += 1;
    if value < mask {
        return value;
    }
    let mut shift = 0;
    loop {
        let b = buf[*pos];
        *pos += 1;
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return value;
        }
    }
}

fn skip_literal(buf: &[u8], pos: &mut usize, prefix: u32) {
    if int(buf, pos, prefix) == 0 {
        let len = int(buf, pos, 7);
        *pos += len;
    }
    let len = int(buf, pos, 7);
    *pos += len;
}

/// One HPACK decoding context (one direction of a connection).
pub struct Context {
    decoder: loona_hpack::Decoder<'static>,
    /// The table size last signalled (the protocol's initial one before).
    pub table_max: usize,
}

impl Context {
    pub fn new() -> Context {
        Context {
            decoder: loona_hpack::Decoder::new(),
            table_max: HEADER_TABLE_SIZE,
        }
    }

    /// Decodes a block: its size updates (which must come first) and fields.
    pub fn decode(&mut self, block: &[u8]) -> (Vec<usize>, Vec<Field>) {
        let mut updates = Vec::new();
        let mut never = Vec::new();
        let mut pos = 0;
        let mut start = 0;
        while pos < block.len() {
            let first = block[pos];
            if first & 0xe0 == 0x20 {
                assert!(never.is_empty(), "a size update after a field");
                updates.push(int(block, &mut pos, 5));
                start = pos;
            } else if first & 0x80 != 0 {
                int(block, &mut pos, 7);
                never.push(false);
            } else if first & 0x40 != 0 {
                skip_literal(block, &mut pos, 6);
                never.push(false);
            } else {
                skip_literal(block, &mut pos, 4);
                never.push(first & 0x10 != 0);
            }
        }
        for &size in &updates {
            self.decoder.set_max_table_size(size);
            self.table_max = size;
        }
        let fields = self
            .decoder
            .decode(&block[start..])
            .unwrap_or_else(|e| panic!("undecodable block: {e:?}"));
        assert_eq!(fields.len(), never.len());
        let fields = fields
            .into_iter()
            .zip(never)
            .map(|((name, value), never_indexed)| Field {
                name,
                value,
                never_indexed,
            })
            .collect();
        (updates, fields)
    }
}

/// Whether the rewriter keeps `value` as `:authority` (the server takes it).
pub fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// What the server should read for a field the client sent.
fn expected(field: &Field) -> Field {
    let mut field = field.clone();
    if field.name == b":authority" && !valid_authority(&field.value) {
        field.value = REPLACEMENT_AUTHORITY.to_vec();
    }
    field
}

/// What went through the rewriter on one connection.
pub struct Connection<'a> {
    /// The client's octets, as the rewriter read them.
    pub input: &'a [u8],
    /// The rewriter's octets, as the server read them.
    pub output: &'a [u8],
    /// The server's octets, as it wrote them.
    pub server: &'a [u8],
    /// Made with `Rewriter::always_rewrite` (else `Rewriter::new`).
    pub always_rewrite: bool,
}

/// What the checked connections held, added up (to see that the rounds
/// covered what they are meant to).
#[derive(Debug, Default)]
pub struct Tally {
    pub connections: usize,
    pub transparent: usize,
    pub blocks: usize,
    pub fields: usize,
    pub replaced: usize,
    pub never_indexed: usize,
    pub multi_frame_in: usize,
    pub multi_frame_out: usize,
    pub padded_in: usize,
    pub priority: usize,
    pub data_frames: usize,
    pub other_frames: usize,
    pub client_updates: usize,
    pub rewriter_updates: usize,
    pub server_table_sizes: std::collections::BTreeSet<usize>,
    pub largest_block: usize,
}

/// The table sizes that the server's SETTINGS frames set, in order.
fn server_settings(server: &[u8]) -> VecDeque<Option<usize>> {
    frames(server)
        .into_iter()
        .filter(|f| f.ty == TYPE_SETTINGS && f.flags & FLAG_ACK == 0 && f.stream == 0)
        .map(|f| {
            f.payload
                .chunks(6)
                .filter(|s| s[..2] == [0, 1])
                .map(|s| u32::from_be_bytes(s[2..].try_into().unwrap()) as usize)
                .next_back()
        })
        .collect()
}

/// Checks that the server read what the client sent: the same frames and
/// header blocks in the same order, other frames byte for byte, every field
/// equal (never-indexed ones still never-indexed) but an `:authority` the
/// server would refuse, which is the replacement; and that the rewriter's
/// HPACK stays within the server's table size.
pub fn check(c: &Connection<'_>, tally: &mut Tally) {
    tally.connections += 1;
    assert!(c.input.starts_with(PREFACE) && c.output.starts_with(PREFACE));
    let input = items(frames(&c.input[PREFACE.len()..]));
    let mut client = Context::new();
    let decoded: Vec<Option<(Vec<usize>, Vec<Field>)>> = input
        .iter()
        .map(|item| match item {
            Item::Block(b) => Some(client.decode(&b.fragment)),
            Item::Other(_) => None,
        })
        .collect();
    if !c.always_rewrite {
        let first = decoded.iter().flatten().next();
        let rewrites = first.is_some_and(|(_, fields)| fields.iter().any(|f| expected(f) != *f));
        if !rewrites {
            // The first block needs nothing: all passes as it came.
            assert!(c.output == c.input, "a connection passed through changed");
            tally.transparent += 1;
            return;
        }
    }
    let output = items(frames(&c.output[PREFACE.len()..]));
    assert_eq!(input.len(), output.len(), "frames or blocks lost or added");
    let mut server = Context::new();
    let mut settings = server_settings(c.server);
    let mut limit = HEADER_TABLE_SIZE;
    let mut low = limit;
    for (i, ((a, b), decoded)) in input.iter().zip(&output).zip(decoded).enumerate() {
        match (a, b) {
            (Item::Other(a), Item::Other(b)) => {
                assert!(a.raw == b.raw, "item {i}: frame type {} changed", a.ty);
                if a.ty == TYPE_SETTINGS && a.flags & FLAG_ACK != 0 {
                    if let Some(Some(size)) = settings.pop_front() {
                        limit = size;
                        low = low.min(size);
                    }
                }
                if a.ty == TYPE_DATA {
                    tally.data_frames += 1;
                } else {
                    tally.other_frames += 1;
                }
            }
            (Item::Block(a), Item::Block(b)) => {
                let (client_updates, fields) = decoded.unwrap();
                assert_eq!(
                    (a.stream, a.end_stream, a.priority),
                    (b.stream, b.end_stream, b.priority),
                    "item {i}: stream, END_STREAM or priority changed"
                );
                assert!(!b.padded);
                assert!(b.largest <= OUT_FRAME_SIZE, "item {i}: frame too large");
                let before = server.table_max;
                let (updates, got) = server.decode(&b.fragment);
                if before > low {
                    // The server's limit dropped below the encoder's table.
                    assert!(
                        updates.first().is_some_and(|&u| u <= low),
                        "item {i}: no size update to {low} or less ({updates:?})"
                    );
                }
                assert!(updates.iter().all(|&u| u <= limit), "item {i}: {updates:?}");
                assert!(server.table_max <= limit, "item {i}: table over {limit}");
                low = limit;
                let want: Vec<Field> = fields.iter().map(expected).collect();
                assert!(
                    got == want,
                    "item {i} (stream {}): {}",
                    a.stream,
                    first_difference(&got, &want)
                );
                tally.blocks += 1;
                tally.fields += want.len();
                tally.replaced += fields.iter().zip(&want).filter(|(f, w)| f != w).count();
                tally.never_indexed += want.iter().filter(|f| f.never_indexed).count();
                tally.multi_frame_in += usize::from(a.frames > 1);
                tally.multi_frame_out += usize::from(b.frames > 1);
                tally.padded_in += usize::from(a.padded);
                tally.priority += usize::from(a.priority.is_some());
                tally.client_updates += client_updates.len();
                tally.rewriter_updates += updates.len();
                tally.largest_block = tally.largest_block.max(a.fragment.len());
            }
            _ => panic!("item {i}: a header block where the other side has a frame"),
        }
    }
    tally.server_table_sizes.insert(limit);
}
