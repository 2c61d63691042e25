//! Unit tests of the rewriting: header blocks in, frames out, decoded again
//! with an HPACK decoder as the server's would.

use super::*;

type Headers = Vec<(Vec<u8>, Vec<u8>)>;

fn h(name: &str, value: &str) -> (Vec<u8>, Vec<u8>) {
    (name.as_bytes().to_vec(), value.as_bytes().to_vec())
}

/// The request headers of a gRPC C-core client dialing `unix:/run/berth/berth.sock`.
fn grpcio_request(path: &str) -> Headers {
    vec![
        h(":scheme", "http"),
        h(":method", "POST"),
        h(":authority", "/run/berth/berth.sock"),
        h(":path", path),
        h("te", "trailers"),
        h("content-type", "application/grpc"),
        h(
            "user-agent",
            "grpc-python/1.85.3 grpc-c/51.0.0 (linux; chttp2)",
        ),
        h("grpc-accept-encoding", "identity, deflate, gzip"),
    ]
}

fn frame(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame_header(&mut out, payload.len(), frame_type, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn encode(encoder: &mut loona_hpack::Encoder<'static>, headers: &Headers) -> Vec<u8> {
    encoder.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])))
}

/// A frame as the server reads it.
#[derive(Debug)]
struct Frame {
    frame_type: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn parse_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 9, "partial frame header in the output");
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        assert!(len <= OUT_FRAME_SIZE || (bytes[3] != 1 && bytes[3] != 9));
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        frames.push(Frame {
            frame_type: bytes[3],
            flags: bytes[4],
            stream,
            payload: bytes[9..9 + len].to_vec(),
        });
        bytes = &bytes[9 + len..];
    }
    frames
}

/// Decodes the header blocks of the output as the server does (one
/// decoder for the connection); returns (stream, flags of the HEADERS
/// frame, headers) for each block, and the other frames.
fn server_view(output: &[u8]) -> (Vec<(u32, u8, Headers)>, Vec<Frame>) {
    assert!(output.starts_with(PREFACE));
    let mut decoder = loona_hpack::Decoder::new();
    let mut blocks = Vec::new();
    let mut others = Vec::new();
    let mut open: Option<(u32, u8, Vec<u8>)> = None;
    for f in parse_frames(&output[PREFACE.len()..]) {
        match f.frame_type {
            TYPE_HEADERS => {
                assert!(open.is_none());
                let mut fragment = &f.payload[..];
                let mut pad = 0;
                if f.flags & FLAG_PADDED != 0 {
                    pad = usize::from(fragment[0]);
                    fragment = &fragment[1..];
                }
                if f.flags & FLAG_PRIORITY != 0 {
                    fragment = &fragment[5..];
                }
                let fragment = fragment[..fragment.len() - pad].to_vec();
                open = Some((f.stream, f.flags, fragment));
            }
            TYPE_CONTINUATION => {
                let (stream, _, block) = open.as_mut().expect("CONTINUATION without HEADERS");
                assert_eq!(*stream, f.stream);
                block.extend_from_slice(&f.payload);
            }
            _ => {
                assert!(open.is_none());
                others.push(f);
                continue;
            }
        }
        if f.flags & FLAG_END_HEADERS != 0 {
            let (stream, flags, block) = open.take().unwrap();
            blocks.push((
                stream,
                flags,
                decoder.decode(&block).expect("valid HPACK out"),
            ));
        }
    }
    assert!(open.is_none());
    (blocks, others)
}

fn run(input: &[u8]) -> Result<Vec<u8>, Error> {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    rewriter.feed(input, &mut out)?;
    Ok(out)
}

/// Feeds one octet at a time.
fn run_bytewise(input: &[u8]) -> Vec<u8> {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    for b in input {
        rewriter.feed(std::slice::from_ref(b), &mut out).unwrap();
    }
    out
}

fn with_authority(headers: &Headers, authority: &str) -> Headers {
    headers
        .iter()
        .map(|(n, v)| {
            if n == b":authority" {
                (n.clone(), authority.as_bytes().to_vec())
            } else {
                (n.clone(), v.clone())
            }
        })
        .collect()
}

