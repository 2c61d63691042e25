//! The channel framing of kubelet's WebSocket sub-protocols: a channel
//! byte (or digit and base64) then the data. Any message decodes or is
//! skipped; a binary message's data is its bytes after the channel.
#![no_main]

use berth_streaming::decode_websocket_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((channel, payload)) = decode_websocket_message(false, data) {
        assert_eq!(channel, data[0]);
        assert_eq!(payload, &data[1..]);
    }
    let _ = decode_websocket_message(true, data);
});
