//! Seccomp: berth's own RuntimeDefault profile (an allow-list: what ordinary
//! programs need, plus what each granted capability makes meaningful; all
//! else fails with EPERM), Unconfined, and Localhost profiles loaded from a
//! JSON file.
//!
//! Names the host's libseccomp does not know are skipped by runc and crun,
//! so the table may name syscalls newer than the host.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cri_api::v1;
use oci_spec::runtime::{
    Arch, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompOperator, LinuxSyscall,
};

use crate::error::{invalid, invalid_path, io_error, path_error, Error};

/// Files, directories and file descriptors.
#[rustfmt::skip]
const FILES: &[&str] = &[
    "access", "cachestat", "chdir", "chmod", "chown", "chown32", "close", "close_range",
    "copy_file_range", "creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64",
    "fadvise64_64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchmodat2",
    "fchown", "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr",
    "flock", "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64",
    "fsync", "ftruncate", "ftruncate64", "futimesat", "getcwd", "getdents", "getdents64",
    "getxattr", "getxattrat", "inotify_add_watch", "inotify_init", "inotify_init1",
    "inotify_rm_watch", "ioctl", "lchown", "lchown32", "lgetxattr", "link", "linkat", "listxattr",
    "listxattrat", "llistxattr", "_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat",
    "lstat64", "mkdir", "mkdirat", "mknod", "mknodat", "name_to_handle_at", "newfstatat", "open",
    "openat", "openat2", "pipe", "pipe2", "pread64", "preadv", "preadv2", "pwrite64", "pwritev",
    "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "removexattr",
    "removexattrat", "rename", "renameat", "renameat2", "rmdir", "sendfile", "sendfile64",
    "setxattr", "setxattrat", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink",
    "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate", "truncate64", "umask",
    "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes", "vmsplice", "write",
    "writev",
];

/// Processes, threads, ids and limits.
#[rustfmt::skip]
const PROCESSES: &[&str] = &[
    "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork", "futex",
    "futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "get_robust_list",
    "get_thread_area", "getcpu", "getegid", "getegid32", "geteuid", "geteuid32", "getgid",
    "getgid32", "getgroups", "getgroups32", "getpgid", "getpgrp", "getpid", "getppid",
    "getpriority", "getrandom", "getresgid", "getresgid32", "getresuid", "getresuid32",
    "getrlimit", "getrusage", "getsid", "gettid", "getuid", "getuid32", "ioprio_get", "ioprio_set",
    "kill", "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "membarrier",
    "pidfd_open", "pidfd_send_signal", "prctl", "prlimit64", "process_mrelease",
    "process_vm_readv", "process_vm_writev", "ptrace", "restart_syscall", "rseq", "seccomp",
    "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsgid32", "setfsuid",
    "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setpgid", "setpriority",
    "setregid", "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid",
    "setreuid32", "setrlimit", "setsid", "setuid", "setuid32", "sysinfo", "tgkill", "times",
    "tkill", "ugetrlimit", "uname", "vfork", "wait4", "waitid", "waitpid",
];

/// Memory.
#[rustfmt::skip]
const MEMORY: &[&str] = &[
    "brk", "madvise", "map_shadow_stack", "memfd_create", "memfd_secret", "mincore", "mlock",
    "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mremap", "mseal", "msync", "munlock",
    "munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages",
];

/// Signals, clocks, timers, scheduling and waiting for events.
#[rustfmt::skip]
const SIGNALS_TIME_EVENTS: &[&str] = &[
    "adjtimex", "alarm", "clock_adjtime", "clock_adjtime64", "clock_getres", "clock_getres_time64",
    "clock_gettime", "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64",
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2",
    "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "getitimer", "gettimeofday",
    "io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64", "io_setup",
    "io_submit", "nanosleep", "pause", "poll", "ppoll", "ppoll_time64", "pselect6",
    "pselect6_time64", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo", "sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity",
    "sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
    "sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr", "sched_setparam",
    "sched_setscheduler", "sched_yield", "select", "_newselect", "setitimer", "sigaltstack",
    "signalfd", "signalfd4", "sigprocmask", "sigreturn", "time", "timer_create", "timer_delete",
    "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64",
    "timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
    "timerfd_settime64",
];

