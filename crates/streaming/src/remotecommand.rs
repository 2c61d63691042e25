//! Exec and attach sessions (kubelet's "remotecommand"): the client's
//! stdin, stdout, stderr, error and resize channels wired to the backend,
//! and the status that ends the session on the error channel.
//!
//! The error channel carries, in protocol v4 and v5, a JSON
//! `metav1.Status`: `{"metadata":{},"status":"Success"}`, or a failure
//! whose reason `NonZeroExitCode` carries the exit code in the cause of
//! reason `ExitCode`, or `InternalError`. Older protocols carry the failure
//! message as text and nothing on success.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::backend::{
    AttachRequest, Backend, BackendError, ExecRequest, Input, Output, StreamIo, TerminalSize,
};
use crate::channel::{pump_in, pump_out, OutChannel, PIPE};
use crate::pool::ChunkReceiver;
use crate::spdy::frame::rst;
use crate::spdy::{Accept, Connection, Stream};

/// How long output still in the pipes may take to reach the client after
/// the process ended.
const DRAIN: Duration = Duration::from_secs(10);
/// How long the client may take to read the end and hang up.
pub(crate) const LINGER: Duration = Duration::from_secs(5);
/// Most bytes of an unfinished resize object kept while its end arrives
/// (`{"Width":65535,"Height":65535}` is 30 bytes).
pub const MAX_RESIZE_PENDING: usize = 4096;

/// SPDY remote command protocols, most preferred first.
pub const SPDY_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
];

/// An exec or an attach.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Exec(ExecRequest),
    Attach(AttachRequest),
}

impl Command {
    fn flags(&self) -> (bool, bool, bool, bool) {
        match self {
            Command::Exec(r) => (r.tty, r.stdin, r.stdout, r.stderr),
            Command::Attach(r) => (r.tty, r.stdin, r.stdout, r.stderr),
        }
    }
    pub(crate) fn tty(&self) -> bool {
        self.flags().0
    }
    pub(crate) fn stdin(&self) -> bool {
        self.flags().1
    }
    pub(crate) fn stdout(&self) -> bool {
        self.flags().2
    }
    pub(crate) fn stderr(&self) -> bool {
        self.flags().3
    }
    fn container_id(&self) -> &str {
        match self {
            Command::Exec(r) => &r.container_id,
            Command::Attach(r) => &r.container_id,
        }
    }
}

/// How the error channel reports the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusFormat {
    /// v4 and v5: a JSON `metav1.Status`, also on success.
    Json,
    /// v1 to v3: the failure's message as text; nothing on success.
    Text,
}

/// The client's channels, whatever carries them.
pub(crate) struct Channels {
    pub stdin: Option<ChunkReceiver>,
    pub resize: Option<ChunkReceiver>,
    pub stdout: Option<OutChannel>,
    pub stderr: Option<OutChannel>,
    pub error: Option<OutChannel>,
    pub status: StatusFormat,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The process ended (or failed) and the client was told.
    Done,
    /// The client went away first; the backend's work was dropped.
    ClientGone,
}

