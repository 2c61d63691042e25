//! Whether pods can run in a user namespace of their own the way berth
//! makes them: a user namespace made by a forked holder, idmapped bind
//! mounts of the state dir and the root dir (pod files, layers and writable
//! layers live there), and the state dir reachable by a pod's root.

use std::path::Path;

/// The host ids of a pod's mapping the probe tries.
const PROBE_HOST_ID: u32 = 65536;

/// Why pods with user namespaces cannot run here, if they cannot: an
/// idmapped bind mount of a scratch dir in `state` and in `root` shows a
/// root-owned file with the mapped owner and leaves nothing behind, and
/// `state` and every dir above it are searchable by others (a pod's root,
/// an unmapped host uid to them, must pass them to reach `<state>/userns`).
/// Blocking (it forks).
pub fn probe(root: &Path, state: &Path) -> Result<(), String> {
    searchable_by_others(state)?;
    for dir in [state, root] {
        berth_idmap::probe(dir, PROBE_HOST_ID).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether `dir` and each dir above it has the search bit for others.
fn searchable_by_others(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for d in dir.ancestors() {
        let mode = std::fs::metadata(d)
            .map_err(|e| format!("{}: {e}", d.display()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "{} (mode {:o}) cannot be passed by a pod's root",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_state_dir_others_cannot_pass_is_named() {
        let top = tempfile::tempdir().unwrap();
        let state = top.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = probe(&state, &state).unwrap_err();
        assert!(err.contains("cannot be passed by a pod's root"), "{err}");
        assert!(err.contains(&top.path().display().to_string()), "{err}");
    }
}
