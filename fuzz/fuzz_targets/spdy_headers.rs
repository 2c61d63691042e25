//! Uncompressed SPDY name/value blocks: `Headers::decode` never panics,
//! stays within its bounds, and what it decodes encodes back to a block
//! that decodes to the same pairs (once repeated names are joined).
#![no_main]

use berth_streaming::spdy::frame::{Headers, MAX_HEADERS, MAX_HEADER_LIST};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(headers) = Headers::decode(data) else {
        return;
    };
    assert!(headers.0.len() <= MAX_HEADERS);
    let bytes: usize = headers.0.iter().map(|(n, v)| n.len() + v.len()).sum();
    assert!(bytes <= MAX_HEADER_LIST);
    // Names are lowered and repeats joined by encode; decoding its block
    // gives the same values under each (lowered) name, in order.
    let again = Headers::decode(&headers.encode()).expect("an encoded block decodes");
    let values = |h: &Headers, name: &str| -> Vec<String> {
        h.0.iter()
            .filter(|(n, _)| n.to_ascii_lowercase() == name)
            .map(|(_, v)| v.clone())
            .collect()
    };
    for (name, _) in &headers.0 {
        let name = name.to_ascii_lowercase();
        // A value with a NUL in it splits on the way back: skip those.
        if values(&headers, &name).iter().any(|v| v.contains('\0')) {
            continue;
        }
        assert_eq!(values(&headers, &name), values(&again, &name), "{name:?}");
    }
});
