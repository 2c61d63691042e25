//! Random header lists: pseudo-headers in random order, with valid and
//! invalid `:authority` values (or none, or two); regular fields that hit
//! the HPACK static table (name and value, or name only), fields sent
//! before on the connection (dynamic table hits), new names, empty, binary
//! and large values, many fields at once, sensitive (never-indexed) ones.

use crate::rng::Rng;

/// Name, value, and whether it is sensitive (a never-indexed literal).
pub type Fields = Vec<(Vec<u8>, Vec<u8>, bool)>;

/// The HPACK static table (RFC 7541 appendix A); index = position + 1.
pub const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static table index of `name`, if it is there.
pub fn static_name(name: &[u8]) -> Option<usize> {
    STATIC_TABLE
        .iter()
        .position(|(n, _)| n.as_bytes() == name)
        .map(|i| i + 1)
}

/// Authorities that the server takes: kept as they are.
pub const VALID_AUTHORITIES: [&str; 7] = [
    "localhost",
    "localhost:1234",
    "10.0.0.1:80",
    "[::1]:10010",
    "berth",
    "a.b-c.example:65535",
    "user@host:8",
];

/// Authorities that the server would refuse: replaced.
pub const INVALID_AUTHORITIES: [&str; 8] = [
    "/run/berth/berth.sock",
    "unix:/run/berth/berth.sock",
    "unix:///tmp/x.sock",
    "tmp%2Frun%2Fberth%2Fberth.sock",
    "a b",
    "",
    "host/path",
    "[::1",
];

/// Names of regular fields that are not in the static table.
const NAMES: [&str; 10] = [
    "te",
    "grpc-timeout",
    "grpc-accept-encoding",
    "grpc-encoding",
    "x-request-id",
    "x-call",
    "x-big",
    "x-trace-bin",
    "x-b3-traceid",
    "grpc-status",
];

/// A name that the server takes (a lowercase token).
fn token(rng: &mut Rng) -> Vec<u8> {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-_.";
    let len = rng.range(1, 24);
    let mut name: Vec<u8> = (0..len).map(|_| *rng.pick(CHARS)).collect();
    name[0] = *rng.pick(&CHARS[..26]);
    name
}

/// A value: visible ASCII only when `visible` (as an HTTP header value:
/// then never large, as h2 Huffman-codes every string and loona-hpack's
/// Huffman decoder is slow in a debug build), any octets else.
pub fn value(rng: &mut Rng, visible: bool) -> Vec<u8> {
    let len = match rng.below(20) {
        0 => 0,
        1 if !visible => rng.range(1000, 24_000),
        1..=4 => rng.range(20, 400),
        _ => rng.range(1, 20),
    };
    if visible {
        printable(rng, len)
    } else {
        rng.bytes(len)
    }
}

/// Visible ASCII, starting and ending with a letter.
pub fn printable(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|_| rng.range(0x20, 0x7e) as u8).collect();
    if let Some(b) = v.first_mut() {
        *b = b'v';
    }
    if let Some(b) = v.last_mut() {
        *b = b'v';
    }
    v
}

/// One regular field: `recent` are fields sent before on this connection.
pub fn field(rng: &mut Rng, recent: &[(Vec<u8>, Vec<u8>)], visible: bool) -> (Vec<u8>, Vec<u8>) {
    match rng.below(10) {
        0..=2 if !recent.is_empty() => rng.pick(recent).clone(),
        0..=2 => (b"x-call".to_vec(), b"1".to_vec()),
        3 => {
            // Name and value in the static table (regular entries: 15 on).
            let (n, v) = STATIC_TABLE[rng.range(14, 60)];
            (n.as_bytes().to_vec(), v.as_bytes().to_vec())
        }
        4 | 5 => {
            let (n, _) = STATIC_TABLE[rng.range(14, 60)];
            (n.as_bytes().to_vec(), value(rng, visible))
        }
        6 | 7 => (rng.pick(&NAMES).as_bytes().to_vec(), value(rng, visible)),
        _ => (token(rng), value(rng, visible)),
    }
}

/// Regular fields: a few (up to `few`), or many (10 times that); their
/// list size stays well below the rewriter's bound (`MAX_HEADER_LIST`).
/// `allowed` says which names the caller can send (an h2 client refuses
/// connection-specific ones).
pub fn regular(
    rng: &mut Rng,
    recent: &mut Vec<(Vec<u8>, Vec<u8>)>,
    (few, visible): (usize, bool),
    allowed: impl Fn(&[u8]) -> bool,
) -> Fields {
    let count = if rng.chance(5) {
        rng.range(4 * few, 12 * few)
    } else {
        rng.size(few + 1) - 1
    };
    let mut fields = Fields::new();
    let mut size = 0;
    while fields.len() < count {
        let (name, value) = field(rng, recent, visible);
        if !allowed(&name) {
            continue;
        }
        size += name.len() + value.len() + 32;
        if size > 100_000 {
            break;
        }
        let sensitive = rng.chance(8);
        if recent.len() < 64 && rng.chance(30) {
            recent.push((name.clone(), value.clone()));
        }
        fields.push((name, value, sensitive));
    }
    fields
}

/// An `:authority` value, valid or not.
pub fn authority(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=3 => rng.pick(&VALID_AUTHORITIES).as_bytes().to_vec(),
        4..=8 => rng.pick(&INVALID_AUTHORITIES).as_bytes().to_vec(),
        _ => {
            let n = rng.range(0, 12);
            rng.bytes(n)
        }
    }
}

/// A request's header list (for the encoder-level rounds: any octets).
pub fn request(rng: &mut Rng, recent: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Fields {
    let mut pseudo: Fields = vec![
        (
            b":method".to_vec(),
            rng.pick(&["GET", "POST", "PUT", "PATCHX"])
                .as_bytes()
                .to_vec(),
            false,
        ),
        (
            b":scheme".to_vec(),
            rng.pick(&["http", "https"]).as_bytes().to_vec(),
            false,
        ),
        (
            b":path".to_vec(),
            match rng.below(4) {
                0 => b"/".to_vec(),
                1 => b"/index.html".to_vec(),
                2 => b"/runtime.v1.RuntimeService/Version".to_vec(),
                _ => [b"/x/".as_slice(), &value(rng, true)].concat(),
            },
            false,
        ),
    ];
    let authorities = match rng.below(10) {
        0 => 0,
        1 => 2,
        _ => 1,
    };
    for _ in 0..authorities {
        pseudo.push((b":authority".to_vec(), authority(rng), rng.chance(5)));
    }
    // Any order of the pseudo-header fields.
    for i in (1..pseudo.len()).rev() {
        pseudo.swap(i, rng.below(i + 1));
    }
    pseudo.extend(regular(rng, recent, (24, false), |_| true));
    pseudo
}

/// A trailer list (for the encoder-level rounds), maybe empty.
pub fn trailers(rng: &mut Rng, recent: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Fields {
    if rng.chance(30) {
        return Fields::new();
    }
    regular(rng, recent, (24, false), |_| true)
}
