//! Running a process in the container (`runc exec --detach`) and streaming
//! its output to the client until it exits.
//!
//! The process becomes the shim's child (subreaper), so its exit comes from
//! the reaper. A timeout kills it (SIGKILL) and is reported as such; output
//! is read for at most [`DRAIN_AFTER_EXIT`] after the process exited, so a
//! background process that keeps the pipes open cannot hold the answer
//! (containerd #9568). A client that hangs up (both directions) kills the
//! process; one that only ends its stdin does not.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::crilog::Stream;
use crate::options::valid_exec_id;
use crate::protocol::{self, Control, ErrorKind, ExecRequest, RemoteError, Response};
use crate::runc::{ExecOptions, ProcessIo};
use crate::sys::{self, ReadOutcome};

use super::io::{read_client_frames, send_output, ConsoleSocket, StdinSink};
use super::reaper::Subscription;
use super::Shim;

/// How long output is still forwarded after the process exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// How long to wait for a killed process to be reaped.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// The exec's files, removed when it ends.
struct ExecFiles(Vec<std::path::PathBuf>);

impl Drop for ExecFiles {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The process's ends of its stdio, as the shim holds them.
struct Ends {
    stdin: Option<File>,
    outputs: Vec<(Stream, File)>,
    terminal: Option<File>,
}

/// Handles [`protocol::Request::Exec`] on `conn`.
pub fn exec(shim: &Shim, mut conn: UnixStream, req: ExecRequest) -> io::Result<()> {
    match start(shim, &req) {
        Err(e) => protocol::write_json(&mut conn, &Response::Error(e)),
        Ok((sub, ends, files)) => {
            if let Err(e) = protocol::write_json(&mut conn, &Response::Started { pid: sub.pid() }) {
                // Nobody will drive or wait for it: do not leave it running.
                let pid = nix::unistd::Pid::from_raw(sub.pid() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                return Err(e);
            }
            let deadline = req
                .timeout_ms
                .filter(|ms| *ms > 0)
                .map(|ms| Instant::now() + Duration::from_millis(ms));
            let result = pump(conn, &sub, ends, deadline);
            drop(files);
            result
        }
    }
}

fn start(shim: &Shim, req: &ExecRequest) -> Result<(Subscription, Ends, ExecFiles), RemoteError> {
    let invalid = |m: String| RemoteError::new(ErrorKind::InvalidRequest, m);
    let internal = |what: &str, e: io::Error| {
        RemoteError::new(
            ErrorKind::Internal,
            format!("exec {}: {what}: {e}", req.exec_id),
        )
    };
    if !valid_exec_id(&req.exec_id) {
        return Err(invalid(format!("exec id {:?} is not valid", req.exec_id)));
    }
    shim.require_running("exec in")?;
    let mut process = req.process.clone();
    let Some(obj) = process.as_object_mut() else {
        return Err(invalid(
            "the exec's process spec is not a JSON object".into(),
        ));
    };
    obj.insert("terminal".into(), req.tty.into());

    let paths = &shim.paths;
    let process_file = paths.exec_file(&req.exec_id, "json");
    let pid_file = paths.exec_file(&req.exec_id, "pid");
    let log_file = paths.runtime_log(&format!("exec-{}", req.exec_id));
    if process_file.exists() {
        return Err(invalid(format!(
            "exec id {:?} is already in use",
            req.exec_id
        )));
    }
    let mut files = ExecFiles(vec![
        process_file.clone(),
        pid_file.clone(),
        log_file.clone(),
    ]);
    let json = serde_json::to_vec(&process).map_err(|e| internal("encoding", e.into()))?;
    std::fs::write(&process_file, json).map_err(|e| internal("writing process spec", e))?;

    let mut ends = Ends {
        stdin: None,
        outputs: Vec::new(),
        terminal: None,
    };
    let mut io = ProcessIo::default();
    let console = if req.tty {
        let n = shim.next_seq();
        let socket = ConsoleSocket::bind(&paths.console_socket(&format!("e{n}")))
            .map_err(|e| internal("console socket", e))?;
        files.0.push(socket.path().to_path_buf());
        Some(socket)
    } else {
        if req.stdin {
            let (r, w) = sys::pipe().map_err(|e| internal("pipe", e))?;
            io.stdin = Some(r);
            ends.stdin = Some(File::from(w));
        }
        for stream in [Stream::Stdout, Stream::Stderr] {
            let (r, w) = sys::pipe().map_err(|e| internal("pipe", e))?;
            sys::set_nonblocking(r.as_raw_fd()).map_err(|e| internal("pipe", e))?;
            match stream {
                Stream::Stdout => io.stdout = Some(w),
                Stream::Stderr => io.stderr = Some(w),
            }
            ends.outputs.push((stream, File::from(r)));
        }
        None
    };

    let opts = ExecOptions {
        process_file: &process_file,
        pid_file: &pid_file,
        console_socket: console.as_ref().map(|c| c.path()),
        detach: true,
        log_file: &log_file,
        io,
    };
    shim.runtime.exec(&shim.opts.id, opts)?;
    let pid = super::read_pid_file(&pid_file).map_err(|e| internal("reading pid file", e))?;
    let sub = shim
        .reaper
        .watch(pid)
        .map_err(|e| internal("watching the process", e))?;
    if let Some(console) = console {
        let master = console.receive(Duration::from_secs(5)).map_err(|e| {
            let _ = sub.signal(libc::SIGKILL);
            internal("receiving the terminal", e)
        })?;
        sys::set_nonblocking(master.as_raw_fd()).map_err(|e| internal("terminal", e))?;
        if req.stdin {
            ends.stdin = Some(master.try_clone().map_err(|e| internal("terminal", e))?);
        }
        ends.terminal = Some(master.try_clone().map_err(|e| internal("terminal", e))?);
        ends.outputs.push((Stream::Stdout, master));
    }
    Ok((sub, ends, files))
}

/// The client's stdin and resizes, for an exec'd process.
struct ExecSink {
    stdin: Option<File>,
    terminal: Option<File>,
}

impl StdinSink for ExecSink {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.stdin {
            Some(f) => sys::write_all(f, data),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn close(&mut self) {
        self.stdin = None;
    }
    fn resize(&mut self, width: u16, height: u16) -> io::Result<()> {
        match &self.terminal {
            Some(t) => sys::set_winsize(t, width, height),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the exec has no terminal",
            )),
        }
    }
}

/// Forwards output until the process exits (and a bounded drain), the
/// deadline passes (kill), or the client hangs up (kill); then sends the exit.
fn pump(
    mut conn: UnixStream,
    sub: &Subscription,
    ends: Ends,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let Ends {
        stdin,
        mut outputs,
        terminal,
    } = ends;
    // Client frames are read on their own thread, so a process that does not
    // read its stdin cannot stall its output.
    let reader = {
        let conn = conn.try_clone()?;
        let mut sink = ExecSink { stdin, terminal };
        std::thread::Builder::new()
            .name("exec-stdin".into())
            .stack_size(64 * 1024)
            .spawn(move || read_client_frames(conn, &mut sink))?
    };

    let mut buf = vec![0u8; 16 * 1024];
    let mut state = PumpState::default();
    loop {
        if state.drained(sub, outputs.is_empty()) {
            break;
        }
        let now = Instant::now();
        if state.kill_given_up(sub, deadline, now) {
            break;
        }
        if wait_for_output(&conn, sub, &outputs, deadline, now)? {
            state.client_gone = true;
        }
        forward_output(&mut conn, &mut outputs, &mut buf, &mut state.client_gone);
    }

    let result = send_exit(&mut conn, sub, &state);
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let _ = reader.join();
    result
}

/// What a pump has seen of the process and the client.
#[derive(Default)]
struct PumpState {
    /// The deadline passed before the process exited.
    timed_out: bool,
    /// The client hung up, or a write to it failed.
    client_gone: bool,
    exited_at: Option<Instant>,
    killed_at: Option<Instant>,
}

impl PumpState {
    /// Notes the process's exit; true once its output is all forwarded,
    /// nobody is left to read it, or the drain after the exit has run its
    /// time.
    fn drained(&mut self, sub: &Subscription, no_outputs: bool) -> bool {
        if self.exited_at.is_none() && sub.exit().is_some() {
            self.exited_at = Some(Instant::now());
        }
        self.exited_at
            .is_some_and(|at| no_outputs || self.client_gone || at.elapsed() >= DRAIN_AFTER_EXIT)
    }

