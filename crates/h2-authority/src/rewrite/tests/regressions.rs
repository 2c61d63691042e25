//! Regression cases that the differential test (`tests/differential`)
//! found, and the check of the server's SETTINGS_HEADER_TABLE_SIZE.

use super::*;

const SOCKET: &[u8] = b"/run/berth/berth.sock";

/// The header blocks of the rewriter's output, not decoded: (stream, HPACK).
fn blocks(output: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut blocks: Vec<(u32, Vec<u8>)> = Vec::new();
    for f in parse_frames(&output[PREFACE.len()..]) {
        match f.frame_type {
            TYPE_HEADERS => {
                let skip = if f.flags & FLAG_PRIORITY != 0 { 5 } else { 0 };
                blocks.push((f.stream, f.payload[skip..].to_vec()));
            }
            TYPE_CONTINUATION => blocks.last_mut().unwrap().1.extend(&f.payload),
            _ => {}
        }
    }
    blocks
}

/// A SETTINGS frame of the server with SETTINGS_HEADER_TABLE_SIZE.
fn settings(table_size: u32) -> Vec<u8> {
    let mut payload = vec![0, 1];
    payload.extend(table_size.to_be_bytes());
    frame(TYPE_SETTINGS, 0, 0, &payload)
}

/// `:method POST`, then `:authority` with the socket path (a literal
/// without indexing, name 1 of the static table), then `extra`.
fn request_block(extra: &[u8]) -> Vec<u8> {
    let mut block = vec![0x83, 0x01, SOCKET.len() as u8];
    block.extend(SOCKET);
    block.extend(extra);
    block
}

#[test]
fn never_indexed_fields_stay_never_indexed() {
    // RFC 7541 7.1.3: an intermediary keeps a never-indexed literal one.
    // `authorization: secret` (name 23 of the static table) and an
    // `:authority` with the socket path (name 1), both never indexed.
    let mut block = vec![0x83, 0x1f, 0x08, 6];
    block.extend(b"secret");
    block.extend([0x11, SOCKET.len() as u8]);
    block.extend(SOCKET);
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block));
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &block));
    let out = run(&input).unwrap();
    for (_, fragment) in blocks(&out) {
        let mut shape = hpack::Shape::default();
        shape.scan(&fragment, HEADER_TABLE_SIZE).unwrap();
        let never: Vec<bool> = shape
            .kinds
            .iter()
            .map(|&k| k == hpack::Kind::NeverIndexed)
            .collect();
        assert_eq!(never, [false, true, true]);
    }
    let (got, _) = server_view(&out);
    let want = vec![
        h(":method", "POST"),
        h("authorization", "secret"),
        h(":authority", "localhost"),
    ];
    assert_eq!(got[0].2, want);
    assert_eq!(got[1].2, want);
}

#[test]
fn short_references_stay_short() {
    // A long name in the client's dynamic table, then many never-indexed
    // fields that name it by index (3 octets each): toward the server they
    // name it by index too, not as a string each time.
    let name = vec![b'n'; 3000];
    let mut first = request_block(&[0x40, 0x7f, 0x80 + 57, 22]); // 3000 = 127 + 57 + 22 * 128
    first.extend(&name);
    first.extend([1, b'v']);
    let mut later = vec![0x83];
    for _ in 0..60 {
        later.extend([0x1f, 62 - 15, 1, b'w']); // never indexed, name 62
    }
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &first));
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &later));
    let out = run(&input).unwrap();
    let blocks = blocks(&out);
    assert!(blocks[1].1.len() <= later.len(), "{}", blocks[1].1.len());
    let (got, _) = server_view(&out);
    assert_eq!(got[1].2.len(), 61);
    assert_eq!(got[1].2[60], (name, b"w".to_vec()));
}

#[test]
fn a_block_of_size_updates_only_is_followed() {
    // Empty trailers right after a table size change: valid HPACK, which
    // loona-hpack's decoder refuses (`SizeUpdateAtEnd`) when handed it whole.
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &request_block(&[]),
    ));
    let trailers = [0x20, 0x3f, 0xe1, 0x1f]; // size updates to 0, then 4096
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_END_STREAM,
        1,
        &trailers,
    ));
    let out = run(&input).unwrap();
    let (got, _) = server_view(&out);
    assert_eq!(got[1], (1, FLAG_END_HEADERS | FLAG_END_STREAM, vec![]));
    assert_eq!(run_bytewise(&input), out);
}

