//! A SPDY/3.1 session over one upgraded connection: streams the peer opens
//! (the server's side) or this side opens (a client's), their data, and an
//! orderly end.
//!
//! Two tasks own the connection. The reader decodes frames in order (the
//! header decompressor needs every block), answers SYN_STREAM with SYN_REPLY
//! (or RST_STREAM when the stream is refused), echoes the peer's PINGs, and
//! hands each stream's DATA to a bounded channel, so a slow consumer slows the
//! peer instead of growing memory. The writer encodes frames in the order
//! they will be on the wire (the header compressor needs that too); frames of
//! the reader go first, frames of streams keep their order (so a FIN never
//! overtakes data, and GOAWAY comes after both).
//!
//! Like the peers kubelet speaks to (moby/spdystream), no flow control
//! windows are kept: WINDOW_UPDATE and SETTINGS are read and ignored.
//!
//! What the peer can make this side hold is bounded: a DATA frame is read
//! and handed on in pieces of [`DATA_CHUNK`] (never the whole 16 MiB a
//! frame may announce), control frames are refused past
//! [`super::frame::MAX_CONTROL_PAYLOAD`], the answers the reader queues for
//! the writer (SYN_REPLY, RST_STREAM, PING) are at most [`CONTROL_QUEUE`] (a
//! peer that sends and never reads is disconnected once the socket's buffers
//! and the queue are full), and at most [`MAX_STREAMS`] of its streams are
//! open at once (more are refused). The peer's data waiting for its
//! consumers is at most [`STREAM_BYTES`] per stream and [`CONNECTION_BYTES`]
//! for all streams together (a [`BytePool`]; past it the reader waits, so
//! the peer's TCP window closes), and the data queued for the writer is at
//! most [`CONNECTION_BYTES`] too, whatever the peer reads.

use berth_lock::MutexExt;
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::pool::{BytePool, ChunkReceiver, ChunkSender};

use super::frame::{
    check_control_len, is_control, payload_len, read_head, rst, Decoder, Encoder, Frame,
    FrameError, Headers, RawFrame, FLAG_FIN,
};

/// Largest DATA payload sent at once, and largest piece of a received DATA
/// frame handed to its stream.
pub const DATA_CHUNK: usize = 32 * 1024;
/// Frames the reader may queue for the writer (answers to the peer).
pub const CONTROL_QUEUE: usize = 1024;
/// Most streams of the peer open at once on one connection.
pub const MAX_STREAMS: usize = 512;
/// Most bytes of the peer's data one stream holds for its consumer.
pub const STREAM_BYTES: usize = 256 * 1024;
/// Most bytes of the peer's data all streams of a connection hold for their
/// consumers, and most bytes of data queued for the writer.
pub const CONNECTION_BYTES: usize = 1024 * 1024;
/// Frames of streams queued for the writer.
const WRITE_QUEUE: usize = 64;

/// Which side of the connection this is; it decides the stream id parity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens odd-numbered streams.
    Client,
    /// Accepts the client's odd-numbered streams.
    Server,
}

/// Decides whether a stream the peer opens is accepted (by its headers);
/// a refused stream gets RST_STREAM and the reason is logged.
pub type Accept = Box<dyn Fn(&Headers) -> Result<(), String> + Send + Sync>;

/// One stream: its headers, what the peer sends on it, and a handle to send.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    /// The peer's data; ends at its FIN or RST_STREAM, or when the
    /// connection ends. What waits here counts against the connection's
    /// [`BytePool`] until it is taken.
    pub rx: ChunkReceiver,
    pub tx: StreamWriter,
}

/// Sends on one stream. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    id: u32,
    shared: Arc<Shared>,
}

enum Out {
    /// A frame, and the bytes of the writer's budget it holds until written.
    Frame(Frame, Option<OwnedSemaphorePermit>),
    /// Flush, end the writing direction (TCP FIN), then say so.
    Shutdown(oneshot::Sender<()>),
}