    /// Kills a running process once the deadline passes or the client is
    /// gone; true when it has not exited within the grace after the kill.
    fn kill_given_up(
        &mut self,
        sub: &Subscription,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        if self.exited_at.is_none() && self.killed_at.is_none() {
            if deadline.is_some_and(|d| now >= d) {
                self.timed_out = true;
            }
            if self.timed_out || self.client_gone {
                let _ = sub.signal(libc::SIGKILL);
                self.killed_at = Some(now);
            }
        }
        self.killed_at.is_some_and(|k| k.elapsed() >= KILL_GRACE)
    }
}

/// Waits (a bounded while, never past the deadline) for output, the
/// process's exit or the client's hang-up; true when the client hung up.
fn wait_for_output(
    conn: &UnixStream,
    sub: &Subscription,
    outputs: &[(Stream, File)],
    deadline: Option<Instant>,
    now: Instant,
) -> io::Result<bool> {
    let mut fds: Vec<libc::pollfd> = outputs
        .iter()
        .map(|(_, f)| sys::pollin(f.as_raw_fd()))
        .collect();
    fds.push(sys::pollin(sub.fd().as_raw_fd()));
    // Only hang-ups: a client that shut down its writing half (no more
    // stdin) is still reading.
    fds.push(libc::pollfd {
        fd: conn.as_raw_fd(),
        events: 0,
        revents: 0,
    });
    let mut wait = Duration::from_millis(250);
    if let Some(d) = deadline {
        wait = wait.min(d.saturating_duration_since(now));
    }
    sys::poll(&mut fds, Some(wait))?;
    Ok(fds[fds.len() - 1].revents & (libc::POLLHUP | libc::POLLERR) != 0)
}

/// Sends what each output has ready to the client (while it is there),
/// dropping the outputs that ended.
fn forward_output(
    conn: &mut UnixStream,
    outputs: &mut Vec<(Stream, File)>,
    buf: &mut [u8],
    client_gone: &mut bool,
) {
    let mut i = 0;
    while i < outputs.len() {
        let (stream, file) = &mut outputs[i];
        let stream = *stream;
        let mut eof = false;
        loop {
            match sys::read_some(file, buf) {
                Ok(ReadOutcome::Data(n)) => {
                    if !*client_gone && send_output(conn, stream, &buf[..n]).is_err() {
                        *client_gone = true;
                    }
                }
                Ok(ReadOutcome::Empty) => break,
                Ok(ReadOutcome::Eof) | Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        if eof {
            outputs.remove(i);
        } else {
            i += 1;
        }
    }
}

/// Tells the client how the process ended (killed if it has not exited),
/// unless the client is gone.
fn send_exit(conn: &mut UnixStream, sub: &Subscription, state: &PumpState) -> io::Result<()> {
    let exit_code = match sub.exit() {
        Some(exit) => sys::exit_code(exit.status),
        None => 128 + libc::SIGKILL,
    };
    if state.client_gone {
        return Ok(());
    }
    protocol::write_json(
        conn,
        &Control::Exit {
            exit_code,
            timed_out: state.timed_out,
        },
    )
}
