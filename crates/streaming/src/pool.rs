//! Byte budgets for what a client makes the server hold: a [`BytePool`] per
//! client connection, and channels whose queued chunks count against both
//! their own limit (per stream: a forwarded connection's data, an exec's
//! stdin) and the pool's (the whole connection). A chunk is charged before
//! it is queued and released when its consumer is done with it, so a
//! client that sends faster than the other side reads (or a consumer that
//! never reads) makes the sender wait (and the peer's TCP window close)
//! instead of growing memory.

use std::ops::Deref;
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// The shared budget of one client connection.
#[derive(Debug, Clone)]
pub struct BytePool {
    budget: Arc<Semaphore>,
    capacity: usize,
}

impl BytePool {
    /// A pool of `capacity` bytes.
    pub fn new(capacity: usize) -> BytePool {
        BytePool {
            budget: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// Bytes not charged right now.
    pub fn available(&self) -> usize {
        self.budget.available_permits()
    }

    /// A channel holding at most `limit` bytes queued (and what the pool has
    /// left).
    pub fn channel(&self, limit: usize) -> (ChunkSender, ChunkReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        let limit = limit.clamp(1, self.capacity.max(1));
        (
            ChunkSender {
                tx,
                own: Arc::new(Semaphore::new(limit)),
                limit,
                pool: self.clone(),
            },
            ChunkReceiver { rx },
        )
    }
}

/// A queued chunk and what it is charged.
#[derive(Debug)]
pub struct Chunk {
    data: Vec<u8>,
    _own: OwnedSemaphorePermit,
    _pool: OwnedSemaphorePermit,
}

impl Chunk {
    /// The bytes (their charge is released).
    pub fn into_vec(self) -> Vec<u8> {
        self.data
    }
}

impl Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

/// Queues chunks, waiting for room. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ChunkSender {
    tx: mpsc::UnboundedSender<Chunk>,
    own: Arc<Semaphore>,
    limit: usize,
    pool: BytePool,
}

impl ChunkSender {
    /// Largest chunk [`ChunkSender::send`] takes.
    pub fn max_chunk(&self) -> usize {
        self.limit
    }

    /// Queues `data` once the channel and the pool have room for it (an
    /// empty chunk costs one byte). `Err(data)` when the receiver is gone or
    /// `data` is larger than [`ChunkSender::max_chunk`].
    pub async fn send(&self, data: Vec<u8>) -> Result<(), Vec<u8>> {
        let cost = data.len().max(1);
        if cost > self.limit || self.tx.is_closed() {
            return Err(data);
        }
        let Ok(cost) = u32::try_from(cost) else {
            return Err(data);
        };
        let own = tokio::select! {
            permit = self.own.clone().acquire_many_owned(cost) => permit,
            () = self.tx.closed() => return Err(data),
        };
        let pool = tokio::select! {
            permit = self.pool.budget.clone().acquire_many_owned(cost) => permit,
            () = self.tx.closed() => return Err(data),
        };
        let (Ok(own), Ok(pool)) = (own, pool) else {
            return Err(data);
        };
        self.tx
            .send(Chunk {
                data,
                _own: own,
                _pool: pool,
            })
            .map_err(|e| e.0.data)
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Takes chunks in order; dropping it releases everything queued.
#[derive(Debug)]
pub struct ChunkReceiver {
    rx: mpsc::UnboundedReceiver<Chunk>,
}

impl ChunkReceiver {
    /// The next chunk, still charged until it is dropped; `None` once every
    /// sender is gone and the queue is empty.
    pub async fn recv_chunk(&mut self) -> Option<Chunk> {
        self.rx.recv().await
    }

    /// The next chunk's bytes, its charge released.
    pub async fn recv(&mut self) -> Option<Vec<u8>> {
        self.rx.recv().await.map(Chunk::into_vec)
    }

    /// The next chunk's bytes if one is queued now, its charge released.
    pub fn try_recv(&mut self) -> Result<Vec<u8>, mpsc::error::TryRecvError> {
        self.rx.try_recv().map(Chunk::into_vec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn blocked(tx: &ChunkSender, data: Vec<u8>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), tx.send(data))
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_channel_holds_at_most_its_limit() {
        let pool = BytePool::new(1000);
        let (tx, mut rx) = pool.channel(100);
        tx.send(vec![1; 60]).await.unwrap();
        assert!(blocked(&tx, vec![2; 60]).await);
        assert_eq!(pool.available(), 940);
        let chunk = rx.recv_chunk().await.unwrap();
        // Still charged while held.
        assert!(blocked(&tx, vec![2; 60]).await);
        drop(chunk);
        tx.send(vec![2; 60]).await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), vec![2; 60]);
        assert_eq!(pool.available(), 1000);
        // Too big for the channel at all.
        assert_eq!(tx.send(vec![0; 101]).await.unwrap_err().len(), 101);
    }

    #[tokio::test]
    async fn channels_share_the_pool_and_a_dropped_receiver_gives_back() {
        let pool = BytePool::new(100);
        let (a, a_rx) = pool.channel(80);
        let (b, mut b_rx) = pool.channel(80);
        a.send(vec![0; 80]).await.unwrap();
        assert!(blocked(&b, vec![0; 30]).await);
        b.send(vec![0; 20]).await.unwrap();
        assert_eq!(pool.available(), 0);
        drop(a_rx);
        assert_eq!(pool.available(), 80);
        assert!(a.send(vec![1]).await.is_err());
        assert!(a.is_closed());
        assert_eq!(b_rx.recv().await.unwrap().len(), 20);
        // Empty chunks cost a byte: they cannot pile up for free.
        let (c, _c_rx) = pool.channel(2);
        c.send(Vec::new()).await.unwrap();
        c.send(Vec::new()).await.unwrap();
        assert!(blocked(&c, Vec::new()).await);
    }

    #[tokio::test]
    async fn a_waiting_sender_gives_up_when_the_receiver_goes() {
        let pool = BytePool::new(10);
        let (tx, rx) = pool.channel(10);
        tx.send(vec![0; 10]).await.unwrap();
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(vec![1; 5]).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(rx);
        let result = tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(result.is_err());
        assert_eq!(pool.available(), 10);
    }
}
