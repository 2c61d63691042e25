//! The client-to-server byte stream of one HTTP/2 connection, rewritten: the
//! header blocks decoded and encoded again with a valid `:authority`, every
//! other byte passed as it came. A pure state machine (no I/O), fed in
//! chunks of any size.

use std::borrow::Cow;

use hpack::{Encoder, Kind, Shape};
use settings::{ServerFrames, TableSizes};

mod hpack;
mod settings;

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What an `:authority` that the server would refuse becomes.
pub const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

/// Largest header block (the HPACK bytes of a HEADERS frame and its
/// CONTINUATION frames, padding and priority left out) that is accepted.
/// hyper advertises and enforces 16 KiB of decoded headers; this bound is
/// well above it, so what hyper would answer itself still reaches it.
pub const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// Largest decoded header list (RFC 9113 section 6.5.2 sizes: name, value
/// and 32 octets each). A small block can name large dynamic-table entries
/// many times, so this is bounded apart from [`MAX_HEADER_BLOCK`].
pub const MAX_HEADER_LIST: usize = 256 * 1024;

/// The HPACK dynamic table size that both contexts start with (the initial
/// SETTINGS_HEADER_TABLE_SIZE, RFC 9113 section 6.5.2), and the largest
/// table that this side's encoder uses toward the server. What the server
/// really sets is followed on the wire ([`Rewriter::observe_server`]): the
/// client's encoder may then use up to that, and this side's encoder
/// shrinks to fit in it (with a dynamic table size update) when it is
/// smaller.
pub const HEADER_TABLE_SIZE: usize = 4096;

/// Largest SETTINGS_HEADER_TABLE_SIZE of the server that is followed: the
/// client's encoder may use that much, and so its table here (the server
/// holds as much itself). A server that sets more is an
/// [`Error::ServerTableTooLarge`].
pub const MAX_HEADER_TABLE_SIZE: usize = 256 * 1024;

/// Largest frame payload written toward the server: the smallest
/// SETTINGS_MAX_FRAME_SIZE a server may advertise, so always allowed.
pub const OUT_FRAME_SIZE: usize = 16_384;

const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_SETTINGS: u8 = 0x4;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// Padding (up to 255 octets, plus its length octet) and priority fields
/// (5 octets) that a HEADERS frame may carry on top of its fragment.
const HEADERS_OVERHEAD: usize = 1 + 255 + 5;

/// Why the client's bytes cannot be followed; the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A HEADERS frame whose padding or priority fields do not fit in it.
    #[error("HEADERS frame on stream {stream}: padding or priority longer than the frame ({len} octets)")]
    BadHeadersFrame {
        /// The frame's stream.
        stream: u32,
        /// The frame's payload length.
        len: usize,
    },
    /// A header block larger than [`MAX_HEADER_BLOCK`].
    #[error("header block on stream {stream} is larger than {limit} octets")]
    HeaderBlockTooLarge {
        /// The block's stream.
        stream: u32,
        /// The limit.
        limit: usize,
    },
    /// A decoded header list larger than [`MAX_HEADER_LIST`].
    #[error("header list on stream {stream} is larger than {limit} octets")]
    HeaderListTooLarge {
        /// The block's stream.
        stream: u32,
        /// The limit.
        limit: usize,
    },
    /// A frame other than the CONTINUATION of an unfinished header block,
    /// or a CONTINUATION frame without one (RFC 9113 section 6.10).
    #[error("frame of type {frame_type:#x} on stream {stream} where {expected}")]
    UnexpectedFrame {
        /// The frame's type.
        frame_type: u8,
        /// The frame's stream.
        stream: u32,
        /// What the frame should have been.
        expected: String,
    },
    /// The header block is not valid HPACK.
    #[error("header block on stream {stream}: HPACK: {source}")]
    Hpack {
        /// The block's stream.
        stream: u32,
        /// The decoder's error.
        #[source]
        source: loona_hpack::decoder::DecoderError,
    },
    /// The server set a SETTINGS_HEADER_TABLE_SIZE larger than
    /// [`MAX_HEADER_TABLE_SIZE`].
    #[error("the server sets SETTINGS_HEADER_TABLE_SIZE {size}, more than the {limit} octets the :authority rewriter follows")]
    ServerTableTooLarge {
        /// What the server set.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The server wrote a SETTINGS frame whose length is not a multiple of 6.
    #[error("the server wrote a SETTINGS frame of {len} octets")]
    BadServerSettings {
        /// The frame's payload length.
        len: usize,
    },
    /// The server wrote more SETTINGS frames than the client acknowledged,
    /// by more than `count`.
    #[error("the server wrote {count} SETTINGS frames that the client did not acknowledge")]
    ServerSettingsUnacknowledged {
        /// The limit.
        count: usize,
    },
}

