//! Linux capabilities: names, the default set, add/drop from the CRI security
//! context, and the set this process can hand out (its bounding set).

use std::collections::HashSet;
use std::io;
use std::path::Path;

use cri_api::v1;
use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

use crate::error::{invalid, io_error, Error};

/// Every capability oci-spec knows, by kernel number.
const CAPS: &[(u32, &str, Capability)] = &[
    (0, "CHOWN", Capability::Chown),
    (1, "DAC_OVERRIDE", Capability::DacOverride),
    (2, "DAC_READ_SEARCH", Capability::DacReadSearch),
    (3, "FOWNER", Capability::Fowner),
    (4, "FSETID", Capability::Fsetid),
    (5, "KILL", Capability::Kill),
    (6, "SETGID", Capability::Setgid),
    (7, "SETUID", Capability::Setuid),
    (8, "SETPCAP", Capability::Setpcap),
    (9, "LINUX_IMMUTABLE", Capability::LinuxImmutable),
    (10, "NET_BIND_SERVICE", Capability::NetBindService),
    (11, "NET_BROADCAST", Capability::NetBroadcast),
    (12, "NET_ADMIN", Capability::NetAdmin),
    (13, "NET_RAW", Capability::NetRaw),
    (14, "IPC_LOCK", Capability::IpcLock),
    (15, "IPC_OWNER", Capability::IpcOwner),
    (16, "SYS_MODULE", Capability::SysModule),
    (17, "SYS_RAWIO", Capability::SysRawio),
    (18, "SYS_CHROOT", Capability::SysChroot),
    (19, "SYS_PTRACE", Capability::SysPtrace),
    (20, "SYS_PACCT", Capability::SysPacct),
    (21, "SYS_ADMIN", Capability::SysAdmin),
    (22, "SYS_BOOT", Capability::SysBoot),
    (23, "SYS_NICE", Capability::SysNice),
    (24, "SYS_RESOURCE", Capability::SysResource),
    (25, "SYS_TIME", Capability::SysTime),
    (26, "SYS_TTY_CONFIG", Capability::SysTtyConfig),
    (27, "MKNOD", Capability::Mknod),
    (28, "LEASE", Capability::Lease),
    (29, "AUDIT_WRITE", Capability::AuditWrite),
    (30, "AUDIT_CONTROL", Capability::AuditControl),
    (31, "SETFCAP", Capability::Setfcap),
    (32, "MAC_OVERRIDE", Capability::MacOverride),
    (33, "MAC_ADMIN", Capability::MacAdmin),
    (34, "SYSLOG", Capability::Syslog),
    (35, "WAKE_ALARM", Capability::WakeAlarm),
    (36, "BLOCK_SUSPEND", Capability::BlockSuspend),
    (37, "AUDIT_READ", Capability::AuditRead),
    (38, "PERFMON", Capability::Perfmon),
    (39, "BPF", Capability::Bpf),
    (40, "CHECKPOINT_RESTORE", Capability::CheckpointRestore),
];

/// The capabilities a container gets when it asks for nothing (Docker's and
/// containerd's CRI default set).
pub const DEFAULT_CAPABILITIES: &[Capability] = &[
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// Parses a capability name with or without `CAP_`, in any case.
pub fn parse_capability(name: &str) -> Option<Capability> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    CAPS.iter().find(|(_, n, _)| *n == bare).map(|(_, _, c)| *c)
}

/// The `CAP_…` name of a capability.
pub fn capability_name(cap: Capability) -> String {
    CAPS.iter()
        .find(|(_, _, c)| *c == cap)
        .map(|(_, n, _)| format!("CAP_{n}"))
        .unwrap_or_else(|| format!("{cap:?}"))
}

/// The capabilities in a `/proc/<pid>/status` hex mask (e.g. `CapBnd`).
pub fn capabilities_from_mask(mask: u64) -> Vec<Capability> {
    CAPS.iter()
        .filter(|(bit, _, _)| mask & (1u64 << bit) != 0)
        .map(|(_, _, c)| *c)
        .collect()
}

