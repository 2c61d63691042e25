//! What the re-encoding needs of a header block beyond its decoded fields,
//! which the HPACK decoder of `loona_hpack` leaves out: the dynamic table
//! size updates at the start of the block (RFC 7541 section 4.2), and how
//! each field came (section 6), above all as a never-indexed literal
//! (section 6.2.3), which an intermediary must send as one again (section
//! 7.1.3). And this side's HPACK encoder, which writes each field as the
//! client did as far as its own table allows.

use std::collections::VecDeque;

use loona_hpack::decoder::{DecoderError, IntegerDecodingError, StringDecodingError};
use loona_hpack::encoder::encode_integer_into;

/// How a field came from the client (RFC 7541 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// An index into the client's tables.
    Indexed,
    /// A literal that the client added to its dynamic table.
    Incremental,
    /// A literal without indexing.
    NotIndexed,
    /// A never-indexed literal.
    NeverIndexed,
}

/// The representations of one header block that matter to the re-encoding
/// (its allocation reused from block to block).
#[derive(Debug, Default)]
pub(super) struct Shape {
    /// The smallest and the last size of the dynamic table size updates at
    /// the start of the block, if it has any: applying them in order and
    /// applying these two leave the same table.
    pub update: Option<(usize, usize)>,
    /// Where the first field starts (after the size updates).
    pub fields_start: usize,
    /// How each field came, in block order.
    pub kinds: Vec<Kind>,
}

impl Shape {
    /// Reads the representations of `block` without decoding any string.
    /// A size update that is not at the start of the block, or one above
    /// `limit` (the largest table the client may use), is an error, as it
    /// is for the server's decoder.
    pub fn scan(&mut self, block: &[u8], limit: usize) -> Result<(), DecoderError> {
        self.update = None;
        self.fields_start = 0;
        self.kinds.clear();
        let mut pos = 0;
        while let Some(&first) = block.get(pos) {
            let rest = &block[pos..];
            pos += if first & 0x80 != 0 {
                self.kinds.push(Kind::Indexed);
                integer(rest, 7)?.1
            } else if first & 0x40 != 0 {
                self.kinds.push(Kind::Incremental);
                literal(rest, 6)?
            } else if first & 0x20 != 0 {
                if !self.kinds.is_empty() {
                    return Err(DecoderError::InvalidMaxDynamicSize);
                }
                let (size, n) = integer(rest, 5)?;
                if size > limit {
                    return Err(DecoderError::InvalidMaxDynamicSize);
                }
                let low = self.update.map_or(size, |(low, _)| low.min(size));
                self.update = Some((low, size));
                self.fields_start = pos + n;
                n
            } else {
                self.kinds.push(if first & 0x10 != 0 {
                    Kind::NeverIndexed
                } else {
                    Kind::NotIndexed
                });
                literal(rest, 4)?
            };
        }
        Ok(())
    }
}

/// An HPACK integer with an `prefix`-bit prefix at the start of `buf`:
/// (value, octets). At most 5 octets, as the decoder allows.
fn integer(buf: &[u8], prefix: u8) -> Result<(usize, usize), DecoderError> {
    let not_enough = DecoderError::IntegerDecodingError(IntegerDecodingError::NotEnoughOctets);
    let (&first, rest) = buf.split_first().ok_or(not_enough)?;
    let mask = (1u8 << prefix) - 1;
    let mut value = usize::from(first & mask);
    if value < usize::from(mask) {
        return Ok((value, 1));
    }
    for (i, &b) in rest.iter().enumerate() {
        value += usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, i + 2));
        }
        if i + 2 == 5 {
            return Err(DecoderError::IntegerDecodingError(
                IntegerDecodingError::TooManyOctets,
            ));
        }
    }
    Err(DecoderError::IntegerDecodingError(
        IntegerDecodingError::NotEnoughOctets,
    ))
}

/// The octets of a literal field (name index with a `prefix`-bit prefix,
/// the name if that index is 0, the value) at the start of `buf`.
fn literal(buf: &[u8], prefix: u8) -> Result<usize, DecoderError> {
    let (index, mut pos) = integer(buf, prefix)?;
    if index == 0 {
        pos += string(&buf[pos..])?;
    }
    Ok(pos + string(&buf[pos..])?)
}

