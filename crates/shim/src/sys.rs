//! Small wrappers over the system calls the shim and the runc client share:
//! pipes, non-blocking reads, `poll` with EINTR retry, pidfds.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// A pipe whose both ends are close-on-exec: `(read, write)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// Puts `fd` in non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a caller-owned descriptor; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes `fd` out of non-blocking mode.
pub fn set_blocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a caller-owned descriptor; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `poll(2)` over `fds`, retried on EINTR; `None` waits forever. Returns the
/// number of descriptors with events.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => millis_until(d),
        };
        // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Milliseconds from now until `deadline`, rounded up, as `poll` wants them.
pub fn millis_until(deadline: Instant) -> i32 {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = left.as_micros().div_ceil(1000);
    ms.min(i32::MAX as u128) as i32
}

/// A `pollfd` asking for input on `fd`.
pub fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// What a non-blocking read of a stream gave.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Bytes were appended.
    Data(usize),
    /// Nothing to read now.
    Empty,
    /// End of stream (also EIO from a pty master whose terminal closed).
    Eof,
}

/// Reads once from a non-blocking `file` into `buf`.
pub fn read_some(file: &mut File, buf: &mut [u8]) -> io::Result<ReadOutcome> {
    loop {
        return match file.read(buf) {
            Ok(0) => Ok(ReadOutcome::Eof),
            Ok(n) => Ok(ReadOutcome::Data(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(ReadOutcome::Empty),
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(ReadOutcome::Eof),
            Err(e) => Err(e),
        };
    }
}

/// Writes all of `data` to `file`, blocking or not: on EAGAIN it waits
/// until the descriptor is writable.
pub fn write_all(file: &File, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut off = 0;
    let mut f = file;
    while off < data.len() {
        match f.write(&data[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [libc::pollfd {
                    fd: file.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                }];
                poll(&mut fds, None)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A pidfd for `pid` (readable once the process exits), where the kernel has them.
pub fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this descriptor to us and nobody else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The exit code a shell would report for a raw wait status: the code, or 128
/// plus the signal that killed the process.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 255,
    }
}

/// Where a process can show a command line other than the one it was
/// started with (what `/proc/self/cmdline`, `ps` and `pgrep -f` read).
pub struct Title {
    area: ArgArea,
    /// The environment's strings were moved away: their room is free too.
    env_free: bool,
}

/// The process's argument and environment strings (fields 48 to 51 of
/// `/proc/self/stat`).
#[derive(Debug, Clone, Copy)]
struct ArgArea {
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
}

impl Title {
    /// Moves the environment's strings to the heap (so that the area after
    /// the arguments may be written over, as setproctitle(3) does). Only
    /// while the process has one thread: the environment is rewritten.
    pub fn claim() -> io::Result<Title> {
        use std::os::unix::ffi::OsStrExt;
        let area = ArgArea::read()?;
        let vars: Vec<_> = std::env::vars_os().collect();
        // A name setenv refuses (set_var would panic) cannot be moved: its
        // string stays where it is, and so the room stays taken.
        let env_free = vars.iter().all(|(k, v)| {
            !k.is_empty() && !k.as_bytes().contains(&b'=') && !v.as_bytes().contains(&0)
        });
        if env_free {
            for (key, value) in vars {
                // setenv copies the pair to the heap and points environ at it.
                std::env::set_var(key, value);
            }
        }
        Ok(Title { area, env_free })
    }

    /// Shows `args` as the command line. Where the kernel lets it
    /// (`PR_SET_MM`, which needs CAP_SYS_RESOURCE): exactly, NUL-separated,
    /// from a new buffer. Else written over the original arguments and
    /// environment strings, joined by spaces and cut to the room there
    /// (as setproctitle(3)). The original argument strings are gone then
    /// (`std::env::args` is not to be used any more).
    pub fn set(self, args: &[std::ffi::OsString]) {
        use std::os::unix::ffi::OsStrExt;
        let mut nul_separated = Vec::new();
        for arg in args {
            nul_separated.extend_from_slice(arg.as_bytes());
            nul_separated.push(0);
        }
        if nul_separated.is_empty() {
            nul_separated.push(0);
        }
        if self.area.replace(nul_separated).is_err() {
            // EPERM without CAP_SYS_RESOURCE (or EINVAL from a kernel that
            // checks the addresses otherwise): the old way.
            let joined: Vec<u8> = args
                .iter()
                .map(|a| a.as_bytes())
                .collect::<Vec<_>>()
                .join(&b' ');
            self.area.overwrite(&joined, self.env_free);
        }
    }
}

impl ArgArea {
    fn read() -> io::Result<ArgArea> {
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/self/stat");
        // Fields from the 3rd on follow the command name's closing parenthesis.
        let rest = stat.rsplit_once(") ").ok_or_else(bad)?.1;
        let mut fields = rest.split_ascii_whitespace().skip(48 - 3);
        let mut next =
            || -> io::Result<u64> { fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad) };
        Ok(ArgArea {
            arg_start: next()?,
            arg_end: next()?,
            env_start: next()?,
            env_end: next()?,
        })
    }

    /// Points the kernel at `buf` (NUL-terminated arguments) instead,
    /// leaking it: it is read for the rest of the process's life.
    fn replace(&self, buf: Vec<u8>) -> io::Result<()> {
        let buf: *mut [u8] = Box::into_raw(buf.into_boxed_slice());
        let start = buf as *mut u8 as u64;
        let end = start + buf.len() as u64;
        let result = self.point_at(start, end);
        if result.is_err() {
            // SAFETY: `buf` came from Box::into_raw above and the kernel
            // was not left pointing at it.
            drop(unsafe { Box::from_raw(buf) });
        }
        result
    }

    /// Sets the kernel's argument area to [start, end).
    fn point_at(&self, start: u64, end: u64) -> io::Result<()> {
        let set = |what: libc::c_int, addr: u64| {
            // SAFETY: PR_SET_MM only changes where the kernel reads the
            // arguments from; `addr` points into a live buffer, leaked
            // once this succeeds.
            let rc = unsafe {
                libc::prctl(
                    libc::PR_SET_MM,
                    what as libc::c_ulong,
                    addr as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            };
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // The kernel wants start <= end after each of the two calls.
        let (old_start, old_end) = (self.arg_start, self.arg_end);
        if start <= old_end {
            set(libc::PR_SET_MM_ARG_START, start)?;
            if let Err(e) = set(libc::PR_SET_MM_ARG_END, end) {
                let _ = set(libc::PR_SET_MM_ARG_START, old_start);
                return Err(e);
            }
        } else {
            set(libc::PR_SET_MM_ARG_END, end)?;
            if let Err(e) = set(libc::PR_SET_MM_ARG_START, start) {
                let _ = set(libc::PR_SET_MM_ARG_END, old_end);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes `title` (cut to fit, NUL-terminated) over the argument
    /// strings and, with `env_free`, the environment strings right after
    /// them (moved away by [`Title::claim`]); the kernel shows it as
    /// setproctitle(3)'s.
    fn overwrite(&self, title: &[u8], env_free: bool) {
        let end = if env_free && self.env_start == self.arg_end && self.env_end > self.env_start {
            self.env_end
        } else {
            self.arg_end
        };
        let room = end.saturating_sub(self.arg_start) as usize;
        if room == 0 {
            return;
        }
        let n = title.len().min(room - 1);
        // SAFETY: [arg_start, end) is this process's own argument (and
        // environment) strings, on its stack, writable; nothing reads them
        // any more (the environment was moved to the heap by `claim`, and
        // the arguments were read before).
        unsafe {
            let at = self.arg_start as *mut u8;
            std::ptr::write_bytes(at, 0, room);
            std::ptr::copy_nonoverlapping(title.as_ptr(), at, n);
        }
    }
}

/// Sets the size of the terminal whose master is `fd`.
pub fn set_winsize(fd: &impl AsRawFd, width: u16, height: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize struct that lives across the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(15)), 143);
    }

    #[test]
    fn nonblocking_reads() {
        use std::io::Write;
        let (r, w) = pipe().unwrap();
        set_nonblocking(r.as_raw_fd()).unwrap();
        let mut r = File::from(r);
        let mut w = File::from(w);
        let mut buf = [0u8; 8];
        assert_eq!(read_some(&mut r, &mut buf).unwrap(), ReadOutcome::Empty);
        w.write_all(b"hi").unwrap();
        let mut fds = [pollin(r.as_raw_fd())];
        assert_eq!(poll(&mut fds, Some(Duration::from_secs(1))).unwrap(), 1);
        assert_eq!(read_some(&mut r, &mut buf).unwrap(), ReadOutcome::Data(2));
        drop(w);
        assert_eq!(read_some(&mut r, &mut buf).unwrap(), ReadOutcome::Eof);
    }
}
