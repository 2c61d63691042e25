//! SPDY/3.1 frames as a peer sends them: split off the bytes one after the
//! other and decoded by one `Decoder` (its zlib stream carries over from
//! frame to frame). Nothing may panic, and what decodes stays in bounds.
#![no_main]

use berth_streaming::spdy::frame::{Decoder, Frame, RawFrame, MAX_HEADERS, MAX_HEADER_LIST};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::default();
    let mut rest = data;
    while let Some((raw, used)) = RawFrame::split(rest) {
        rest = &rest[used..];
        let headers = match decoder.decode(raw) {
            Ok(Frame::SynStream { headers, .. })
            | Ok(Frame::SynReply { headers, .. })
            | Ok(Frame::Headers { headers, .. }) => headers,
            Ok(_) => continue,
            // The connection ends at the first bad frame.
            Err(_) => break,
        };
        assert!(headers.0.len() <= MAX_HEADERS);
        let bytes: usize = headers.0.iter().map(|(n, v)| n.len() + v.len()).sum();
        assert!(bytes <= MAX_HEADER_LIST);
    }
});