/// Where in the client's stream the rewriter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Checking the connection preface; `matched` octets of it seen.
    Preface { matched: usize },
    /// Reading a 9-octet frame header (`len` octets of it in `head`).
    FrameHeader { len: usize },
    /// Passing `remaining` octets of a frame's payload as they are.
    Pass { remaining: usize },
    /// Collecting a HEADERS or CONTINUATION payload (`remaining` to go).
    Collect { remaining: usize },
    /// Not HTTP/2 with prior knowledge (the server answers it as it sees
    /// fit), or a client whose first header block needed no rewriting:
    /// everything passes.
    Transparent,
}

/// The header block being assembled (a HEADERS frame without END_HEADERS
/// waits for its CONTINUATION frames).
#[derive(Debug, Clone, Copy)]
struct Pending {
    stream: u32,
    end_stream: bool,
    /// Stream dependency and weight of the HEADERS frame, if it had them.
    priority: Option<[u8; 5]>,
}

/// Rewrites the client-to-server bytes of one HTTP/2 connection (see the
/// crate documentation). One per connection: it holds the connection's
/// HPACK state. The server's bytes go through [`Rewriter::observe_server`]
/// (as [`crate::AuthorityFix`] does), or the table sizes stay at the
/// protocol's initial [`HEADER_TABLE_SIZE`].
pub struct Rewriter {
    state: State,
    head: [u8; FRAME_HEADER_LEN],
    /// The current frame's type, flags and stream (while collecting).
    frame: (u8, u8, u32),
    /// The payload of the HEADERS or CONTINUATION frame being collected.
    payload: Vec<u8>,
    /// The header block assembled so far.
    block: Vec<u8>,
    pending: Option<Pending>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: Encoder,
    /// Scratch space for the re-encoded block.
    encoded: Vec<u8>,
    /// The size updates and never-indexed fields of the block.
    shape: Shape,
    /// The table sizes that the server's SETTINGS set.
    sizes: TableSizes,
    /// Follows what the server writes, for its SETTINGS.
    server: ServerFrames,
    replaced: u64,
    /// Until the connection's first header block is complete: its frames
    /// as they came, passed as they are if it needs no rewriting.
    first: Option<Vec<u8>>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter")
            .field("state", &self.state)
            .field("pending", &self.pending)
            .field("replaced", &self.replaced)
            .finish_non_exhaustive()
    }
}

impl Rewriter {
    /// A rewriter at the start of a connection (before the preface).
    pub fn new() -> Rewriter {
        // The client's size updates are checked against the server's
        // settings before the decoder sees them (`Shape::scan`).
        let decoder = loona_hpack::Decoder::new();
        let encoder = Encoder::new(HEADER_TABLE_SIZE);
        Rewriter {
            state: State::Preface { matched: 0 },
            head: [0; FRAME_HEADER_LEN],
            frame: (0, 0, 0),
            payload: Vec::new(),
            block: Vec::new(),
            pending: None,
            decoder,
            encoder,
            encoded: Vec::new(),
            shape: Shape::default(),
            sizes: TableSizes::new(),
            server: ServerFrames::new(),
            replaced: 0,
            first: Some(Vec::new()),
        }
    }

    /// A rewriter that re-encodes every header block of the connection, also
    /// when the first one names a valid authority (which [`Rewriter::new`]
    /// then passes with the rest of the connection as it came): a later
    /// block with an invalid authority is rewritten too, at the cost of
    /// decoding and encoding every block.
    pub fn always_rewrite() -> Rewriter {
        Rewriter {
            first: None,
            ..Rewriter::new()
        }
    }

