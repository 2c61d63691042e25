//! The HPACK dynamic table sizes as the server sets them: its SETTINGS
//! frames are followed in what it writes to the client, and take effect
//! when the client acknowledges them (RFC 9113 section 6.5.3), which the
//! rewriter sees in the client's stream.
//!
//! SETTINGS_HEADER_TABLE_SIZE bounds both HPACK contexts that cross the
//! rewriter: the client's encoder (decoded here) may use up to it as soon
//! as the client has read it, and the rewriter's own encoder (decoded by the
//! server) must fit in it once it is acknowledged, and must say so with a
//! dynamic table size update (RFC 7541 section 4.2).

use std::collections::VecDeque;

use super::{Error, FRAME_HEADER_LEN, HEADER_TABLE_SIZE, MAX_HEADER_TABLE_SIZE};

const TYPE_SETTINGS: u8 = 0x4;
const FLAG_ACK: u8 = 0x1;
const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// Server SETTINGS frames that the client has not acknowledged yet, at most.
const MAX_UNACKED: usize = 64;

/// The table sizes of both HPACK contexts of one connection.
#[derive(Debug)]
pub(super) struct TableSizes {
    /// The server's SETTINGS_HEADER_TABLE_SIZE that the client has
    /// acknowledged last (the protocol's initial value before that).
    acked: usize,
    /// The server's SETTINGS frames that the client has not acknowledged
    /// yet, oldest first: the table size each set, if it set one.
    unacked: VecDeque<Option<usize>>,
    /// The size of the rewriter's encoder table, as the server's decoder
    /// was last told it.
    encoder: usize,
    /// Since the last block was encoded: the smallest and the last table
    /// size the encoder must take (both must be signalled, RFC 7541 4.2).
    pending: Option<(usize, usize)>,
}

impl TableSizes {
    pub fn new() -> TableSizes {
        TableSizes {
            acked: HEADER_TABLE_SIZE,
            unacked: VecDeque::new(),
            encoder: HEADER_TABLE_SIZE,
            pending: None,
        }
    }

    /// The server sent a SETTINGS frame (not an acknowledgement), with the
    /// last SETTINGS_HEADER_TABLE_SIZE in it if it had one.
    fn server_settings(&mut self, size: Option<u32>) -> Result<(), Error> {
        let size = match size {
            Some(size) => {
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size > MAX_HEADER_TABLE_SIZE {
                    return Err(Error::ServerTableTooLarge {
                        size,
                        limit: MAX_HEADER_TABLE_SIZE,
                    });
                }
                Some(size)
            }
            None => None,
        };
        if self.unacked.len() == MAX_UNACKED {
            return Err(Error::ServerSettingsUnacknowledged { count: MAX_UNACKED });
        }
        self.unacked.push_back(size);
        Ok(())
    }

    /// The client acknowledged the server's oldest unacknowledged SETTINGS.
    pub fn client_ack(&mut self) {
        if let Some(Some(size)) = self.unacked.pop_front() {
            self.acked = size;
            let size = size.min(HEADER_TABLE_SIZE);
            let low = self.pending.map_or(size, |(low, _)| low.min(size));
            self.pending = Some((low, size));
        }
    }

    /// The largest table the client's encoder may use now: what the server
    /// allows, or a value it sent that the client may have read already.
    pub fn decoder_limit(&self) -> usize {
        self.unacked
            .iter()
            .flatten()
            .fold(self.acked, |limit, &size| limit.max(size))
    }

    /// The server's SETTINGS_HEADER_TABLE_SIZE in force.
    pub fn server_limit(&self) -> usize {
        self.acked
    }

    /// At the start of a block that the rewriter encodes: the table size
    /// updates to write first (none, one or two), in order. The encoder
    /// takes the last one.
    pub fn take_updates(&mut self) -> impl Iterator<Item = usize> {
        let mut updates = [None, None];
        if let Some((low, last)) = self.pending.take() {
            if low < self.encoder {
                updates[0] = Some(low);
                self.encoder = low;
            }
            if last != self.encoder {
                updates[1] = Some(last);
                self.encoder = last;
            }
        }
        updates.into_iter().flatten()
    }
}

