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