#[test]
fn socket_path_authority_becomes_localhost_other_headers_unchanged() {
    let headers = grpcio_request("/runtime.v1.RuntimeService/Version");
    let mut client = loona_hpack::Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &encode(&mut client, &headers),
    ));
    input.extend(frame(0x0, FLAG_END_STREAM, 1, &[0, 0, 0, 0, 0])); // DATA: empty message

    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    rewriter.feed(&input, &mut out).unwrap();
    assert_eq!(rewriter.replaced(), 1);
    let (blocks, others) = server_view(&out);
    assert_eq!(blocks.len(), 1);
    let (stream, flags, got) = &blocks[0];
    assert_eq!(*stream, 1);
    assert_eq!(*flags, FLAG_END_HEADERS);
    assert_eq!(*got, with_authority(&headers, "localhost"));
    // SETTINGS and DATA pass byte for byte.
    assert_eq!(others.len(), 2);
    assert_eq!(others[0].frame_type, 0x4);
    assert_eq!(others[1].frame_type, 0x0);
    assert_eq!(others[1].flags, FLAG_END_STREAM);
    assert_eq!(others[1].payload, [0, 0, 0, 0, 0]);
    assert!(out.ends_with(&frame(0x0, FLAG_END_STREAM, 1, &[0, 0, 0, 0, 0])));
    // Any chunking gives the same bytes.
    assert_eq!(run_bytewise(&input), out);
}

#[test]
fn valid_authorities_are_kept() {
    for authority in [
        "localhost",
        "localhost:1234",
        "10.0.0.1:80",
        "[::1]:10010",
        "berth",
    ] {
        let headers = with_authority(&grpcio_request("/a/b"), authority);
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM,
            1,
            &encode(&mut client, &headers),
        ));
        let (blocks, _) = server_view(&run(&input).unwrap());
        assert_eq!(blocks[0].2, headers, "{authority}");
        assert_eq!(blocks[0].1, FLAG_END_HEADERS | FLAG_END_STREAM);
    }
    // What h2 refuses is replaced: the socket path, with and without the scheme.
    for authority in [
        "tmp%2Frun%2Fberth%2Fberth.sock",
        "/run/berth/berth.sock",
        "unix:/run/berth/berth.sock",
        "unix:///tmp/x.sock",
        "a b",
        "",
    ] {
        let headers = with_authority(&grpcio_request("/a/b"), authority);
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &encode(&mut client, &headers),
        ));
        let (blocks, _) = server_view(&run(&input).unwrap());
        assert_eq!(
            blocks[0].2,
            with_authority(&headers, "localhost"),
            "{authority:?}"
        );
    }
}

#[test]
fn a_client_with_a_valid_first_authority_passes_untouched() {
    let headers = with_authority(&grpcio_request("/a/b"), "localhost");
    let mut client = IndexingClient::default();
    let mut input = PREFACE.to_vec();
    input.extend(frame(0x4, 0, 0, &[]));
    let block = client.encode(&headers);
    let (a, b) = block.split_at(5);
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_PADDED,
        1,
        &[[2].as_slice(), a, &[0, 0]].concat(),
    ));
    input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b));
    input.extend(frame(0x0, FLAG_END_STREAM, 1, &[0, 0, 0, 0, 0]));
    // Later blocks, even one naming the socket path, pass as they are (the
    // server refuses that one, as without the rewriter).
    let later = with_authority(&headers, "/run/berth/berth.sock");
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        3,
        &client.encode(&later),
    ));
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        5,
        &client.encode(&headers),
    ));
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    rewriter.feed(&input, &mut out).unwrap();
    assert_eq!(out, input);
    assert_eq!(rewriter.direct_len(), usize::MAX);
    assert_eq!(run_bytewise(&input), input);
    let (blocks, _) = server_view(&out);
    assert_eq!(blocks[0].2, headers);
    assert_eq!(blocks[2].2, headers);
}

#[test]
fn empty_continuation_flood_is_bounded() {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, 0, 1, &[0x82]));
    rewriter.feed(&input, &mut out).unwrap();
    let empty = frame(TYPE_CONTINUATION, 0, 1, &[]);
    let result =
        (0..2 * MAX_HEADER_BLOCK / 9 + 2).try_for_each(|_| rewriter.feed(&empty, &mut out));
    assert!(matches!(
        result,
        Err(Error::HeaderBlockTooLarge { stream: 1, .. })
    ));
}

