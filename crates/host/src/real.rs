//! The machine berth runs on.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{process, Host, Ran};

/// How long a program asked about (`--version`, `features`) may take.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this much of a file or of a command's output is read.
const MAX_READ: u64 = 256 * 1024;

/// The machine berth runs on.
pub struct RealHost;

impl Host for RealHost {
    fn read(&self, path: &Path) -> Option<String> {
        let file = std::fs::File::open(path).ok()?;
        let mut text = String::new();
        file.take(MAX_READ).read_to_string(&mut text).ok()?;
        Some(text)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn is_executable(&self, path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    fn list_dir(&self, path: &Path) -> Vec<PathBuf> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        entries.sort();
        entries
    }
    fn path_dirs(&self) -> Vec<PathBuf> {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default()
    }
    fn run(&self, binary: &Path, arg: &str) -> Ran {
        run_bounded(binary, arg)
    }
    fn kernel_release(&self) -> String {
        nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default()
    }
    fn euid(&self) -> u32 {
        nix::unistd::geteuid().as_raw()
    }
    fn exe_dir(&self) -> Option<PathBuf> {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    }
}

/// Runs `binary arg` for at most [`COMMAND_TIMEOUT`]; its output is read
/// once it has exited, so what it prints must fit the pipe (a runtime's
/// `features` document does).
fn run_bounded(binary: &Path, arg: &str) -> Ran {
    let spawned = std::process::Command::new(binary)
        .arg(arg)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Ran::Failed(e.to_string()),
    };
    let status = match process::wait_or_kill(&mut child, COMMAND_TIMEOUT) {
        Ok(Some(status)) => status,
        Ok(None) => return Ran::TimedOut,
        Err(e) => return Ran::Failed(e.to_string()),
    };
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(MAX_READ).read_to_string(&mut out);
    }
    if !status.success() {
        return Ran::Failed(format!("`{arg}` exited with {status}"));
    }
    Ran::Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_reads_and_fails_bounded() {
        let host = RealHost;
        let sh = Path::new("/bin/sh");
        assert!(host.is_executable(sh));
        assert_eq!(
            host.run(Path::new("/bin/echo"), "hi"),
            Ran::Ok("hi\n".into())
        );
        assert!(matches!(
            host.run(Path::new("/bin/false"), "x"),
            Ran::Failed(_)
        ));
        assert!(matches!(
            host.run(Path::new("/no/such"), "x"),
            Ran::Failed(_)
        ));
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("runtime");
        std::fs::write(
            &runtime,
            "#!/bin/sh\necho \"fake $1 1.0\"\necho commit: x\n",
        )
        .unwrap();
        std::fs::set_permissions(
            &runtime,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(host.version(&runtime).unwrap(), "fake --version 1.0");
        let slow = dir.path().join("slow");
        std::fs::write(&slow, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let start = std::time::Instant::now();
        assert_eq!(host.run(&slow, "features"), Ran::TimedOut);
        assert!(host.version(&slow).unwrap_err().contains("did not answer"));
        assert!(start.elapsed() < Duration::from_secs(30));
        assert!(host.read(Path::new("/proc/self/status")).is_some());
        assert!(host.kernel_release().contains('.'));
    }
}
