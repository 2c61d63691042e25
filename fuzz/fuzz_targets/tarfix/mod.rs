//! The tar headers a fuzzer mutated, made to pass the reader's checksum
//! test, so that the mutation reaches the code behind it (shared by the
//! targets that take tars).

/// Sets the checksum of each header the tar reader meets, walking the
/// stream as it does: a header, the GNU sparse extension blocks it
/// announces, its data rounded up to whole blocks.
pub fn fix_checksums(tar: &mut [u8]) {
    let mut off = 0usize;
    while off + 512 <= tar.len() {
        let block = &mut tar[off..off + 512];
        off += 512;
        if block.iter().all(|&b| b == 0) {
            continue;
        }
        let mut h = tar::Header::new_old();
        h.as_mut_bytes().copy_from_slice(block);
        h.set_cksum();
        block.copy_from_slice(h.as_bytes());
        if h.entry_type() == tar::EntryType::GNUSparse && block[482] != 0 {
            // Extension blocks: 21 sparse entries, then "is extended".
            while off + 512 <= tar.len() {
                let more = tar[off + 504] != 0;
                off += 512;
                if !more {
                    break;
                }
            }
        }
        let size = h.entry_size().unwrap_or(0);
        let Some(next) = usize::try_from(size.div_ceil(512).saturating_mul(512))
            .ok()
            .and_then(|n| off.checked_add(n))
        else {
            return;
        };
        off = next;
    }
}
