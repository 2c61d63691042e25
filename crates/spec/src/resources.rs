//! Cgroup resources (CPU, memory, hugepages, pids, cgroup v2 unified
//! settings), the OOM score adjustment and the cgroups path. The resource
//! mapping serves CreateContainer and UpdateContainerResources alike.

use std::collections::HashMap;
use std::path::Path;

use cri_api::v1;
use oci_spec::runtime::{LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxPids, LinuxResources};

use crate::error::{invalid, io_error, Error};
use crate::SpecOptions;

const FIELD: &str = "linux.resources";

/// The CFS periods the kernel accepts, in µs.
const CPU_PERIOD_US: std::ops::RangeInclusive<u64> = 1_000..=1_000_000;

/// The least CFS quota the kernel accepts, in µs.
const MIN_CPU_QUOTA_US: i64 = 1_000;

/// The cgroup v1 cpu shares the kernel keeps (runc maps them onto v2
/// weights from the same range).
const CPU_SHARES: std::ops::RangeInclusive<u64> = 2..=262_144;

/// Maps CRI resources onto OCI ones. A zero or empty CRI field sets nothing.
///
/// Memory swap follows containerd: `memory_swap_limit_in_bytes` when given,
/// else the memory limit itself (no swapping), and only where the host has
/// swap accounting. Hugepage limits are dropped where the hugetlb controller
/// is absent (kubelet sends them for every page size). `unified` needs cgroup
/// v2. The pids limit comes from `opts`.
pub fn linux_resources(
    id: &str,
    r: &v1::LinuxContainerResources,
    opts: &SpecOptions,
) -> Result<LinuxResources, Error> {
    let mut out = LinuxResources::default();
    if let Some(cpu) = cpu(id, r)? {
        out.set_cpu(Some(cpu));
    }
    if let Some(memory) = memory(id, r, opts)? {
        out.set_memory(Some(memory));
    }
    if let Some(limits) = hugepage_limits(id, r, opts)? {
        out.set_hugepage_limits(Some(limits));
    }
    if let Some(unified) = unified(id, r, opts)? {
        out.set_unified(Some(unified));
    }
    if let Some(limit) = opts.pids_limit.filter(|l| *l != 0) {
        let mut pids = LinuxPids::default();
        pids.set_limit(limit);
        out.set_pids(Some(pids));
    }
    Ok(out)
}

/// `v` of the CRI field `field`: none when 0, refused when negative.
fn positive(id: &str, v: i64, field: &str) -> Result<Option<u64>, Error> {
    match v {
        0 => Ok(None),
        v if v > 0 => Ok(Some(v as u64)),
        v => Err(invalid(
            id,
            format!("{FIELD}.{field}"),
            format!("{v} is negative"),
        )),
    }
}

/// The CRI field `field` of `linux.resources` is refused, for `why`.
fn bad(id: &str, field: &str, why: String) -> Error {
    invalid(id, format!("{FIELD}.{field}"), why)
}

/// CFS period, shares and quota, and the cpuset; none when nothing is set.
fn cpu(id: &str, r: &v1::LinuxContainerResources) -> Result<Option<LinuxCpu>, Error> {
    let mut cpu = LinuxCpu::default();
    let period = positive(id, r.cpu_period, "cpu_period")?;
    if let Some(p) = period.filter(|p| !CPU_PERIOD_US.contains(p)) {
        return Err(bad(
            id,
            "cpu_period",
            format!("{p} is outside {CPU_PERIOD_US:?} µs"),
        ));
    }
    cpu.set_period(period);
    let shares = positive(id, r.cpu_shares, "cpu_shares")?;
    if let Some(s) = shares.filter(|s| !CPU_SHARES.contains(s)) {
        return Err(bad(
            id,
            "cpu_shares",
            format!("{s} is outside {CPU_SHARES:?}"),
        ));
    }
    cpu.set_shares(shares);
    match r.cpu_quota {
        0 => {}
        -1 => {
            cpu.set_quota(Some(-1));
        }
        q if q >= MIN_CPU_QUOTA_US => {
            cpu.set_quota(Some(q));
        }
        q => {
            return Err(bad(
                id,
                "cpu_quota",
                format!("{q} is neither -1 (no limit) nor at least {MIN_CPU_QUOTA_US} µs"),
            ))
        }
    }
    for (v, field) in [
        (&r.cpuset_cpus, "cpuset_cpus"),
        (&r.cpuset_mems, "cpuset_mems"),
    ] {
        if !v
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ',' | '-'))
        {
            return Err(bad(id, field, format!("{v:?} is not a list like 0-3,7")));
        }
    }
    if !r.cpuset_cpus.is_empty() {
        cpu.set_cpus(Some(r.cpuset_cpus.clone()));
    }
    if !r.cpuset_mems.is_empty() {
        cpu.set_mems(Some(r.cpuset_mems.clone()));
    }
    Ok((cpu != LinuxCpu::default()).then_some(cpu))
}