/// Sockets (but `socket` itself, which is filtered) and System V / POSIX IPC.
#[rustfmt::skip]
const NETWORK_IPC: &[&str] = &[
    "accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "ipc",
    "listen", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
    "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd",
    "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "semctl", "semget", "semop",
    "semtimedop", "semtimedop_time64", "send", "sendmmsg", "sendmsg", "sendto", "setsockopt",
    "shmat", "shmctl", "shmdt", "shmget", "shutdown", "socketcall", "socketpair",
];

/// Syscalls a capability makes meaningful, allowed only when the container
/// holds it.
#[rustfmt::skip]
const BY_CAPABILITY: &[(Capability, &[&str])] = &[
    (Capability::DacReadSearch, &["open_by_handle_at"]),
    (Capability::SysAdmin, &[
        "bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen", "fspick",
        "lookup_dcookie", "mount", "mount_setattr", "move_mount", "open_tree", "perf_event_open",
        "quotactl", "quotactl_fd", "setdomainname", "sethostname", "setns", "syslog", "umount",
        "umount2", "unshare",
    ]),
    (Capability::SysBoot, &["reboot"]),
    (Capability::SysChroot, &["chroot"]),
    (Capability::SysModule, &["delete_module", "finit_module", "init_module"]),
    (Capability::SysPacct, &["acct"]),
    (Capability::SysPtrace, &[
        "kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev",
        "ptrace",
    ]),
    (Capability::SysRawio, &["ioperm", "iopl"]),
    (Capability::SysTime, &["clock_settime", "clock_settime64", "settimeofday", "stime"]),
    (Capability::SysTtyConfig, &["vhangup"]),
    (Capability::SysNice, &["get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"]),
    (Capability::Syslog, &["syslog"]),
    (Capability::Bpf, &["bpf"]),
    (Capability::Perfmon, &["perf_event_open"]),
];

/// The namespace flags of clone(2) that need CAP_SYS_ADMIN: CLONE_NEWNS,
/// NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID and NEWNET.
const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// `personality(2)` values a program may set: PER_LINUX, PER_LINUX32,
/// UNAME26, UNAME26|PER_LINUX32, and the query 0xffffffff.
const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// AF_VSOCK: the one socket family a container may not open.
const AF_VSOCK: u64 = 40;

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

fn rule(names: &[&str], action: LinuxSeccompAction, args: Vec<LinuxSeccompArg>) -> LinuxSyscall {
    let mut s = LinuxSyscall::default();
    s.set_names(names.iter().map(|n| n.to_string()).collect());
    s.set_action(action);
    if !args.is_empty() {
        s.set_args(Some(args));
    }
    s
}

fn arg(index: usize, value: u64, op: LinuxSeccompOperator) -> LinuxSeccompArg {
    let b = LinuxSeccompArgBuilder::default()
        .index(index)
        .value(value)
        .op(op);
    let b = if op == LinuxSeccompOperator::ScmpCmpMaskedEq {
        b.value_two(0u64)
    } else {
        b
    };
    // Every field is set: building cannot fail.
    b.build().unwrap_or_default()
}

/// The architectures the profile covers: the native one and those it can
/// run binaries of.
fn architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else if cfg!(target_arch = "s390x") {
        vec![Arch::ScmpArchS390x, Arch::ScmpArchS390]
    } else if cfg!(target_arch = "riscv64") {
        vec![Arch::ScmpArchRiscv64]
    } else {
        vec![Arch::ScmpArchNative]
    }
}