#[test]
fn block_split_across_continuation_frames() {
    let headers = grpcio_request("/runtime.v1.RuntimeService/Status");
    let mut client = loona_hpack::Encoder::new();
    let block = encode(&mut client, &headers);
    let (a, rest) = block.split_at(7);
    let (b, c) = rest.split_at(rest.len() / 2);
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, FLAG_END_STREAM, 3, a));
    input.extend(frame(TYPE_CONTINUATION, 0, 3, b));
    input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, c));
    let out = run(&input).unwrap();
    let (blocks, others) = server_view(&out);
    assert!(others.is_empty());
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].0, 3);
    assert_eq!(blocks[0].1, FLAG_END_HEADERS | FLAG_END_STREAM);
    assert_eq!(blocks[0].2, with_authority(&headers, "localhost"));
    assert_eq!(run_bytewise(&input), out);
}

/// A client encoder that indexes every field (as gRPC C-core does), so
/// that later blocks are mostly references to its dynamic table.
#[derive(Default)]
struct IndexingClient {
    /// Newest first: index 62 is `table[0]`.
    table: Vec<(Vec<u8>, Vec<u8>)>,
}

impl IndexingClient {
    fn encode(&mut self, headers: &Headers) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in headers {
            if let Some(i) = self.table.iter().position(|(n, v)| n == name && v == value) {
                assert!(62 + i < 127);
                out.push(0x80 | (62 + i) as u8);
                continue;
            }
            out.push(0x40);
            for s in [name, value] {
                assert!(s.len() < 127);
                out.push(s.len() as u8);
                out.extend_from_slice(s);
            }
            self.table.insert(0, (name.clone(), value.clone()));
            let size: usize = self.table.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
            assert!(
                size <= HEADER_TABLE_SIZE,
                "no evictions in this test client"
            );
        }
        out
    }
}

#[test]
fn dynamic_table_entries_survive_across_streams() {
    let mut client = IndexingClient::default();
    let mut input = PREFACE.to_vec();
    let mut expected = Vec::new();
    let mut sizes = Vec::new();
    for (i, path) in ["/a/One", "/a/Two", "/a/One", "/a/Three"]
        .iter()
        .enumerate()
    {
        let mut headers = grpcio_request(path);
        headers.push(h("x-call", &format!("{}", i % 2)));
        let block = client.encode(&headers);
        sizes.push(block.len());
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1 + 2 * i as u32,
            &block,
        ));
        expected.push(with_authority(&headers, "localhost"));
    }
    // The later blocks name the client's dynamic table (a few octets each).
    assert!(sizes[2] < 16, "{sizes:?}");
    let out = run(&input).unwrap();
    let (blocks, _) = server_view(&out);
    let got: Vec<Headers> = blocks.into_iter().map(|(_, _, headers)| headers).collect();
    assert_eq!(got, expected);
    assert_eq!(run_bytewise(&input), out);
}

#[test]
fn client_table_size_update_is_followed() {
    // Literal with incremental indexing, new name: "x-a: 1" (and an
    // authority to rewrite, so that the connection is followed); then a
    // size update to 0 (table emptied) and an index now out of range.
    let mut input = PREFACE.to_vec();
    let first = [
        0x40, 3, b'x', b'-', b'a', 1, b'1', 0x82, 0x01, 3, b'a', b' ', b'b',
    ];
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &first));
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &[0xbe, 0x82]));
    let (blocks, _) = server_view(&run(&input).unwrap());
    assert_eq!(blocks[1].2, vec![h("x-a", "1"), h(":method", "GET")]);
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 5, &[0x20, 0xbe]));
    assert!(matches!(run(&input), Err(Error::Hpack { stream: 5, .. })));
    // A size update above what the server allows.
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        1,
        &[0x3f, 0xe1, 0x7f, 0x82],
    )); // 16384
    assert!(matches!(run(&input), Err(Error::Hpack { stream: 1, .. })));
}