/// The memory limit and memory+swap limit; none when nothing is set.
fn memory(
    id: &str,
    r: &v1::LinuxContainerResources,
    opts: &SpecOptions,
) -> Result<Option<LinuxMemory>, Error> {
    let mut memory = LinuxMemory::default();
    let limit = positive(id, r.memory_limit_in_bytes, "memory_limit_in_bytes")?;
    let swap = match r.memory_swap_limit_in_bytes {
        0 => None,
        -1 => Some(-1),
        v if v > 0 => Some(v),
        v => {
            return Err(invalid(
                id,
                format!("{FIELD}.memory_swap_limit_in_bytes"),
                format!("{v} is negative"),
            ))
        }
    };
    // The kernel's memory+swap limit cannot be below the memory limit.
    if let (Some(l), Some(s)) = (limit, swap.filter(|s| *s > 0)) {
        if (s as u64) < l {
            return Err(bad(
                id,
                "memory_swap_limit_in_bytes",
                format!("{s} is below memory_limit_in_bytes {l}"),
            ));
        }
    }
    if let Some(limit) = limit {
        memory.set_limit(Some(limit as i64));
    }
    if opts.swap_available {
        memory.set_swap(swap.or(limit.map(|l| l as i64)));
    }
    Ok((memory != LinuxMemory::default()).then_some(memory))
}

/// The hugepage limits, checked even where they are dropped; none when
/// there are none or the host has no hugetlb controller.
fn hugepage_limits(
    id: &str,
    r: &v1::LinuxContainerResources,
    opts: &SpecOptions,
) -> Result<Option<Vec<LinuxHugepageLimit>>, Error> {
    // The page size names a cgroup file (hugetlb.<size>.limit_in_bytes).
    for h in &r.hugepage_limits {
        let digits = h.page_size.trim_end_matches(['K', 'M', 'G', 'T', 'P', 'B']);
        let unit = &h.page_size[digits.len()..];
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || !matches!(unit, "KB" | "MB" | "GB" | "TB" | "PB")
        {
            return Err(bad(
                id,
                "hugepage_limits",
                format!("page size {:?} is not like 2MB or 1GB", h.page_size),
            ));
        }
    }
    if r.hugepage_limits.is_empty() {
        return Ok(None);
    }
    if !opts.hugetlb_available {
        tracing::debug!(
            container = id,
            "no hugetlb cgroup controller: hugepage limits ignored"
        );
        return Ok(None);
    }
    let mut limits = Vec::new();
    for h in &r.hugepage_limits {
        let mut l = LinuxHugepageLimit::default();
        l.set_page_size(h.page_size.clone());
        l.set_limit(i64::try_from(h.limit).map_err(|_| {
            bad(
                id,
                "hugepage_limits",
                format!("limit {} of {} is too large", h.limit, h.page_size),
            )
        })?);
        limits.push(l);
    }
    Ok(Some(limits))
}

