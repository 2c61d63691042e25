//! What one shim is started with ([`ShimOptions`], passed as its command line,
//! or to a standby shim as the same arguments in one frame on its stdin) and
//! where its files live in its state directory ([`ShimPaths`]).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::crilog::LogTarget;

/// Longest path a unix socket address holds (sun_path, minus the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Most bytes of arguments a standby shim accepts in its options frame
/// ([`args_frame`]); a longer frame is refused unread.
pub const MAX_OPTIONS_FRAME: usize = 64 * 1024;

/// Everything one shim needs to create and look after one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimOptions {
    /// The container id, as the OCI runtime knows it.
    pub id: String,
    /// The OCI bundle (absolute).
    pub bundle: PathBuf,
    /// The shim's own directory (absolute): socket, exit file, pid file, logs.
    pub state_dir: PathBuf,
    /// The OCI runtime binary (`runc`, `crun`, or a path).
    pub runtime: PathBuf,
    /// The runtime's `--root`.
    pub runtime_root: PathBuf,
    /// Pass `--systemd-cgroup` to the runtime.
    pub systemd_cgroup: bool,
    /// More global options for the runtime, before the command (e.g. crun's
    /// `--cgroup-manager=disabled`).
    pub runtime_args: Vec<String>,
    /// The CRI log file for the container's output (below the pod's log
    /// directory, never through a symlink: see [`LogTarget`]); `None`
    /// discards it.
    pub log: Option<LogTarget>,
    /// Keep the container's stdin open for attach.
    pub stdin: bool,
    /// Close the container's stdin when the first attach that used it ends.
    pub stdin_once: bool,
    /// Give the container a terminal (the bundle's `process.terminal` must agree).
    pub tty: bool,
    /// Bound on each runtime invocation.
    pub runtime_timeout: Duration,
    /// Start the container as the shim comes up (`run --detach`: one
    /// runtime exec instead of `create` + `start`); the first Start request
    /// then only reports it. For callers that start at once anyway.
    pub run_detached: bool,
}

impl ShimOptions {
    /// Options for container `id` from `bundle`, with the shim's files in
    /// `state_dir`; runtime `runc` with root `/run/runc`, no stdin, no TTY.
    pub fn new(
        id: impl Into<String>,
        bundle: impl Into<PathBuf>,
        state_dir: impl Into<PathBuf>,
    ) -> ShimOptions {
        ShimOptions {
            id: id.into(),
            bundle: bundle.into(),
            state_dir: state_dir.into(),
            runtime: PathBuf::from("runc"),
            runtime_root: PathBuf::from("/run/runc"),
            systemd_cgroup: false,
            runtime_args: Vec::new(),
            log: None,
            stdin: false,
            stdin_once: false,
            tty: false,
            runtime_timeout: crate::runc::DEFAULT_TIMEOUT,
            run_detached: false,
        }
    }

    /// The shim's files.
    pub fn paths(&self) -> ShimPaths {
        ShimPaths::new(&self.state_dir)
    }