#[derive(Debug)]
struct Shared {
    role: Role,
    /// Frames of streams, in order.
    out: mpsc::Sender<OutItem>,
    /// Streams this side has not ended yet.
    open_local: Mutex<HashSet<u32>>,
    /// Receivers of the peer's data, by stream.
    inbound: Mutex<HashMap<u32, ChunkSender>>,
    /// What the peer's data may hold, all streams together.
    pool: BytePool,
    /// What data queued for the writer may hold.
    out_budget: Arc<Semaphore>,
    /// Streams opened here that wait for their SYN_REPLY.
    replies: Mutex<HashMap<u32, oneshot::Sender<Result<(), u32>>>>,
    next_id: AtomicU32,
    /// Highest stream id the peer opened.
    last_peer_id: AtomicU32,
    closed: watch::Sender<bool>,
}

/// Wrapper so `Out` can be debug-printed in `Shared`.
struct OutItem(Out);

impl std::fmt::Debug for OutItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Out::Frame(frame, _) => write!(f, "{frame:?}"),
            Out::Shutdown(_) => write!(f, "Shutdown"),
        }
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the SPDY connection is closed")
}

impl Shared {
    async fn send(&self, frame: Frame) -> io::Result<()> {
        self.out
            .send(OutItem(Out::Frame(frame, None)))
            .await
            .map_err(|_| broken())
    }

    /// Queues a DATA frame once the writer's budget has room for it.
    async fn send_data(&self, stream_id: u32, data: &[u8]) -> io::Result<()> {
        let cost = u32::try_from(data.len().max(1)).map_err(|_| broken())?;
        let permit = self
            .out_budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| broken())?;
        let frame = Frame::Data {
            stream_id,
            flags: 0,
            data: data.to_vec(),
        };
        self.out
            .send(OutItem(Out::Frame(frame, Some(permit))))
            .await
            .map_err(|_| broken())
    }
}

impl StreamWriter {
    /// The stream's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Sends `data` (in as many DATA frames as needed).
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(DATA_CHUNK) {
            if !self.shared.open_local.lock_unpoisoned().contains(&self.id) {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    format!("SPDY stream {} is closed", self.id),
                ));
            }
            self.shared.send_data(self.id, chunk).await?;
        }
        Ok(())
    }

    /// Ends this side of the stream (DATA with FIN); once only.
    pub async fn close(&self) -> io::Result<()> {
        if !self.shared.open_local.lock_unpoisoned().remove(&self.id) {
            return Ok(());
        }
        self.shared
            .send(Frame::Data {
                stream_id: self.id,
                flags: FLAG_FIN,
                data: Vec::new(),
            })
            .await
    }

    /// Abandons the stream in both directions (RST_STREAM).
    pub async fn reset(&self, status: u32) -> io::Result<()> {
        self.shared.open_local.lock_unpoisoned().remove(&self.id);
        self.shared.inbound.lock_unpoisoned().remove(&self.id);
        self.shared
            .send(Frame::RstStream {
                stream_id: self.id,
                status,
            })
            .await
    }
}