/// The bounding set of this process: everything runc, started by us, can
/// grant. Root here may lack some (CAP_SYS_RESOURCE), so "ALL" means this.
pub fn current_capabilities() -> io::Result<Vec<Capability>> {
    use berth_host::Host;
    let status = berth_host::RealHost
        .read(Path::new("/proc/self/status"))
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "/proc/self/status"))?;
    let mask = berth_host::bounding_set(&status)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no CapBnd line"))?;
    Ok(capabilities_from_mask(mask))
}

/// `all` as given, or this process's bounding set.
pub(crate) fn all_capabilities(
    id: &str,
    all: Option<&[Capability]>,
) -> Result<Vec<Capability>, Error> {
    match all {
        Some(all) => Ok(all.to_vec()),
        None => current_capabilities().map_err(|e| {
            io_error(
                id,
                "reading the bounding set in",
                "/proc/self/status".as_ref(),
                e,
            )
        }),
    }
}

fn parse_list(id: &str, field: &str, names: &[String]) -> Result<(bool, Vec<Capability>), Error> {
    let mut all = false;
    let mut caps = Vec::new();
    for name in names {
        if name.trim().eq_ignore_ascii_case("ALL") {
            all = true;
        } else {
            caps.push(
                parse_capability(name)
                    .ok_or_else(|| invalid(id, field, format!("unknown capability {name:?}")))?,
            );
        }
    }
    Ok((all, caps))
}

