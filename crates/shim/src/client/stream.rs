//! An exec's or attach's stream ([`IoStream`]): the process's output and
//! exit coming down, its stdin and terminal size going up; and the async
//! reading and writing of the frames every call to a shim is made of.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use crate::error::Error;
use crate::protocol::{self, Control, FrameKind};

/// Largest stdin frame sent at once.
const STDIN_CHUNK: usize = 64 * 1024;

/// Something that came down a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The process (exec) or the container (attach) exited; the stream ends.
    Exit {
        exit_code: i32,
        timed_out: bool,
    },
}

/// A live exec or attach stream; [`IoStream::split`] to drive both
/// directions from different tasks.
#[derive(Debug)]
pub struct IoStream {
    pid: Option<u32>,
    reader: StreamReader,
    writer: StreamWriter,
}

/// The receiving half of an [`IoStream`].
#[derive(Debug)]
pub struct StreamReader {
    id: String,
    inner: OwnedReadHalf,
    done: bool,
}

/// The sending half of an [`IoStream`].
#[derive(Debug)]
pub struct StreamWriter {
    id: String,
    inner: OwnedWriteHalf,
}

impl IoStream {
    /// The stream on `conn`, a connection to the shim of container `id`
    /// whose request the shim has answered.
    pub(super) fn new(id: &str, conn: UnixStream) -> IoStream {
        let (r, w) = conn.into_split();
        IoStream {
            pid: None,
            reader: StreamReader {
                id: id.to_string(),
                inner: r,
                done: false,
            },
            writer: StreamWriter {
                id: id.to_string(),
                inner: w,
            },
        }
    }

    /// The stream of an exec'd process `pid`.
    pub(super) fn with_pid(mut self, pid: u32) -> IoStream {
        self.pid = Some(pid);
        self
    }

    /// The exec'd process's pid (none for an attach).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The two halves.
    pub fn split(self) -> (StreamReader, StreamWriter) {
        (self.reader, self.writer)
    }

    /// See [`StreamReader::next`].
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, Error> {
        self.reader.next().await
    }

    /// See [`StreamWriter::stdin`].
    pub async fn stdin(&mut self, data: &[u8]) -> Result<(), Error> {
        self.writer.stdin(data).await
    }

    /// See [`StreamWriter::close_stdin`].
    pub async fn close_stdin(&mut self) -> Result<(), Error> {
        self.writer.close_stdin().await
    }

    /// See [`StreamWriter::resize`].
    pub async fn resize(&mut self, width: u16, height: u16) -> Result<(), Error> {
        self.writer.resize(width, height).await
    }
}

impl StreamReader {
    /// The next event; `None` after [`StreamEvent::Exit`] (or if the shim
    /// hung up without one).
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, Error> {
        if self.done {
            return Ok(None);
        }
        let frame = read_frame(&mut self.inner)
            .await
            .map_err(|e| Error::Protocol {
                id: self.id.clone(),
                message: format!("reading the stream: {e}"),
            })?;
        let Some((kind, payload)) = frame else {
            self.done = true;
            return Ok(None);
        };
        Ok(Some(match kind {
            FrameKind::Stdout => StreamEvent::Stdout(payload),
            FrameKind::Stderr => StreamEvent::Stderr(payload),
            kind => match protocol::decode::<Control>(kind, &payload) {
                Ok(Control::Exit {
                    exit_code,
                    timed_out,
                }) => {
                    self.done = true;
                    StreamEvent::Exit {
                        exit_code,
                        timed_out,
                    }
                }
                other => {
                    return Err(Error::Protocol {
                        id: self.id.clone(),
                        message: format!("unexpected message in the stream: {other:?}"),
                    })
                }
            },
        }))
    }
}

impl StreamWriter {
    /// Sends bytes to the process's stdin.
    pub async fn stdin(&mut self, data: &[u8]) -> Result<(), Error> {
        for chunk in data.chunks(STDIN_CHUNK) {
            write_frame(&mut self.inner, FrameKind::Stdin, chunk)
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Closes the process's stdin (for an attach: only with `stdin_once`).
    pub async fn close_stdin(&mut self) -> Result<(), Error> {
        self.control(&Control::CloseStdin).await
    }

    /// Resizes the terminal.
    pub async fn resize(&mut self, width: u16, height: u16) -> Result<(), Error> {
        self.control(&Control::Resize { width, height }).await
    }

    async fn control(&mut self, c: &Control) -> Result<(), Error> {
        let payload = serde_json::to_vec(c).map_err(|e| self.err(e.into()))?;
        write_frame(&mut self.inner, FrameKind::Json, &payload)
            .await
            .map_err(|e| self.err(e))
    }

    fn err(&self, e: std::io::Error) -> Error {
        Error::Protocol {
            id: self.id.clone(),
            message: format!("writing to the stream: {e}"),
        }
    }
}

pub(super) async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: FrameKind,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(5 + payload.len());
    buf.extend_from_slice(&protocol::frame_header(kind, payload.len())?);
    buf.extend_from_slice(payload);
    w.write_all(&buf).await?;
    w.flush().await
}

pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<(FrameKind, Vec<u8>)>> {
    let mut h = [0u8; 5];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let (kind, len) = protocol::parse_header(h)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some((kind, payload)))
}