    /// Checks what a shim could not work with: a bad id, relative paths, a
    /// socket path too long for a unix address.
    pub fn validate(&self) -> Result<(), String> {
        validate_id(&self.id)?;
        for (name, path) in [("bundle", &self.bundle), ("state dir", &self.state_dir)] {
            if !path.is_absolute() {
                return Err(format!("{name} {} is not an absolute path", path.display()));
            }
        }
        if let Some(log) = &self.log {
            // Built by LogTarget::new, or not: checked again.
            LogTarget::new(log.dir(), log.file())?;
        }
        let socket = self.paths().socket();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "socket path {} is longer than {MAX_SOCKET_PATH} bytes",
                socket.display()
            ));
        }
        Ok(())
    }

    /// The shim's command line for these options.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut pair = |k: &str, v: &OsStr| {
            args.push(k.into());
            args.push(v.to_os_string());
        };
        pair("--id", OsStr::new(&self.id));
        pair("--bundle", self.bundle.as_os_str());
        pair("--state-dir", self.state_dir.as_os_str());
        pair("--runtime", self.runtime.as_os_str());
        pair("--runtime-root", self.runtime_root.as_os_str());
        let timeout = self.runtime_timeout.as_millis().to_string();
        pair("--runtime-timeout-ms", OsStr::new(&timeout));
        if let Some(log) = &self.log {
            pair("--log-dir", log.dir().as_os_str());
            pair("--log-file", log.file().as_os_str());
        }
        for arg in &self.runtime_args {
            pair("--runtime-arg", OsStr::new(arg));
        }
        for (flag, on) in [
            ("--systemd-cgroup", self.systemd_cgroup),
            ("--stdin", self.stdin),
            ("--stdin-once", self.stdin_once),
            ("--tty", self.tty),
            ("--run-detached", self.run_detached),
        ] {
            if on {
                args.push(flag.into());
            }
        }
        args
    }

    /// Parses the shim's command line (without the program name).
    pub fn from_args(args: impl IntoIterator<Item = OsString>) -> Result<ShimOptions, String> {
        let mut opts = ShimOptions::new("", "", "");
        let mut seen_id = false;
        let (mut log_dir, mut log_file): (Option<PathBuf>, Option<PathBuf>) = (None, None);
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let flag = arg.to_string_lossy().into_owned();
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--id" => {
                    opts.id = value()?
                        .into_string()
                        .map_err(|_| "--id is not UTF-8".to_string())?;
                    seen_id = true;
                }
                "--bundle" => opts.bundle = value()?.into(),
                "--state-dir" => opts.state_dir = value()?.into(),
                "--runtime" => opts.runtime = value()?.into(),
                "--runtime-root" => opts.runtime_root = value()?.into(),
                "--runtime-timeout-ms" => {
                    let v = value()?;
                    let ms: u64 = v
                        .to_str()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| format!("--runtime-timeout-ms {v:?} is not a number"))?;
                    opts.runtime_timeout = Duration::from_millis(ms);
                }
                "--log-dir" => log_dir = Some(value()?.into()),
                "--log-file" => log_file = Some(value()?.into()),
                "--runtime-arg" => opts.runtime_args.push(
                    value()?
                        .into_string()
                        .map_err(|_| "--runtime-arg is not UTF-8".to_string())?,
                ),
                "--systemd-cgroup" => opts.systemd_cgroup = true,
                "--stdin" => opts.stdin = true,
                "--stdin-once" => opts.stdin_once = true,
                "--tty" => opts.tty = true,
                "--run-detached" => opts.run_detached = true,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        if !seen_id {
            return Err("--id is required".into());
        }
        for (name, path) in [("--bundle", &opts.bundle), ("--state-dir", &opts.state_dir)] {
            if path.as_os_str().is_empty() {
                return Err(format!("{name} is required"));
            }
        }
        opts.log = match (log_dir, log_file) {
            (None, None) => None,
            (Some(dir), Some(file)) => Some(LogTarget::new(dir, file)?),
            _ => return Err("--log-dir and --log-file go together".into()),
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// The frame that hands `args` (a shim's command line without the program
/// name, as [`ShimOptions::to_args`] makes it) to a standby shim: the
/// payload's length (4 bytes, big-endian), then each argument followed by a
/// NUL. Refused: an argument holding a NUL (no command line can carry it),
/// a payload over [`MAX_OPTIONS_FRAME`].
pub fn args_frame(args: &[OsString]) -> Result<Vec<u8>, String> {
    let len: usize = args.iter().map(|a| a.len() + 1).sum();
    if len > MAX_OPTIONS_FRAME {
        return Err(format!(
            "options of {len} bytes are over the {MAX_OPTIONS_FRAME}-byte limit"
        ));
    }
    let mut frame = Vec::with_capacity(4 + len);
    frame.extend_from_slice(&(len as u32).to_be_bytes());
    for arg in args {
        let bytes = arg.as_bytes();
        if bytes.contains(&0) {
            return Err(format!("argument {arg:?} holds a NUL byte"));
        }
        frame.extend_from_slice(bytes);
        frame.push(0);
    }
    Ok(frame)
}

/// Reads one [`args_frame`] from `r`: `None` at EOF before its first byte
/// (no options will come). Never reads more than the header and a payload
/// within [`MAX_OPTIONS_FRAME`]: a longer frame is refused from its header.
pub fn read_args_frame(r: &mut impl Read) -> Result<Option<Vec<OsString>>, String> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err("the options frame ends inside its header".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the options: {e}")),
        }
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_OPTIONS_FRAME {
        return Err(format!(
            "options of {len} bytes are over the {MAX_OPTIONS_FRAME}-byte limit"
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)
        .map_err(|e| format!("reading {len} bytes of options: {e}"))?;
    if payload.last().is_some_and(|b| *b != 0) {
        return Err("the options frame does not end with a NUL".into());
    }
    let mut args: Vec<OsString> = payload
        .split(|b| *b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    // The split leaves an empty piece after the last NUL.
    args.pop();
    Ok(Some(args))
}

/// Checks a container id the way runc does: letters, digits, `_`, `+`, `-`, `.`.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 1024 {
        return Err(format!("container id {id:?} is empty or too long"));
    }
    if id == "." || id == ".." {
        return Err(format!("container id {id:?} is not allowed"));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'.'))
    {
        return Err(format!(
            "container id {id:?} has characters other than [A-Za-z0-9_+.-]"
        ));
    }
    Ok(())
}

/// Where a shim's files are, in its state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimPaths {
    dir: PathBuf,
}

impl ShimPaths {
    /// The files of the shim whose state directory is `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> ShimPaths {
        ShimPaths { dir: dir.into() }
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket the shim serves on.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("shim.sock")
    }

    /// The exit file ([`crate::read_exit_file`]).
    pub fn exit_file(&self) -> PathBuf {
        self.dir.join("exit.json")
    }

    /// The shim's own diagnostics.
    pub fn shim_log(&self) -> PathBuf {
        self.dir.join("shim.log")
    }

    /// The container's init pid, as the runtime wrote it.
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("init.pid")
    }

    /// The runtime's JSON log for `create` (and `exec`s, with their own names).
    pub fn runtime_log(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{what}.runtime.log"))
    }

    /// A console socket the runtime sends a pty master to.
    pub fn console_socket(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{what}.tty.sock"))
    }

    /// A file of exec `exec_id` (`json`: its process spec, `pid`: its pid).
    pub fn exec_file(&self, exec_id: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("exec-{exec_id}.{ext}"))
    }
}

