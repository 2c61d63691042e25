//! NRI's connection multiplexer (the contract of containerd/nri's
//! `pkg/net/multiplex`), written over tokio.
//!
//! One stream (the "trunk": a unix socket) carries several logical
//! connections, one ttrpc session each. Each logical connection is handed to
//! its user as one end of an in-memory [`DuplexStream`]; tasks pump bytes
//! between the other end and the trunk. Everything is bounded: frames larger
//! than one ttrpc message are a protocol error that closes the trunk, and the
//! duplex buffers apply back-pressure instead of queueing without limit.

pub mod frame;

use std::sync::{Arc, Mutex as StdMutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

pub use frame::{
    decode_frame, decode_header, encode_frame, encode_header, split_message, Decoded, FrameError,
    FrameHeader, FRAME_HEADER_LEN, MAX_PAYLOAD, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN,
    TTRPC_HEADER_LEN, TTRPC_MAX_MESSAGE,
};

/// Bytes buffered per logical connection in each direction.
const DUPLEX_BUFFER: usize = 64 * 1024;
/// Largest chunk copied from the trunk at a time.
const COPY_CHUNK: usize = 16 * 1024;

/// Why a trunk stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closed {
    /// The peer closed the trunk (EOF) or we closed it.
    Eof,
    /// A malformed frame or an I/O error; the text says which.
    Error(String),
}

/// A running multiplexer: owns the pump tasks; dropping or closing it ends
/// every logical connection.
pub struct Mux {
    tasks: StdMutex<Vec<JoinHandle<()>>>,
    closed_tx: Arc<watch::Sender<Option<Closed>>>,
}

impl Mux {
    /// Starts multiplexing `trunk` into the logical connections `ids`,
    /// returning one stream per id, in order. Frames for other ids are
    /// discarded, as NRI's Go mux does.
    pub fn start<T>(trunk: T, ids: &[u32]) -> (Mux, Vec<DuplexStream>)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(trunk);
        let wr = Arc::new(Mutex::new(wr));
        let (closed_tx, _) = watch::channel(None);
        let closed_tx = Arc::new(closed_tx);
        let mut users = Vec::new();
        let mut inbound = Vec::new();
        let mut tasks = Vec::new();
        for &id in ids {
            let (user, ours) = tokio::io::duplex(DUPLEX_BUFFER);
            let (our_rd, our_wr) = tokio::io::split(ours);
            users.push(user);
            inbound.push((id, our_wr));
            let wr = wr.clone();
            let tx = closed_tx.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = pump_out(id, our_rd, wr).await {
                    set_closed(&tx, e);
                }
            }));
        }
        let tx = closed_tx.clone();
        tasks.push(tokio::spawn(async move {
            let why = pump_in(rd, inbound).await;
            set_closed(&tx, why);
        }));
        let mux = Mux {
            tasks: StdMutex::new(tasks),
            closed_tx,
        };
        (mux, users)
    }

    /// Resolves when the trunk has stopped, with the reason.
    pub async fn closed(&self) -> Closed {
        let mut rx = self.closed_tx.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return Closed::Eof;
            }
        }
    }

    /// Why the trunk stopped, if it has.
    pub fn closed_reason(&self) -> Option<Closed> {
        self.closed_tx.borrow().clone()
    }

    /// Stops all pumps, which closes the trunk and every logical connection.
    pub fn close(&self) {
        set_closed(&self.closed_tx, Closed::Eof);
        if let Ok(mut tasks) = self.tasks.lock() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        self.close();
    }
}

fn set_closed(tx: &watch::Sender<Option<Closed>>, why: Closed) {
    tx.send_if_modified(|cur| {
        if cur.is_none() {
            *cur = Some(why);
            true
        } else {
            false
        }
    });
}

/// Reads frames from the trunk and forwards their payloads, chunk by chunk
/// (never buffering a whole frame), to the logical connection they name.
async fn pump_in<R>(rd: R, mut conns: Vec<(u32, tokio::io::WriteHalf<DuplexStream>)>) -> Closed
where
    R: AsyncRead + Unpin,
{
    let why = forward_frames(rd, &mut conns).await;
    // Our ends are split halves: only an explicit shutdown lets the users
    // see EOF while the outbound pumps still hold the read halves.
    for (_, w) in conns.iter_mut() {
        let _ = w.shutdown().await;
    }
    why
}

async fn forward_frames<R>(rd: R, conns: &mut [(u32, tokio::io::WriteHalf<DuplexStream>)]) -> Closed
where
    R: AsyncRead + Unpin,
{
    // One read takes in a frame's header and (most often) its payload,
    // rather than one read for each.
    let mut rd = tokio::io::BufReader::with_capacity(COPY_CHUNK, rd);
    let mut chunk = vec![0u8; COPY_CHUNK];
    loop {
        let mut hdr = [0u8; FRAME_HEADER_LEN];
        match rd.read_exact(&mut hdr).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Closed::Eof,
            Err(e) => return Closed::Error(format!("reading frame header: {e}")),
        }
        let FrameHeader { conn, len } = match decode_header(hdr) {
            Ok(h) => h,
            Err(e) => return Closed::Error(e.to_string()),
        };
        let mut left = len;
        let mut target = conns.iter_mut().find(|(id, _)| *id == conn);
        while left > 0 {
            let n = left.min(chunk.len());
            if let Err(e) = rd.read_exact(&mut chunk[..n]).await {
                return Closed::Error(format!("reading frame payload: {e}"));
            }
            left -= n;
            if let Some((_, w)) = target.as_mut() {
                if w.write_all(&chunk[..n]).await.is_err() {
                    // The user dropped its end: discard the rest of its data.
                    target = None;
                }
            }
        }
    }
}