    /// Takes the next octets that the server wrote to the client (all of
    /// them, in order, from the start of the connection): the rewriter
    /// follows the server's SETTINGS_HEADER_TABLE_SIZE, which bounds the
    /// HPACK tables on both of its sides (see [`HEADER_TABLE_SIZE`]). A
    /// value it cannot follow is an error, after which the connection must
    /// be closed: the rewriter never encodes for a table the server does not
    /// have.
    pub fn observe_server(&mut self, bytes: &[u8]) -> Result<(), Error> {
        if self.state == State::Transparent {
            // Nothing is encoded here any more.
            return Ok(());
        }
        self.server.feed(bytes, &mut self.sizes)
    }

    /// The server's SETTINGS_HEADER_TABLE_SIZE in force (acknowledged by
    /// the client), as far as [`Rewriter::observe_server`] saw it.
    pub fn server_header_table_size(&self) -> usize {
        self.sizes.server_limit()
    }

    /// How many `:authority` values were replaced so far.
    pub fn replaced(&self) -> u64 {
        self.replaced
    }

    /// How many of the next input octets pass unchanged: the caller may
    /// deliver up to that many straight from its source and then report them
    /// with [`Rewriter::consume_direct`] instead of [`Rewriter::feed`].
    /// 0 when the next octets must go through `feed`.
    pub fn direct_len(&self) -> usize {
        match self.state {
            State::Pass { remaining } => remaining,
            State::Transparent => usize::MAX,
            _ => 0,
        }
    }

    /// Records that `n` octets (at most [`Rewriter::direct_len`]) were
    /// delivered unchanged by the caller.
    pub fn consume_direct(&mut self, n: usize) {
        if let State::Pass { remaining } = self.state {
            let remaining = remaining.saturating_sub(n);
            self.state = if remaining == 0 {
                State::FrameHeader { len: 0 }
            } else {
                State::Pass { remaining }
            };
        }
    }

