//! An upgraded connection that ends when nothing crosses it for a while
//! (kubelet's and containerd's `stream_idle_timeout`, 4 h by default): a
//! forgotten `kubectl exec` or port-forward does not hold its session, its
//! process and its shim connection for ever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, failing reads with `TimedOut` once `timeout` has passed without
/// a byte read or written.
pub(crate) struct Idle<T> {
    inner: T,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Idle<T> {
    pub(crate) fn new(inner: T, timeout: Duration) -> Idle<T> {
        Idle {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn active(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.timeout);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Idle<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // Waiting for the peer: the deadline wakes this read too.
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("stream idle for {:?}", self.timeout),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Idle<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.active();
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_times_out() {
        let (a, _b) = tokio::io::duplex(64);
        let mut idle = Idle::new(a, Duration::from_secs(10));
        let started = Instant::now();
        let err = idle.read(&mut [0; 8]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_either_way_keeps_it_open() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut idle = Idle::new(a, Duration::from_secs(10));
        let started = Instant::now();
        for round in 0..4 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            if round % 2 == 0 {
                b.write_all(b"x").await.unwrap();
                let mut one = [0; 1];
                idle.read_exact(&mut one).await.unwrap();
            } else {
                idle.write_all(b"y").await.unwrap();
                let mut one = [0; 1];
                b.read_exact(&mut one).await.unwrap();
            }
        }
        // 24 s in, 0 s since the last byte: 10 more before it ends.
        let err = idle.read(&mut [0; 8]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(34));
    }

    #[tokio::test(start_paused = true)]
    async fn data_and_eof_pass_through() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut idle = Idle::new(a, Duration::from_secs(10));
        b.write_all(b"hello").await.unwrap();
        drop(b);
        let mut got = Vec::new();
        idle.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
    }
}