/// Syscalls only some architectures have.
fn arch_syscalls() -> &'static [&'static str] {
    if cfg!(target_arch = "x86_64") {
        &["arch_prctl", "modify_ldt"]
    } else if cfg!(any(target_arch = "aarch64", target_arch = "arm")) {
        &[
            "arm_fadvise64_64",
            "arm_sync_file_range",
            "breakpoint",
            "cacheflush",
            "set_tls",
            "sync_file_range2",
        ]
    } else if cfg!(target_arch = "s390x") {
        &[
            "s390_pci_mmio_read",
            "s390_pci_mmio_write",
            "s390_runtime_instr",
        ]
    } else if cfg!(target_arch = "riscv64") {
        &["riscv_flush_icache"]
    } else if cfg!(target_arch = "powerpc64") {
        &["swapcontext", "sync_file_range2"]
    } else {
        &[]
    }
}

/// berth's RuntimeDefault profile for a process holding `caps` (its bounding
/// set): everything not allowed fails with EPERM.
pub fn default_profile(caps: &HashSet<Capability>) -> LinuxSeccomp {
    use LinuxSeccompAction::{ScmpActAllow as Allow, ScmpActErrno as Errno};
    use LinuxSeccompOperator::{ScmpCmpEq as Eq, ScmpCmpMaskedEq as MaskedEq, ScmpCmpNe as Ne};

    let mut base: Vec<&str> = [FILES, PROCESSES, MEMORY, SIGNALS_TIME_EVENTS, NETWORK_IPC].concat();
    base.extend_from_slice(arch_syscalls());
    let mut syscalls = vec![rule(&base, Allow, vec![])];
    syscalls.push(rule(&["socket"], Allow, vec![arg(0, AF_VSOCK, Ne)]));
    for p in PERSONALITIES {
        syscalls.push(rule(&["personality"], Allow, vec![arg(0, *p, Eq)]));
    }
    for (cap, names) in BY_CAPABILITY {
        if caps.contains(cap) {
            syscalls.push(rule(names, Allow, vec![]));
        }
    }
    if !caps.contains(&Capability::SysAdmin) {
        // clone without namespace flags; clone3 cannot be filtered on its
        // flags, so it says ENOSYS and the C library falls back to clone.
        let flags_arg = if cfg!(target_arch = "s390x") { 1 } else { 0 };
        syscalls.push(rule(
            &["clone"],
            Allow,
            vec![arg(flags_arg, CLONE_NAMESPACE_FLAGS, MaskedEq)],
        ));
        let mut clone3 = rule(&["clone3"], Errno, vec![]);
        clone3.set_errno_ret(Some(ENOSYS));
        syscalls.push(clone3);
    }

    let mut profile = LinuxSeccomp::default();
    profile.set_default_action(Errno);
    profile.set_default_errno_ret(Some(EPERM));
    profile.set_architectures(Some(architectures()));
    profile.set_syscalls(Some(syscalls));
    profile
}

/// The largest Localhost profile read (Docker's own profile is ~20 KiB).
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// Loads a Localhost profile: an OCI `LinuxSeccomp` as JSON, from a regular
/// file of at most [`MAX_PROFILE_BYTES`]. It is opened without blocking (a
/// FIFO would hold the caller forever) and checked with fstat after the open
/// (no race with a rename), so a device such as /dev/zero or a FIFO is
/// refused before anything is read, and the read is bounded whatever the
/// file does meanwhile.
pub fn load_profile(id: &str, path: &Path) -> Result<LinuxSeccomp, Error> {
    const FIELD: &str = "linux.security_context.seccomp.localhost_ref";
    if !path.is_absolute() {
        return Err(invalid_path(id, FIELD, path, "is not an absolute path"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| path_error(id, FIELD, "opening the seccomp profile", path, e))?;
    let md = file
        .metadata()
        .map_err(|e| io_error(id, "inspecting the seccomp profile", path, e))?;
    if !md.file_type().is_file() {
        return Err(invalid_path(id, FIELD, path, "is not a regular file"));
    }
    if md.len() > MAX_PROFILE_BYTES {
        return Err(invalid_path(
            id,
            FIELD,
            path,
            format!("is larger than {MAX_PROFILE_BYTES} bytes"),
        ));
    }
    let mut text = Vec::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| io_error(id, "reading the seccomp profile", path, e))?;
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(invalid_path(
            id,
            FIELD,
            path,
            format!("is larger than {MAX_PROFILE_BYTES} bytes"),
        ));
    }
    serde_json::from_slice(&text)
        .map_err(|e| invalid_path(id, FIELD, path, format!("is not a seccomp profile: {e}")))
}