/// The cgroup v2 settings, each key a file of the container's cgroup
/// directory; none when there are none, refused on a cgroup v1 host.
fn unified(
    id: &str,
    r: &v1::LinuxContainerResources,
    opts: &SpecOptions,
) -> Result<Option<HashMap<String, String>>, Error> {
    if r.unified.is_empty() {
        return Ok(None);
    }
    if !opts.cgroup_v2 {
        return Err(invalid(
            id,
            format!("{FIELD}.unified"),
            "cgroup v2 settings on a cgroup v1 host",
        ));
    }
    // Each key names a file of the container's cgroup directory.
    if let Some(k) = r.unified.keys().find(|k| {
        k.is_empty() || k.contains('/') || k.starts_with('.') || k.chars().any(char::is_control)
    }) {
        return Err(bad(
            id,
            "unified",
            format!("{k:?} is not a cgroup file name"),
        ));
    }
    Ok(Some(r.unified.clone()))
}

/// The `oomScoreAdj` to ask for: none unless the config sets a non-zero
/// value, and then never lower than `floor` (this process's own score, read
/// from /proc/self/oom_score_adj when `None`): lowering it needs
/// CAP_SYS_RESOURCE, which root may lack, and runc would fail.
pub fn oom_score_adj(id: &str, requested: i64, floor: Option<i32>) -> Result<Option<i32>, Error> {
    if requested == 0 {
        return Ok(None);
    }
    if !(-1000..=1000).contains(&requested) {
        return Err(invalid(
            id,
            format!("{FIELD}.oom_score_adj"),
            format!("{requested} is outside -1000..1000"),
        ));
    }
    let floor = match floor {
        Some(f) => f,
        None => current_oom_score_adj()
            .map_err(|e| io_error(id, "reading", Path::new("/proc/self/oom_score_adj"), e))?,
    };
    Ok(Some((requested as i32).max(floor)))
}

