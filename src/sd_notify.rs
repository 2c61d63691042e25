//! systemd's readiness protocol (sd_notify(3)) for `Type=notify`: one
//! datagram such as `READY=1` to the unix socket named by `$NOTIFY_SOCKET`
//! (a path, or `@name` in the abstract namespace).
//!
//! [`take_socket`] runs first thing in `main`, while berth has one thread: it
//! takes `NOTIFY_SOCKET` out of the environment, so the shims and runc that
//! berth starts never see it (runc would otherwise hand the socket to the
//! container and wait for the container's own READY).

use std::ffi::OsString;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::OnceLock;

static SOCKET: OnceLock<Option<OsString>> = OnceLock::new();

/// Takes `$NOTIFY_SOCKET` out of the environment and keeps it for
/// [`ready`]. Call it before any other thread starts.
pub fn take_socket() {
    let socket = std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty());
    if socket.is_some() {
        // Single-threaded here (the first thing main does): no other thread
        // reads the environment concurrently.
        std::env::remove_var("NOTIFY_SOCKET");
    }
    let _ = SOCKET.set(socket);
}

/// Tells systemd that berth is ready (recovery done, the CRI socket serves).
/// Does nothing when berth was not started by systemd with `Type=notify`.
pub fn ready() {
    notify_logged("READY=1");
}

fn notify_logged(state: &str) {
    let Some(Some(socket)) = SOCKET.get() else {
        return;
    };
    match notify(socket, state) {
        Ok(()) => tracing::debug!(state, "notified systemd"),
        Err(e) => {
            tracing::warn!(state, socket = ?socket, error = %e, "notifying systemd (NOTIFY_SOCKET)")
        }
    }
}

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the notify socket
/// `socket`: a filesystem path, or `@name` for the abstract namespace.
pub fn notify(socket: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = socket.as_bytes();
    let addr = match bytes.first() {
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(&bytes[1..])?
        }
        Some(b'/') => SocketAddr::from_pathname(PathBuf::from(socket))?,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "NOTIFY_SOCKET is neither an absolute path nor an abstract name (@…)",
            ))
        }
    };
    let sender = UnixDatagram::unbound()?;
    // A datagram either goes whole or fails; systemd reads it at once, and a
    // full queue must not hold up the daemon.
    sender.set_write_timeout(Some(std::time::Duration::from_secs(1)))?;
    sender.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn sends_one_datagram_to_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        notify(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("berth-test-notify-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let receiver = UnixDatagram::bind_addr(&addr).unwrap();
        let socket = OsString::from(format!("@{name}"));
        notify(&socket, "STOPPING=1").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn refuses_a_relative_name_and_a_missing_socket() {
        assert!(notify(std::ffi::OsStr::from_bytes(b"notify"), "READY=1").is_err());
        let dir = tempfile::tempdir().unwrap();
        assert!(notify(dir.path().join("none").as_os_str(), "READY=1").is_err());
    }
}
