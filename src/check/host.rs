//! The real host: [`RealHost`] answers the checks' questions from the machine
//! berth runs on.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Host;

/// How long `BINARY --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
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
    fn version(&self, binary: &Path) -> Result<String, String> {
        run_version(binary)
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

/// Runs `binary --version` with a time limit and returns its first line.
pub(super) fn run_version(binary: &Path) -> Result<String, String> {
    let mut child = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let status = crate::process::wait_or_kill(&mut child, VERSION_TIMEOUT)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "`--version` did not answer in {}s",
                VERSION_TIMEOUT.as_secs()
            )
        })?;
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(MAX_READ).read_to_string(&mut out);
    }
    if !status.success() {
        return Err(format!("`--version` exited with {status}"));
    }
    Ok(out.lines().next().unwrap_or("").trim().to_string())
}
