//! A standby ("spare") shim: `berth-shim --standby --state-root DIR`.
//!
//! The daemon starts one before it needs a shim. It forks and leads a
//! session of its own as every shim does, and does ahead all that needs no
//! container: SIGCHLD blocked, child subreaper, one malloc arena, the reaper
//! and the threads started ahead. Then it reads its options from stdin: one
//! frame ([`crate::options::args_frame`], at most
//! [`crate::options::MAX_OPTIONS_FRAME`] bytes, refused from its header if
//! longer) holding the very arguments a shim's command line would, parsed
//! and checked as the command line is ([`ShimOptions::from_args`]). From
//! there it is the shim those arguments would have started: it answers on
//! stdout, serves, and its command line (what `ps` and `pgrep -f` show)
//! becomes `berth-shim` with those arguments.
//!
//! - EOF before any options (the daemon dropped it, or ended): it exits 0,
//!   having written nothing anywhere.
//! - Options it refuses: it answers an `InvalidRequest` error saying what
//!   the command line would have said on stderr, and exits 2.
//!
//! Its only descriptors are its stdio (everything above is closed at once,
//! as in every shim): stdin, the read end of a pipe whose write end only
//! the daemon holds (close-on-exec there), so a spare cannot outlive its
//! daemon by more than that EOF; stdout, the pipe the daemon reads the
//! answer from; stderr, /dev/null until the options name `shim.log`.
//!
//! `DIR` is where the daemon keeps its shims' state dirs. The spare writes
//! nothing there: it names it so that it is found, and counted, with the
//! daemon's other shims by whoever looks at command lines.

use std::ffi::OsString;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::path::PathBuf;

use crate::options::{read_args_frame, ShimOptions};
use crate::protocol::{ErrorKind, RemoteError, Response};
use crate::sys;

use super::setup;

/// The entry point of `berth-shim --standby` (`args`: what follows it).
pub(super) fn main(args: impl Iterator<Item = OsString>) -> ! {
    if let Err(msg) = state_root(args) {
        eprintln!("berth-shim: {msg}");
        std::process::exit(2);
    }
    super::detach();
    let _ = std::env::set_current_dir("/");
    // The program name, before the title may write over it.
    let program = std::env::args_os()
        .next()
        .unwrap_or_else(|| "berth-shim".into());
    // While this is the only thread.
    let title = sys::Title::claim();
    // Nothing to tell anyone yet: the daemon finds this spare gone when it
    // takes it, and starts a shim afresh.
    let Ok(prepared) = setup::prepare(true) else {
        std::process::exit(1);
    };
    // SAFETY: fd 0 is this process's stdin, open (the daemon's pipe) and
    // borrowed here only: ManuallyDrop leaves it open for the shim's
    // redirection to /dev/null to replace.
    let mut stdin = ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    let args = match read_args_frame(&mut *stdin) {
        Ok(None) => std::process::exit(0),
        Ok(Some(args)) => args,
        Err(msg) => refuse(msg),
    };
    let opts = match ShimOptions::from_args(args.clone()) {
        Ok(opts) => opts,
        Err(msg) => refuse(msg),
    };
    super::finish(setup::setup_prepared(opts, prepared), move || {
        // Off the start-up's path: after the answer.
        match title {
            Ok(title) => {
                let mut line = vec![program];
                line.extend(args);
                title.set(&line);
            }
            Err(e) => super::log(format_args!("showing the options as the command line: {e}")),
        }
    })
}

/// `--state-root DIR`: an absolute path.
fn state_root(args: impl Iterator<Item = OsString>) -> Result<PathBuf, String> {
    let mut root = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--state-root") => {
                let dir = PathBuf::from(args.next().ok_or("--state-root needs a value")?);
                if !dir.is_absolute() {
                    return Err(format!("--state-root {} is not absolute", dir.display()));
                }
                root = Some(dir);
            }
            _ => return Err(format!("unknown argument {arg:?} after --standby")),
        }
    }
    root.ok_or_else(|| "--standby needs --state-root".to_string())
}

/// Refuses the options: says why on stdout, and exits 2 (as the command
/// line's refusal does).
fn refuse(msg: String) -> ! {
    super::answer(&Response::Error(RemoteError::new(
        ErrorKind::InvalidRequest,
        msg,
    )));
    std::process::exit(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_root_args() {
        let parse = |a: &[&str]| state_root(a.iter().map(OsString::from));
        assert_eq!(
            parse(&["--state-root", "/run/b/s"]).unwrap(),
            PathBuf::from("/run/b/s")
        );
        assert!(parse(&[]).is_err());
        assert!(parse(&["--state-root"]).is_err());
        assert!(parse(&["--state-root", "rel"]).is_err());
        assert!(parse(&["--state-root", "/s", "--id", "c"]).is_err());
    }
}
