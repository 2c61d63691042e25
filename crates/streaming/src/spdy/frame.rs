//! SPDY/3.1 frames: their wire layout, and the name/value header blocks of
//! SYN_STREAM, SYN_REPLY and HEADERS (compressed with [`super::zlib`]).
//!
//! Every frame starts with 8 bytes. A control frame: the control bit and the
//! version (`0x8003`), the type (16 bits), flags (8 bits), the payload length
//! (24 bits). A data frame: the stream id (31 bits, control bit clear), flags,
//! length.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::zlib::{HeaderCompressor, HeaderDecompressor};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
/// Last frame of the sender on this stream (DATA, SYN_STREAM, SYN_REPLY, HEADERS).
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM: the receiver may not send on this stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// Largest payload one frame can carry (24-bit length).
pub const MAX_FRAME_PAYLOAD: usize = (1 << 24) - 1;
/// Largest control frame payload accepted from the peer. Control frames are
/// small (a stream's headers compress to some dozens of bytes); a bigger one
/// is refused before its payload is read. DATA frames may use the whole
/// 24-bit length: they are read and handed on in pieces (see [`read_head`]).
pub const MAX_CONTROL_PAYLOAD: usize = 1 << 20;
/// Most name/value pairs one header block may decode to (each value of a
/// NUL-joined list counts), as other SPDY peers bound it.
pub const MAX_HEADERS: usize = 1000;
/// Most bytes the decoded pairs of one header block may take, counted as
/// HTTP/2 counts a header list: name, value and [`HEADER_OVERHEAD`] per pair.
/// The budget is checked before each pair is made, so a block whose values
/// repeat a long name is refused before it is copied.
pub const MAX_HEADER_LIST: usize = 1 << 20;
/// What each decoded pair costs beyond its name and value (RFC 9113 §6.5.2).
pub const HEADER_OVERHEAD: usize = 32;

/// Control frame types.
pub mod kind {
    pub const SYN_STREAM: u16 = 1;
    pub const SYN_REPLY: u16 = 2;
    pub const RST_STREAM: u16 = 3;
    pub const SETTINGS: u16 = 4;
    pub const PING: u16 = 6;
    pub const GOAWAY: u16 = 7;
    pub const HEADERS: u16 = 8;
    pub const WINDOW_UPDATE: u16 = 9;
}

/// RST_STREAM status codes.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
}

/// What a frame could not be read or written for.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("unsupported SPDY version {0} (only 3 is spoken)")]
    Version(u16),
    #[error("invalid frame: {0}")]
    Invalid(&'static str),
    #[error("header compression: {0}")]
    Compression(String),
    /// The peer sent more than this side accepts (a frame, a header block).
    #[error("limit exceeded: {0}")]
    Limit(String),
}

/// Header names and values of a stream, names in lower case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// Headers from pairs (names are lowered).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Headers {
        Headers(
            pairs
                .into_iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
                .collect(),
        )
    }

    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The uncompressed name/value block: a 32-bit count, then each name
    /// and value with a 32-bit length. Values of a repeated name are joined
    /// with NUL (a block may not repeat a name).
    pub fn encode(&self) -> Vec<u8> {
        let mut names: Vec<(String, String)> = Vec::new();
        for (name, value) in &self.0 {
            let name = name.to_ascii_lowercase();
            match names.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => {
                    v.push('\0');
                    v.push_str(value);
                }
                None => names.push((name, value.clone())),
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(&(names.len() as u32).to_be_bytes());
        for (name, value) in &names {
            for s in [name, value] {
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
        out
    }

    /// Parses an uncompressed name/value block. Refuses, before making them,
    /// more than [`MAX_HEADERS`] pairs or pairs over [`MAX_HEADER_LIST`].
    pub fn decode(block: &[u8]) -> Result<Headers, FrameError> {
        let mut r = Cursor(block);
        let count = r.u32()? as usize;
        if count > MAX_HEADERS {
            return Err(FrameError::Limit(format!(
                "a header block of {count} names (at most {MAX_HEADERS})"
            )));
        }
        let mut headers = Vec::new();
        let mut budget = MAX_HEADER_LIST;
        for _ in 0..count {
            let len = r.u32()? as usize;
            let name = r.take(len)?;
            let len = r.u32()? as usize;
            let value = r.take(len)?;
            let name = String::from_utf8_lossy(name);
            for v in value.split(|b| *b == 0) {
                let cost = name.len() + v.len() + HEADER_OVERHEAD;
                if headers.len() == MAX_HEADERS {
                    return Err(FrameError::Limit(format!(
                        "a header block of more than {MAX_HEADERS} values"
                    )));
                }
                if cost > budget {
                    return Err(FrameError::Limit(format!(
                        "a header block of more than {MAX_HEADER_LIST} bytes of names and values"
                    )));
                }
                budget -= cost;
                headers.push((name.to_string(), String::from_utf8_lossy(v).into_owned()));
            }
        }
        Ok(Headers(headers))
    }
}

/// One SETTINGS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

/// One frame, unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream_id: u32,
        flags: u8,
        data: Vec<u8>,
    },
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        flags: u8,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    /// A control frame type this side does not know (skipped).
    Unknown {
        kind: u16,
        flags: u8,
        payload: Vec<u8>,
    },
}