/// Where in the server's stream the follower is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a frame header (`len` octets of it so far).
    Head { len: usize },
    /// Skipping `remaining` octets of a payload.
    Skip { remaining: usize },
    /// Reading a SETTINGS payload, 6 octets per setting; `len` octets of
    /// the current one so far.
    Settings { remaining: usize, len: usize },
    /// Not an HTTP/2 server (its first frame was no SETTINGS): not followed.
    Off,
}

/// Follows the frames the server writes, for its SETTINGS.
#[derive(Debug)]
pub(super) struct ServerFrames {
    state: State,
    head: [u8; FRAME_HEADER_LEN],
    setting: [u8; 6],
    /// The SETTINGS_HEADER_TABLE_SIZE of the SETTINGS frame being read.
    table_size: Option<u32>,
    first: bool,
}

impl ServerFrames {
    pub fn new() -> ServerFrames {
        ServerFrames {
            state: State::Head { len: 0 },
            head: [0; FRAME_HEADER_LEN],
            setting: [0; 6],
            table_size: None,
            first: true,
        }
    }

    /// Takes the next octets that the server wrote.
    pub fn feed(&mut self, mut input: &[u8], sizes: &mut TableSizes) -> Result<(), Error> {
        while !input.is_empty() {
            match self.state {
                State::Head { len } => {
                    let n = (FRAME_HEADER_LEN - len).min(input.len());
                    self.head[len..len + n].copy_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = State::Head { len: len + n };
                    if len + n == FRAME_HEADER_LEN {
                        self.start_frame(sizes)?;
                    }
                }
                State::Skip { remaining } => {
                    let n = remaining.min(input.len());
                    input = &input[n..];
                    self.state = if n == remaining {
                        State::Head { len: 0 }
                    } else {
                        State::Skip {
                            remaining: remaining - n,
                        }
                    };
                }
                State::Settings { remaining, len } => {
                    let n = (6 - len).min(input.len());
                    self.setting[len..len + n].copy_from_slice(&input[..n]);
                    input = &input[n..];
                    let (remaining, len) = (remaining - n, len + n);
                    self.state = State::Settings { remaining, len };
                    if len < 6 {
                        continue;
                    }
                    let [a, b, value @ ..] = self.setting;
                    if u16::from_be_bytes([a, b]) == SETTINGS_HEADER_TABLE_SIZE {
                        self.table_size = Some(u32::from_be_bytes(value));
                    }
                    self.state = State::Settings { remaining, len: 0 };
                    if remaining == 0 {
                        self.state = State::Head { len: 0 };
                        sizes.server_settings(self.table_size.take())?;
                    }
                }
                State::Off => return Ok(()),
            }
        }
        Ok(())
    }

