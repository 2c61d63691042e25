//! The bounds of the SPDY parsers, through their public API: how many
//! header values a block may decode to, how many bytes they may take, how
//! far a header block may inflate, how large a control frame may be.
//!
//! The inputs are the ones that made the old code allocate without bound, so
//! the process's address space is capped at 4 GiB first ([`bound_memory`]):
//! a regression aborts the test instead of eating the machine.

use berth_streaming::spdy::frame::{Headers, RawFrame};
use berth_streaming::spdy::zlib::{HeaderCompressor, HeaderDecompressor, MAX_HEADER_BLOCK};

/// Caps this test process's address space (a failed allocation aborts).
fn bound_memory() {
    let limit = libc::rlimit {
        rlim_cur: 4 << 30,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
}

/// A block of `names` names, each with `value`.
fn block(names: usize, name_len: usize, value: &[u8]) -> Vec<u8> {
    let mut b = (names as u32).to_be_bytes().to_vec();
    for i in 0..names {
        let digits = i.to_string();
        let mut name = vec![b'n'; name_len.saturating_sub(digits.len())];
        name.extend_from_slice(digits.as_bytes());
        for s in [&name[..], value] {
            b.extend_from_slice(&(s.len() as u32).to_be_bytes());
            b.extend_from_slice(s);
        }
    }
    b
}

#[test]
fn a_block_decodes_to_at_most_1000_values() {
    bound_memory();
    assert_eq!(
        Headers::decode(&block(1000, 4, b"v")).unwrap().0.len(),
        1000
    );
    assert!(Headers::decode(&block(1001, 4, b"v")).is_err());
    // NUL-joined values count one by one.
    let joined = vec![0u8; 999];
    assert_eq!(
        Headers::decode(&block(1, 1, &joined)).unwrap().0.len(),
        1000
    );
    assert!(Headers::decode(&block(1, 1, &[0u8; 1000])).is_err());
    // A count no block could hold is refused before anything is read.
    assert!(Headers::decode(&u32::MAX.to_be_bytes()).is_err());
}

#[test]
fn decoded_names_and_values_are_bounded_before_they_are_copied() {
    bound_memory();
    // 300 KiB name, 3 values: 900 KiB of pairs fits in 1 MiB; 4 do not.
    let name_len = 300 << 10;
    assert_eq!(
        Headers::decode(&block(1, name_len, b"a\0b\0c"))
            .unwrap()
            .0
            .len(),
        3
    );
    assert!(Headers::decode(&block(1, name_len, b"a\0b\0c\0d")).is_err());
    // The block: a 500 KiB name and 500 KiB of NULs.
    assert!(Headers::decode(&block(1, 500 << 10, &vec![0u8; 500 << 10])).is_err());
}

#[test]
fn a_header_block_inflates_to_at_most_the_limit() {
    bound_memory();
    let mut c = HeaderCompressor::new().unwrap();
    let mut d = HeaderDecompressor::default();
    let exact = vec![7u8; MAX_HEADER_BLOCK];
    let packed = c.compress(&exact).unwrap();
    assert_eq!(d.decompress(&packed).unwrap().len(), MAX_HEADER_BLOCK);

    let mut c = HeaderCompressor::new().unwrap();
    let mut d = HeaderDecompressor::default();
    let over = vec![7u8; MAX_HEADER_BLOCK + 1];
    assert!(d.decompress(&c.compress(&over).unwrap()).is_err());

    // 16 MiB of zeros in some 16 KiB: refused, and quickly.
    let mut c = HeaderCompressor::new().unwrap();
    let mut d = HeaderDecompressor::default();
    let bomb = c.compress(&vec![0u8; 16 << 20]).unwrap();
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    let started = std::time::Instant::now();
    assert!(d.decompress(&bomb).is_err());
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[tokio::test]
async fn a_control_frame_over_1_mib_is_refused_by_its_head() {
    // A SYN_STREAM announcing 16 MiB, of which 4 bytes come.
    let (mut client, mut server) = tokio::io::duplex(1024);
    use tokio::io::AsyncWriteExt;
    client
        .write_all(&[0x80, 3, 0, 1, 0, 0xff, 0xff, 0xff, 0, 0, 0, 1])
        .await
        .unwrap();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        RawFrame::read(&mut server),
    )
    .await
    .expect("refused without waiting for the payload");
    assert!(read.is_err());
}