/// Writes frames; owns the sending direction's header compressor, so frames
/// must be encoded in the order they go on the wire.
pub struct Encoder {
    zlib: HeaderCompressor,
}

impl Encoder {
    pub fn new() -> Result<Encoder, FrameError> {
        Ok(Encoder {
            zlib: HeaderCompressor::new()?,
        })
    }

    /// Appends `frame`'s bytes to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let id = |v: u32| (v & 0x7fff_ffff).to_be_bytes();
        let (kind, flags, payload) = match frame {
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                if data.len() > MAX_FRAME_PAYLOAD {
                    return Err(FrameError::Invalid("data frame too large"));
                }
                out.extend_from_slice(&id(*stream_id));
                push_flags_len(out, *flags, data.len());
                out.extend_from_slice(data);
                return Ok(());
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                flags,
                headers,
            } => {
                let mut p = Vec::new();
                p.extend_from_slice(&id(*stream_id));
                p.extend_from_slice(&id(*associated_to));
                p.push((priority & 0x07) << 5);
                p.push(0); // credential slot
                p.extend(self.zlib.compress(&headers.encode())?);
                (kind::SYN_STREAM, *flags, p)
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => (
                kind::SYN_REPLY,
                *flags,
                self.with_headers(*stream_id, headers)?,
            ),
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => (
                kind::HEADERS,
                *flags,
                self.with_headers(*stream_id, headers)?,
            ),
            Frame::RstStream { stream_id, status } => (
                kind::RST_STREAM,
                0,
                pair(id(*stream_id), status.to_be_bytes()),
            ),
            Frame::Settings { flags, entries } => {
                let mut p = Vec::new();
                p.extend_from_slice(&(entries.len() as u32).to_be_bytes());
                for e in entries {
                    p.push(e.flags);
                    p.extend_from_slice(&e.id.to_be_bytes()[1..]);
                    p.extend_from_slice(&e.value.to_be_bytes());
                }
                (kind::SETTINGS, *flags, p)
            }
            Frame::Ping { id } => (kind::PING, 0, id.to_be_bytes().to_vec()),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => (
                kind::GOAWAY,
                0,
                pair(id(*last_good_stream_id), status.to_be_bytes()),
            ),
            Frame::WindowUpdate { stream_id, delta } => {
                (kind::WINDOW_UPDATE, 0, pair(id(*stream_id), id(*delta)))
            }
            Frame::Unknown {
                kind,
                flags,
                payload,
            } => (*kind, *flags, payload.clone()),
        };
        if payload.len() > MAX_FRAME_PAYLOAD {
            return Err(FrameError::Invalid("control frame too large"));
        }
        out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
        out.extend_from_slice(&kind.to_be_bytes());
        push_flags_len(out, flags, payload.len());
        out.extend_from_slice(&payload);
        Ok(())
    }

    fn with_headers(&mut self, stream_id: u32, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        let mut p = (stream_id & 0x7fff_ffff).to_be_bytes().to_vec();
        p.extend(self.zlib.compress(&headers.encode())?);
        Ok(p)
    }
}

fn pair(a: [u8; 4], b: [u8; 4]) -> Vec<u8> {
    let mut p = a.to_vec();
    p.extend_from_slice(&b);
    p
}

fn push_flags_len(out: &mut Vec<u8>, flags: u8, len: usize) {
    out.push(flags);
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
}

/// Reads frames; owns the receiving direction's header decompressor, so
/// every header-carrying frame must pass through it in order.
#[derive(Default)]
pub struct Decoder {
    zlib: HeaderDecompressor,
}

/// A frame as it came off the wire: its 8-byte head and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub head: [u8; 8],
    pub payload: Vec<u8>,
}

/// Reads the 8-byte head of the next frame; `None` at a clean end of the
/// connection.
pub async fn read_head<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<[u8; 8]>, FrameError> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(FrameError::Invalid("connection ended inside a frame head")),
            n => got += n,
        }
    }
    Ok(Some(head))
}

/// Whether a frame head is a control frame's (else DATA).
pub fn is_control(head: &[u8; 8]) -> bool {
    head[0] & 0x80 != 0
}

/// The payload length a frame head announces.
pub fn payload_len(head: &[u8; 8]) -> usize {
    u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize
}