/// What the container asked for.
enum Profile {
    Unconfined,
    RuntimeDefault,
    Localhost(String),
}

fn requested(
    id: &str,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    default: bool,
) -> Result<Profile, Error> {
    use v1::security_profile::ProfileType;
    if let Some(sp) = sc.and_then(|sc| sc.seccomp.as_ref()) {
        return match ProfileType::try_from(sp.profile_type) {
            Ok(ProfileType::Unconfined) => Ok(Profile::Unconfined),
            Ok(ProfileType::RuntimeDefault) => Ok(Profile::RuntimeDefault),
            Ok(ProfileType::Localhost) => Ok(Profile::Localhost(
                sp.localhost_ref
                    .trim_start_matches("localhost/")
                    .to_string(),
            )),
            Err(_) => Err(invalid(
                id,
                "linux.security_context.seccomp.profile_type",
                format!("unknown profile type {}", sp.profile_type),
            )),
        };
    }
    #[allow(deprecated)]
    let path = sc.map(|sc| sc.seccomp_profile_path.as_str()).unwrap_or("");
    match path {
        "" if default => Ok(Profile::RuntimeDefault),
        "" | "unconfined" => Ok(Profile::Unconfined),
        "runtime/default" | "docker/default" => Ok(Profile::RuntimeDefault),
        p => match p.strip_prefix("localhost/") {
            Some(file) => Ok(Profile::Localhost(file.to_string())),
            None => Err(invalid(
                id,
                "linux.security_context.seccomp_profile_path",
                format!("unknown profile {p:?}"),
            )),
        },
    }
}