/// This process's OOM score adjustment.
pub fn current_oom_score_adj() -> std::io::Result<i32> {
    let text = std::fs::read_to_string("/proc/self/oom_score_adj")?;
    text.trim()
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The cgroup parent of a pod with no `linux.cgroup_parent`, cgroupfs driver.
pub const DEFAULT_CGROUPFS_PARENT: &str = "/berth";

/// The cgroup parent of a pod with no `linux.cgroup_parent`, systemd driver:
/// where runc itself puts a container that names no slice.
pub const DEFAULT_SYSTEMD_PARENT: &str = "system.slice";

/// The prefix of the scopes of the systemd driver: `berth-<id>.scope`.
const SCOPE_PREFIX: &str = "berth";

const PARENT_FIELD: &str = "linux.cgroup_parent";

/// Checks a cgroup parent for the driver and puts it in the form
/// [`cgroups_path`] takes; empty gives the driver's default.
///
/// systemd: kubelet sends the pod's slice by name
/// (`kubepods-besteffort-pod<uid>.slice`); a path of slices
/// (`/kubepods.slice/kubepods-besteffort.slice/...slice`) stands for its last
/// one, as containerd's `getCgroupsPath` reads it. Anything but a `.slice`
/// unit name is refused (runc would fail on it, or worse, make a cgroup named
/// after it). cgroupfs: an absolute path (a relative one is taken from the
/// root), cleaned, without `..`.
fn parent_for_driver(id: &str, parent: &str, systemd: bool) -> Result<String, Error> {
    let bad = |why: &str| invalid(id, PARENT_FIELD, format!("{parent:?} {why}"));
    if parent.chars().any(|c| c.is_control()) {
        return Err(bad("holds a control character"));
    }
    if systemd {
        let slice = parent
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("");
        if slice.is_empty() {
            return if parent.is_empty() {
                Ok(DEFAULT_SYSTEMD_PARENT.to_string())
            } else {
                Err(bad("names no slice"))
            };
        }
        let stem = slice.strip_suffix(".slice").unwrap_or("");
        let unit_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '\\');
        if stem.is_empty() || !stem.chars().all(unit_char) || slice.len() > 255 {
            return Err(bad(
                "is not a systemd slice name (like kubepods-besteffort-pod<uid>.slice), \
                 as the systemd cgroup driver needs",
            ));
        }
        return Ok(slice.to_string());
    }
    let mut parts = Vec::new();
    for c in parent.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(bad("leads out of the cgroup tree")),
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Ok(DEFAULT_CGROUPFS_PARENT.to_string());
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The pod's cgroup parent, resolved once at RunPodSandbox for the
/// configured driver: `linux.cgroup_parent` checked and normalized, or the
/// driver's default when kubelet sends none — [`DEFAULT_CGROUPFS_PARENT`]
/// for cgroupfs, [`DEFAULT_SYSTEMD_PARENT`] for systemd. (containerd leaves
/// `cgroupsPath` unset then, and runc picks `/<id>` or `system.slice`;
/// berth keeps its pods together under `/berth` with cgroupfs and takes
/// runc's `system.slice` with systemd.) Store it as
/// [`SandboxInfo::cgroup_parent`](crate::SandboxInfo) and in
/// [`PauseRequest::cgroup_parent`](crate::PauseRequest): the pause and every
/// container of the pod are then siblings under it.
pub fn pod_cgroup_parent(
    pod_id: &str,
    config: &v1::PodSandboxConfig,
    opts: &SpecOptions,
) -> Result<String, Error> {
    let parent = config
        .linux
        .as_ref()
        .map(|l| l.cgroup_parent.as_str())
        .unwrap_or("");
    parent_for_driver(pod_id, parent, opts.cgroup_driver_systemd)
}

/// The cgroups path of a container (or pause) `id` under a parent from
/// [`pod_cgroup_parent`]: `<parent>/<id>` for cgroupfs, and
/// `<slice>:berth:<id>` for systemd (runc's `slice:prefix:name`, the scope
/// `berth-<id>.scope` in that slice, as containerd's `cri-containerd`). An
/// empty parent means the driver's default. A parent that does not fit the
/// driver is refused (see [`pod_cgroup_parent`]).
pub fn cgroups_path(parent: &str, id: &str, systemd: bool) -> Result<String, Error> {
    let parent = parent_for_driver(id, parent, systemd)?;
    Ok(if systemd {
        format!("{parent}:{SCOPE_PREFIX}:{id}")
    } else {
        format!("{parent}/{id}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SpecOptions {
        SpecOptions {
            swap_available: true,
            hugetlb_available: true,
            ..Default::default()
        }
    }

    #[test]
    fn empty_resources_set_nothing() {
        let r = linux_resources("c", &Default::default(), &opts()).unwrap();
        assert_eq!(r, LinuxResources::default());
    }

    #[test]
    fn full_mapping() {
        let r = v1::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            cpuset_cpus: "0-1".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![v1::HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            ..Default::default()
        };
        let mut o = opts();
        o.pids_limit = Some(1024);
        let out = linux_resources("c", &r, &o).unwrap();
        let cpu = out.cpu().clone().unwrap();
        assert_eq!(cpu.period(), Some(100_000));
        assert_eq!(cpu.quota(), Some(50_000));
        assert_eq!(cpu.shares(), Some(512));
        assert_eq!(cpu.cpus().as_deref(), Some("0-1"));
        assert_eq!(cpu.mems().as_deref(), Some("0"));
        let mem = out.memory().unwrap();
        assert_eq!(mem.limit(), Some(64 << 20));
        // No swap limit given: swap = limit.
        assert_eq!(mem.swap(), Some(64 << 20));
        let h = out.hugepage_limits().clone().unwrap();
        assert_eq!(h[0].page_size(), "2MB");
        assert_eq!(h[0].limit(), 4 << 20);
        assert_eq!(out.pids().unwrap().limit(), 1024);
    }

    #[test]
    fn swap_limit_and_availability() {
        let r = v1::LinuxContainerResources {
            memory_limit_in_bytes: 100,
            memory_swap_limit_in_bytes: 300,
            ..Default::default()
        };
        let out = linux_resources("c", &r, &opts()).unwrap();
        assert_eq!(out.memory().unwrap().swap(), Some(300));
        let mut o = opts();
        o.swap_available = false;
        let out = linux_resources("c", &r, &o).unwrap();
        assert_eq!(out.memory().unwrap().swap(), None);
        assert_eq!(out.memory().unwrap().limit(), Some(100));
    }

    #[test]
    fn hugepages_dropped_without_controller() {
        let r = v1::LinuxContainerResources {
            hugepage_limits: vec![v1::HugepageLimit {
                page_size: "1GB".into(),
                limit: 0,
            }],
            ..Default::default()
        };
        let mut o = opts();
        o.hugetlb_available = false;
        assert!(linux_resources("c", &r, &o)
            .unwrap()
            .hugepage_limits()
            .is_none());
    }

    #[test]
    fn unified_needs_v2() {
        let mut r = v1::LinuxContainerResources::default();
        r.unified.insert("memory.high".into(), "1000000".into());
        let e = linux_resources("c", &r, &opts()).unwrap_err();
        assert!(e.to_string().contains("unified"), "{e}");
        let mut o = opts();
        o.cgroup_v2 = true;
        let out = linux_resources("c", &r, &o).unwrap();
        assert_eq!(out.unified().as_ref().unwrap()["memory.high"], "1000000");
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let res = |f: fn(&mut v1::LinuxContainerResources)| {
            let mut r = v1::LinuxContainerResources::default();
            f(&mut r);
            r
        };
        for (r, field) in [
            // Before, all of these reached runc (or the kernel) as they were.
            (res(|r| r.cpu_shares = 1), "cpu_shares"),
            (res(|r| r.cpu_shares = 262_145), "cpu_shares"),
            (res(|r| r.cpu_period = 999), "cpu_period"),
            (res(|r| r.cpu_period = 1_000_001), "cpu_period"),
            (res(|r| r.cpu_quota = 999), "cpu_quota"),
            (res(|r| r.cpu_quota = -2), "cpu_quota"),
            (res(|r| r.cpuset_cpus = "0-1; x".into()), "cpuset_cpus"),
            (res(|r| r.cpuset_mems = "../".into()), "cpuset_mems"),
            (
                res(|r| {
                    r.memory_limit_in_bytes = 100;
                    r.memory_swap_limit_in_bytes = 50
                }),
                "memory_swap_limit_in_bytes",
            ),
            // Before, silently i64::MAX.
            (
                res(|r| {
                    r.hugepage_limits = vec![v1::HugepageLimit {
                        page_size: "2MB".into(),
                        limit: u64::MAX,
                    }]
                }),
                "hugepage_limits",
            ),
            (
                res(|r| {
                    r.hugepage_limits = vec![v1::HugepageLimit {
                        page_size: "../../x".into(),
                        limit: 1,
                    }]
                }),
                "hugepage_limits",
            ),
            (
                res(|r| {
                    r.hugepage_limits = vec![v1::HugepageLimit {
                        page_size: String::new(),
                        limit: 1,
                    }]
                }),
                "hugepage_limits",
            ),
        ] {
            let e = linux_resources("c4", &r, &opts()).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{field}");
            let msg = e.to_string();
            assert!(msg.contains(field) && msg.contains("c4"), "{msg}");
        }
        let mut o = opts();
        o.cgroup_v2 = true;
        for k in ["../../cgroup.procs", "", ".x"] {
            let mut r = v1::LinuxContainerResources::default();
            r.unified.insert(k.into(), "1".into());
            let e = linux_resources("c", &r, &o).unwrap_err();
            assert!(e.to_string().contains("unified"), "{e}");
        }
        // The edges are fine.
        let r = v1::LinuxContainerResources {
            cpu_shares: 2,
            cpu_period: 1_000,
            cpu_quota: -1,
            memory_limit_in_bytes: 100,
            memory_swap_limit_in_bytes: 100,
            cpuset_cpus: "0-3,7".into(),
            ..Default::default()
        };
        let out = linux_resources("c", &r, &opts()).unwrap();
        assert_eq!(out.cpu().as_ref().unwrap().quota(), Some(-1));
    }

    #[test]
    fn negative_values_are_invalid() {
        let r = v1::LinuxContainerResources {
            cpu_shares: -2,
            ..Default::default()
        };
        let e = linux_resources("c", &r, &opts()).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("cpu_shares"));
    }

    #[test]
    fn oom_score_adj_is_clamped_up_and_only_set_when_asked() {
        assert_eq!(oom_score_adj("c", 0, Some(0)).unwrap(), None);
        assert_eq!(oom_score_adj("c", 0, Some(500)).unwrap(), None);
        assert_eq!(oom_score_adj("c", 100, Some(0)).unwrap(), Some(100));
        assert_eq!(oom_score_adj("c", -998, Some(0)).unwrap(), Some(0));
        assert_eq!(oom_score_adj("c", -998, Some(-999)).unwrap(), Some(-998));
        assert_eq!(oom_score_adj("c", 200, Some(500)).unwrap(), Some(500));
        assert!(oom_score_adj("c", 1001, Some(0)).is_err());
        // Live floor: never below this process's own.
        let own = current_oom_score_adj().unwrap();
        assert_eq!(
            oom_score_adj("c", -1000, None).unwrap(),
            Some(own.max(-1000))
        );
    }

    #[test]
    fn cgroups_paths() {
        let path = |p: &str, systemd| cgroups_path(p, "abc", systemd).unwrap();
        assert_eq!(
            path("/kubepods/burstable/pod1", false),
            "/kubepods/burstable/pod1/abc"
        );
        assert_eq!(path("/kubepods/", false), "/kubepods/abc");
        assert_eq!(path("", false), "/berth/abc");
        assert_eq!(path("kubepods", false), "/kubepods/abc");
        assert_eq!(path("/a//./b", false), "/a/b/abc");
        assert_eq!(
            path("kubepods-burstable-pod1.slice", true),
            "kubepods-burstable-pod1.slice:berth:abc"
        );
        // A path of slices stands for its last one, as containerd reads it.
        assert_eq!(
            path(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice",
                true
            ),
            "kubepods-besteffort-pod1.slice:berth:abc"
        );
        assert_eq!(path("", true), "system.slice:berth:abc");
    }

    #[test]
    fn parents_that_do_not_fit_the_driver_are_refused() {
        for (parent, systemd) in [
            // Before, "podabc:berth:abc": runc fails on it or makes a cgroup named so.
            ("/kubepods/besteffort/podabc", true),
            ("kubepods", true),
            (".slice", true),
            ("a:b.slice", true),
            ("/", true),
            ("/kubepods/../../etc", false),
            ("..", false),
            ("/kube\npods", false),
        ] {
            let e = cgroups_path(parent, "c9", systemd).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{parent}");
            let msg = e.to_string();
            assert!(msg.contains("c9") && msg.contains("cgroup_parent"), "{msg}");
        }
    }

    #[test]
    fn pod_cgroup_parent_per_driver() {
        let pod = |parent: &str| v1::PodSandboxConfig {
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: parent.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let cgroupfs = SpecOptions::default();
        let systemd = SpecOptions {
            cgroup_driver_systemd: true,
            ..Default::default()
        };
        let none = v1::PodSandboxConfig::default();
        assert_eq!(pod_cgroup_parent("p", &none, &cgroupfs).unwrap(), "/berth");
        assert_eq!(
            pod_cgroup_parent("p", &pod(""), &cgroupfs).unwrap(),
            "/berth"
        );
        assert_eq!(
            pod_cgroup_parent("p", &none, &systemd).unwrap(),
            "system.slice"
        );
        assert_eq!(
            pod_cgroup_parent("p", &pod("/kubepods/burstable/pod1/"), &cgroupfs).unwrap(),
            "/kubepods/burstable/pod1"
        );
        assert_eq!(
            pod_cgroup_parent("p", &pod("kubepods-besteffort-pod1.slice"), &systemd).unwrap(),
            "kubepods-besteffort-pod1.slice"
        );
        let e = pod_cgroup_parent("pod7", &pod("/kubepods/pod1"), &systemd).unwrap_err();
        assert!(e.to_string().contains("pod7"), "{e}");
        // The resolved parent gives the same paths again: resolving is idempotent.
        for (p, o) in [("/kubepods/x", &cgroupfs), ("k-p.slice", &systemd)] {
            let once = pod_cgroup_parent("p", &pod(p), o).unwrap();
            assert_eq!(pod_cgroup_parent("p", &pod(&once), o).unwrap(), once);
        }
    }
}