#[test]
fn a_size_update_after_a_field_is_refused() {
    // As the server's decoder does (RFC 7541 4.2: at the start of a block).
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &request_block(&[0x20]),
    ));
    assert!(matches!(
        run(&input),
        Err(Error::Hpack {
            stream: 1,
            source: loona_hpack::decoder::DecoderError::InvalidMaxDynamicSize
        })
    ));
}

#[test]
fn the_encoder_shrinks_when_the_client_acknowledges_a_smaller_server_table() {
    let mut rewriter = Rewriter::new();
    rewriter.observe_server(&settings(0)).unwrap();
    let mut input = PREFACE.to_vec();
    // Before the acknowledgement the server's table is still 4096.
    let indexed = [0x40, 1, b'x', 1, b'y']; // x: y, with incremental indexing
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &request_block(&indexed),
    ));
    input.extend(frame(TYPE_SETTINGS, FLAG_ACK, 0, &[]));
    // The client shrinks its table too (the rewriter's side is its own).
    let after = [[0x20].as_slice(), &request_block(&[0x40, 1, b'x', 1, b'z'])].concat();
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &after));
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        5,
        &request_block(&[]),
    ));
    let mut out = Vec::new();
    rewriter.feed(&input, &mut out).unwrap();
    assert_eq!(rewriter.server_header_table_size(), 0);
    let blocks = blocks(&out);
    let mut shape = hpack::Shape::default();
    shape.scan(&blocks[0].1, 4096).unwrap();
    assert_eq!(shape.update, None);
    // The first block after the acknowledgement says 0, and only that one.
    shape.scan(&blocks[1].1, 0).unwrap();
    assert_eq!(shape.update, Some((0, 0)));
    shape.scan(&blocks[2].1, 0).unwrap();
    assert_eq!(shape.update, None);
    let (got, _) = server_view(&out);
    assert_eq!(got[1].2[2], h("x", "z"));
}

#[test]
fn the_client_may_use_the_larger_table_the_server_allows() {
    // A size update to 65536 (5 octets) before the request.
    let block = [[0x3f, 0xe1, 0xff, 0x03].as_slice(), &request_block(&[])].concat();
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block));
    // Not what a server that said nothing allows.
    assert!(matches!(
        run(&input),
        Err(Error::Hpack {
            stream: 1,
            source: loona_hpack::decoder::DecoderError::InvalidMaxDynamicSize
        })
    ));
    // Allowed as soon as the server wrote it (the client may have read it).
    let mut rewriter = Rewriter::new();
    rewriter.observe_server(&settings(65_536)).unwrap();
    let mut out = Vec::new();
    rewriter.feed(&input, &mut out).unwrap();
    // This side's encoder keeps its 4096, which fits: no update toward the server.
    let mut shape = hpack::Shape::default();
    shape.scan(&blocks(&out)[0].1, 4096).unwrap();
    assert_eq!(shape.update, None);
}

#[test]
fn a_server_table_the_rewriter_cannot_follow_is_an_error() {
    let too_large = u32::try_from(MAX_HEADER_TABLE_SIZE + 1).unwrap();
    let mut rewriter = Rewriter::new();
    let result = rewriter.observe_server(&settings(too_large));
    assert!(matches!(result, Err(Error::ServerTableTooLarge { .. })));
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("SETTINGS_HEADER_TABLE_SIZE 262145"),
        "{message}"
    );
    // The largest one it follows is fine.
    let largest = u32::try_from(MAX_HEADER_TABLE_SIZE).unwrap();
    Rewriter::new().observe_server(&settings(largest)).unwrap();
}

#[test]
fn always_rewrite_follows_every_block() {
    let valid = with_authority(&grpcio_request("/a/b"), "localhost");
    let later = grpcio_request("/a/b"); // the socket path
    let mut client = loona_hpack::Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &encode(&mut client, &valid),
    ));
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        3,
        &encode(&mut client, &later),
    ));
    assert_eq!(run(&input).unwrap(), input);
    let mut rewriter = Rewriter::always_rewrite();
    let mut out = Vec::new();
    rewriter.feed(&input, &mut out).unwrap();
    assert_eq!(rewriter.replaced(), 1);
    let (got, _) = server_view(&out);
    assert_eq!(got[0].2, valid);
    assert_eq!(got[1].2, with_authority(&later, "localhost"));
}