/// The container's seccomp filter, `None` for none. Privileged containers get
/// none. `caps` is the container's bounding set; `available` says whether the
/// host can filter at all; `default` whether RuntimeDefault applies to a
/// container that names no profile.
pub(crate) fn seccomp(
    id: &str,
    sc: Option<&v1::LinuxContainerSecurityContext>,
    caps: &HashSet<Capability>,
    available: bool,
    default: bool,
) -> Result<Option<LinuxSeccomp>, Error> {
    if sc.is_some_and(|sc| sc.privileged) {
        return Ok(None);
    }
    let profile = requested(id, sc, default)?;
    if !available && !matches!(profile, Profile::Unconfined) {
        return Err(invalid(
            id,
            "linux.security_context.seccomp",
            "seccomp is not supported on this host",
        ));
    }
    match profile {
        Profile::Unconfined => Ok(None),
        Profile::RuntimeDefault => Ok(Some(default_profile(caps))),
        Profile::Localhost(path) => load_profile(id, Path::new(&path)).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(p: &LinuxSeccomp) -> HashSet<String> {
        p.syscalls()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|s| s.action() == LinuxSeccompAction::ScmpActAllow && s.args().is_none())
            .flat_map(|s| s.names().clone())
            .collect()
    }

    fn with_args<'a>(p: &'a LinuxSeccomp, name: &str) -> Vec<&'a LinuxSyscall> {
        p.syscalls()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|s| s.names().iter().any(|n| n == name))
            .collect()
    }

    fn default_caps() -> HashSet<Capability> {
        crate::caps::DEFAULT_CAPABILITIES.iter().copied().collect()
    }

    #[test]
    fn default_profile_allows_what_shells_and_ping_need() {
        let p = default_profile(&default_caps());
        assert_eq!(p.default_action(), LinuxSeccompAction::ScmpActErrno);
        assert_eq!(p.default_errno_ret(), Some(EPERM));
        let a = allowed(&p);
        for name in [
            "read",
            "write",
            "openat",
            "close",
            "execve",
            "wait4",
            "vfork",
            "fork",
            "exit_group",
            "rt_sigaction",
            "rt_sigreturn",
            "nanosleep",
            "clock_nanosleep",
            "getuid",
            "getgroups",
            "setsockopt",
            "sendto",
            "recvmsg",
            "recvfrom",
            "poll",
            "ioctl",
            "brk",
            "mmap",
            "newfstatat",
            "statx",
            "getdents64",
            "fcntl",
            "dup2",
            "pipe2",
            "chdir",
            "uname",
            "arch_prctl",
            "set_tid_address",
            "getrandom",
            "prlimit64",
            "rseq",
            "futex",
        ] {
            assert!(a.contains(name), "{name} is not allowed");
        }
        // socket: everything but AF_VSOCK.
        let socket = with_args(&p, "socket");
        assert_eq!(socket.len(), 1);
        let args = socket[0].args().clone().unwrap();
        assert_eq!(
            (args[0].index(), args[0].value(), args[0].op()),
            (0, AF_VSOCK, LinuxSeccompOperator::ScmpCmpNe)
        );
        // clone: only without namespace flags; clone3 says ENOSYS.
        let clone = with_args(&p, "clone");
        assert_eq!(clone.len(), 1);
        assert_eq!(
            clone[0].args().clone().unwrap()[0].value(),
            CLONE_NAMESPACE_FLAGS
        );
        let clone3 = with_args(&p, "clone3");
        assert_eq!(clone3[0].action(), LinuxSeccompAction::ScmpActErrno);
        assert_eq!(clone3[0].errno_ret(), Some(ENOSYS));
        // Capability-gated calls are absent without the capability.
        for name in [
            "mount",
            "unshare",
            "setns",
            "reboot",
            "init_module",
            "bpf",
            "settimeofday",
            "kcmp",
        ] {
            assert!(with_args(&p, name).is_empty(), "{name} is allowed");
        }
        assert!(a.contains("chroot"), "SYS_CHROOT is in the default set");
    }

    #[test]
    fn sys_admin_opens_namespaces_and_mounts() {
        let mut caps = default_caps();
        caps.insert(Capability::SysAdmin);
        let p = default_profile(&caps);
        let a = allowed(&p);
        for name in [
            "mount",
            "umount2",
            "unshare",
            "setns",
            "clone",
            "clone3",
            "sethostname",
        ] {
            assert!(a.contains(name), "{name}");
        }
        assert!(with_args(&p, "clone3")
            .iter()
            .all(|s| s.action() == LinuxSeccompAction::ScmpActAllow));
    }

    #[test]
    fn profile_serializes_as_oci_json() {
        let p = default_profile(&default_caps());
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(v["defaultErrnoRet"], 1);
        assert_eq!(v["architectures"][0], "SCMP_ARCH_X86_64");
        assert!(v["syscalls"].as_array().unwrap().len() > 5);
    }

    fn sc(t: v1::security_profile::ProfileType, r: &str) -> v1::LinuxContainerSecurityContext {
        v1::LinuxContainerSecurityContext {
            seccomp: Some(v1::SecurityProfile {
                profile_type: t as i32,
                localhost_ref: r.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn profile_selection() {
        use v1::security_profile::ProfileType;
        let caps = default_caps();
        let rd = sc(ProfileType::RuntimeDefault, "");
        assert!(seccomp("c", Some(&rd), &caps, true, false)
            .unwrap()
            .is_some());
        let un = sc(ProfileType::Unconfined, "");
        assert!(seccomp("c", Some(&un), &caps, true, true)
            .unwrap()
            .is_none());
        // Nothing named: the host default decides.
        assert!(seccomp("c", None, &caps, true, false).unwrap().is_none());
        assert!(seccomp("c", None, &caps, true, true).unwrap().is_some());
        // Privileged: never.
        let mut p = rd.clone();
        p.privileged = true;
        assert!(seccomp("c", Some(&p), &caps, true, true).unwrap().is_none());
        // Deprecated path field.
        #[allow(deprecated)]
        let old = v1::LinuxContainerSecurityContext {
            seccomp_profile_path: "runtime/default".into(),
            ..Default::default()
        };
        assert!(seccomp("c", Some(&old), &caps, true, false)
            .unwrap()
            .is_some());
        // No seccomp on the host: asking for a profile fails, unconfined works.
        assert!(seccomp("c", Some(&rd), &caps, false, false).is_err());
        assert!(seccomp("c", Some(&un), &caps, false, false)
            .unwrap()
            .is_none());
    }

    #[test]
    fn localhost_profiles() {
        use v1::security_profile::ProfileType;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("profile.json");
        std::fs::write(
            &file,
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
        )
        .unwrap();
        let caps = default_caps();
        let p = seccomp(
            "c",
            Some(&sc(ProfileType::Localhost, file.to_str().unwrap())),
            &caps,
            true,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.default_action(), LinuxSeccompAction::ScmpActAllow);
        assert_eq!(
            p.syscalls().as_ref().unwrap()[0].names(),
            &vec!["mkdir".to_string()]
        );

        let missing = dir.path().join("nope.json");
        let e = seccomp(
            "c5",
            Some(&sc(ProfileType::Localhost, missing.to_str().unwrap())),
            &caps,
            true,
            false,
        )
        .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(
            e.to_string().contains("nope.json") && e.to_string().contains("c5"),
            "{e}"
        );

        std::fs::write(&file, "not json").unwrap();
        let e = seccomp(
            "c",
            Some(&sc(ProfileType::Localhost, file.to_str().unwrap())),
            &caps,
            true,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a seccomp profile"), "{e}");

        let e = seccomp(
            "c",
            Some(&sc(ProfileType::Localhost, "relative.json")),
            &caps,
            true,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn localhost_profiles_must_be_small_regular_files() {
        use v1::security_profile::ProfileType;
        let caps = default_caps();
        let load = |path: &Path| {
            seccomp(
                "c6",
                Some(&sc(ProfileType::Localhost, path.to_str().unwrap())),
                &caps,
                true,
                false,
            )
        };
        // Before: opening a FIFO with no writer blocked forever. Run in a
        // thread so a regression fails the test instead of hanging it.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("profile.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || {
            let r = load_profile("c6", &f).map(|_| ());
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("loading a FIFO profile hangs");
        assert!(r.unwrap_err().contains("regular file"));
        // Unblock the thread of an old, blocking open if there is one.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);

        let big = dir.path().join("big.json");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_PROFILE_BYTES + 1).unwrap();
        let e = load(&big).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");

        // A directory is not a profile either; a symlink to a good file is.
        assert!(load(dir.path()).is_err());
        let good = dir.path().join("good.json");
        std::fs::write(&good, r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(load(&link).unwrap().is_some());
    }

    /// Before: /dev/zero was read until memory ran out. The check runs in a
    /// child (this test binary again) capped at 1 GiB of address space, so a
    /// regression fails there instead of eating the machine's memory.
    #[test]
    fn a_dev_zero_profile_is_refused_without_reading() {
        const CHILD: &str = "BERTH_SPEC_DEV_ZERO_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let e = load_profile("c6", Path::new("/dev/zero")).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("regular file"), "{e}");
            return;
        }
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "seccomp::tests::a_dev_zero_profile_is_refused_without_reading",
            "--test-threads=1",
        ])
        .env(CHILD, "1");
        // SAFETY: setrlimit is async-signal-safe; nothing else runs here.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 1 << 30,
                    rlim_max: 1 << 30,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("1 passed"), "{text}");
    }
}