/// The process capabilities for a container: the default set (or, when
/// privileged, `all`), with the security context's add and drop lists applied
/// in containerd's order — add ALL, drop ALL, add each, drop each — so that
/// `add: [ALL], drop: [CHOWN]` is everything but CAP_CHOWN. Ambient
/// capabilities join every set.
pub(crate) fn capabilities(
    id: &str,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    all: &[Capability],
) -> Result<LinuxCapabilities, Error> {
    let mut set: HashSet<Capability> = DEFAULT_CAPABILITIES.iter().copied().collect();
    let mut ambient = HashSet::new();
    let field = "linux.security_context.capabilities";
    if let Some(c) = sc.and_then(|sc| sc.capabilities.as_ref()) {
        let (add_all, add) = parse_list(
            id,
            &format!("{field}.add_capabilities"),
            &c.add_capabilities,
        )?;
        let (drop_all, drop) = parse_list(
            id,
            &format!("{field}.drop_capabilities"),
            &c.drop_capabilities,
        )?;
        let (_, amb) = parse_list(
            id,
            &format!("{field}.add_ambient_capabilities"),
            &c.add_ambient_capabilities,
        )?;
        if add_all {
            set.extend(all.iter().copied());
        }
        if drop_all {
            set.clear();
        }
        set.extend(add);
        for cap in drop {
            set.remove(&cap);
        }
        ambient.extend(amb);
    }
    if sc.is_some_and(|sc| sc.privileged) {
        set = all.iter().copied().collect();
    }
    set.extend(ambient.iter().copied());
    let caps: Capabilities = set;
    let mut out = LinuxCapabilities::default();
    out.set_bounding(Some(caps.clone()));
    out.set_effective(Some(caps.clone()));
    out.set_permitted(Some(caps));
    out.set_inheritable(Some(ambient.clone()));
    out.set_ambient(Some(ambient));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(add: &[&str], drop: &[&str]) -> v1::LinuxContainerSecurityContext {
        v1::LinuxContainerSecurityContext {
            capabilities: Some(v1::Capability {
                add_capabilities: add.iter().map(|s| s.to_string()).collect(),
                drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
                add_ambient_capabilities: vec![],
            }),
            ..Default::default()
        }
    }

    fn all() -> Vec<Capability> {
        CAPS.iter().map(|(_, _, c)| *c).collect()
    }

    fn bounding(c: &LinuxCapabilities) -> HashSet<Capability> {
        c.bounding().clone().unwrap()
    }

    #[test]
    fn names_parse_with_or_without_prefix() {
        assert_eq!(parse_capability("NET_ADMIN"), Some(Capability::NetAdmin));
        assert_eq!(
            parse_capability("CAP_NET_ADMIN"),
            Some(Capability::NetAdmin)
        );
        assert_eq!(
            parse_capability("cap_sys_admin"),
            Some(Capability::SysAdmin)
        );
        assert_eq!(parse_capability("BOGUS"), None);
        assert_eq!(capability_name(Capability::SysAdmin), "CAP_SYS_ADMIN");
    }

    #[test]
    fn mask_decodes_bits() {
        // This machine's root: everything up to CHECKPOINT_RESTORE but SYS_RESOURCE.
        let caps = capabilities_from_mask(0x1fffeffffff);
        assert_eq!(caps.len(), 40);
        assert!(!caps.contains(&Capability::SysResource));
        assert!(caps.contains(&Capability::CheckpointRestore));
        assert_eq!(capabilities_from_mask(1 << 21), vec![Capability::SysAdmin]);
    }

    #[test]
    fn no_security_context_gives_the_default_set() {
        let c = capabilities("c", None, &all()).unwrap();
        let want: HashSet<_> = DEFAULT_CAPABILITIES.iter().copied().collect();
        assert_eq!(bounding(&c), want);
        assert_eq!(c.effective().clone().unwrap(), want);
        assert_eq!(c.permitted().clone().unwrap(), want);
        assert!(c.ambient().clone().unwrap().is_empty());
        assert!(c.inheritable().clone().unwrap().is_empty());
    }

    #[test]
    fn add_and_drop() {
        let c = capabilities(
            "c",
            Some(&sc(&["NET_ADMIN", "CAP_SYS_TIME"], &["chown"])),
            &all(),
        )
        .unwrap();
        let b = bounding(&c);
        assert!(b.contains(&Capability::NetAdmin));
        assert!(b.contains(&Capability::SysTime));
        assert!(!b.contains(&Capability::Chown));
        assert!(b.contains(&Capability::Kill));
    }

    #[test]
    fn drop_all_then_add() {
        let c = capabilities("c", Some(&sc(&["NET_BIND_SERVICE"], &["ALL"])), &all()).unwrap();
        assert_eq!(
            bounding(&c),
            [Capability::NetBindService].into_iter().collect()
        );
        let c = capabilities("c", Some(&sc(&[], &["all"])), &all()).unwrap();
        assert!(bounding(&c).is_empty());
    }

    #[test]
    fn add_all_then_drop() {
        let some = vec![Capability::Chown, Capability::SysAdmin, Capability::Kill];
        let c = capabilities("c", Some(&sc(&["ALL"], &["CHOWN"])), &some).unwrap();
        let b = bounding(&c);
        assert!(b.contains(&Capability::SysAdmin));
        assert!(!b.contains(&Capability::Chown));
        // The default set stays too.
        assert!(b.contains(&Capability::NetRaw));
    }

    #[test]
    fn unknown_name_is_invalid_argument() {
        let e = capabilities("c9", Some(&sc(&["NET_WIZARD"], &[])), &all()).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains("c9") && msg.contains("add_capabilities") && msg.contains("NET_WIZARD"),
            "{msg}"
        );
    }

    #[test]
    fn privileged_gets_all() {
        let mut s = sc(&[], &["ALL"]);
        s.privileged = true;
        let some = vec![Capability::Chown, Capability::SysAdmin];
        let c = capabilities("c", Some(&s), &some).unwrap();
        assert_eq!(bounding(&c), some.into_iter().collect());
    }

    #[test]
    fn ambient_joins_every_set() {
        let mut s = sc(&[], &["ALL"]);
        s.capabilities.as_mut().unwrap().add_ambient_capabilities = vec!["NET_BIND_SERVICE".into()];
        let c = capabilities("c", Some(&s), &all()).unwrap();
        let one: HashSet<_> = [Capability::NetBindService].into_iter().collect();
        assert_eq!(bounding(&c), one);
        assert_eq!(c.ambient().clone().unwrap(), one);
        assert_eq!(c.inheritable().clone().unwrap(), one);
        assert_eq!(c.permitted().clone().unwrap(), one);
    }
}