/// A SPDY session. Dropping it stops both tasks and closes the connection.
pub struct Connection {
    shared: Arc<Shared>,
    incoming: Option<mpsc::Receiver<Stream>>,
    closed: watch::Receiver<bool>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

impl Connection {
    /// Starts a session on `io`. A server passes `accept`; streams it
    /// accepts come out of [`Connection::accept`].
    pub fn new<IO>(io: IO, role: Role, accept: Option<Accept>) -> Result<Connection, FrameError>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let encoder = Encoder::new()?;
        let (read, write) = tokio::io::split(io);
        let (out_tx, out_rx) = mpsc::channel(WRITE_QUEUE);
        let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE);
        let (closed_tx, closed_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            role,
            out: out_tx,
            open_local: Mutex::new(HashSet::new()),
            inbound: Mutex::new(HashMap::new()),
            pool: BytePool::new(CONNECTION_BYTES),
            out_budget: Arc::new(Semaphore::new(CONNECTION_BYTES)),
            replies: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(match role {
                Role::Client => 1,
                Role::Server => 2,
            }),
            last_peer_id: AtomicU32::new(0),
            closed: closed_tx,
        });
        let (incoming_tx, incoming_rx) = match accept {
            Some(_) => {
                let (tx, rx) = mpsc::channel(8);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let writer = tokio::spawn(write_loop(
            write,
            encoder,
            control_rx,
            out_rx,
            shared.clone(),
        ));
        let reader = tokio::spawn(read_loop(
            read,
            shared.clone(),
            control_tx,
            accept.zip(incoming_tx),
        ));
        Ok(Connection {
            shared,
            incoming: incoming_rx,
            closed: closed_rx,
            reader,
            writer,
        })
    }

    /// A server's session on `io`, accepting the streams `accept` allows;
    /// `None` (logged) if it cannot start.
    pub fn serve<IO>(io: IO, accept: Accept) -> Option<Connection>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        match Connection::new(io, Role::Server, Some(accept)) {
            Ok(conn) => Some(conn),
            Err(e) => {
                tracing::warn!(error = %e, "SPDY session");
                None
            }
        }
    }

    /// The next stream the peer opened; `None` once the connection ended
    /// or after [`Connection::stop_accepting`].
    pub async fn accept(&mut self) -> Option<Stream> {
        self.incoming.as_mut()?.recv().await
    }

    /// Refuses further streams from the peer (RST_STREAM REFUSED_STREAM).
    pub fn stop_accepting(&mut self) {
        self.incoming = None;
    }

    /// Resolves when the peer has gone (end of connection or broken socket).
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closed.clone();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Opens a stream (a client's move) and waits for the peer's SYN_REPLY.
    pub async fn open(&self, headers: Headers) -> io::Result<Stream> {
        let id = self.shared.next_id.fetch_add(2, Ordering::SeqCst);
        let (tx, rx) = self.shared.pool.channel(STREAM_BYTES);
        let (reply_tx, reply_rx) = oneshot::channel();
        self.shared.inbound.lock_unpoisoned().insert(id, tx);
        self.shared.replies.lock_unpoisoned().insert(id, reply_tx);
        self.shared.open_local.lock_unpoisoned().insert(id);
        self.shared
            .send(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: headers.clone(),
            })
            .await?;
        match reply_rx.await {
            Ok(Ok(())) => Ok(Stream {
                id,
                headers,
                rx,
                tx: StreamWriter {
                    id,
                    shared: self.shared.clone(),
                },
            }),
            Ok(Err(status)) => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("the peer reset stream {id} (status {status})"),
            )),
            Err(_) => Err(broken()),
        }
    }

    /// Ends the session in order: FIN on every stream this side has not
    /// ended, GOAWAY, the end of the writing direction; then waits up to
    /// `linger` for the peer to read everything and hang up.
    pub async fn finish(&self, linger: Duration) {
        let open: Vec<u32> = self.shared.open_local.lock_unpoisoned().drain().collect();
        for stream_id in open {
            let _ = self
                .shared
                .send(Frame::Data {
                    stream_id,
                    flags: FLAG_FIN,
                    data: Vec::new(),
                })
                .await;
        }
        if self.shared.role == Role::Server {
            let _ = self
                .shared
                .send(Frame::GoAway {
                    last_good_stream_id: self.shared.last_peer_id.load(Ordering::SeqCst),
                    status: 0,
                })
                .await;
        }
        let (done_tx, done_rx) = oneshot::channel();
        if self
            .shared
            .out
            .send(OutItem(Out::Shutdown(done_tx)))
            .await
            .is_ok()
        {
            let _ = tokio::time::timeout(linger, done_rx).await;
        }
        let _ = tokio::time::timeout(linger, self.closed()).await;
    }
}