/// Runs one exec or attach over `ch` until the backend returns (then the
/// status goes to the error channel) or `gone` resolves (then everything is
/// dropped, which ends the process).
pub(crate) async fn run(
    backend: Arc<dyn Backend>,
    cmd: &Command,
    ch: Channels,
    gone: impl Future<Output = ()>,
) -> Outcome {
    let mut inputs = JoinSet::new();
    let mut outputs = JoinSet::new();
    let stdin = match ch.stdin.filter(|_| cmd.stdin()) {
        Some(rx) => {
            let (app, feed) = tokio::io::duplex(PIPE);
            inputs.spawn(pump_in(rx, feed));
            Some(Box::pin(app) as Input)
        }
        None => None,
    };
    let resize = match ch.resize.filter(|_| cmd.tty()) {
        Some(rx) => {
            let (tx, sizes) = mpsc::channel(4);
            inputs.spawn(resize_pump(rx, tx));
            Some(sizes)
        }
        None => None,
    };
    let mut output = |wanted: bool, out: Option<OutChannel>| match out.filter(|_| wanted) {
        Some(out) => {
            let (app, read) = tokio::io::duplex(PIPE);
            outputs.spawn(pump_out(read, out));
            Some(Box::pin(app) as Output)
        }
        None => None,
    };
    let stdout = output(cmd.stdout(), ch.stdout);
    let stderr = output(cmd.stderr() && !cmd.tty(), ch.stderr);
    let io = StreamIo {
        stdin,
        stdout,
        stderr,
        tty: cmd.tty(),
        resize,
    };
    let work = async {
        match cmd {
            Command::Exec(req) => backend.exec(req, io).await.map(Some),
            Command::Attach(req) => backend.attach(req, io).await.map(|()| None),
        }
    };
    let result = tokio::select! {
        result = work => result,
        _ = gone => {
            tracing::debug!(container = cmd.container_id(), "streaming client went away");
            return Outcome::ClientGone;
        }
    };
    // The backend dropped its ends: what it wrote is still in the pipes.
    let drained = tokio::time::timeout(DRAIN, async {
        while outputs.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            container = cmd.container_id(),
            "output did not reach the client in time"
        );
    }
    match &result {
        Ok(Some(code)) => tracing::debug!(container = cmd.container_id(), code, "exec ended"),
        Ok(None) => tracing::debug!(container = cmd.container_id(), "attach ended"),
        Err(e) => tracing::warn!(container = cmd.container_id(), error = %e, "streaming failed"),
    }
    if let (Some(error), Some(status)) = (ch.error, status_message(ch.status, cmd, &result)) {
        let _ = error.write(&status).await;
    }
    Outcome::Done
}

/// What the error channel says about `result`, if anything.
pub(crate) fn status_message(
    format: StatusFormat,
    cmd: &Command,
    result: &Result<Option<i32>, BackendError>,
) -> Option<Vec<u8>> {
    let status = match result {
        Ok(None) | Ok(Some(0)) => json!({"metadata": {}, "status": "Success"}),
        Ok(Some(code)) => {
            let what = match cmd {
                Command::Exec(r) => format!("command {:?}", r.cmd),
                Command::Attach(_) => "attached process".into(),
            };
            json!({
                "metadata": {},
                "status": "Failure",
                "message": format!(
                    "command terminated with non-zero exit code: {what} exited with {code}"
                ),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
            })
        }
        Err(e) => {
            let what = match cmd {
                Command::Exec(_) => "error executing command in container",
                Command::Attach(_) => "error attaching to container",
            };
            let err = format!("{what}: {e}");
            json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("Internal error occurred: {err}"),
                "reason": "InternalError",
                "details": {"causes": [{"message": err}]},
                "code": 500,
            })
        }
    };
    match format {
        StatusFormat::Json => serde_json::to_vec(&status).ok(),
        StatusFormat::Text => status["message"].as_str().map(|m| m.as_bytes().to_vec()),
    }
}

/// Why the resize stream is no longer read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResizeError {
    /// What the client sent is not a stream of terminal size objects.
    #[error("bad JSON on the resize stream")]
    BadJson,
    /// An object is still unfinished after [`MAX_RESIZE_PENDING`] bytes.
    #[error("a resize object longer than {MAX_RESIZE_PENDING} bytes")]
    TooLong,
}

/// Reads the resize stream: JSON objects (`{"Width":80,"Height":24}`), one
/// after the other, split anywhere across chunks. At most
/// [`MAX_RESIZE_PENDING`] bytes of an unfinished object are kept, and they
/// are parsed again only when a chunk could end the object (brings a `}` or
/// `]`), so a client trickling a long object costs no repeated work.
#[derive(Debug, Default)]
pub struct ResizeDecoder {
    buf: Vec<u8>,
}

