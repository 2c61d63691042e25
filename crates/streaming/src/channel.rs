//! The pieces sessions share, whatever carries them: an output channel (a
//! SPDY stream, a WebSocket channel) and the pumps between channels and the
//! pipes the backend reads and writes.

use std::io;
use std::sync::Arc;

use crate::pool::ChunkReceiver;
use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::spdy::StreamWriter;

/// Bytes one pump moves at once.
pub(crate) const CHUNK: usize = 32 * 1024;
/// Buffer of the pipes between the pumps and the backend.
pub(crate) const PIPE: usize = 64 * 1024;

/// One direction to the client.
#[async_trait]
pub(crate) trait Channel: Send + Sync {
    async fn write(&self, data: &[u8]) -> io::Result<()>;
    /// Ends this direction, where the transport can say so (SPDY FIN).
    async fn close(&self) -> io::Result<()>;
}

pub(crate) type OutChannel = Arc<dyn Channel>;

#[async_trait]
impl Channel for StreamWriter {
    async fn write(&self, data: &[u8]) -> io::Result<()> {
        StreamWriter::write(self, data).await
    }
    async fn close(&self) -> io::Result<()> {
        StreamWriter::close(self).await
    }
}

/// Sends what the backend writes into `r` to `out` until EOF. Once the
/// client stops taking it, reads on and drops it, so the backend is never
/// blocked by a client that went away.
pub(crate) async fn pump_out(mut r: impl AsyncRead + Unpin, out: OutChannel) {
    let mut buf = vec![0u8; CHUNK];
    let mut sending = true;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if sending && out.write(&buf[..n]).await.is_err() {
                    sending = false;
                }
            }
        }
    }
}

/// Feeds the client's chunks into `w`, and ends it when the client ends.
/// A chunk stays charged to the connection's pool until it is written.
pub(crate) async fn pump_in(mut rx: ChunkReceiver, mut w: impl AsyncWrite + Unpin) {
    while let Some(chunk) = rx.recv_chunk().await {
        if w.write_all(&chunk).await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// A spawned task that ends with its owner.
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
