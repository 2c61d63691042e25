//! The trunk's frame format, as pure functions on bytes so that it can be
//! unit-tested and fuzzed without any I/O.
//!
//! A frame is an 8-byte header — the logical connection id (u32 big endian)
//! and the payload length (u32 big endian) — followed by the payload. NRI's
//! Go side never sends a frame larger than one ttrpc message (10-byte ttrpc
//! header + 4 MiB body), so anything larger is a protocol error: accepting it
//! would let a plugin make us buffer arbitrary amounts of memory.

/// Length of the frame header on the trunk.
pub const FRAME_HEADER_LEN: usize = 8;
/// Length of a ttrpc message header (length u32, stream id u32, type, flags).
pub const TTRPC_HEADER_LEN: usize = 10;
/// The largest ttrpc message body ttrpc allows (Go and Rust alike).
pub const TTRPC_MAX_MESSAGE: usize = 4 << 20;
/// The largest frame payload a peer may send: one whole ttrpc message.
pub const MAX_PAYLOAD: usize = TTRPC_HEADER_LEN + TTRPC_MAX_MESSAGE;
/// Go's ttrpc reads through a `bufio.Reader` of this size, and NRI's Go mux
/// fails a read (ENOMEM) whose buffer is smaller than the frame: we must cut
/// our messages into frames exactly as Go's `bufio.Writer` of the same size
/// would (see [`split_message`]).
pub const GO_BUFIO_SIZE: usize = 4096;

/// Logical connection on which the plugin serves the `Plugin` service.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// Logical connection on which the runtime serves the `Runtime` service.
pub const RUNTIME_SERVICE_CONN: u32 = 2;

/// What is wrong with bytes that claim to be a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Connection id 0 is reserved by NRI's mux.
    #[error("frame for the reserved connection id 0")]
    ReservedConn,
    /// A payload larger than [`MAX_PAYLOAD`].
    #[error("frame payload of {len} bytes exceeds the maximum of {max}")]
    Oversize { len: usize, max: usize },
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub conn: u32,
    pub len: usize,
}

/// Result of [`decode_frame`] on a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole frame; `consumed` bytes of the buffer belong to it.
    Frame {
        conn: u32,
        payload: &'a [u8],
        consumed: usize,
    },
    /// The buffer holds only part of a frame: at least `needed` more bytes
    /// must be read before it can be decoded.
    Incomplete { needed: usize },
}

/// Decodes and validates a frame header.
pub fn decode_header(hdr: [u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, FrameError> {
    let conn = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let len = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
    if conn == 0 {
        return Err(FrameError::ReservedConn);
    }
    if len > MAX_PAYLOAD {
        return Err(FrameError::Oversize {
            len,
            max: MAX_PAYLOAD,
        });
    }
    Ok(FrameHeader { conn, len })
}

/// Decodes the first frame in `buf` (the fuzzing entry point).
pub fn decode_frame(buf: &[u8]) -> Result<Decoded<'_>, FrameError> {
    let Some(hdr) = buf.get(..FRAME_HEADER_LEN) else {
        return Ok(Decoded::Incomplete {
            needed: FRAME_HEADER_LEN - buf.len(),
        });
    };
    let mut raw = [0u8; FRAME_HEADER_LEN];
    raw.copy_from_slice(hdr);
    let FrameHeader { conn, len } = decode_header(raw)?;
    let end = FRAME_HEADER_LEN + len;
    match buf.get(FRAME_HEADER_LEN..end) {
        Some(payload) => Ok(Decoded::Frame {
            conn,
            payload,
            consumed: end,
        }),
        None => Ok(Decoded::Incomplete {
            needed: end - buf.len(),
        }),
    }
}

/// Encodes a frame header.
pub fn encode_header(conn: u32, len: usize) -> [u8; FRAME_HEADER_LEN] {
    let mut hdr = [0u8; FRAME_HEADER_LEN];
    hdr[..4].copy_from_slice(&conn.to_be_bytes());
    // Callers never pass more than MAX_PAYLOAD, which fits in a u32.
    hdr[4..].copy_from_slice(&(len as u32).to_be_bytes());
    hdr
}

/// Encodes one whole frame (header and payload).
pub fn encode_frame(conn: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_header(conn, payload.len()));
    out.extend_from_slice(payload);
    out
}

/// The frame sizes one ttrpc message of `total` bytes (header included) is
/// cut into, matching what Go's ttrpc produces through a 4096-byte
/// `bufio.Writer`: a message that fits goes whole; a larger one is a full
/// 4096-byte frame then the rest in one frame. Go's reader (a 4096-byte
/// `bufio.Reader` over a mux that refuses frames larger than the read buffer)
/// only copes with exactly this split.
pub fn split_message(total: usize) -> Vec<usize> {
    if total <= GO_BUFIO_SIZE {
        vec![total]
    } else {
        vec![GO_BUFIO_SIZE, total - GO_BUFIO_SIZE]
    }
}

/// Body length announced by a ttrpc message header.
pub fn ttrpc_body_len(hdr: &[u8; TTRPC_HEADER_LEN]) -> usize {
    u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let f = encode_frame(2, b"hello");
        assert_eq!(
            decode_frame(&f),
            Ok(Decoded::Frame {
                conn: 2,
                payload: b"hello",
                consumed: 13
            })
        );
    }

    #[test]
    fn short_header_and_short_payload_are_incomplete() {
        assert_eq!(decode_frame(&[]), Ok(Decoded::Incomplete { needed: 8 }));
        assert_eq!(
            decode_frame(&[0, 0, 0, 1, 0]),
            Ok(Decoded::Incomplete { needed: 3 })
        );
        let f = encode_frame(1, b"abcdef");
        assert_eq!(
            decode_frame(&f[..10]),
            Ok(Decoded::Incomplete { needed: 4 })
        );
    }

    #[test]
    fn oversize_and_reserved_are_errors() {
        let mut hdr = encode_header(1, 0);
        hdr[4..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode_frame(&hdr),
            Err(FrameError::Oversize { .. })
        ));
        let hdr = encode_header(1, MAX_PAYLOAD + 1);
        assert!(matches!(
            decode_frame(&hdr),
            Err(FrameError::Oversize { .. })
        ));
        let ok = encode_header(1, MAX_PAYLOAD);
        assert_eq!(
            decode_frame(&ok),
            Ok(Decoded::Incomplete {
                needed: MAX_PAYLOAD
            })
        );
        assert_eq!(
            decode_frame(&encode_frame(0, b"x")),
            Err(FrameError::ReservedConn)
        );
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic fuzz: every prefix of some noisy buffers.
        let mut seed = 0x2545_f491_u32;
        for _ in 0..200 {
            let mut buf = Vec::new();
            for _ in 0..64 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                buf.push((seed % 7) as u8);
            }
            for n in 0..buf.len() {
                let _ = decode_frame(&buf[..n]);
            }
        }
    }

    #[test]
    fn split_like_go_bufio() {
        assert_eq!(split_message(10), vec![10]);
        assert_eq!(split_message(4096), vec![4096]);
        assert_eq!(split_message(4097), vec![4096, 1]);
        assert_eq!(split_message(100_000), vec![4096, 95_904]);
    }
}
