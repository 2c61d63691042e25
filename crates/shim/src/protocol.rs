//! The wire protocol between the daemon and a shim, over the shim's unix
//! socket: one request per connection.
//!
//! Every message is a frame: a 4-byte big-endian payload length, a 1-byte
//! kind, then the payload. [`FrameKind::Json`] frames carry a [`Request`]
//! (client → shim), then a [`Response`] (shim → client). After a successful
//! [`Request::Exec`] or [`Request::Attach`] the connection becomes a stream:
//! the client sends stdin frames and JSON [`Control`] frames (close stdin,
//! resize); the shim sends stdout and stderr frames and ends with a JSON
//! [`Control::Exit`].
//!
//! The same framing carries the shim's start-up answer ([`Response::Created`]
//! or [`Response::Error`]) on the pipe that is its stdout.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Largest payload accepted in one frame.
pub const MAX_FRAME: usize = 8 << 20;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A JSON message: [`Request`], [`Response`] or [`Control`].
    Json = 0,
    /// Bytes for the process's stdin.
    Stdin = 1,
    /// Bytes the process wrote to stdout (or to its terminal).
    Stdout = 2,
    /// Bytes the process wrote to stderr.
    Stderr = 3,
}

impl FrameKind {
    /// The kind for a byte on the wire.
    pub fn from_byte(b: u8) -> Option<FrameKind> {
        Some(match b {
            0 => FrameKind::Json,
            1 => FrameKind::Stdin,
            2 => FrameKind::Stdout,
            3 => FrameKind::Stderr,
            _ => return None,
        })
    }
}

/// The 5-byte header of a frame.
pub fn frame_header(kind: FrameKind, len: usize) -> io::Result<[u8; 5]> {
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {len} bytes is over the {MAX_FRAME} limit"),
        ));
    }
    let l = (len as u32).to_be_bytes();
    Ok([l[0], l[1], l[2], l[3], kind as u8])
}

/// Parses a frame header into kind and payload length.
pub fn parse_header(h: [u8; 5]) -> io::Result<(FrameKind, usize)> {
    let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let kind = FrameKind::from_byte(h[4])
        .ok_or_else(|| invalid(format!("unknown frame kind {}", h[4])))?;
    if len > MAX_FRAME {
        return Err(invalid(format!(
            "frame of {len} bytes is over the {MAX_FRAME} limit"
        )));
    }
    Ok((kind, len))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Writes one frame (blocking).
pub fn write_frame(w: &mut impl Write, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(5 + payload.len());
    buf.extend_from_slice(&frame_header(kind, payload.len())?);
    buf.extend_from_slice(payload);
    w.write_all(&buf)
}

/// Writes a JSON frame (blocking).
pub fn write_json<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let payload = serde_json::to_vec(msg).map_err(io::Error::other)?;
    write_frame(w, FrameKind::Json, &payload)
}

/// Reads one frame (blocking); `None` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<(FrameKind, Vec<u8>)>> {
    let mut h = [0u8; 5];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let (kind, len) = parse_header(h)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((kind, payload)))
}

/// Decodes the payload of a JSON frame.
pub fn decode<T: for<'de> Deserialize<'de>>(kind: FrameKind, payload: &[u8]) -> io::Result<T> {
    if kind != FrameKind::Json {
        return Err(invalid(format!("expected a JSON frame, got {kind:?}")));
    }
    serde_json::from_slice(payload).map_err(|e| invalid(format!("bad message: {e}")))
}

/// A request from the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The shim's view of the container.
    State,
    /// `runc start`; answers [`Response::Started`].
    Start,
    /// `runc kill [--all] ID signal` (a no-op once the container has exited, unless `all`).
    Kill { signal: i32, all: bool },
    /// Blocks until the container has exited and its exit file is written;
    /// answers [`Response::Exited`].
    Wait,
    /// Runs a process in the container; answers [`Response::Started`], then streams.
    Exec(ExecRequest),
    /// Streams the container's live output and feeds its stdin; answers [`Response::Ok`], then streams.
    Attach(AttachRequest),
    /// Resizes the container's terminal.
    Resize { width: u16, height: u16 },
    /// Reopens the CRI log file (after kubelet rotated it).
    ReopenLog,
    /// `runc update --resources -` with this LinuxResources JSON.
    Update { resources: serde_json::Value },
    /// `runc pause`.
    Pause,
    /// `runc resume`.
    Resume,
    /// `runc delete [--force]`, then the shim exits.
    Delete { force: bool },
}

/// A process to run in the container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Names the exec's files in the shim's directory: letters, digits, `-`, `_`, `.`; at most 64.
    pub exec_id: String,
    /// The OCI process spec (its `terminal` is set from `tty`).
    pub process: serde_json::Value,
    /// Give the process a terminal (its output then all comes as stdout).
    pub tty: bool,
    /// Keep the process's stdin open for stdin frames.
    pub stdin: bool,
    /// Kill the process when it runs longer; `None` waits for ever.
    pub timeout_ms: Option<u64>,
}

/// Which streams an attach wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRequest {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    /// Done.
    Ok,
    /// The shim's start-up answer: the container is created.
    Created { pid: u32, shim_pid: u32 },
    /// The container (or exec'd process) started with this pid.
    Started { pid: u32 },
    /// The shim's view of the container.
    State(ShimState),
    /// How the container ended.
    Exited(ExitInfo),
    /// The request failed.
    Error(RemoteError),
}

