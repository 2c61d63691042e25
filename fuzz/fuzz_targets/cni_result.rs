//! What a CNI plugin prints on ADD, parsed as each spec version's result.
#![no_main]

use berth_cni::{CniResult, SpecVersion};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&v, json)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let version = SpecVersion::ALL[usize::from(v) % SpecVersion::ALL.len()];
    if let Ok(result) = CniResult::parse(&value, version) {
        let _ = result.sandbox_ips("eth0");
        // What berth caches of a result reads back.
        let cached = serde_json::to_value(&result).unwrap();
        let _ = serde_json::from_value::<CniResult>(cached).unwrap();
    }
});