/// Refuses a control frame over [`MAX_CONTROL_PAYLOAD`] by its head alone.
pub fn check_control_len(head: &[u8; 8]) -> Result<(), FrameError> {
    let len = payload_len(head);
    if is_control(head) && len > MAX_CONTROL_PAYLOAD {
        return Err(FrameError::Limit(format!(
            "a control frame of {len} bytes (at most {MAX_CONTROL_PAYLOAD})"
        )));
    }
    Ok(())
}

impl RawFrame {
    /// Reads one frame; `None` at a clean end of the connection. A control
    /// frame over [`MAX_CONTROL_PAYLOAD`] is refused before its payload is
    /// read; a DATA payload grows only as its bytes arrive.
    pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<RawFrame>, FrameError> {
        let Some(head) = read_head(r).await? else {
            return Ok(None);
        };
        check_control_len(&head)?;
        let len = payload_len(&head);
        let mut payload = Vec::with_capacity(len.min(64 * 1024));
        let got = r.take(len as u64).read_to_end(&mut payload).await?;
        if got < len {
            return Err(FrameError::Invalid("connection ended inside a frame"));
        }
        Ok(Some(RawFrame { head, payload }))
    }

    /// Splits a complete frame off the front of `buf`, if it holds one.
    pub fn split(buf: &[u8]) -> Option<(RawFrame, usize)> {
        let head: [u8; 8] = buf.get(..8)?.try_into().ok()?;
        let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        let payload = buf.get(8..8 + len)?.to_vec();
        Some((RawFrame { head, payload }, 8 + len))
    }
}

impl Decoder {
    /// Unpacks a raw frame.
    pub fn decode(&mut self, raw: RawFrame) -> Result<Frame, FrameError> {
        let h = raw.head;
        let flags = h[4];
        check_control_len(&h)?;
        if h[0] & 0x80 == 0 {
            return Ok(Frame::Data {
                stream_id: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
                flags,
                data: raw.payload,
            });
        }
        let version = u16::from_be_bytes([h[0] & 0x7f, h[1]]);
        if version != VERSION {
            return Err(FrameError::Version(version));
        }
        let frame_kind = u16::from_be_bytes([h[2], h[3]]);
        let p = &raw.payload;
        let mut r = Cursor(p);
        Ok(match frame_kind {
            kind::SYN_STREAM => {
                let stream_id = r.id()?;
                let associated_to = r.id()?;
                let priority = r.take(2)?[0] >> 5;
                let headers = self.headers(r.rest())?;
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    flags,
                    headers,
                }
            }
            kind::SYN_REPLY => Frame::SynReply {
                stream_id: r.id()?,
                flags,
                headers: self.headers(r.rest())?,
            },
            kind::HEADERS => Frame::Headers {
                stream_id: r.id()?,
                flags,
                headers: self.headers(r.rest())?,
            },
            kind::RST_STREAM => Frame::RstStream {
                stream_id: r.id()?,
                status: r.u32()?,
            },
            kind::SETTINGS => {
                let count = r.u32()? as usize;
                let mut entries = Vec::new();
                for _ in 0..count {
                    let e = r.take(8)?;
                    entries.push(Setting {
                        flags: e[0],
                        id: u32::from_be_bytes([0, e[1], e[2], e[3]]),
                        value: u32::from_be_bytes([e[4], e[5], e[6], e[7]]),
                    });
                }
                Frame::Settings { flags, entries }
            }
            kind::PING => Frame::Ping { id: r.u32()? },
            kind::GOAWAY => Frame::GoAway {
                last_good_stream_id: r.id()?,
                // SPDY/3 added the status; tolerate a SPDY/2-sized frame.
                status: if p.len() >= 8 { r.u32()? } else { 0 },
            },
            kind::WINDOW_UPDATE => Frame::WindowUpdate {
                stream_id: r.id()?,
                delta: r.id()?,
            },
            kind => Frame::Unknown {
                kind,
                flags,
                payload: raw.payload,
            },
        })
    }

    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, FrameError> {
        Headers::decode(&self.zlib.decompress(compressed)?)
    }
}

