//! The container's stdio, owned by the shim: the copiers that turn its
//! output into CRI log records and hand it to attached clients, its stdin,
//! its terminal, and the console socket a runtime sends a pty master over.

use berth_lock::MutexExt;
use std::fs::File;
use std::io::{self, IoSliceMut, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use crate::crilog::{LineSplitter, LogError, LogFile, LogTarget, Stream};
use crate::protocol::{self, Control, FrameKind};
use crate::sys;

use super::worker::{run_on, Worker, SMALL_STACK};

/// Output chunks queued for one attached client before it counts as stuck
/// and is dropped (the log must never wait for a slow client).
const SUBSCRIBER_QUEUE: usize = 256;

/// What an attached client receives.
pub enum OutEvent {
    Data(Stream, Vec<u8>),
    /// The container exited with this code; nothing follows.
    Exit(i32),
}

struct Subscriber {
    id: u64,
    stdout: bool,
    stderr: bool,
    tx: SyncSender<OutEvent>,
}

#[derive(Default)]
struct Subscribers {
    next_id: u64,
    list: Vec<Subscriber>,
    exit: Option<i32>,
}

/// The container's stdio. See the module docs.
pub struct ContainerIo {
    log: Option<LogFile>,
    stdin: Mutex<Option<File>>,
    terminal: Mutex<Option<File>>,
    subs: Mutex<Subscribers>,
    copiers: Mutex<usize>,
    copiers_done: Condvar,
}

impl ContainerIo {
    /// Opens the CRI log of `log` (when there is one).
    pub fn new(log: Option<&LogTarget>) -> Result<ContainerIo, LogError> {
        Ok(ContainerIo {
            log: log.map(LogFile::open).transpose()?,
            stdin: Mutex::new(None),
            terminal: Mutex::new(None),
            subs: Mutex::new(Subscribers::default()),
            copiers: Mutex::new(0),
            copiers_done: Condvar::new(),
        })
    }

    /// Keeps `stdin` as the writing end of the container's stdin.
    pub fn set_stdin(&self, stdin: File) {
        *self.stdin.lock_unpoisoned() = Some(stdin);
    }

    /// Keeps the container's pty master (for resizes).
    pub fn set_terminal(&self, master: File) {
        *self.terminal.lock_unpoisoned() = Some(master);
    }

    /// Whether the container's stdin is (still) open.
    pub fn has_stdin(&self) -> bool {
        self.stdin.lock_unpoisoned().is_some()
    }

    /// Writes to the container's stdin.
    pub fn write_stdin(&self, data: &[u8]) -> io::Result<()> {
        // A clone, so a blocked write does not hold the lock.
        let file = match &*self.stdin.lock_unpoisoned() {
            Some(f) => f.try_clone()?,
            None => return Err(io::ErrorKind::BrokenPipe.into()),
        };
        sys::write_all(&file, data)
    }

    /// Closes the container's stdin (it reads EOF).
    pub fn close_stdin(&self) {
        self.stdin.lock_unpoisoned().take();
    }

    /// Resizes the container's terminal.
    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        match &*self.terminal.lock_unpoisoned() {
            Some(master) => sys::set_winsize(master, width, height),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the container has no terminal",
            )),
        }
    }

    /// Reopens the CRI log file; `None` when the container has none.
    pub fn reopen_log(&self) -> Option<Result<(), LogError>> {
        self.log.as_ref().map(LogFile::reopen)
    }

    /// A copier of `source` (a pipe, or the pty master) into the log and to
    /// attached clients as `stream`, until EOF: counted from now on (the
    /// exit monitor waits for it), copying once [started](Copier::start).
    pub fn copier(self: &Arc<Self>, source: File, stream: Stream) -> Copier {
        *self.copiers.lock_unpoisoned() += 1;
        Copier {
            live: Live(self.clone()),
            source,
            stream,
        }
    }

    fn copy(&self, mut source: File, stream: Stream) {
        let mut splitter = LineSplitter::default();
        let mut buf = vec![0u8; 16 * 1024];
        let mut log_failed = false;
        let mut write_log = |tag, content: &[u8]| {
            if let Some(log) = &self.log {
                if let Err(e) = log.write(stream, tag, content) {
                    if !log_failed {
                        super::log(format_args!("writing {}: {e}", log.path().display()));
                        log_failed = true;
                    }
                }
            }
        };
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // EIO: the terminal's other side is closed.
                Err(_) => break,
            };
            splitter.feed(&buf[..n], &mut write_log);
            self.publish(stream, &buf[..n]);
        }
        splitter.finish(&mut write_log);
    }

    /// Waits up to `timeout` for every copier to reach EOF.
    pub fn wait_copiers(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut live = self.copiers.lock_unpoisoned();
        while *live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            live = self
                .copiers_done
                .wait_timeout(live, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn publish(&self, stream: Stream, data: &[u8]) {
        let mut subs = self.subs.lock_unpoisoned();
        subs.list.retain(|s| {
            let wanted = match stream {
                Stream::Stdout => s.stdout,
                Stream::Stderr => s.stderr,
            };
            if !wanted {
                return true;
            }
            match s.tx.try_send(OutEvent::Data(stream, data.to_vec())) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    super::log(format_args!("attach {} is too slow: dropped", s.id));
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// Subscribes to the output; after the container has exited the
    /// receiver gets the exit at once.
    pub fn subscribe(&self, stdout: bool, stderr: bool) -> (u64, Receiver<OutEvent>) {
        let (tx, rx) = sync_channel(SUBSCRIBER_QUEUE);
        let mut subs = self.subs.lock_unpoisoned();
        subs.next_id += 1;
        let id = subs.next_id;
        match subs.exit {
            Some(code) => {
                let _ = tx.try_send(OutEvent::Exit(code));
            }
            None => subs.list.push(Subscriber {
                id,
                stdout,
                stderr,
                tx,
            }),
        }
        (id, rx)
    }

    /// Forgets subscriber `id`.
    pub fn unsubscribe(&self, id: u64) {
        self.subs.lock_unpoisoned().list.retain(|s| s.id != id);
    }

    /// Tells every subscriber the container exited, and ends their streams.
    pub fn broadcast_exit(&self, code: i32) {
        let mut subs = self.subs.lock_unpoisoned();
        subs.exit = Some(code);
        for s in subs.list.drain(..) {
            // A full queue drops the exit: that client was dropped anyway.
            let _ = s.tx.try_send(OutEvent::Exit(code));
        }
    }
}

/// A copier counted but not yet copying (see [`ContainerIo::copier`]);
/// dropped unstarted, it closes its source and is counted no more.
pub struct Copier {
    live: Live,
    source: File,
    stream: Stream,
}

/// One counted copier; the count goes down when it is dropped.
struct Live(Arc<ContainerIo>);

impl Drop for Live {
    fn drop(&mut self) {
        *self.0.copiers.lock_unpoisoned() -= 1;
        self.0.copiers_done.notify_all();
    }
}

impl Copier {
    /// The stream it copies.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Starts copying on `worker` (a thread started ahead), or on a new
    /// thread.
    pub fn start(self, worker: Option<Worker>) -> io::Result<()> {
        let Copier {
            live,
            source,
            stream,
        } = self;
        let name = match stream {
            Stream::Stdout => "copy-stdout",
            Stream::Stderr => "copy-stderr",
        };
        run_on(worker, name, SMALL_STACK, move || {
            live.0.copy(source, stream);
            drop(live);
        })
    }
}

/// A unix socket a runtime connects to (`--console-socket`) to send the pty
/// master of a process with a terminal.
pub struct ConsoleSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ConsoleSocket {
    /// Listens at `path` (replacing a stale socket).
    pub fn bind(path: &Path) -> io::Result<ConsoleSocket> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        Ok(ConsoleSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Receives the master the runtime sent (it connects and sends before it
    /// exits, so after a successful create or exec it is already queued).
    pub fn receive(&self, timeout: Duration) -> io::Result<File> {
        let mut fds = [sys::pollin(self.listener.as_raw_fd())];
        if sys::poll(&mut fds, Some(timeout))? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the runtime sent no terminal",
            ));
        }
        let (conn, _) = self.listener.accept()?;
        conn.set_nonblocking(false)?;
        conn.set_read_timeout(Some(timeout))?;
        let mut name = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut name)];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 2]);
        let msg = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut received: Vec<OwnedFd> = Vec::new();
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: SCM_RIGHTS installed these descriptors in our table
                // for us alone.
                received.extend(
                    fds.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        let mut received = received.into_iter();
        match received.next() {
            Some(fd) => Ok(File::from(fd)),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the runtime's console message held no descriptor",
            )),
        }
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a stream client's stdin and terminal requests go.
pub trait StdinSink {
    fn write(&mut self, data: &[u8]) -> io::Result<()>;
    fn close(&mut self);
    fn resize(&mut self, width: u16, height: u16) -> io::Result<()>;
}

