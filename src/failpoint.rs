//! Fault injection for crash tests. In debug builds, `BERTH_FAILPOINTS`
//! names steps (comma separated) at which the daemon aborts, as if killed
//! with SIGKILL: e.g. `BERTH_FAILPOINTS=run_pod_sandbox:after_cni`. Release
//! builds compile every failpoint away.

/// Aborts the process when `name` is listed in `BERTH_FAILPOINTS`.
#[inline]
pub fn hit(name: &str) {
    #[cfg(debug_assertions)]
    {
        if let Ok(list) = std::env::var("BERTH_FAILPOINTS") {
            if list.split(',').any(|p| p.trim() == name) {
                tracing::error!(failpoint = name, "failpoint hit: aborting");
                std::process::abort();
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
