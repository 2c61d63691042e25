//! Exec and attach: a [`RemoteCommand`] over SPDY or WebSocket, its
//! streams, and what it sent back.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::{
    encode_ws, or_usual, protocol_err, spdy_upgrade, ws_send, ws_upgrade, ClientError, Dialer,
    Transport, Ws, WsSink,
};
use crate::backend::TerminalSize;
use crate::channel::AbortOnDrop;
use crate::spdy::{Connection, Headers, Stream, StreamWriter};

/// Which streams an exec or attach asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Something the server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// On the error channel: the status.
    Error(Vec<u8>),
}

enum Sender {
    Spdy {
        _conn: Connection,
        stdin: Option<StreamWriter>,
        resize: Option<StreamWriter>,
    },
    Ws {
        sink: WsSink,
        _reader: AbortOnDrop,
    },
}

/// A running exec or attach.
pub struct RemoteCommand {
    protocol: String,
    sender: Sender,
    events: mpsc::Receiver<Event>,
}

/// Everything an exec or attach sent back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finished {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The error channel's content (a JSON status in v4 and v5).
    pub status: Vec<u8>,
}

impl Finished {
    /// The exit code a v4/v5 status reports: 0 for success, the
    /// `ExitCode` cause of a `NonZeroExitCode` failure; `None` otherwise.
    pub fn exit_code(&self) -> Option<i32> {
        exit_code(&self.status)
    }
}

/// The exit code in a v4/v5 status (see [`Finished::exit_code`]).
pub fn exit_code(status: &[u8]) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_slice(status).ok()?;
    match v["status"].as_str()? {
        "Success" => Some(0),
        _ if v["reason"] == "NonZeroExitCode" => v["details"]["causes"]
            .as_array()?
            .iter()
            .find(|c| c["reason"] == "ExitCode")?["message"]
            .as_str()?
            .parse()
            .ok(),
        _ => None,
    }
}

/// Forwards a stream's data as events until it ends.
fn spdy_events(stream: Stream, tx: mpsc::Sender<Event>, make: fn(Vec<u8>) -> Event) {
    let mut rx = stream.rx;
    tokio::spawn(async move {
        while let Some(data) = rx.recv().await {
            if tx.send(make(data)).await.is_err() {
                return;
            }
        }
    });
}

impl RemoteCommand {
    /// Upgrades `url` and opens the streams `opts` ask for, offering
    /// `protocols` (most preferred first; empty: the transport's usual ones).
    pub async fn connect(
        url: &str,
        transport: Transport,
        opts: CommandOptions,
        protocols: &[&str],
    ) -> Result<RemoteCommand, ClientError> {
        RemoteCommand::connect_with(&Dialer::plain(), url, transport, opts, protocols).await
    }

    /// [`RemoteCommand::connect`] through `dialer` (for `https://` URLs).
    pub async fn connect_with(
        dialer: &Dialer,
        url: &str,
        transport: Transport,
        opts: CommandOptions,
        protocols: &[&str],
    ) -> Result<RemoteCommand, ClientError> {
        match transport {
            Transport::Spdy => RemoteCommand::connect_spdy(dialer, url, opts, protocols).await,
            Transport::WebSocket => RemoteCommand::connect_ws(dialer, url, protocols).await,
        }
    }

    /// Over SPDY: opens a stream for each of `opts`, in the order kubelet's
    /// clients open them.
    async fn connect_spdy(
        dialer: &Dialer,
        url: &str,
        opts: CommandOptions,
        protocols: &[&str],
    ) -> Result<RemoteCommand, ClientError> {
        let protocols = or_usual(protocols, crate::REMOTE_COMMAND_SPDY_PROTOCOLS);
        let (conn, protocol) = spdy_upgrade(dialer, url, protocols).await?;
        let open = |kind: &'static str| conn.open(Headers::from_pairs([("streamType", kind)]));
        let (tx, events) = mpsc::channel(64);
        // kubelet's clients open error, stdin, stdout, stderr, resize.
        spdy_events(open("error").await?, tx.clone(), Event::Error);
        let stdin = match opts.stdin {
            true => Some(open("stdin").await?.tx),
            false => None,
        };
        if opts.stdout {
            spdy_events(open("stdout").await?, tx.clone(), Event::Stdout);
        }
        if opts.stderr && !opts.tty {
            spdy_events(open("stderr").await?, tx.clone(), Event::Stderr);
        }
        let resize = match opts.tty && protocol != "v2.channel.k8s.io" {
            true => Some(open("resize").await?.tx),
            false => None,
        };
        Ok(RemoteCommand {
            protocol,
            sender: Sender::Spdy {
                _conn: conn,
                stdin,
                resize,
            },
            events,
        })
    }