    /// Takes all of `input` (the next octets from the client) and appends
    /// what goes to the server to `out`. Octets of an incomplete frame
    /// header or header block are kept until the rest arrives. After an
    /// error the connection must be closed (the state is undefined).
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        while !input.is_empty() {
            match self.state {
                State::Preface { matched } => {
                    let want = &PREFACE[matched..];
                    let n = want.len().min(input.len());
                    if input[..n] != want[..n] {
                        // Not HTTP/2 with prior knowledge; the server says so.
                        // (The octets matched before are already out.)
                        self.state = State::Transparent;
                        continue;
                    }
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if matched + n == PREFACE.len() {
                        State::FrameHeader { len: 0 }
                    } else {
                        State::Preface {
                            matched: matched + n,
                        }
                    };
                }
                State::FrameHeader { len } => {
                    let n = (FRAME_HEADER_LEN - len).min(input.len());
                    self.head[len..len + n].copy_from_slice(&input[..n]);
                    input = &input[n..];
                    if len + n < FRAME_HEADER_LEN {
                        self.state = State::FrameHeader { len: len + n };
                    } else {
                        self.start_frame(out)?;
                    }
                }
                State::Pass { remaining } => {
                    let n = remaining.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.consume_direct(n);
                }
                State::Collect { remaining } => {
                    let n = remaining.min(input.len());
                    self.payload.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if n == remaining {
                        self.state = State::FrameHeader { len: 0 };
                        self.end_frame(out)?;
                    } else {
                        self.state = State::Collect {
                            remaining: remaining - n,
                        };
                    }
                }
                State::Transparent => {
                    out.extend_from_slice(input);
                    input = &[];
                }
            }
        }
        Ok(())
    }

    /// A whole frame header is in `head`: decide what its payload is for.
    fn start_frame(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let head = self.head;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let frame_type = head[3];
        let flags = head[4];
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let is_block = frame_type == TYPE_HEADERS || frame_type == TYPE_CONTINUATION;
        if let Some(pending) = self.pending {
            if frame_type != TYPE_CONTINUATION || stream != pending.stream {
                return Err(Error::UnexpectedFrame {
                    frame_type,
                    stream,
                    expected: format!("the CONTINUATION of stream {}", pending.stream),
                });
            }
        } else if frame_type == TYPE_CONTINUATION {
            return Err(Error::UnexpectedFrame {
                frame_type,
                stream,
                expected: "no header block was open".to_string(),
            });
        }
        if !is_block {
            if frame_type == TYPE_SETTINGS && flags & FLAG_ACK != 0 && stream == 0 {
                // From here on the server's decoder uses the setting.
                self.sizes.client_ack();
            }
            out.extend_from_slice(&head);
            self.state = if len == 0 {
                State::FrameHeader { len: 0 }
            } else {
                State::Pass { remaining: len }
            };
            return Ok(());
        }
        if self.block.len() + len > MAX_HEADER_BLOCK + HEADERS_OVERHEAD {
            return Err(Error::HeaderBlockTooLarge {
                stream,
                limit: MAX_HEADER_BLOCK,
            });
        }
        self.frame = (frame_type, flags, stream);
        self.payload.clear();
        if len == 0 {
            self.state = State::FrameHeader { len: 0 };
            self.end_frame(out)
        } else {
            self.state = State::Collect { remaining: len };
            Ok(())
        }
    }

    /// A whole HEADERS or CONTINUATION payload is in `payload`.
    fn end_frame(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let (frame_type, flags, stream) = self.frame;
        let payload = std::mem::take(&mut self.payload);
        if let Some(raw) = &mut self.first {
            // Bounded: many empty CONTINUATION frames add no fragment but octets here.
            if raw.len() + FRAME_HEADER_LEN + payload.len() > 2 * MAX_HEADER_BLOCK {
                self.payload = payload;
                return Err(Error::HeaderBlockTooLarge {
                    stream,
                    limit: MAX_HEADER_BLOCK,
                });
            }
            raw.extend_from_slice(&self.head);
            raw.extend_from_slice(&payload);
        }
        let result = self.add_fragment(frame_type, flags, stream, &payload);
        self.payload = payload;
        result?;
        if flags & FLAG_END_HEADERS != 0 {
            self.finish_block(out)?;
        }
        Ok(())
    }

    fn add_fragment(
        &mut self,
        frame_type: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> Result<(), Error> {
        let fragment = if frame_type == TYPE_HEADERS {
            let bad = || Error::BadHeadersFrame {
                stream,
                len: payload.len(),
            };
            let mut rest = payload;
            let mut pad = 0;
            if flags & FLAG_PADDED != 0 {
                let (&pad_len, tail) = rest.split_first().ok_or_else(bad)?;
                pad = usize::from(pad_len);
                rest = tail;
            }
            let mut priority = None;
            if flags & FLAG_PRIORITY != 0 {
                let (fields, tail) = rest.split_first_chunk::<5>().ok_or_else(bad)?;
                priority = Some(*fields);
                rest = tail;
            }
            if pad > rest.len() {
                return Err(bad());
            }
            self.block.clear();
            self.pending = Some(Pending {
                stream,
                end_stream: flags & FLAG_END_STREAM != 0,
                priority,
            });
            &rest[..rest.len() - pad]
        } else {
            payload
        };
        if self.block.len() + fragment.len() > MAX_HEADER_BLOCK {
            return Err(Error::HeaderBlockTooLarge {
                stream,
                limit: MAX_HEADER_BLOCK,
            });
        }
        self.block.extend_from_slice(fragment);
        Ok(())
    }

    /// The header block is complete: decode it, replace a bad `:authority`,
    /// encode it again and write it as HEADERS (+ CONTINUATION) frames.
    fn finish_block(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let result = self.reencode(pending.stream);
        self.block.clear();
        let replaced = result?;
        self.replaced += replaced;
        if let Some(raw) = self.first.take() {
            if replaced == 0 {
                // A client whose first request names a valid authority (tonic,
                // grpc-go since 1.x "localhost", kubelet) keeps it: the rest of
                // the connection passes untouched, at no cost.
                out.extend_from_slice(&raw);
                self.state = State::Transparent;
                return Ok(());
            }
        }
        write_block(out, &pending, &self.encoded);
        Ok(())
    }

    /// Decodes `block` in the client's HPACK context and encodes it again
    /// into `encoded` in this side's, an invalid `:authority` replaced:
    /// how many were.
    fn reencode(&mut self, stream: u32) -> Result<u64, Error> {
        let hpack = |source| Error::Hpack { stream, source };
        self.shape
            .scan(&self.block, self.sizes.decoder_limit())
            .map_err(hpack)?;
        if let Some((low, last)) = self.shape.update {
            // The client's size updates; the decoder gets the fields after them.
            self.decoder.set_max_table_size(low);
            self.decoder.set_max_table_size(last);
        }
        self.encoded.clear();
        for size in self.sizes.take_updates() {
            // The server's setting, acknowledged since the last block.
            self.encoder.size_update(size, &mut self.encoded);
        }
        let mut list_size = 0usize;
        let mut too_large = false;
        let mut replaced = 0u64;
        let Rewriter {
            decoder,
            encoder,
            encoded,
            block,
            shape,
            ..
        } = self;
        let mut kinds = shape.kinds.iter().copied();
        decoder
            .decode_with_cb(
                &block[shape.fields_start..],
                |name: Cow<[u8]>, value: Cow<[u8]>| {
                    // As many kinds as fields: the scan read the same block.
                    let kind = kinds.next().unwrap_or(Kind::NotIndexed);
                    list_size = list_size.saturating_add(name.len() + value.len() + 32);
                    if too_large || list_size > MAX_HEADER_LIST {
                        too_large = true;
                        return;
                    }
                    let value: &[u8] = if &*name == b":authority" && !valid_authority(&value) {
                        if replaced == 0 {
                            tracing::debug!(
                                stream,
                                authority = %String::from_utf8_lossy(&value),
                                "replacing an :authority that is not a URI authority"
                            );
                        }
                        replaced += 1;
                        REPLACEMENT_AUTHORITY
                    } else {
                        &value
                    };
                    // As the client wrote it, as far as this side's table
                    // allows; never indexed stays so (RFC 7541 7.1.3).
                    encoder.field(&name, value, kind, encoded);
                },
            )
            .map_err(hpack)?;
        if too_large {
            return Err(Error::HeaderListTooLarge {
                stream,
                limit: MAX_HEADER_LIST,
            });
        }
        Ok(replaced)
    }
}

