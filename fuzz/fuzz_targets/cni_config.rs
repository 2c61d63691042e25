//! CNI network configuration files (`.conf`, `.conflist`).
#![no_main]

use berth_cni::NetworkConfigList;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = NetworkConfigList::from_bytes(data, None) {
        let _ = list.to_value();
    }
});
