//! HTTP/2 frames from a CRI client, through the `:authority` rewriter in
//! front of the gRPC server (split at points the input chooses): an error
//! or a bounded output, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = berth_h2_authority::Rewriter::new();
    let mut out = Vec::new();
    let mut input = berth_h2_authority::PREFACE.to_vec();
    input.extend_from_slice(data);
    let step = 1 + data.first().copied().unwrap_or(0) as usize;
    for chunk in input.chunks(step) {
        if r.feed(chunk, &mut out).is_err() {
            break;
        }
    }
    assert!(out.len() <= input.len() * 4 + berth_h2_authority::MAX_HEADER_LIST);
});