/// In-band messages of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "control", rename_all = "snake_case")]
pub enum Control {
    /// Client → shim: no more stdin.
    CloseStdin,
    /// Client → shim: resize the terminal.
    Resize { width: u16, height: u16 },
    /// Shim → client, last message: the process (exec) or container (attach) exited.
    Exit { exit_code: i32, timed_out: bool },
}

/// Where the container is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerStatus {
    Created,
    Running,
    Paused,
    Stopped,
}

/// The shim's view of its container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShimState {
    /// The container id.
    pub id: String,
    /// The container's init pid (as seen from the host).
    pub pid: u32,
    /// The shim's own pid.
    pub shim_pid: u32,
    pub status: ContainerStatus,
    /// Set once the container has exited.
    pub exit: Option<ExitInfo>,
    /// Where the exit is recorded.
    pub exit_file: PathBuf,
    /// When the runtime was told to run the container, in nanoseconds since
    /// the Unix epoch; `None` before that (and from shims older than this
    /// field).
    #[serde(default)]
    pub started_at_ns: Option<i64>,
}

/// How a container ended: written to the exit file before anyone is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The init process's pid.
    pub pid: u32,
    /// Its exit code, or 128 + the signal that killed it.
    pub exit_code: i32,
    /// When the shim reaped it, in nanoseconds since the Unix epoch.
    pub exited_at_ns: i64,
    /// Whether the kernel's OOM killer killed a process of the container.
    pub oom_killed: bool,
}

/// What kind of failure a [`RemoteError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The OCI runtime failed; `exit_status` and `stderr` say how.
    Runtime,
    /// The OCI runtime did not finish in time.
    RuntimeTimeout,
    /// The request was malformed.
    InvalidRequest,
    /// The container is not in a state that allows the request.
    FailedPrecondition,
    /// Anything else inside the shim (files, pipes, sockets).
    Internal,
}

/// A failure reported by the shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub kind: ErrorKind,
    pub message: String,
    /// The runtime's exit status, for [`ErrorKind::Runtime`].
    #[serde(default)]
    pub exit_status: Option<i32>,
    /// The runtime's stderr (or log), for runtime errors.
    #[serde(default)]
    pub stderr: Option<String>,
}

impl RemoteError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RemoteError {
        RemoteError {
            kind,
            message: message.into(),
            exit_status: None,
            stderr: None,
        }
    }

    /// Whether the runtime said the container does not exist.
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::Runtime
            && self
                .stderr
                .as_deref()
                .is_some_and(|s| s.contains("does not exist") || s.contains("not exist"))
    }
}

impl From<crate::runc::RuncError> for RemoteError {
    fn from(e: crate::runc::RuncError) -> RemoteError {
        let kind = if e.is_timeout() {
            ErrorKind::RuntimeTimeout
        } else {
            ErrorKind::Runtime
        };
        RemoteError {
            kind,
            message: e.to_string(),
            exit_status: e.exit_status(),
            stderr: Some(e.stderr().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_json(
            &mut buf,
            &Request::Kill {
                signal: 9,
                all: true,
            },
        )
        .unwrap();
        write_frame(&mut buf, FrameKind::Stdout, b"hello").unwrap();
        let mut r = &buf[..];
        let (kind, payload) = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(
            decode::<Request>(kind, &payload).unwrap(),
            Request::Kill {
                signal: 9,
                all: true
            }
        );
        assert_eq!(
            read_frame(&mut r).unwrap().unwrap(),
            (FrameKind::Stdout, b"hello".to_vec())
        );
        assert!(read_frame(&mut r).unwrap().is_none());
    }

    #[test]
    fn rejects_bad_frames() {
        let mut r: &[u8] = &[0, 0, 0, 1, 9, 0];
        assert!(read_frame(&mut r).is_err());
        let mut r: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0];
        assert!(read_frame(&mut r).is_err());
        let mut r: &[u8] = &[0, 0, 0, 4, 0, b'{'];
        assert!(read_frame(&mut r).is_err());
        assert!(decode::<Request>(FrameKind::Json, b"{\"op\":\"nope\"}").is_err());
    }

    /// A shim started by an older berth (still running after an upgrade)
    /// reports no start time: its state still reads, without one.
    #[test]
    fn a_state_without_a_start_time_reads() {
        let old = r#"{"result":"state","id":"c","pid":7,"shim_pid":6,"status":"running","exit":null,"exit_file":"/x/exit.json"}"#;
        let Response::State(state) = decode::<Response>(FrameKind::Json, old.as_bytes()).unwrap()
        else {
            panic!("not a state");
        };
        assert_eq!((state.pid, state.started_at_ns), (7, None));
        let new = serde_json::to_string(&Response::State(ShimState {
            started_at_ns: Some(9),
            ..state
        }))
        .unwrap();
        assert!(new.ends_with(r#""started_at_ns":9}"#), "{new}");
    }

    #[test]
    fn messages_are_tagged() {
        let json = serde_json::to_string(&Response::Exited(ExitInfo {
            pid: 7,
            exit_code: 137,
            exited_at_ns: 5,
            oom_killed: true,
        }))
        .unwrap();
        assert_eq!(
            json,
            r#"{"result":"exited","pid":7,"exit_code":137,"exited_at_ns":5,"oom_killed":true}"#
        );
        let c: Control =
            serde_json::from_str(r#"{"control":"resize","width":80,"height":24}"#).unwrap();
        assert_eq!(
            c,
            Control::Resize {
                width: 80,
                height: 24
            }
        );
    }
}