async fn write_loop<W: AsyncWrite>(
    mut io: WriteHalf<W>,
    mut encoder: Encoder,
    mut control: mpsc::Receiver<Frame>,
    mut out: mpsc::Receiver<OutItem>,
    shared: Arc<Shared>,
) {
    let mut buf = Vec::new();
    let mut control_open = true;
    loop {
        let item = tokio::select! {
            biased;
            frame = control.recv(), if control_open => match frame {
                Some(frame) => Out::Frame(frame, None),
                None => {
                    control_open = false;
                    continue;
                }
            },
            item = out.recv() => match item {
                Some(OutItem(item)) => item,
                None => break,
            },
        };
        match item {
            // The budget the frame holds goes back once it is written.
            Out::Frame(frame, _budget) => {
                buf.clear();
                if let Err(e) = encoder.encode(&frame, &mut buf) {
                    tracing::warn!(error = %e, "SPDY: encoding a frame");
                    break;
                }
                if let Err(e) = write_all(&mut io, &buf).await {
                    tracing::debug!(error = %e, "SPDY: writing");
                    break;
                }
            }
            Out::Shutdown(done) => {
                let _ = io.shutdown().await;
                let _ = done.send(());
                // Nothing more may be written; keep reading the queue so
                // senders are not stuck, but drop what they send. The peer
                // may still be reading: the connection is not closed yet.
                while out.recv().await.is_some() {}
                return;
            }
        }
    }
    // A write failed: the peer is unreachable.
    shared.closed.send_replace(true);
}

async fn write_all<W: AsyncWrite>(io: &mut WriteHalf<W>, buf: &[u8]) -> io::Result<()> {
    io.write_all(buf).await?;
    io.flush().await
}

/// Queues an answer for the writer. `false` when the queue is full: the
/// peer does not read what it asks for, and the connection ends.
fn answer(control: &mpsc::Sender<Frame>, frame: Frame) -> bool {
    match control.try_send(frame) {
        Ok(()) => true,
        // The writer has stopped (shut down or failed): nothing to send to.
        Err(mpsc::error::TrySendError::Closed(_)) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::warn!(
                queued = CONTROL_QUEUE,
                "SPDY: the peer does not read the answers to its frames; closing"
            );
            false
        }
    }
}

/// Streams of the peer still open in either direction.
fn open_streams(shared: &Shared) -> usize {
    let local = shared.open_local.lock_unpoisoned();
    let inbound = shared.inbound.lock_unpoisoned();
    local.len() + inbound.keys().filter(|id| !local.contains(id)).count()
}

/// Reads the payload of a DATA frame of `len` bytes in pieces of at most
/// [`DATA_CHUNK`] and hands them to the stream's receiver, if it has one.
async fn read_data<R: AsyncRead>(
    io: &mut ReadHalf<R>,
    shared: &Shared,
    stream_id: u32,
    len: usize,
) -> io::Result<()> {
    let mut tx = shared.inbound.lock_unpoisoned().get(&stream_id).cloned();
    let mut left = len;
    while left > 0 {
        let mut piece = vec![0u8; left.min(DATA_CHUNK)];
        io.read_exact(&mut piece).await?;
        left -= piece.len();
        if let Some(sender) = &tx {
            // Waits while the stream or the connection holds its most.
            if sender.send(piece).await.is_err() {
                // The consumer is gone: drop the rest of this stream.
                shared.inbound.lock_unpoisoned().remove(&stream_id);
                tx = None;
            }
        }
    }
    Ok(())
}

async fn read_loop<R: AsyncRead>(
    mut io: ReadHalf<R>,
    shared: Arc<Shared>,
    control: mpsc::Sender<Frame>,
    acceptor: Option<(Accept, mpsc::Sender<Stream>)>,
) {
    let mut decoder = Decoder::default();
    let mut reader = Reader {
        shared,
        control,
        acceptor,
        going_away: false,
    };
    loop {
        let frame = match reader.read_frame(&mut io, &mut decoder).await {
            Incoming::Data => continue,
            Incoming::Control(frame) => frame,
            Incoming::End => break,
        };
        if !reader.on_frame(frame).await {
            break;
        }
    }
    // The peer is gone: every stream's data ends, waiting openers fail.
    let shared = &reader.shared;
    shared.inbound.lock_unpoisoned().clear();
    shared.replies.lock_unpoisoned().clear();
    shared.closed.send_replace(true);
}