#[test]
fn padding_is_dropped_priority_kept() {
    let headers = grpcio_request("/a/b");
    let mut client = loona_hpack::Encoder::new();
    let block = encode(&mut client, &headers);
    let mut payload = vec![4u8]; // pad length
    payload.extend([0x80, 0, 0, 1, 15]); // exclusive dependency on 1, weight 16
    payload.extend(&block);
    payload.extend([0; 4]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY,
        3,
        &payload,
    ));
    let out = run(&input).unwrap();
    let frames = parse_frames(&out[PREFACE.len()..]);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].flags, FLAG_END_HEADERS | FLAG_PRIORITY);
    assert_eq!(frames[0].payload[..5], [0x80, 0, 0, 1, 15]);
    let (blocks, _) = server_view(&out);
    assert_eq!(blocks[0].2, with_authority(&headers, "localhost"));

    // Padding longer than the frame.
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_PADDED,
        1,
        &[9, 0x82],
    ));
    assert!(matches!(
        run(&input),
        Err(Error::BadHeadersFrame { stream: 1, .. })
    ));
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_PRIORITY,
        1,
        &[0, 0],
    ));
    assert!(matches!(
        run(&input),
        Err(Error::BadHeadersFrame { stream: 1, .. })
    ));
}

#[test]
fn large_block_is_written_in_frames_of_at_most_16k() {
    let mut headers = grpcio_request("/a/b");
    for i in 0..6 {
        headers.push(h(&format!("x-big-{i}"), &"v".repeat(9000)));
    }
    let mut client = loona_hpack::Encoder::new();
    let block = encode(&mut client, &headers);
    let mut input = PREFACE.to_vec();
    let mut chunks = block.chunks(16_384).peekable();
    let mut first = true;
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let flags = if last { FLAG_END_HEADERS } else { 0 };
        let frame_type = if first {
            TYPE_HEADERS
        } else {
            TYPE_CONTINUATION
        };
        input.extend(frame(frame_type, flags, 1, chunk));
        first = false;
    }
    let out = run(&input).unwrap();
    let frames = parse_frames(&out[PREFACE.len()..]);
    assert!(frames.len() >= 4);
    assert!(frames.iter().all(|f| f.payload.len() <= OUT_FRAME_SIZE));
    let (blocks, _) = server_view(&out);
    assert_eq!(blocks[0].2, with_authority(&headers, "localhost"));
}

#[test]
fn oversized_blocks_and_lists_are_refused() {
    // A header block larger than the limit, in CONTINUATION frames.
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, 0, 1, &[0x82]));
    let chunk = vec![0x82; 16_384];
    for _ in 0..(MAX_HEADER_BLOCK / chunk.len() + 1) {
        input.extend(frame(TYPE_CONTINUATION, 0, 1, &chunk));
    }
    assert!(matches!(
        run(&input),
        Err(Error::HeaderBlockTooLarge { stream: 1, .. })
    ));
    // A frame announcing more than the limit is refused before its payload.
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    let mut head = PREFACE.to_vec();
    head.extend([0xff, 0xff, 0xff, TYPE_HEADERS, FLAG_END_HEADERS, 0, 0, 0, 1]);
    assert!(matches!(
        rewriter.feed(&head, &mut out),
        Err(Error::HeaderBlockTooLarge { .. })
    ));

    // A small block naming one 4 KiB table entry many times.
    let mut block = vec![0x40, 3, b'x', b'-', b'a', 0x7f, 0xa1, 0x1e]; // value: 4000 octets
    block.extend(std::iter::repeat_n(b'v', 4000));
    block.extend(std::iter::repeat_n(0xbe, 100)); // index 62, 100 times
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &block));
    assert!(matches!(
        run(&input),
        Err(Error::HeaderListTooLarge { stream: 1, .. })
    ));
}

#[test]
fn continuation_rules() {
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[0x82]));
    assert!(matches!(
        run(&input),
        Err(Error::UnexpectedFrame { frame_type: 9, .. })
    ));
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, 0, 1, &[0x82]));
    input.extend(frame(0x0, 0, 1, &[1]));
    assert!(matches!(
        run(&input),
        Err(Error::UnexpectedFrame { frame_type: 0, .. })
    ));
    let mut input = PREFACE.to_vec();
    input.extend(frame(TYPE_HEADERS, 0, 1, &[0x82]));
    input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, &[0x84]));
    assert!(matches!(
        run(&input),
        Err(Error::UnexpectedFrame { stream: 3, .. })
    ));
}

