//! The processes of a container, from its cgroup and `/proc` (as cAdvisor
//! counts them): processes, threads, open file descriptors and sockets,
//! and the soft limit on open files of its first process.

use std::path::Path;

/// What a container's processes hold, counted now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Processes {
    pub(super) processes: u64,
    pub(super) threads: u64,
    pub(super) file_descriptors: u64,
    pub(super) sockets: u64,
}

/// The processes in the cgroup at `dir` and the cgroups below it; `None`
/// when the cgroup is gone. A process that exits during the count is left
/// out.
pub(super) fn count(dir: &Path) -> Option<Processes> {
    let pids = berth_cgroup_stats::pids_below(dir)?;
    let mut out = Processes::default();
    for pid in pids {
        let proc = Path::new("/proc").join(pid.to_string());
        let Ok(tasks) = std::fs::read_dir(proc.join("task")) else {
            continue;
        };
        out.processes += 1;
        out.threads += tasks.count() as u64;
        let Ok(fds) = std::fs::read_dir(proc.join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            out.file_descriptors += 1;
            let socket = std::fs::read_link(fd.path()).is_ok_and(|target| {
                target
                    .as_os_str()
                    .as_encoded_bytes()
                    .starts_with(b"socket:")
            });
            if socket {
                out.sockets += 1;
            }
        }
    }
    Some(out)
}

/// The soft limit on open files of process `pid` (`/proc/<pid>/limits`);
/// `None` when it is unlimited or the process is gone.
pub(super) fn max_open_files(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    soft_limit(&text, "Max open files")
}

/// The soft limit of `name` in a `/proc/<pid>/limits` text.
fn soft_limit(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix(name))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        let text = "\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 524288               files
Max locked memory         unlimited            unlimited            bytes
";
        assert_eq!(soft_limit(text, "Max open files"), Some(1024));
        assert_eq!(soft_limit(text, "Max cpu time"), None);
        assert_eq!(soft_limit(text, "Max processes"), None);
    }

    #[test]
    fn this_process_is_counted() {
        // A fake cgroup holding this test process.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("cgroup.procs"), "999999999\n").unwrap();
        let _socket = std::os::unix::net::UnixDatagram::unbound().unwrap();
        let p = count(dir.path()).unwrap();
        assert_eq!(p.processes, 1, "the gone pid is left out");
        assert!(p.threads >= 1);
        assert!(p.file_descriptors >= 3);
        assert!(p.sockets >= 1);
        assert_eq!(count(&dir.path().join("gone")), None);
        assert!(max_open_files(std::process::id()).is_some_and(|n| n > 0));
    }
}