/// Whether the server (h2) takes `value` as an `:authority`.
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Writes `block` as a HEADERS frame and as many CONTINUATION frames as it
/// needs, none over [`OUT_FRAME_SIZE`].
fn write_block(out: &mut Vec<u8>, pending: &Pending, block: &[u8]) {
    let mut flags = 0;
    if pending.end_stream {
        flags |= FLAG_END_STREAM;
    }
    let mut room = OUT_FRAME_SIZE;
    if pending.priority.is_some() {
        flags |= FLAG_PRIORITY;
        room -= 5;
    }
    let first = block.len().min(room);
    let (chunk, mut rest) = block.split_at(first);
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    let extra = if pending.priority.is_some() { 5 } else { 0 };
    write_frame_header(
        out,
        chunk.len() + extra,
        TYPE_HEADERS,
        flags,
        pending.stream,
    );
    if let Some(priority) = pending.priority {
        out.extend_from_slice(&priority);
    }
    out.extend_from_slice(chunk);
    while !rest.is_empty() {
        let n = rest.len().min(OUT_FRAME_SIZE);
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        let flags = if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
        write_frame_header(out, n, TYPE_CONTINUATION, flags, pending.stream);
        out.extend_from_slice(chunk);
    }
}

fn write_frame_header(out: &mut Vec<u8>, len: usize, frame_type: u8, flags: u8, stream: u32) {
    // len <= OUT_FRAME_SIZE: fits in 24 bits.
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(frame_type);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

#[cfg(test)]
mod tests;