impl ResizeDecoder {
    /// Appends to `sizes` the sizes `chunk` completes. An error ends the
    /// stream (kubelet stops reading it at bad JSON too); the sizes before
    /// the bad part are still appended.
    pub fn push(&mut self, chunk: &[u8], sizes: &mut Vec<TerminalSize>) -> Result<(), ResizeError> {
        let can_end = chunk.iter().any(|b| matches!(b, b'}' | b']'));
        self.buf.extend_from_slice(chunk);
        if can_end {
            let (got, used, bad) = parse_sizes(&self.buf);
            self.buf.drain(..used);
            sizes.extend(got);
            if bad {
                return Err(ResizeError::BadJson);
            }
        }
        if self.buf.len() > MAX_RESIZE_PENDING {
            return Err(ResizeError::TooLong);
        }
        Ok(())
    }
}

/// Turns the resize stream's JSON objects into sizes until the stream ends
/// or [`ResizeDecoder`] gives up; sizes decoded before the error are kept.
async fn resize_pump(mut rx: ChunkReceiver, tx: mpsc::Sender<TerminalSize>) {
    let mut decoder = ResizeDecoder::default();
    let mut sizes = Vec::new();
    while let Some(chunk) = rx.recv().await {
        let result = decoder.push(&chunk, &mut sizes);
        for size in sizes.drain(..) {
            if tx.send(size).await.is_err() {
                return;
            }
        }
        if let Err(e) = result {
            tracing::warn!(error = %e, "the resize stream; ignoring further resizes");
            return;
        }
    }
}

/// The complete sizes at the start of `buf`, how many bytes they took, and
/// whether what follows is not JSON.
fn parse_sizes(buf: &[u8]) -> (Vec<TerminalSize>, usize, bool) {
    let mut sizes = Vec::new();
    let mut iter = serde_json::Deserializer::from_slice(buf).into_iter::<TerminalSize>();
    let mut used = 0;
    loop {
        match iter.next() {
            Some(Ok(size)) => {
                sizes.push(size);
                used = iter.byte_offset();
            }
            Some(Err(e)) if e.is_eof() => return (sizes, used, false),
            Some(Err(_)) => return (sizes, used, true),
            None => return (sizes, used, false),
        }
    }
}

/// The SPDY protocol's version number (2, 3 or 4).
fn spdy_version(protocol: &str) -> u8 {
    match protocol {
        "v4.channel.k8s.io" => 4,
        "v3.channel.k8s.io" => 3,
        _ => 2,
    }
}

/// The stream types a remote command client opens.
fn accept_remote_command_stream() -> Accept {
    Box::new(|headers| match headers.get("streamtype") {
        Some("stdin" | "stdout" | "stderr" | "error" | "resize") => Ok(()),
        other => Err(format!("unexpected stream type {other:?}")),
    })
}

