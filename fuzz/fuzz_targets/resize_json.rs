//! The resize stream: JSON terminal sizes, split anywhere across chunks.
//! No panic, what is kept stays bounded, and where neither run gives up
//! the sizes do not depend on where the chunks were cut.
#![no_main]

use berth_streaming::ResizeDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let whole = {
        let mut d = ResizeDecoder::default();
        let mut sizes = Vec::new();
        d.push(input, &mut sizes).map(|()| sizes)
    };
    let split = {
        let mut d = ResizeDecoder::default();
        let mut sizes = Vec::new();
        let at = usize::from(cut).min(input.len());
        d.push(&input[..at], &mut sizes)
            .and_then(|()| d.push(&input[at..], &mut sizes))
            .map(|()| sizes)
    };
    if let (Ok(a), Ok(b)) = (&whole, &split) {
        assert_eq!(a, b);
    }
});
