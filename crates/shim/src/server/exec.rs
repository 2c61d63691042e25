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
    let mut timed_out = false;
    let mut client_gone = false;
    let mut exited_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    loop {
        if exited_at.is_none() && sub.exit().is_some() {
            exited_at = Some(Instant::now());
        }
        if let Some(at) = exited_at {
            if outputs.is_empty() || client_gone || at.elapsed() >= DRAIN_AFTER_EXIT {
                break;
            }
        }
        let now = Instant::now();
        if exited_at.is_none() && killed_at.is_none() {
            if deadline.is_some_and(|d| now >= d) {
                timed_out = true;
            }
            if timed_out || client_gone {
                let _ = sub.signal(libc::SIGKILL);
                killed_at = Some(now);
            }
        }
        if killed_at.is_some_and(|k| k.elapsed() >= KILL_GRACE) {
            break;
        }

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
        if fds[fds.len() - 1].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            client_gone = true;
        }

        let mut i = 0;
        while i < outputs.len() {
            let (stream, file) = &mut outputs[i];
            let stream = *stream;
            let mut eof = false;
            loop {
                match sys::read_some(file, &mut buf) {
                    Ok(ReadOutcome::Data(n)) => {
                        if !client_gone && send_output(&mut conn, stream, &buf[..n]).is_err() {
                            client_gone = true;
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

    let exit_code = match sub.exit() {
        Some(exit) => sys::exit_code(exit.status),
        None => 128 + libc::SIGKILL,
    };
    let result = if client_gone {
        Ok(())
    } else {
        protocol::write_json(
            &mut conn,
            &Control::Exit {
                exit_code,
                timed_out,
            },
        )
    };
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let _ = reader.join();
    result
}
