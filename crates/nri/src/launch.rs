//! Pre-installed plugins: discovery in `plugin_path` and launching with a
//! pre-connected socket as fd 3 (containerd/nri `newLaunchedPlugin`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::plugin::{check_plugin_index, Launch};

/// Environment variables NRI gives a launched plugin (`pkg/api/plugin.go`).
pub const PLUGIN_NAME_ENV: &str = "NRI_PLUGIN_NAME";
pub const PLUGIN_IDX_ENV: &str = "NRI_PLUGIN_IDX";
pub const PLUGIN_SOCKET_ENV: &str = "NRI_PLUGIN_SOCKET";

/// Configuration files larger than this are refused.
const MAX_CONFIG: u64 = 1 << 20;

/// A discovered pre-installed plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub idx: String,
    pub name: String,
    pub path: PathBuf,
    pub config: String,
}

/// Lists the executables `IDX-NAME` in `dir`, in index then name order, each
/// with its configuration from `conf_dir` (`IDX-NAME.conf`, else
/// `NAME.conf`). A missing directory means no plugins; a badly named
/// executable is skipped with a warning (NRI fails the whole start there,
/// which would take the runtime down for one stray file).
pub async fn discover(dir: &Path, conf_dir: &Path) -> std::io::Result<Vec<Discovered>> {
    let mut rd = match tokio::fs::read_dir(dir).await {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    while let Some(entry) = rd.next_entry().await? {
        let Ok(meta) = entry.metadata().await else {
            continue;
        };
        if meta.is_dir() || meta.permissions().mode() & 0o111 == 0 {
            continue;
        }
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some((idx, name)) = file.split_once('-') else {
            tracing::warn!(file, "skipping NRI plugin: not named IDX-NAME");
            continue;
        };
        if check_plugin_index(idx).is_err() || name.is_empty() {
            tracing::warn!(file, "skipping NRI plugin: not named IDX-NAME");
            continue;
        }
        let config = read_config(conf_dir, idx, name).await?;
        out.push(Discovered {
            idx: idx.to_string(),
            name: name.to_string(),
            path: entry.path(),
            config,
        });
    }
    out.sort_by(|a, b| (&a.idx, &a.name).cmp(&(&b.idx, &b.name)));
    Ok(out)
}

async fn read_config(conf_dir: &Path, idx: &str, name: &str) -> std::io::Result<String> {
    for file in [format!("{idx}-{name}.conf"), format!("{name}.conf")] {
        let path = conf_dir.join(file);
        match tokio::fs::metadata(&path).await {
            Ok(m) if m.len() > MAX_CONFIG => {
                return Err(std::io::Error::other(format!(
                    "{}: larger than {MAX_CONFIG} bytes",
                    path.display()
                )))
            }
            Ok(_) => return tokio::fs::read_to_string(&path).await,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(String::new())
}

/// Starts `d` with one end of a fresh socketpair as its fd 3, returning the
/// other end (as a tokio stream) and the child.
pub(crate) fn spawn(d: &Discovered) -> std::io::Result<(tokio::net::UnixStream, Launch)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let theirs: OwnedFd = theirs.into();
    let fd = theirs.as_raw_fd();
    let mut cmd = tokio::process::Command::new(&d.path);
    cmd.env_clear()
        .env(PLUGIN_NAME_ENV, &d.name)
        .env(PLUGIN_IDX_ENV, &d.idx)
        .env(PLUGIN_SOCKET_ENV, "3")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // SAFETY: between fork and exec we only call dup2/fcntl, which are
    // async-signal-safe, on a descriptor that stays open in the parent
    // until spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                // dup2 onto itself keeps CLOEXEC: clear it instead.
                if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(theirs);
    ours.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(ours)?;
    Ok((
        stream,
        Launch {
            idx: d.idx.clone(),
            name: d.name.clone(),
            child,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn discovery_order_names_and_configs() {
        let dir = tempfile::tempdir().unwrap();
        let conf = tempfile::tempdir().unwrap();
        for (f, mode) in [
            ("20-b", 0o755),
            ("10-a", 0o755),
            ("10-0", 0o755),
            ("x-bad", 0o755),
            ("30-noexec", 0o644),
        ] {
            let p = dir.path().join(f);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::write(conf.path().join("10-a.conf"), "specific").unwrap();
        std::fs::write(conf.path().join("a.conf"), "generic").unwrap();
        std::fs::write(conf.path().join("b.conf"), "bee").unwrap();
        let found = discover(dir.path(), conf.path()).await.unwrap();
        let names: Vec<(String, String, String)> = found
            .into_iter()
            .map(|d| (d.idx, d.name, d.config))
            .collect();
        assert_eq!(
            names,
            vec![
                ("10".into(), "0".into(), "".into()),
                ("10".into(), "a".into(), "specific".into()),
                ("20".into(), "b".into(), "bee".into()),
            ]
        );
        let none = discover(&dir.path().join("missing"), conf.path())
            .await
            .unwrap();
        assert!(none.is_empty());
    }
}
