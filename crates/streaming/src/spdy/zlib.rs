//! SPDY/3 header compression: one zlib stream per direction for the whole
//! connection, primed with the dictionary of the SPDY/3 specification, each
//! header block ended with a sync flush.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::frame::FrameError;

/// The SPDY/3 header compression dictionary (1423 bytes, from the
/// specification; its Adler-32 is `0xe3c6a7c2`).
pub const DICTIONARY: &[u8] =
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\
    \x03put\x00\x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\
    \x00\x00\x0eaccept-charset\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0facc\
    ept-language\x00\x00\x00\x0daccept-ranges\x00\x00\x00\x03age\x00\x00\x00\x05\
    allow\x00\x00\x00\x0dauthorization\x00\x00\x00\x0dcache-control\x00\x00\x00\
    \x0aconnection\x00\x00\x00\x0ccontent-base\x00\x00\x00\x10content-encoding\
    \x00\x00\x00\x10content-language\x00\x00\x00\x0econtent-length\x00\x00\x00\
    \x10content-location\x00\x00\x00\x0bcontent-md5\x00\x00\x00\x0dcontent-range\
    \x00\x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00\
    \x00\x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04hos\
    t\x00\x00\x00\x08if-match\x00\x00\x00\x11if-modified-since\x00\x00\x00\x0dif\
    -none-match\x00\x00\x00\x08if-range\x00\x00\x00\x13if-unmodified-since\x00\
    \x00\x00\x0dlast-modified\x00\x00\x00\x08location\x00\x00\x00\x0cmax-forward\
    s\x00\x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\x00\x13pro\
    xy-authorization\x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0b\
    retry-after\x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\
    \x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\x0auser\
    -agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\x07warning\x00\x00\
    \x00\x10www-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\x00\x00\
    \x00\x06status\x00\x00\x00\x06200 OK\x00\x00\x00\x07version\x00\x00\x00\x08H\
    TTP/1.1\x00\x00\x00\x03url\x00\x00\x00\x06public\x00\x00\x00\x0aset-cookie\
    \x00\x00\x00\x0akeep-alive\x00\x00\x00\x06origin1001012012022052063003023033\
    04305306307402405406407408409410411412413414415416417502504505203 Non-Author\
    itative Information204 No Content301 Moved Permanently400 Bad Request401 Una\
    uthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemen\
    ted503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 0\
    0:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,im\
    age/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/java\
    script,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1\
    ,utf-,*,enq=0.";

/// Largest header block accepted after decompression.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// The sending side's compressor.
pub struct HeaderCompressor {
    zlib: Compress,
}

impl HeaderCompressor {
    /// A compressor primed with [`DICTIONARY`].
    pub fn new() -> Result<HeaderCompressor, FrameError> {
        let mut zlib = Compress::new(Compression::default(), true);
        zlib.set_dictionary(DICTIONARY)
            .map_err(|e| FrameError::Compression(e.to_string()))?;
        Ok(HeaderCompressor { zlib })
    }

    /// Compresses one header block, sync-flushed so the peer can decode it
    /// at once.
    pub fn compress(&mut self, block: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut pos = 0;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256.max(block.len() - pos));
            }
            let before = self.zlib.total_in();
            self.zlib
                .compress_vec(&block[pos..], &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::Compression(e.to_string()))?;
            pos += (self.zlib.total_in() - before) as usize;
            // Done when all input is in and the flush left room to spare.
            if pos == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The receiving side's decompressor.
pub struct HeaderDecompressor {
    zlib: Decompress,
}

impl Default for HeaderDecompressor {
    fn default() -> Self {
        HeaderDecompressor {
            zlib: Decompress::new(true),
        }
    }
}

impl HeaderDecompressor {
    /// Decompresses one header block (the peer's stream asks for the
    /// dictionary in its first block). Output past [`MAX_HEADER_BLOCK`] is an
    /// error before it is made: zlib inflates a run of one byte about a
    /// thousand to one, so a small frame can carry a huge block.
    pub fn decompress(&mut self, data: &[u8]) -> Result<Vec<u8>, FrameError> {
        let too_large = || {
            FrameError::Limit(format!(
                "a header block that decompresses to more than {MAX_HEADER_BLOCK} bytes"
            ))
        };
        let mut out = Vec::with_capacity((data.len() * 4 + 64).min(MAX_HEADER_BLOCK + 1));
        let mut pos = 0;
        loop {
            if out.capacity() - out.len() < 64 {
                // One byte past the limit tells a block of exactly the limit
                // from a larger one.
                let room = (MAX_HEADER_BLOCK + 1).saturating_sub(out.len());
                if room == 0 {
                    return Err(too_large());
                }
                out.reserve_exact(out.len().max(256).min(room));
            }
            let (in_before, out_before) = (self.zlib.total_in(), out.len());
            let result = self
                .zlib
                .decompress_vec(&data[pos..], &mut out, FlushDecompress::Sync);
            let consumed = (self.zlib.total_in() - in_before) as usize;
            pos += consumed;
            if out.len() > MAX_HEADER_BLOCK {
                return Err(too_large());
            }
            let mut progress = consumed > 0 || out.len() > out_before;
            match result {
                Ok(Status::Ok) | Ok(Status::BufError) | Ok(Status::StreamEnd) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(DICTIONARY)
                        .map_err(|e| FrameError::Compression(e.to_string()))?;
                    progress = true;
                }
                Err(e) => return Err(FrameError::Compression(e.to_string())),
            }
            if pos == data.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if !progress {
                return Err(FrameError::Compression(
                    "the header block does not decompress".into(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_the_specified_one() {
        assert_eq!(DICTIONARY.len(), 1423);
        let mut zlib = Compress::new(Compression::default(), true);
        assert_eq!(zlib.set_dictionary(DICTIONARY).unwrap(), 0xe3c6_a7c2);
    }

    #[test]
    fn blocks_round_trip_on_one_stream() {
        let mut c = HeaderCompressor::new().unwrap();
        let mut d = HeaderDecompressor::default();
        let blocks: Vec<Vec<u8>> = vec![
            b"\x00\x00\x00\x01\x00\x00\x00\x0astreamtype\x00\x00\x00\x05error".to_vec(),
            Vec::new(),
            (0..5000u32).flat_map(|i| i.to_be_bytes()).collect(),
            b"\x00\x00\x00\x00".to_vec(),
        ];
        for block in &blocks {
            let packed = c.compress(block).unwrap();
            assert_eq!(&d.decompress(&packed).unwrap(), block);
        }
    }

    #[test]
    fn the_first_block_names_the_dictionary() {
        let mut c = HeaderCompressor::new().unwrap();
        let packed = c.compress(b"\x00\x00\x00\x00").unwrap();
        // zlib header with FDICT set, then the dictionary's Adler-32.
        assert_eq!(packed[1] & 0x20, 0x20);
        assert_eq!(&packed[2..6], &0xe3c6_a7c2u32.to_be_bytes());
    }

    #[test]
    fn garbage_is_an_error() {
        let mut d = HeaderDecompressor::default();
        assert!(d.decompress(b"\x12\x34\x56\x78garbage").is_err());
    }
}
