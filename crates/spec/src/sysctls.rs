//! The pod's sysctls (`PodSandboxConfig.linux.sysctls`), set in the pause
//! and in every container of the pod. Only sysctls the kernel keeps per
//! namespace are accepted, and only when the pod has that namespace of its
//! own — the rules runc enforces, checked here first so that the error names
//! the field instead of failing in the runtime.

use std::collections::HashMap;

use cri_api::v1;

use crate::error::{invalid, Error};

/// Sysctls of the IPC namespace besides `fs.mqueue.*`.
const IPC_SYSCTLS: &[&str] = &[
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// The longest sysctl value accepted.
const MAX_VALUE: usize = 4096;

/// The pod's sysctls, checked; `None` when there are none. `host_network`
/// also means the host's UTS namespace, as berth runs pods.
pub(crate) fn pod_sysctls(
    id: &str,
    config: &v1::PodSandboxConfig,
    host_network: bool,
    host_ipc: bool,
) -> Result<Option<HashMap<String, String>>, Error> {
    let sysctls = match config.linux.as_ref() {
        Some(l) if !l.sysctls.is_empty() => &l.sysctls,
        _ => return Ok(None),
    };
    for (name, value) in sysctls {
        let field = format!("linux.sysctls[{name:?}]");
        let refuse = |why: &str| Err(invalid(id, field.as_str(), why));
        if name.is_empty()
            || name.contains("..")
            || name.starts_with(['.', '/'])
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return refuse("is not a sysctl name");
        }
        if value.len() > MAX_VALUE || value.chars().any(|c| c.is_control()) {
            return refuse("has a value with control characters or too long");
        }
        if IPC_SYSCTLS.contains(&name.as_str()) || name.starts_with("fs.mqueue.") {
            if host_ipc {
                return refuse("is of the IPC namespace, and the pod uses the host's");
            }
        } else if name.starts_with("net.") {
            if host_network {
                return refuse("is of the network namespace, and the pod uses the host's");
            }
        } else if name == "kernel.domainname" {
            if host_network {
                return refuse("is of the UTS namespace, and the pod uses the host's");
            }
        } else if name == "kernel.hostname" {
            return refuse("conflicts with the pod's hostname: set that instead");
        } else {
            return refuse("is not namespaced: it would change the host");
        }
    }
    Ok(Some(sysctls.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(sysctls: &[(&str, &str)]) -> v1::PodSandboxConfig {
        v1::PodSandboxConfig {
            linux: Some(v1::LinuxPodSandboxConfig {
                sysctls: sysctls
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn namespaced_sysctls_pass_with_their_namespace() {
        let p = pod(&[
            ("net.ipv4.ip_unprivileged_port_start", "0"),
            ("net.ipv4.ping_group_range", "0 2147483647"),
            ("kernel.shm_rmid_forced", "1"),
            ("fs.mqueue.msg_max", "20"),
            ("kernel.domainname", "example"),
        ]);
        let got = pod_sysctls("p", &p, false, false).unwrap().unwrap();
        assert_eq!(got.len(), 5);
        assert_eq!(pod_sysctls("p", &pod(&[]), true, true).unwrap(), None);
    }

    #[test]
    fn host_and_unknown_sysctls_are_invalid() {
        for (name, host_net, host_ipc) in [
            ("net.ipv4.ip_forward", true, false),
            ("kernel.domainname", true, false),
            ("kernel.sem", false, true),
            ("fs.mqueue.queues_max", false, true),
            ("kernel.hostname", false, false),
            ("vm.overcommit_memory", false, false),
            ("kernel.panic", false, false),
            ("", false, false),
            ("net..x", false, false),
            ("net.ipv4 x", false, false),
        ] {
            let e = pod_sysctls("pod3", &pod(&[(name, "1")]), host_net, host_ipc).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{name}");
            assert!(e.to_string().contains("linux.sysctls") && e.to_string().contains("pod3"));
        }
        let e = pod_sysctls("p", &pod(&[("net.core.somaxconn", "1\n2")]), false, false);
        assert!(e.is_err());
    }
}