/// The octets of a string literal (Huffman-coded or not) at the start of `buf`.
fn string(buf: &[u8]) -> Result<usize, DecoderError> {
    let (len, n) = integer(buf, 7)?;
    if buf.len() - n < len {
        return Err(DecoderError::StringDecodingError(
            StringDecodingError::NotEnoughOctets,
        ));
    }
    Ok(n + len)
}

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// This side's HPACK encoder toward the server. It adds to its dynamic
/// table what the client added to its own (a field the client indexed, or
/// named by an index into its dynamic table), so that both tables hold much
/// the same and what was a short reference from the client stays one
/// toward the server. No Huffman coding: it is for a local socket.
#[derive(Debug)]
pub(super) struct Encoder {
    /// Newest first: index 62 is `table[0]`.
    table: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Encoder {
    pub fn new(max: usize) -> Encoder {
        Encoder {
            table: VecDeque::new(),
            size: 0,
            max,
        }
    }

    /// Writes a dynamic table size update, and takes it.
    pub fn size_update(&mut self, max: usize, out: &mut Vec<u8>) {
        integer_into(max, 5, 0x20, out);
        self.max = max;
        self.evict(0);
    }

    /// Writes one field, which came from the client as `kind`.
    pub fn field(&mut self, name: &[u8], value: &[u8], kind: Kind, out: &mut Vec<u8>) {
        let (exact, named) = self.find(name, value);
        if kind == Kind::NeverIndexed {
            return literal_into(0x10, 4, named, name, value, out);
        }
        if let Some(index) = exact {
            return integer_into(index, 7, 0x80, out);
        }
        let size = name.len() + value.len() + 32;
        if matches!(kind, Kind::Indexed | Kind::Incremental) && size <= self.max {
            // The name is resolved before the insertion evicts anything.
            literal_into(0x40, 6, named, name, value, out);
            self.evict(size);
            self.table.push_front((name.into(), value.into()));
            self.size += size;
        } else {
            literal_into(0x00, 4, named, name, value, out);
        }
    }

    /// The index of the field, and an index of its name (static table first).
    fn find(&self, name: &[u8], value: &[u8]) -> (Option<usize>, Option<usize>) {
        let mut named = None;
        let fixed = STATIC_TABLE.iter().map(|&(n, v)| (n, v));
        let dynamic = self.table.iter().map(|(n, v)| (&n[..], &v[..]));
        for (i, (n, v)) in fixed.chain(dynamic).enumerate() {
            if n == name {
                if v == value {
                    return (Some(i + 1), Some(i + 1));
                }
                named.get_or_insert(i + 1);
            }
        }
        (None, named)
    }

    /// Evicts the oldest entries until `room` more octets fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + 32;
        }
    }
}

fn integer_into(value: usize, prefix: u8, first: u8, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = encode_integer_into(value, prefix, first, out);
}

/// A literal field: its name by index if it has one, else as a string.
fn literal_into(
    first: u8,
    prefix: u8,
    named: Option<usize>,
    name: &[u8],
    value: &[u8],
    out: &mut Vec<u8>,
) {
    match named {
        Some(index) => integer_into(index, prefix, first, out),
        None => {
            out.push(first);
            integer_into(name.len(), 7, 0, out);
            out.extend_from_slice(name);
        }
    }
    integer_into(value.len(), 7, 0, out);
    out.extend_from_slice(value);
}