    fn start_frame(&mut self, sizes: &mut TableSizes) -> Result<(), Error> {
        let head = self.head;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let settings = head[3] == TYPE_SETTINGS && head[4] & FLAG_ACK == 0 && stream == 0;
        if std::mem::take(&mut self.first) && !settings {
            self.state = State::Off;
            return Ok(());
        }
        self.state = if !settings {
            if len == 0 {
                State::Head { len: 0 }
            } else {
                State::Skip { remaining: len }
            }
        } else if len % 6 != 0 {
            return Err(Error::BadServerSettings { len });
        } else if len == 0 {
            sizes.server_settings(None)?;
            State::Head { len: 0 }
        } else {
            State::Settings {
                remaining: len,
                len: 0,
            }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
        let mut out = vec![
            0,
            0,
            (6 * entries.len()) as u8,
            TYPE_SETTINGS,
            0,
            0,
            0,
            0,
            0,
        ];
        for (id, value) in entries {
            out.extend(id.to_be_bytes());
            out.extend(value.to_be_bytes());
        }
        out
    }

    #[test]
    fn server_settings_are_followed_in_any_chunks() {
        let mut bytes = settings(&[(0x3, 100), (0x1, 0), (0x4, 65_535)]);
        bytes.extend([0, 0, 0, TYPE_SETTINGS, FLAG_ACK, 0, 0, 0, 0]); // ACK of the client's
        bytes.extend([0, 0, 3, 0x0, 0, 0, 0, 0, 1, 1, 2, 3]); // DATA
        bytes.extend(settings(&[(0x1, 8192), (0x1, 1000)]));
        bytes.extend(settings(&[]));
        for chunk in [1, 2, 5, 7, bytes.len()] {
            let mut frames = ServerFrames::new();
            let mut sizes = TableSizes::new();
            for piece in bytes.chunks(chunk) {
                frames.feed(piece, &mut sizes).unwrap();
            }
            assert_eq!(sizes.unacked, [Some(0), Some(1000), None], "{chunk}");
            assert_eq!(sizes.decoder_limit(), HEADER_TABLE_SIZE);
            sizes.client_ack();
            assert_eq!(sizes.server_limit(), 0);
            assert_eq!(sizes.decoder_limit(), 1000);
            sizes.client_ack();
            sizes.client_ack();
            sizes.client_ack(); // one too many: nothing to take
            assert_eq!((sizes.server_limit(), sizes.decoder_limit()), (1000, 1000));
            // Both the smallest (0) and the last (1000) are signalled.
            assert_eq!(sizes.take_updates().collect::<Vec<_>>(), [0, 1000]);
            assert_eq!(sizes.take_updates().count(), 0);
        }
    }

    #[test]
    fn encoder_updates_only_when_its_table_changes() {
        let mut sizes = TableSizes::new();
        let mut frames = ServerFrames::new();
        frames
            .feed(&settings(&[(0x1, 65_536)]), &mut sizes)
            .unwrap();
        assert_eq!(sizes.decoder_limit(), 65_536);
        sizes.client_ack();
        // The encoder stays at its own 4096, which the server allows.
        assert_eq!(sizes.take_updates().count(), 0);
        assert_eq!(sizes.decoder_limit(), 65_536);
    }

    #[test]
    fn what_the_rewriter_cannot_follow_is_an_error() {
        let mut sizes = TableSizes::new();
        let too_large = u32::try_from(MAX_HEADER_TABLE_SIZE + 1).unwrap();
        let result = ServerFrames::new().feed(&settings(&[(0x1, too_large)]), &mut sizes);
        assert!(matches!(
            result,
            Err(Error::ServerTableTooLarge { size, .. }) if size == MAX_HEADER_TABLE_SIZE + 1
        ));
        let mut bad = settings(&[(0x1, 0)]);
        bad[2] = 5;
        let result = ServerFrames::new().feed(&bad, &mut TableSizes::new());
        assert!(matches!(result, Err(Error::BadServerSettings { len: 5 })));
        let mut frames = ServerFrames::new();
        let mut sizes = TableSizes::new();
        let result = (0..=MAX_UNACKED).try_for_each(|_| frames.feed(&settings(&[]), &mut sizes));
        assert!(matches!(
            result,
            Err(Error::ServerSettingsUnacknowledged { .. })
        ));
    }

    #[test]
    fn a_server_that_is_not_http2_is_not_followed() {
        let mut frames = ServerFrames::new();
        let mut sizes = TableSizes::new();
        frames
            .feed(b"HTTP/1.1 400 Bad Request\r\n\r\n", &mut sizes)
            .unwrap();
        frames.feed(&settings(&[(0x1, 0)]), &mut sizes).unwrap();
        assert_eq!(frames.state, State::Off);
        assert!(sizes.unacked.is_empty());
    }
}
