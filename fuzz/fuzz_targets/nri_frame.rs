//! NRI's multiplexed trunk, as a plugin writes it: frames (connection id,
//! length, payload) read one after the other from one buffer, and the ttrpc
//! message headers inside them.
#![no_main]

use berth_nri::mux::frame::{
    decode_frame, split_message, ttrpc_body_len, Decoded, FRAME_HEADER_LEN, MAX_PAYLOAD,
    TTRPC_HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        match decode_frame(rest) {
            Ok(Decoded::Frame {
                conn,
                payload,
                consumed,
            }) => {
                assert_ne!(conn, 0);
                assert!(payload.len() <= MAX_PAYLOAD);
                assert_eq!(consumed, FRAME_HEADER_LEN + payload.len());
                if let Some(hdr) = payload.get(..TTRPC_HEADER_LEN) {
                    let mut h = [0u8; TTRPC_HEADER_LEN];
                    h.copy_from_slice(hdr);
                    let total = ttrpc_body_len(&h).saturating_add(TTRPC_HEADER_LEN);
                    let parts = split_message(total);
                    assert_eq!(parts.iter().sum::<usize>(), total);
                }
                rest = &rest[consumed..];
            }
            Ok(Decoded::Incomplete { needed }) => {
                assert!(needed > 0);
                break;
            }
            Err(_) => break,
        }
    }
});