/// Reads whole ttrpc messages written by the user of logical connection `id`
/// and frames them onto the trunk the way Go's ttrpc would (see
/// [`split_message`]).
async fn pump_out<R, W>(id: u32, mut rd: R, wr: Arc<Mutex<W>>) -> Result<(), Closed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let mut hdr = [0u8; TTRPC_HEADER_LEN];
        match rd.read_exact(&mut hdr).await {
            Ok(_) => {}
            // Our own ttrpc side closed: nothing more to send.
            Err(_) => return Ok(()),
        }
        let body = frame::ttrpc_body_len(&hdr);
        if body > TTRPC_MAX_MESSAGE {
            return Err(Closed::Error(format!(
                "outgoing ttrpc message of {body} bytes exceeds the maximum"
            )));
        }
        // The message's frames (header and payload each), whole, so that
        // they go out in one write: the peer wakes once per message.
        let total = TTRPC_HEADER_LEN + body;
        let sizes = split_message(total);
        let mut out = Vec::with_capacity(total + sizes.len() * FRAME_HEADER_LEN);
        out.extend_from_slice(&encode_header(id, sizes[0]));
        out.extend_from_slice(&hdr);
        let start = out.len();
        out.resize(start + body, 0);
        if rd.read_exact(&mut out[start..]).await.is_err() {
            return Ok(());
        }
        if let Some(&rest) = sizes.get(1) {
            // Split like Go (one full bufio buffer, then the rest): the
            // second frame's header goes in after the first frame.
            let at = FRAME_HEADER_LEN + sizes[0];
            out.splice(at..at, encode_header(id, rest));
        }
        let mut w = wr.lock().await;
        let res = async {
            w.write_all(&out).await?;
            w.flush().await
        }
        .await;
        if let Err(e) = res {
            return Err(Closed::Error(format!("writing to trunk: {e}")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttrpc_msg(body: &[u8]) -> Vec<u8> {
        let mut m = (body.len() as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, 1, 1, 0]);
        m.extend_from_slice(body);
        m
    }

    #[tokio::test]
    async fn frames_are_routed_and_split_like_go() {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (_ma, mut sa) = Mux::start(a, &[1, 2]);
        let (_mb, mut sb) = Mux::start(b, &[1, 2]);
        let big = vec![7u8; 10_000];
        let msg = ttrpc_msg(&big);
        sa[1].write_all(&msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        sb[1].read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg);
        let small = ttrpc_msg(b"hi");
        sb[0].write_all(&small).await.unwrap();
        let mut got = vec![0u8; small.len()];
        sa[0].read_exact(&mut got).await.unwrap();
        assert_eq!(got, small);
    }

    #[tokio::test]
    async fn wire_format_matches_go_split() {
        let (a, mut raw) = tokio::io::duplex(1 << 20);
        let (_ma, mut sa) = Mux::start(a, &[1]);
        let msg = ttrpc_msg(&vec![1u8; 5000]);
        sa[0].write_all(&msg).await.unwrap();
        let mut hdr = [0u8; 8];
        raw.read_exact(&mut hdr).await.unwrap();
        assert_eq!(
            decode_header(hdr).unwrap(),
            FrameHeader { conn: 1, len: 4096 }
        );
        let mut skip = vec![0u8; 4096];
        raw.read_exact(&mut skip).await.unwrap();
        raw.read_exact(&mut hdr).await.unwrap();
        assert_eq!(
            decode_header(hdr).unwrap(),
            FrameHeader {
                conn: 1,
                len: msg.len() - 4096
            }
        );
    }

    #[tokio::test]
    async fn oversize_frame_closes_the_trunk() {
        let (a, mut raw) = tokio::io::duplex(1 << 16);
        let (mux, mut sa) = Mux::start(a, &[1]);
        raw.write_all(&encode_header(1, MAX_PAYLOAD + 1))
            .await
            .unwrap();
        let why = tokio::time::timeout(std::time::Duration::from_secs(5), mux.closed())
            .await
            .unwrap();
        assert!(
            matches!(why, Closed::Error(ref e) if e.contains("exceeds")),
            "{why:?}"
        );
        let mut buf = [0u8; 1];
        assert_eq!(sa[0].read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn unknown_conn_is_discarded_and_eof_reported() {
        let (a, mut raw) = tokio::io::duplex(1 << 16);
        let (mux, mut sa) = Mux::start(a, &[1]);
        raw.write_all(&encode_frame(9, b"ignored")).await.unwrap();
        raw.write_all(&encode_frame(1, b"kept")).await.unwrap();
        let mut buf = [0u8; 4];
        sa[0].read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"kept");
        drop(raw);
        assert_eq!(mux.closed().await, Closed::Eof);
    }
}
