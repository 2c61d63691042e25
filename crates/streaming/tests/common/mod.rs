//! A fake runtime behind the streaming server, shared by the tests.
#![allow(dead_code)]

pub mod apiserver;
pub mod tls;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use berth_streaming::{
    AttachRequest, Backend, BackendError, Config, ExecRequest, PortStream, StreamIo,
    StreamingServer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs commands by name: `echo ARGS`, `fail CODE` ("oops" on stderr), `cat`,
/// `size` (the first terminal size), `sleep`; anything else fails. Attach
/// echoes stdin. Port 1 has nothing listening, port 7 greets and hangs up,
/// port 9 accepts and never reads nor writes (a stuck server), port 19
/// writes without end, other ports greet and echo. Counts the processes
/// alive.
#[derive(Default)]
pub struct Fake {
    pub alive: AtomicUsize,
}

/// Counts one live process while it exists.
struct Alive<'a>(&'a AtomicUsize);

impl<'a> Alive<'a> {
    fn new(n: &'a AtomicUsize) -> Alive<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        Alive(n)
    }
}

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn copy_stdin_to_stdout(io: &mut StreamIo) -> std::io::Result<()> {
    let (Some(stdin), Some(stdout)) = (io.stdin.as_mut(), io.stdout.as_mut()) else {
        return Ok(());
    };
    let mut buf = [0u8; 1024];
    loop {
        let n = stdin.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stdout.write_all(&buf[..n]).await?;
    }
}

#[async_trait]
impl Backend for Fake {
    async fn exec(&self, req: &ExecRequest, mut io: StreamIo) -> Result<i32, BackendError> {
        let _alive = Alive::new(&self.alive);
        let internal = |e: std::io::Error| BackendError::Internal(e.to_string());
        match req.cmd[0].as_str() {
            "echo" => {
                let line = format!("{}\n", req.cmd[1..].join(" "));
                if let Some(out) = io.stdout.as_mut() {
                    out.write_all(line.as_bytes()).await.map_err(internal)?;
                }
                Ok(0)
            }
            "fail" => {
                // As a process would, after a moment: kubectl's WebSocket
                // client (client-go) reads frames before it has made its
                // streams, and drops those of a stream not made yet
                // ("Unknown stream id 2, discarding message"); a frame sent
                // the instant the upgrade is done was seen lost that way.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                if let Some(err) = io.stderr.as_mut() {
                    err.write_all(b"oops\n").await.map_err(internal)?;
                }
                Ok(req.cmd[1].parse().unwrap_or(1))
            }
            "cat" => {
                copy_stdin_to_stdout(&mut io).await.map_err(internal)?;
                Ok(0)
            }
            "size" => {
                // Waits, like a process, if the resizes stop before the first.
                let Some(size) = io.resize.as_mut().unwrap().recv().await else {
                    return std::future::pending().await;
                };
                let line = format!("{} {}\r\n", size.height, size.width);
                io.stdout
                    .as_mut()
                    .unwrap()
                    .write_all(line.as_bytes())
                    .await
                    .map_err(internal)?;
                Ok(0)
            }
            "sleep" => std::future::pending().await,
            _ => Err(BackendError::Internal("no such command".into())),
        }
    }

    async fn attach(&self, _req: &AttachRequest, mut io: StreamIo) -> Result<(), BackendError> {
        let _alive = Alive::new(&self.alive);
        copy_stdin_to_stdout(&mut io)
            .await
            .map_err(|e| BackendError::Internal(e.to_string()))
    }

    async fn port_forward(
        &self,
        pod: &str,
        port: u16,
        mut stream: PortStream,
    ) -> Result<(), BackendError> {
        let err = |e: std::io::Error| BackendError::Internal(e.to_string());
        let greeting = format!("hi from {port}\n");
        match port {
            1 => Err(BackendError::FailedPrecondition(format!(
                "nothing listens on port 1 in {pod}"
            ))),
            // Greets and hangs up, like `nc -l -e echo hi`.
            7 => stream.write_all(greeting.as_bytes()).await.map_err(err),
            9 => {
                let _held = stream;
                std::future::pending().await
            }
            19 => {
                let block = [b'x'; 16 * 1024];
                loop {
                    stream.write_all(&block).await.map_err(err)?;
                }
            }
            // Greets, then echoes until the client's half-close.
            _ => {
                stream.write_all(greeting.as_bytes()).await.map_err(err)?;
                let mut buf = [0u8; 1024];
                loop {
                    let n = stream.read(&mut buf).await.map_err(err)?;
                    if n == 0 {
                        return stream.shutdown().await.map_err(err);
                    }
                    stream.write_all(&buf[..n]).await.map_err(err)?;
                }
            }
        }
    }
}

pub struct Server {
    pub server: StreamingServer,
    pub fake: Arc<Fake>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

pub fn start_with(config: Config) -> Server {
    let fake = Arc::new(Fake::default());
    let server = StreamingServer::new(config, fake.clone()).unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve().await.unwrap() });
    Server { server, fake }
}

pub fn start() -> Server {
    start_with(Config::default())
}
