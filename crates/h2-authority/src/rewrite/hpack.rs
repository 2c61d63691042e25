//! What the re-encoding needs of a header block beyond its decoded fields,
//! which the HPACK decoder and encoder of `loona_hpack` leave out: the
//! dynamic table size updates at the start of the block (RFC 7541 section
//! 4.2), and which fields came as never-indexed literals (section 6.2.3),
//! which an intermediary must send as never-indexed literals again
//! (section 7.1.3); and writing both.

use loona_hpack::decoder::{DecoderError, IntegerDecodingError, StringDecodingError};
use loona_hpack::encoder::encode_integer_into;

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
    /// Ordinals (in block order, from 0) of the fields that are
    /// never-indexed literals.
    pub never_indexed: Vec<usize>,
}

impl Shape {
    /// Reads the representations of `block` without decoding any string.
    /// A size update that is not at the start of the block, or one above
    /// `limit` (the largest table the client may use), is an error, as it
    /// is for the server's decoder.
    pub fn scan(&mut self, block: &[u8], limit: usize) -> Result<(), DecoderError> {
        self.update = None;
        self.fields_start = 0;
        self.never_indexed.clear();
        let mut pos = 0;
        let mut fields = 0;
        while let Some(&first) = block.get(pos) {
            let rest = &block[pos..];
            pos += if first & 0x80 != 0 {
                // Indexed field.
                integer(rest, 7)?.1
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing.
                literal(rest, 6)?
            } else if first & 0x20 != 0 {
                if fields > 0 {
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
                // Literal without indexing (0000) or never indexed (0001).
                if first & 0x10 != 0 {
                    self.never_indexed.push(fields);
                }
                literal(rest, 4)?
            };
            if first & 0xe0 != 0x20 {
                fields += 1;
            }
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

/// Writes a dynamic table size update.
pub(super) fn write_size_update(size: usize, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = encode_integer_into(size, 5, 0x20, out);
}

/// Writes a never-indexed literal field with a literal name (it touches no
/// table).
pub(super) fn write_never_indexed(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x10);
    for s in [name, value] {
        let _ = encode_integer_into(s.len(), 7, 0, out);
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_updates_and_never_indexed_fields() {
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
        assert_eq!(shape.never_indexed, [1]);
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
    }

    #[test]
    fn written_representations_decode() {
        let mut out = Vec::new();
        write_size_update(4096, &mut out);
        write_never_indexed(b"authorization", &[b'v'; 200], &mut out);
        let mut shape = Shape::default();
        shape.scan(&out, 4096).unwrap();
        assert_eq!(shape.update, Some((4096, 4096)));
        assert_eq!(shape.never_indexed, [0]);
        let mut decoder = loona_hpack::Decoder::new();
        let fields = decoder.decode(&out).unwrap();
        assert_eq!(fields, [(b"authorization".to_vec(), vec![b'v'; 200])]);
    }
}
