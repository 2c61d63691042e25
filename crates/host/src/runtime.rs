//! What an OCI runtime binary (runc, crun) can do on this host.

use std::path::Path;

use crate::{hybrid_v2_mount, Facts, Host, Ran};

/// Why runtime `binary` refuses every container on this host, if it does:
/// crun refuses a cgroup v1 "hybrid" host whose cgroup2 mount has
/// controllers ("cgroups in hybrid mode not supported, drop all controllers
/// from cgroupv2"). Err: it could not be asked now (not found, failing,
/// too slow), so it runs nothing now and may be asked again.
pub fn refusal(host: &dyn Host, binary: &Path) -> Result<Option<String>, String> {
    Ok(refusal_of_version(host, &host.version(binary)?))
}

/// Why a runtime whose `--version` first line is `version` refuses every
/// container on this host, if it does (see [`refusal`]).
pub fn refusal_of_version(host: &dyn Host, version: &str) -> Option<String> {
    let mountinfo = host
        .read(Path::new("/proc/self/mountinfo"))
        .unwrap_or_default();
    let controllers =
        hybrid_v2_mount(&mountinfo).and_then(|dir| host.read(&dir.join("cgroup.controllers")));
    refuses_this_host(version, &mountinfo, controllers.as_deref())
}

/// Why a runtime whose `--version` first line is `version` refuses every
/// container on a host with `mountinfo` (and, on a hybrid host, cgroup2
/// `controllers`), if it does.
pub fn refuses_this_host(
    version: &str,
    mountinfo: &str,
    controllers: Option<&str>,
) -> Option<String> {
    let crun = version.starts_with("crun ");
    let hybrid = hybrid_v2_mount(mountinfo).is_some();
    let has_controllers = controllers.is_some_and(|c| !c.trim().is_empty());
    (crun && hybrid && has_controllers).then(|| {
        "crun refuses cgroup v1 hybrid hosts whose cgroup2 mount has controllers".to_string()
    })
}

/// Whether runtime `binary` makes recursive read-only mounts here: the
/// kernel has mount_setattr (5.12) and its `features` lists `rro`. Err:
/// `features` did not answer in time, so ask again later.
pub fn recursive_read_only(host: &dyn Host, facts: &Facts, binary: &Path) -> Result<bool, String> {
    if !facts.rro_kernel() {
        return Ok(false);
    }
    match host.run(binary, "features") {
        Ran::Ok(out) => Ok(lists_rro(out.as_bytes())),
        // Not found, not executable, failing: it cannot.
        Ran::Failed(_) => Ok(false),
        Ran::TimedOut => Err(format!(
            "`{} features` did not answer in time",
            binary.display()
        )),
    }
}

/// Whether an OCI runtime `features` document lists the `rro` mount option.
pub fn lists_rro(features_json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(features_json)
        .ok()
        .and_then(|v| {
            v.get("mountOptions")?
                .as_array()
                .map(|opts| opts.iter().any(|o| o == "rro"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeHost;

    const HYBRID: &str = "30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro\n\
        31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
        32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";

    #[test]
    fn crun_on_a_hybrid_host_with_v2_controllers_runs_nothing() {
        let v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let (crun, runc) = ("crun version 1.8.1", "runc version 1.1.5");
        assert!(refuses_this_host(crun, HYBRID, Some("memory pids\n")).is_some());
        // runc runs there; crun too without v2 controllers, or on v2.
        assert!(refuses_this_host(runc, HYBRID, Some("memory pids\n")).is_none());
        assert!(refuses_this_host(crun, HYBRID, Some("\n")).is_none());
        assert!(refuses_this_host(crun, v2, Some("cpu memory")).is_none());
    }

    #[test]
    fn refusal_asks_the_binary_and_the_host() {
        let mut host = FakeHost::default();
        host.file("/proc/self/mountinfo", HYBRID);
        host.file("/sys/fs/cgroup/unified/cgroup.controllers", "memory pids\n");
        host.exe(
            "/usr/bin/crun",
            Ran::Ok("crun version 1.8.1\ncommit: x\n".into()),
        );
        host.exe("/usr/sbin/runc", Ran::Ok("runc version 1.1.5\n".into()));
        host.exe("/usr/bin/slow", Ran::TimedOut);
        assert!(refusal(&host, Path::new("/usr/bin/crun"))
            .unwrap()
            .is_some());
        assert_eq!(refusal(&host, Path::new("/usr/sbin/runc")), Ok(None));
        assert!(refusal(&host, Path::new("/usr/bin/slow")).is_err());
        assert!(refusal(&host, Path::new("/usr/bin/none")).is_err());
    }

    #[test]
    fn rro_needs_the_kernel_and_the_runtime() {
        let features = r#"{"ociVersionMin":"1.0.0","mountOptions":["ro","rro","rbind"]}"#;
        let mut host = FakeHost::default();
        host.exe("/usr/sbin/runc", Ran::Ok(features.into()));
        host.exe("/usr/bin/slow", Ran::TimedOut);
        let runc = Path::new("/usr/sbin/runc");
        let mut facts = Facts::detect(&host);
        facts.kernel = Some((6, 1));
        assert_eq!(recursive_read_only(&host, &facts, runc), Ok(true));
        assert_eq!(
            recursive_read_only(&host, &facts, Path::new("/no/such")),
            Ok(false)
        );
        assert!(recursive_read_only(&host, &facts, Path::new("/usr/bin/slow")).is_err());
        facts.kernel = Some((5, 10));
        assert_eq!(recursive_read_only(&host, &facts, runc), Ok(false));
    }

    #[test]
    fn rro_in_runtime_features() {
        assert!(lists_rro(
            br#"{"ociVersionMin":"1.0.0","mountOptions":["ro","rro","rbind"]}"#
        ));
        assert!(!lists_rro(br#"{"mountOptions":["ro","rbind"]}"#));
        assert!(!lists_rro(b"unknown command features"));
        assert!(!lists_rro(b"{}"));
    }
}
