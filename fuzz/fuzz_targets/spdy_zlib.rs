//! SPDY/3 header compression: the decompressor takes any bytes without a
//! panic and never gives more than `MAX_HEADER_BLOCK`; what the compressor
//! makes decompresses to what went in, block after block on one stream.
#![no_main]

use berth_streaming::spdy::zlib::{HeaderCompressor, HeaderDecompressor, MAX_HEADER_BLOCK};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Hostile input, split into blocks at the first byte's interval.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1) * 16;
    let mut d = HeaderDecompressor::default();
    for block in data.chunks(step) {
        match d.decompress(block) {
            Ok(out) => assert!(out.len() <= MAX_HEADER_BLOCK),
            Err(_) => break,
        }
    }
    // A round trip of the input as blocks.
    let mut c = HeaderCompressor::new().unwrap();
    let mut d = HeaderDecompressor::default();
    for block in data.chunks(step) {
        let packed = c.compress(block).unwrap();
        assert_eq!(d.decompress(&packed).unwrap(), block);
    }
});