/// The HPACK static table (RFC 7541 appendix A): index = position + 1.
const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_updates_and_kinds() {
        let mut shape = Shape::default();
        // Size updates 100 and 4096 (3 octets), indexed :method GET, a
        // never-indexed literal with indexed name (authorization, 23), a
        // literal without indexing, a literal with incremental indexing.
        let block = [
            0x3f, 0x45, 0x3f, 0xe1, 0x1f, 0x82, 0x1f, 0x08, 1, b'x', 0x00, 1, b'a', 1, b'b', 0x40,
            1, b'c', 0x81, 0xff,
        ];
        shape.scan(&block, 4096).unwrap();
        assert_eq!(shape.update, Some((100, 4096)));
        assert_eq!(shape.fields_start, 5);
        use Kind::*;
        assert_eq!(
            shape.kinds,
            [Indexed, NeverIndexed, NotIndexed, Incremental]
        );
        // Above the limit; after a field; truncated.
        assert!(shape.scan(&block, 4095).is_err());
        assert!(matches!(
            shape.scan(&[0x82, 0x20], 4096),
            Err(DecoderError::InvalidMaxDynamicSize)
        ));
        assert!(shape.scan(&[0x10, 3, b'a'], 4096).is_err());
        assert!(shape
            .scan(&[0xff, 0x80, 0x80, 0x80, 0x80, 0x01], 4096)
            .is_err());
        assert!(shape.scan(&[0xff, 0x80], 4096).is_err());
        // Only size updates: no field.
        shape.scan(&[0x20], 4096).unwrap();
        assert_eq!((shape.update, shape.fields_start), (Some((0, 0)), 1));
        assert!(shape.kinds.is_empty());
    }

    /// Encodes `fields`, checks that a decoder reads them back, returns the
    /// octets.
    fn encode(
        encoder: &mut Encoder,
        decoder: &mut loona_hpack::Decoder<'static>,
        fields: &[(&[u8], &[u8], Kind)],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        for &(name, value, kind) in fields {
            encoder.field(name, value, kind, &mut out);
        }
        let decoded = decoder.decode(&out).unwrap();
        let want: Vec<_> = fields
            .iter()
            .map(|(n, v, _)| (n.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(decoded, want);
        out
    }

    #[test]
    fn the_encoder_writes_fields_as_the_client_did() {
        use Kind::*;
        let mut encoder = Encoder::new(4096);
        let mut decoder = loona_hpack::Decoder::new();
        let big = vec![b'n'; 3000];
        let out = encode(
            &mut encoder,
            &mut decoder,
            &[
                (b":method", b"POST", Indexed),         // static: 0x83
                (b"x-a", b"1", Incremental),            // new name, added
                (b"x-b", b"2", NotIndexed),             // not added
                (b"authorization", b"s", NeverIndexed), // static name 23
                (&big, b"v", Incremental),              // a long name, added
            ],
        );
        assert_eq!(out[..1], [0x83]);
        assert_eq!(out[1..8], [0x40, 3, b'x', b'-', b'a', 1, b'1']);
        assert_eq!(out[8..15], [0x00, 3, b'x', b'-', b'b', 1, b'2']);
        assert_eq!(out[15..19], [0x1f, 0x08, 1, b's']);
        // Later: references, the long name by its index even never indexed.
        let out = encode(
            &mut encoder,
            &mut decoder,
            &[
                (b"x-a", b"1", Indexed),
                (&big, b"w", NeverIndexed),
                (&big, b"v", NotIndexed),
            ],
        );
        assert_eq!(out, [0x80 | 63, 0x1f, 62 - 15, 1, b'w', 0x80 | 62]);
    }

    #[test]
    fn the_encoder_table_is_bounded_and_follows_size_updates() {
        use Kind::*;
        let mut encoder = Encoder::new(100);
        let mut decoder = loona_hpack::Decoder::new();
        // Too large for the table: a literal without indexing.
        let large = vec![b'v'; 80];
        let out = encode(&mut encoder, &mut decoder, &[(b"x", &large, Incremental)]);
        assert_eq!(out[0], 0x00);
        // 40 octets each: two fit, the third evicts the first.
        for (i, v) in [b"aaaaaa", b"bbbbbb", b"cccccc"].iter().enumerate() {
            let out = encode(&mut encoder, &mut decoder, &[(b"x", *v, Incremental)]);
            assert_eq!(out[0] & 0xc0, 0x40, "{i}");
        }
        assert_eq!(encoder.table.len(), 2);
        let out = encode(&mut encoder, &mut decoder, &[(b"x", b"aaaaaa", Indexed)]);
        assert_eq!(out[0] & 0xc0, 0x40, "evicted: added again");
        let mut out = Vec::new();
        encoder.size_update(0, &mut out);
        assert_eq!(out, [0x20]);
        assert!(encoder.table.is_empty());
        out.extend(encode(&mut encoder, &mut decoder, &[(b"x", b"a", Indexed)]));
        decoder.decode(&out).unwrap();
        assert_eq!(out[1], 0x00);
    }
}