/// Serves an exec or attach over an upgraded SPDY connection: waits for the
/// client's streams (one per channel), runs the command, reports the end.
pub(crate) async fn serve_spdy<IO>(
    io: IO,
    protocol: &str,
    cmd: Command,
    backend: Arc<dyn Backend>,
    creation_timeout: Duration,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let Some(mut conn) = Connection::serve(io, accept_remote_command_stream()) else {
        return;
    };
    let version = spdy_version(protocol);
    let resize = cmd.tty() && version >= 3;
    let expected = 1
        + usize::from(cmd.stdin())
        + usize::from(cmd.stdout())
        + usize::from(cmd.stderr())
        + usize::from(resize);
    let mut streams: HashMap<String, Stream> = HashMap::new();
    let deadline = tokio::time::sleep(creation_timeout);
    tokio::pin!(deadline);
    while streams.len() < expected {
        tokio::select! {
            stream = conn.accept() => {
                let Some(stream) = stream else { return };
                let kind = stream.headers.get("streamtype").unwrap_or_default().to_string();
                if streams.contains_key(&kind) || (kind == "resize" && !resize) {
                    let _ = stream.tx.reset(rst::PROTOCOL_ERROR).await;
                    continue;
                }
                streams.insert(kind, stream);
            }
            _ = &mut deadline => {
                tracing::warn!(
                    container = cmd.container_id(),
                    got = streams.len(),
                    expected,
                    "timed out waiting for the client to create its streams"
                );
                return;
            }
        }
    }
    conn.stop_accepting();
    let mut take = |kind: &str| streams.remove(kind);
    let out = |s: Stream| Arc::new(s.tx) as OutChannel;
    let channels = Channels {
        stdin: take("stdin").map(|s| s.rx),
        resize: take("resize").map(|s| s.rx),
        stdout: take("stdout").map(out),
        stderr: take("stderr").map(out),
        error: take("error").map(out),
        status: if version >= 4 {
            StatusFormat::Json
        } else {
            StatusFormat::Text
        },
    };
    if run(backend, &cmd, channels, conn.closed()).await == Outcome::Done {
        conn.finish(LINGER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec() -> Command {
        Command::Exec(ExecRequest {
            container_id: "c".into(),
            cmd: vec!["false".into()],
            tty: false,
            stdin: false,
            stdout: true,
            stderr: true,
        })
    }

    #[test]
    fn status_carries_the_exit_code_as_kubelet_writes_it() {
        let ok = status_message(StatusFormat::Json, &exec(), &Ok(Some(0))).unwrap();
        assert_eq!(ok, br#"{"metadata":{},"status":"Success"}"#);
        let failed = status_message(StatusFormat::Json, &exec(), &Ok(Some(3))).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&failed).unwrap();
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
        let text = status_message(StatusFormat::Text, &exec(), &Ok(Some(3))).unwrap();
        assert!(String::from_utf8(text)
            .unwrap()
            .contains("non-zero exit code"));
        assert_eq!(
            status_message(StatusFormat::Text, &exec(), &Ok(Some(0))),
            None
        );
        let err = Err(BackendError::Internal("shim gone".into()));
        let v: serde_json::Value =
            serde_json::from_slice(&status_message(StatusFormat::Json, &exec(), &err).unwrap())
                .unwrap();
        assert_eq!(v["reason"], "InternalError");
        assert_eq!(v["code"], 500);
        assert!(v["message"].as_str().unwrap().contains("shim gone"));
    }

    #[test]
    fn resize_objects_split_across_chunks() {
        let (sizes, used, bad) = parse_sizes(b"{\"Width\":80,\"Height\":24}\n{\"Width\":1");
        assert_eq!(
            sizes,
            vec![TerminalSize {
                width: 80,
                height: 24
            }]
        );
        assert!(!bad);
        assert_eq!(used, 24);
        let (sizes, _, bad) = parse_sizes(b"{\"width\":5,\"height\":6} nonsense");
        assert_eq!(sizes.len(), 1);
        assert!(bad);
    }

    #[test]
    fn the_resize_decoder_keeps_sizes_before_bad_json_and_bounds_what_it_keeps() {
        let mut d = ResizeDecoder::default();
        let mut sizes = Vec::new();
        d.push(b"{\"Width\":8", &mut sizes).unwrap();
        assert!(sizes.is_empty());
        d.push(b"0,\"Height\":24}{\"width\":5,", &mut sizes)
            .unwrap();
        assert_eq!(
            sizes,
            [TerminalSize {
                width: 80,
                height: 24
            }]
        );
        assert_eq!(
            d.push(b"\"height\":6} nonsense }", &mut sizes),
            Err(ResizeError::BadJson)
        );
        assert_eq!(sizes.len(), 2);

        let mut d = ResizeDecoder::default();
        let mut sizes = Vec::new();
        d.push(b"{\"Width\":", &mut sizes).unwrap();
        let spaces = [b' '; 1024];
        for _ in 0..3 {
            d.push(&spaces, &mut sizes).unwrap();
        }
        assert_eq!(d.push(&spaces, &mut sizes), Err(ResizeError::TooLong));
    }
}
