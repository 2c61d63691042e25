//! Image references as CRI's PullImage and kubelet pass them.
#![no_main]

use berth_oci_image::Reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = Reference::parse(text) {
        let _ = (r.domain(), r.path(), r.tag(), r.digest(), r.upstream_host());
        // A reference's full name parses to the same reference.
        let name = match r.tagged() {
            Some(tagged) => tagged,
            None => r.name(),
        };
        let _ = Reference::parse(&name);
    }
});