/// Whether `bytes` is a safe exec id for file names: `[A-Za-z0-9_.-]`, 1 to 64.
pub fn valid_exec_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && OsStr::new(id)
            .as_bytes()
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        let mut opts = ShimOptions::new("c1", "/b", "/s");
        opts.runtime = "crun".into();
        opts.runtime_args = vec!["--cgroup-manager=disabled".into(), "--debug".into()];
        opts.log = Some(LogTarget::new("/l", "c/0.log").unwrap());
        opts.stdin = true;
        opts.tty = true;
        opts.runtime_timeout = Duration::from_millis(1500);
        assert_eq!(ShimOptions::from_args(opts.to_args()).unwrap(), opts);
        let plain = ShimOptions::new("c2", "/b", "/s");
        assert_eq!(ShimOptions::from_args(plain.to_args()).unwrap(), plain);
    }

    #[test]
    fn bad_args() {
        let parse = |a: &[&str]| ShimOptions::from_args(a.iter().map(OsString::from));
        assert!(parse(&["--bundle", "/b", "--state-dir", "/s"]).is_err());
        assert!(parse(&["--id", "c", "--bundle", "/b"]).is_err());
        assert!(parse(&["--id", "c", "--bundle", "rel", "--state-dir", "/s"]).is_err());
        assert!(parse(&["--id", "../x", "--bundle", "/b", "--state-dir", "/s"]).is_err());
        assert!(parse(&["--id", "c", "--bundle", "/b", "--state-dir", "/s", "--what"]).is_err());
        assert!(parse(&["--id"]).is_err());
        let base = ["--id", "c", "--bundle", "/b", "--state-dir", "/s"];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
        assert!(with(&["--log-dir", "/l", "--log-file", "c/0.log"]).is_ok());
        assert!(with(&["--log-dir", "/l"]).is_err());
        assert!(with(&["--log-file", "0.log"]).is_err());
        assert!(with(&["--log-dir", "l", "--log-file", "0.log"]).is_err());
        assert!(with(&["--log-dir", "/l", "--log-file", "../0.log"]).is_err());
        assert!(with(&["--log-dir", "/l", "--log-file", "/etc/passwd"]).is_err());
        let long = format!("/{}", "d".repeat(120));
        assert!(parse(&["--id", "c", "--bundle", "/b", "--state-dir", &long]).is_err());
    }

    #[test]
    fn frames_round_trip() {
        let mut opts = ShimOptions::new("c1", "/b", "/s");
        opts.runtime_args = vec!["--debug".into(), String::new()];
        opts.run_detached = true;
        let frame = args_frame(&opts.to_args()).unwrap();
        let args = read_args_frame(&mut &frame[..]).unwrap().unwrap();
        assert_eq!(args, opts.to_args());
        assert_eq!(ShimOptions::from_args(args).unwrap(), opts);
        // Nothing at all: no options, not an error.
        assert_eq!(read_args_frame(&mut &b""[..]).unwrap(), None);
        // No arguments: an empty payload, refused by from_args later.
        let empty = args_frame(&[]).unwrap();
        assert_eq!(empty, [0, 0, 0, 0]);
        assert_eq!(read_args_frame(&mut &empty[..]).unwrap(), Some(vec![]));
    }

    #[test]
    fn bad_frames() {
        let read = |b: &[u8]| read_args_frame(&mut &b[..]);
        assert!(read(&[0, 0]).is_err());
        assert!(read(&[0, 0, 0, 5, b'-', b'-', b'i', b'd']).is_err());
        assert!(read(&[0, 0, 0, 3, b'-', b'-', b'x']).is_err());
        // Over the limit: refused from the header, the payload never read.
        let over = ((MAX_OPTIONS_FRAME + 1) as u32).to_be_bytes();
        let mut reader = std::io::Read::chain(&over[..], std::io::repeat(b'a'));
        let err = read_args_frame(&mut reader).unwrap_err();
        assert!(err.contains("limit"), "{err}");
        assert!(args_frame(&[OsString::from("a\0b")]).is_err());
        assert!(args_frame(&[OsString::from("a".repeat(MAX_OPTIONS_FRAME))]).is_err());
        let at_limit = OsString::from("a".repeat(MAX_OPTIONS_FRAME - 1));
        let frame = args_frame(std::slice::from_ref(&at_limit)).unwrap();
        assert_eq!(read(&frame).unwrap(), Some(vec![at_limit]));
    }

    #[test]
    fn exec_ids() {
        assert!(valid_exec_id("abc-1_2.x"));
        assert!(!valid_exec_id(""));
        assert!(!valid_exec_id("../x"));
        assert!(!valid_exec_id(".hidden"));
        assert!(!valid_exec_id(&"a".repeat(65)));
    }
}
