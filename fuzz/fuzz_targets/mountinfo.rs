//! `/proc/self/mountinfo` lines (what berth reads to find mounts and their
//! propagation).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mounts = berth_mountinfo::parse(&text);
    for m in &mounts {
        let _ = (m.is_shared(), m.is_slave(), m.has_super_option("ro"));
    }
    let _ = berth_mountinfo::mount_of(&mounts, std::path::Path::new("/var/lib/berth"));
    let _ = berth_mountinfo::unescape(&text);
});