/// What the reader took from the connection at once.
enum Incoming {
    /// A DATA frame, handed to its stream already.
    Data,
    /// A control frame, decoded.
    Control(Frame),
    /// The connection ended or failed, or the peer broke the protocol (and
    /// GOAWAY is queued).
    End,
}

/// The reading task: what it answers with and what it hands streams to.
struct Reader {
    shared: Arc<Shared>,
    /// Answers to the peer, for the writer.
    control: mpsc::Sender<Frame>,
    /// Decides on the peer's streams and takes the accepted ones; `None`
    /// on a client, or once no more are taken.
    acceptor: Option<(Accept, mpsc::Sender<Stream>)>,
    /// The peer sent GOAWAY: its new streams are refused.
    going_away: bool,
}

impl Reader {
    /// Reads the next frame: a DATA frame is handed on in pieces as it is
    /// read, a control frame is decoded.
    async fn read_frame<R: AsyncRead>(
        &self,
        io: &mut ReadHalf<R>,
        decoder: &mut Decoder,
    ) -> Incoming {
        let head = match read_head(io).await {
            Ok(Some(head)) => head,
            Ok(None) => return Incoming::End,
            Err(e) => {
                tracing::debug!(error = %e, "SPDY: reading");
                return Incoming::End;
            }
        };
        if !is_control(&head) {
            let stream_id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            if let Err(e) = read_data(io, &self.shared, stream_id, payload_len(&head)).await {
                tracing::debug!(error = %e, "SPDY: reading");
                return Incoming::End;
            }
            if head[4] & FLAG_FIN != 0 {
                self.shared.inbound.lock_unpoisoned().remove(&stream_id);
            }
            return Incoming::Data;
        }
        if let Err(e) = check_control_len(&head) {
            self.protocol_error(&e);
            return Incoming::End;
        }
        let mut payload = vec![0u8; payload_len(&head)];
        if let Err(e) = io.read_exact(&mut payload).await {
            tracing::debug!(error = %e, "SPDY: reading");
            return Incoming::End;
        }
        match decoder.decode(RawFrame { head, payload }) {
            Ok(frame) => Incoming::Control(frame),
            Err(e) => {
                self.protocol_error(&e);
                Incoming::End
            }
        }
    }

    /// Tells the peer it broke the protocol (GOAWAY PROTOCOL_ERROR), before
    /// the connection ends.
    fn protocol_error(&self, e: &FrameError) {
        tracing::warn!(error = %e, "SPDY: bad frame from the peer; closing");
        let _ = self.control.try_send(Frame::GoAway {
            last_good_stream_id: self.shared.last_peer_id.load(Ordering::SeqCst),
            status: 1,
        });
    }

    /// Acts on one control frame; `false` when the connection ends.
    async fn on_frame(&mut self, frame: Frame) -> bool {
        let shared = &self.shared;
        match frame {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => self.on_syn_stream(stream_id, flags, headers).await,
            Frame::SynReply {
                stream_id, flags, ..
            } => {
                if let Some(reply) = shared.replies.lock_unpoisoned().remove(&stream_id) {
                    let _ = reply.send(Ok(()));
                }
                if flags & FLAG_FIN != 0 {
                    shared.inbound.lock_unpoisoned().remove(&stream_id);
                }
                true
            }
            // Read above, in pieces.
            Frame::Data { .. } => true,
            Frame::Headers {
                stream_id, flags, ..
            } => {
                if flags & FLAG_FIN != 0 {
                    shared.inbound.lock_unpoisoned().remove(&stream_id);
                }
                true
            }
            Frame::RstStream { stream_id, status } => {
                shared.inbound.lock_unpoisoned().remove(&stream_id);
                shared.open_local.lock_unpoisoned().remove(&stream_id);
                if let Some(reply) = shared.replies.lock_unpoisoned().remove(&stream_id) {
                    let _ = reply.send(Err(status));
                }
                true
            }
            Frame::Ping { id } => {
                // Answer the peer's pings; ours are even (server) or odd (client).
                let ours = match shared.role {
                    Role::Server => id % 2 == 0,
                    Role::Client => id % 2 == 1,
                };
                ours || answer(&self.control, Frame::Ping { id })
            }
            Frame::GoAway { .. } => {
                self.going_away = true;
                true
            }
            Frame::Settings { .. } | Frame::WindowUpdate { .. } | Frame::Unknown { .. } => true,
        }
    }