/// Reads a stream client's frames (stdin bytes, close-stdin, resize) into
/// `sink` until the client hangs up; stdin is closed then too.
pub fn read_client_frames(mut conn: UnixStream, sink: &mut dyn StdinSink) {
    let mut stdin_open = true;
    while let Ok(Some(frame)) = protocol::read_frame(&mut conn) {
        match frame {
            (FrameKind::Stdin, data) => {
                if stdin_open && sink.write(&data).is_err() {
                    stdin_open = false;
                    sink.close();
                }
            }
            (kind, payload) => match protocol::decode::<Control>(kind, &payload) {
                Ok(Control::CloseStdin) => {
                    stdin_open = false;
                    sink.close();
                }
                Ok(Control::Resize { width, height }) => {
                    if let Err(e) = sink.resize(width, height) {
                        super::log(format_args!("resize: {e}"));
                    }
                }
                Ok(Control::Exit { .. }) | Err(_) => break,
            },
        }
    }
    if stdin_open {
        sink.close();
    }
}

/// Whether the client on `conn` has hung up both directions (it may have
/// shut down only its writing half, and still be reading).
pub fn peer_gone(conn: &UnixStream) -> bool {
    let mut fds = [libc::pollfd {
        fd: conn.as_raw_fd(),
        events: 0,
        revents: 0,
    }];
    match sys::poll(&mut fds, Some(Duration::ZERO)) {
        Ok(_) => fds[0].revents & (libc::POLLHUP | libc::POLLERR) != 0,
        Err(_) => true,
    }
}

/// Writes one stream frame to a client.
pub fn send_output(conn: &mut UnixStream, stream: Stream, data: &[u8]) -> io::Result<()> {
    let kind = match stream {
        Stream::Stdout => FrameKind::Stdout,
        Stream::Stderr => FrameKind::Stderr,
    };
    protocol::write_frame(conn, kind, data)
}