/// Big-endian reads over a payload, failing instead of panicking on short input.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.0.len() < n {
            return Err(FrameError::Invalid("frame payload too short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A 31-bit stream id (the reserved top bit is ignored).
    fn id(&mut self) -> Result<u32, FrameError> {
        Ok(self.u32()? & 0x7fff_ffff)
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frames: &[Frame]) {
        let mut enc = Encoder::new().unwrap();
        let mut dec = Decoder::default();
        let mut wire = Vec::new();
        for f in frames {
            enc.encode(f, &mut wire).unwrap();
        }
        let mut pos = 0;
        for f in frames {
            let (raw, used) = RawFrame::split(&wire[pos..]).unwrap();
            pos += used;
            assert_eq!(&dec.decode(raw).unwrap(), f);
        }
        assert_eq!(pos, wire.len());
    }

    #[test]
    fn every_frame_kind_round_trips() {
        let h = |t: &str| Headers::from_pairs([("streamType", t), ("port", "80")]);
        let stored = |t: &str| {
            Headers(vec![
                ("streamtype".into(), t.into()),
                ("port".into(), "80".into()),
            ])
        };
        assert_eq!(h("data"), stored("data"));
        round_trip(&[
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 3,
                flags: 0,
                headers: h("error"),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: FLAG_FIN,
                headers: Headers::default(),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 0,
                priority: 0,
                flags: FLAG_UNIDIRECTIONAL,
                headers: h("stdout"),
            },
            Frame::Data {
                stream_id: 3,
                flags: 0,
                data: b"hello".to_vec(),
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Vec::new(),
            },
            Frame::Headers {
                stream_id: 3,
                flags: 0,
                headers: h("x"),
            },
            Frame::RstStream {
                stream_id: 5,
                status: rst::CANCEL,
            },
            Frame::Settings {
                flags: 0,
                entries: vec![Setting {
                    flags: 1,
                    id: 7,
                    value: 65536,
                }],
            },
            Frame::Ping { id: 1 },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            },
            Frame::WindowUpdate {
                stream_id: 3,
                delta: 1000,
            },
            Frame::Unknown {
                kind: 0x42,
                flags: 0,
                payload: vec![1, 2, 3],
            },
        ]);
    }

    #[test]
    fn layout_matches_the_specification() {
        let mut enc = Encoder::new().unwrap();
        let mut wire = Vec::new();
        enc.encode(
            &Frame::Data {
                stream_id: 5,
                flags: FLAG_FIN,
                data: b"ab".to_vec(),
            },
            &mut wire,
        )
        .unwrap();
        assert_eq!(wire, [0, 0, 0, 5, 1, 0, 0, 2, b'a', b'b']);
        wire.clear();
        enc.encode(
            &Frame::RstStream {
                stream_id: 7,
                status: rst::REFUSED_STREAM,
            },
            &mut wire,
        )
        .unwrap();
        assert_eq!(wire, [0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 3]);
        wire.clear();
        enc.encode(&Frame::Ping { id: 2 }, &mut wire).unwrap();
        assert_eq!(wire, [0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 2]);
        wire.clear();
        enc.encode(
            &Frame::GoAway {
                last_good_stream_id: 9,
                status: 0,
            },
            &mut wire,
        )
        .unwrap();
        assert_eq!(wire, [0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 0]);
        wire.clear();
        enc.encode(
            &Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: Headers::default(),
            },
            &mut wire,
        )
        .unwrap();
        assert_eq!(&wire[..5], &[0x80, 3, 0, 2, 0]);
        assert_eq!(&wire[8..12], &[0, 0, 0, 1]);
        // A zlib stream with the dictionary flag, for an empty block.
        assert_eq!(wire[12] & 0x0f, 8);
        assert_eq!(&wire[14..18], &0xe3c6_a7c2u32.to_be_bytes());
    }

    #[test]
    fn header_block_layout() {
        let h = Headers::from_pairs([("streamType", "stdin"), ("Port", "1"), ("port", "2")]);
        let block = h.encode();
        let mut expect = vec![0, 0, 0, 2, 0, 0, 0, 10];
        expect.extend_from_slice(b"streamtype");
        expect.extend_from_slice(&[0, 0, 0, 5]);
        expect.extend_from_slice(b"stdin");
        expect.extend_from_slice(&[0, 0, 0, 4]);
        expect.extend_from_slice(b"port");
        expect.extend_from_slice(&[0, 0, 0, 3]);
        expect.extend_from_slice(b"1\x002");
        assert_eq!(block, expect);
        let back = Headers::decode(&block).unwrap();
        assert_eq!(back.get("StreamType"), Some("stdin"));
        assert_eq!(back.0.len(), 3);
    }

    #[test]
    fn short_and_bad_frames_are_errors_not_panics() {
        let mut dec = Decoder::default();
        for (head, payload) in [
            ([0x80u8, 3, 0, 3, 0, 0, 0, 2], vec![0u8, 1]),
            ([0x80, 2, 0, 6, 0, 0, 0, 4], vec![0, 0, 0, 1]),
            ([0x80, 3, 0, 1, 0, 0, 0, 12], vec![0; 12]),
            ([0x80, 3, 0, 4, 0, 0, 0, 4], vec![0, 0, 0, 9]),
        ] {
            assert!(dec.decode(RawFrame { head, payload }).is_err());
        }
        assert!(Headers::decode(&[0, 0, 0, 1, 0, 0, 0, 9, b'a']).is_err());
        assert!(RawFrame::split(&[0, 0, 0, 1, 0, 0, 0, 5, 1]).is_none());
    }
}