    /// Over a WebSocket: the streams are channels of the one connection,
    /// turned into events as they arrive.
    async fn connect_ws(
        dialer: &Dialer,
        url: &str,
        protocols: &[&str],
    ) -> Result<RemoteCommand, ClientError> {
        let protocols = or_usual(protocols, &["v5.channel.k8s.io", "v4.channel.k8s.io"]);
        let Ws {
            sink,
            protocol,
            mut rx,
            reader,
        } = ws_upgrade(dialer, url, protocols).await?;
        let (tx, events) = mpsc::channel(64);
        tokio::spawn(async move {
            while let Some((channel, data)) = rx.recv().await {
                let event = match channel {
                    1 => Event::Stdout(data),
                    2 => Event::Stderr(data),
                    3 => Event::Error(data),
                    _ => continue,
                };
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        });
        Ok(RemoteCommand {
            protocol,
            sender: Sender::Ws {
                sink,
                _reader: reader,
            },
            events,
        })
    }

    /// The sub-protocol the server chose.
    pub fn protocol(&self) -> &str {
        &self.protocol
    }

    /// Sends bytes to the process's stdin.
    pub async fn send_stdin(&mut self, data: &[u8]) -> Result<(), ClientError> {
        match &mut self.sender {
            Sender::Spdy { stdin, .. } => match stdin {
                Some(s) => Ok(s.write(data).await?),
                None => Err(protocol_err("no stdin stream")),
            },
            Sender::Ws { sink, .. } => ws_send(sink, encode_ws(&self.protocol, 0, data)).await,
        }
    }

    /// Ends stdin (SPDY: FIN on the stream; WebSocket v5: the close signal).
    pub async fn close_stdin(&mut self) -> Result<(), ClientError> {
        match &mut self.sender {
            Sender::Spdy { stdin, .. } => match stdin {
                Some(s) => Ok(s.close().await?),
                None => Err(protocol_err("no stdin stream")),
            },
            Sender::Ws { sink, .. } if self.protocol == "v5.channel.k8s.io" => {
                ws_send(sink, Message::Binary(vec![255u8, 0].into())).await
            }
            Sender::Ws { .. } => Err(protocol_err(format!(
                "{:?} cannot close stdin",
                self.protocol
            ))),
        }
    }

    /// Tells the server the terminal's size.
    pub async fn resize(&mut self, width: u16, height: u16) -> Result<(), ClientError> {
        let json = serde_json::to_vec(&TerminalSize { width, height })
            .map_err(|e| protocol_err(e.to_string()))?;
        match &mut self.sender {
            Sender::Spdy { resize, .. } => match resize {
                Some(s) => Ok(s.write(&json).await?),
                None => Err(protocol_err("no resize stream")),
            },
            Sender::Ws { sink, .. } => ws_send(sink, encode_ws(&self.protocol, 4, &json)).await,
        }
    }

    /// The next thing the server sent; `None` once it has ended everything.
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// Reads stdout until it contains `needle` (or `timeout` passes), and
    /// returns all stdout read so far.
    pub async fn read_stdout_until(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        let found = tokio::time::timeout(timeout, async {
            while let Some(event) = self.next().await {
                if let Event::Stdout(data) = event {
                    out.extend_from_slice(&data);
                    if String::from_utf8_lossy(&out).contains(needle) {
                        return true;
                    }
                }
            }
            false
        })
        .await;
        match found {
            Ok(true) => Ok(out),
            _ => Err(protocol_err(format!(
                "{needle:?} not in stdout {:?}",
                String::from_utf8_lossy(&out)
            ))),
        }
    }

    /// Reads everything until the server ends, bounded by `timeout`.
    pub async fn finish(mut self, timeout: Duration) -> Result<Finished, ClientError> {
        let mut done = Finished::default();
        tokio::time::timeout(timeout, async {
            while let Some(event) = self.next().await {
                match event {
                    Event::Stdout(d) => done.stdout.extend(d),
                    Event::Stderr(d) => done.stderr.extend(d),
                    Event::Error(d) => done.status.extend(d),
                }
            }
        })
        .await
        .map_err(|_| protocol_err(format!("the session did not end in {timeout:?}: {done:?}")))?;
        Ok(done)
    }
}
