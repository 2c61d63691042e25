//! One scratch directory per fuzzing process, `<parent>/berth-fuzz-<pid>`,
//! on tmpfs when there is one. libFuzzer ends with `exit()`, which runs no
//! Rust destructor (a `TempDir` in a static would stay behind), so the
//! directory is removed by an `atexit` handler, and those of processes that
//! no longer run (a crash) are removed when the next one starts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_at_exit() {
    if let Some(dir) = DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The scratch directory of this process (made at the first call).
pub fn dir() -> &'static Path {
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let parent = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        if let Ok(entries) = std::fs::read_dir(&parent) {
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("berth-fuzz-")) else {
                    continue;
                };
                if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = parent.join(format!("berth-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        // SAFETY: registers a function without arguments that only removes
        // a directory.
        unsafe { libc::atexit(remove_at_exit) };
        dir
    })
}
