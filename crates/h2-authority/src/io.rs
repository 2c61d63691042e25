//! [`AuthorityFix`]: one accepted connection with its reading side passed
//! through a [`Rewriter`]; writes go straight to the connection, the
//! rewriter watching them for the server's SETTINGS.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::Rewriter;

/// How much is read from the connection at once into the rewriter.
const READ_CHUNK: usize = 16 * 1024;

/// A connection whose client-to-server HTTP/2 bytes are rewritten so that
/// any `:authority` is accepted (see the crate documentation). Hand it to
/// the HTTP/2 server in place of the connection itself; with the `tonic`
/// feature it is `tonic::transport::server::Connected` with the wrapped
/// connection's connect info.
///
/// Payloads of frames other than HEADERS and CONTINUATION (DATA above all)
/// are read straight into the server's buffer. A framing or HPACK error is
/// returned from `poll_read` as [`io::ErrorKind::InvalidData`] (the server
/// then closes the connection), and again on every later read.
///
/// What the server writes goes to the connection as it is, and through
/// [`Rewriter::observe_server`]: a SETTINGS_HEADER_TABLE_SIZE of the server
/// is followed by both HPACK contexts of the rewriter; one that it cannot
/// follow is an [`io::ErrorKind::InvalidData`] error from that write (the
/// server closes the connection) and from every later read.
#[derive(Debug)]
pub struct AuthorityFix<S> {
    inner: S,
    rewriter: Rewriter,
    /// What the rewriter produced and the server has not read yet.
    out: Vec<u8>,
    out_pos: usize,
    /// Read from the connection, for the rewriter.
    chunk: Box<[u8]>,
    failed: bool,
}

impl<S> AuthorityFix<S> {
    /// Wraps an accepted connection (before anything was read from or
    /// written to it).
    pub fn new(inner: S) -> AuthorityFix<S> {
        AuthorityFix::with_rewriter(inner, Rewriter::new())
    }

    /// Wraps an accepted connection with a given rewriter (such as
    /// [`Rewriter::always_rewrite`]), which must be new.
    pub fn with_rewriter(inner: S, rewriter: Rewriter) -> AuthorityFix<S> {
        AuthorityFix {
            inner,
            rewriter,
            out: Vec::new(),
            out_pos: 0,
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            failed: false,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// How many `:authority` values were replaced on this connection.
    pub fn replaced(&self) -> u64 {
        self.rewriter.replaced()
    }

    /// Shows the rewriter the first `n` octets of what the server wrote
    /// (after a failure the connection is going away: no more).
    fn observe<'a>(&mut self, n: usize, bufs: impl Iterator<Item = &'a [u8]>) -> io::Result<()> {
        if self.failed {
            return Ok(());
        }
        let mut left = n;
        for buf in bufs {
            if left == 0 {
                break;
            }
            let part = &buf[..left.min(buf.len())];
            left -= part.len();
            if let Err(err) = self.rewriter.observe_server(part) {
                self.failed = true;
                tracing::warn!(error = %err, "closing an HTTP/2 connection: the :authority rewriter cannot follow the server's settings");
                return Err(io::Error::new(io::ErrorKind::InvalidData, err));
            }
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "connection closed after an HTTP/2 framing or settings error",
            )));
        }
        if dst.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.out_pos < this.out.len() {
                let n = dst.remaining().min(this.out.len() - this.out_pos);
                dst.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let direct = this.rewriter.direct_len();
            if direct > 0 {
                // A payload that passes unchanged: read it where the server wants it.
                let limit = direct.min(dst.remaining());
                let mut sub = ReadBuf::new(dst.initialize_unfilled_to(limit));
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut sub))?;
                let n = sub.filled().len();
                dst.advance(n);
                this.rewriter.consume_direct(n);
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut this.chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf))?;
            let n = buf.filled().len();
            if n == 0 {
                // End of the connection; a partial frame kept back is dropped,
                // and the server sees the connection end.
                return Poll::Ready(Ok(()));
            }
            if let Err(err) = this.rewriter.feed(&this.chunk[..n], &mut this.out) {
                this.failed = true;
                tracing::warn!(error = %err, "closing an HTTP/2 connection: its client's frames cannot be followed");
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, err)));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.observe(n, std::iter::once(buf))?;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        this.observe(n, bufs.iter().map(|buf| &**buf))?;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(feature = "tonic")]
impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFix<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