#[test]
fn not_http2_passes_unchanged() {
    let input = b"GET / HTTP/1.1\r\nHost: /run/x.sock\r\n\r\n";
    assert_eq!(run(input).unwrap(), input);
    let mut input = PREFACE[..10].to_vec();
    input.extend(b"garbage that is not a preface");
    assert_eq!(run(&input).unwrap(), input);
    assert_eq!(run_bytewise(&input), input);
}

#[test]
fn direct_delivery_of_data_payloads() {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    let mut head = PREFACE.to_vec();
    head.extend(&frame(0x0, 0, 1, &[])[..]);
    head[PREFACE.len() + 2] = 100; // DATA of 100 octets, payload to follow
    rewriter.feed(&head, &mut out).unwrap();
    assert_eq!(out, head);
    assert_eq!(rewriter.direct_len(), 100);
    rewriter.consume_direct(60);
    assert_eq!(rewriter.direct_len(), 40);
    rewriter.feed(&[7; 40], &mut out).unwrap();
    assert_eq!(rewriter.direct_len(), 0);
    assert_eq!(out[head.len()..], [7; 40]);
}

/// xorshift64*: deterministic noise without a dependency.
struct Noise(u64);
impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn garbage_is_an_error_or_passes_never_a_panic() {
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut errors = 0;
    for round in 0..3000 {
        let mut input = PREFACE.to_vec();
        // Header-block frames with random payloads, random flags and lengths,
        // and plain random frames.
        for _ in 0..(1 + noise.next() % 6) {
            let len = (noise.next() % 300) as usize;
            let frame_type = match noise.next() % 4 {
                0 => TYPE_CONTINUATION,
                1 => (noise.next() % 12) as u8,
                _ => TYPE_HEADERS,
            };
            let flags = noise.next() as u8;
            let stream = (noise.next() % 4) as u32;
            let mut payload = noise.bytes(len);
            if round % 3 == 0 && !payload.is_empty() {
                // Mostly-valid HPACK: indexed fields, some out of range.
                for b in payload.iter_mut() {
                    *b |= 0x80;
                }
            }
            input.extend(frame(frame_type, flags, stream, &payload));
        }
        if round % 5 == 0 {
            let n = (noise.next() % 64) as usize;
            input.extend(noise.bytes(n));
        }
        let split = (noise.next() as usize) % (input.len() + 1);
        let mut rewriter = Rewriter::new();
        let mut out = Vec::new();
        let result = rewriter
            .feed(&input[..split], &mut out)
            .and_then(|()| rewriter.feed(&input[split..], &mut out));
        if result.is_err() {
            errors += 1;
        }
        assert!(out.len() <= input.len() * 4 + MAX_HEADER_LIST);
    }
    assert!(errors > 100, "{errors}");
}

#[test]
#[ignore = "a measurement: cargo test -p berth-h2-authority --release -- --ignored --nocapture"]
fn request_block_rewrite_cost() {
    // A tonic client's request: after the first, its fields are dynamic-table references.
    let headers = vec![
        h(":method", "POST"),
        h(":scheme", "http"),
        h(":path", "/runtime.v1.RuntimeService/Version"),
        h(":authority", "[::]:50051"),
        h("content-type", "application/grpc"),
        h("user-agent", "tonic/0.14.9"),
        h("te", "trailers"),
    ];
    let mut client = IndexingClient::default();
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    rewriter.feed(PREFACE, &mut out).unwrap();
    let first = frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &client.encode(&headers));
    rewriter.feed(&first, &mut out).unwrap();
    let data = frame(0, FLAG_END_STREAM, 1, &[0; 5]);
    let start = std::time::Instant::now();
    let n = 100_000u32;
    for i in 0..n {
        out.clear();
        let block = client.encode(&headers);
        rewriter
            .feed(
                &frame(TYPE_HEADERS, FLAG_END_HEADERS, 3 + 2 * i, &block),
                &mut out,
            )
            .unwrap();
        rewriter.feed(&data, &mut out).unwrap();
    }
    println!(
        "one request (HEADERS + DATA) through the rewriter: {:?}",
        start.elapsed() / n
    );
}

mod regressions;