    /// A stream the peer opens: refused (RST_STREAM) if its id is wrong or
    /// this side does not take it, else answered with SYN_REPLY and handed
    /// to the acceptor. `false` when the connection ends.
    async fn on_syn_stream(&mut self, stream_id: u32, flags: u8, headers: Headers) -> bool {
        let shared = &self.shared;
        let peer_parity = match shared.role {
            Role::Server => 1,
            Role::Client => 0,
        };
        let last = shared.last_peer_id.load(Ordering::SeqCst);
        if stream_id == 0 || stream_id % 2 != peer_parity || stream_id <= last {
            return answer(
                &self.control,
                Frame::RstStream {
                    stream_id,
                    status: rst::PROTOCOL_ERROR,
                },
            );
        }
        shared.last_peer_id.store(stream_id, Ordering::SeqCst);
        if let Err(reason) = self.verdict(&headers) {
            tracing::debug!(stream_id, ?headers, %reason, "SPDY: refusing a stream");
            return answer(
                &self.control,
                Frame::RstStream {
                    stream_id,
                    status: rst::REFUSED_STREAM,
                },
            );
        }
        let (tx, rx) = shared.pool.channel(STREAM_BYTES);
        if flags & FLAG_FIN == 0 {
            shared.inbound.lock_unpoisoned().insert(stream_id, tx);
        }
        shared.open_local.lock_unpoisoned().insert(stream_id);
        if !answer(
            &self.control,
            Frame::SynReply {
                stream_id,
                flags: 0,
                headers: Headers::default(),
            },
        ) {
            return false;
        }
        let stream = Stream {
            id: stream_id,
            headers,
            rx,
            tx: StreamWriter {
                id: stream_id,
                shared: shared.clone(),
            },
        };
        self.deliver(stream).await
    }

    /// Whether this side takes a new stream of the peer with `headers`; the
    /// reason if not.
    fn verdict(&self, headers: &Headers) -> Result<(), String> {
        match &self.acceptor {
            _ if self.going_away => Err("the peer is going away".to_string()),
            None => Err("this side accepts no streams".to_string()),
            Some((_, tx)) if tx.is_closed() => Err("no more streams expected".to_string()),
            Some(_) if open_streams(&self.shared) >= MAX_STREAMS => Err(format!(
                "{MAX_STREAMS} streams are open on this connection already"
            )),
            Some((accept, _)) => accept(headers),
        }
    }

    /// Hands an accepted stream to the acceptor; if it takes no more, the
    /// stream is reset (REFUSED_STREAM) and so is every later one. `false`
    /// when the connection ends.
    async fn deliver(&mut self, stream: Stream) -> bool {
        let stream_id = stream.id;
        let delivered = match &self.acceptor {
            Some((_, tx)) => tx.send(stream).await.is_ok(),
            None => false,
        };
        if delivered {
            return true;
        }
        self.shared.inbound.lock_unpoisoned().remove(&stream_id);
        self.shared.open_local.lock_unpoisoned().remove(&stream_id);
        self.acceptor = None;
        answer(
            &self.control,
            Frame::RstStream {
                stream_id,
                status: rst::REFUSED_STREAM,
            },
        )
    }
}
