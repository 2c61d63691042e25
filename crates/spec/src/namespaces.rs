//! The namespaces of a container: a new mount namespace; the pod's network,
//! IPC and UTS namespaces joined by path (pinned, for a pod without a pause)
//! or through the pause process (or the host's);
//! the PID namespace by the container's `NamespaceOption.pid`; a new cgroup
//! namespace on cgroup v2 (not privileged); the pod's user namespace (see
//! [`crate::userns`]), joined through the pause like the others.

use std::path::{Path, PathBuf};

use cri_api::v1;
use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

use crate::error::{invalid, Error};
use crate::userns::{check_container_user_namespace, UserNamespace};
use crate::SandboxInfo;

fn ns(typ: LinuxNamespaceType, path: Option<PathBuf>) -> LinuxNamespace {
    let mut n = LinuxNamespace::default();
    n.set_typ(typ);
    n.set_path(path);
    n
}

/// `/proc/<pid>/ns/<name>` of a live process.
fn proc_ns(id: &str, pid: u32, name: &str, field: &str) -> Result<PathBuf, Error> {
    if pid == 0 {
        return Err(invalid(
            id,
            field,
            format!("no process to join the {name} namespace of"),
        ));
    }
    Ok(PathBuf::from(format!("/proc/{pid}/ns/{name}")))
}

/// The container's namespaces. `target_pid` is the pid of the container
/// named by `target_id`, needed for PID mode TARGET. `userns` is the pod's
/// user namespace: the container joins it through the pause (first, as
/// runc and crun join a user namespace before the others, which it owns).
pub(crate) fn namespaces(
    id: &str,
    sandbox: &SandboxInfo,
    options: Option<&v1::NamespaceOption>,
    target_pid: Option<u32>,
    cgroup_ns: bool,
    userns: Option<&UserNamespace>,
) -> Result<Vec<LinuxNamespace>, Error> {
    const FIELD: &str = "linux.security_context.namespace_options";
    check_container_user_namespace(id, options, userns)?;
    let mut out = vec![ns(LinuxNamespaceType::Mount, None)];
    if userns.is_some() {
        out.push(ns(
            LinuxNamespaceType::User,
            Some(proc_ns(id, sandbox.pid, "user", "sandbox pid")?),
        ));
    }
    if let Some(netns) = &sandbox.netns {
        out.push(ns(LinuxNamespaceType::Network, Some(netns.clone())));
        // The pod has its own UTS namespace only with its own network.
        let uts = match &sandbox.uts_ns {
            Some(pinned) => pinned.clone(),
            None => proc_ns(id, sandbox.pid, "uts", "sandbox pid")?,
        };
        out.push(ns(LinuxNamespaceType::Uts, Some(uts)));
    }
    if !sandbox.host_ipc {
        let ipc = match &sandbox.ipc_ns {
            Some(pinned) => pinned.clone(),
            None => proc_ns(id, sandbox.pid, "ipc", "sandbox pid")?,
        };
        out.push(ns(LinuxNamespaceType::Ipc, Some(ipc)));
    }

    let mode = options.map(|o| o.pid).unwrap_or_default();
    let mode = v1::NamespaceMode::try_from(mode)
        .map_err(|_| invalid(id, format!("{FIELD}.pid"), format!("unknown mode {mode}")))?;
    match mode {
        v1::NamespaceMode::Pod if sandbox.host_pid => {}
        v1::NamespaceMode::Pod if sandbox.pid == 0 => {
            return Err(invalid(
                id,
                format!("{FIELD}.pid"),
                "POD, but the pod shares no PID namespace (its own pid mode is CONTAINER, \
                 so it runs without a pause): ask for CONTAINER",
            ))
        }
        v1::NamespaceMode::Pod => out.push(ns(
            LinuxNamespaceType::Pid,
            Some(proc_ns(id, sandbox.pid, "pid", "sandbox pid")?),
        )),
        v1::NamespaceMode::Container => out.push(ns(LinuxNamespaceType::Pid, None)),
        v1::NamespaceMode::Node => {}
        v1::NamespaceMode::Target => {
            let target = options.map(|o| o.target_id.as_str()).unwrap_or("");
            let pid = target_pid.ok_or_else(|| {
                invalid(
                    id,
                    format!("{FIELD}.target_id"),
                    format!("target container {target:?} is not running"),
                )
            })?;
            out.push(ns(
                LinuxNamespaceType::Pid,
                Some(proc_ns(id, pid, "pid", &format!("{FIELD}.target_id"))?),
            ));
        }
    }

    if cgroup_ns {
        out.push(ns(LinuxNamespaceType::Cgroup, None));
    }
    Ok(out)
}

/// The namespaces of a pod's pause: new mount, UTS, IPC and PID namespaces
/// unless the pod uses the host's (host network means host UTS, as kubelet
/// expects), the network namespace at `netns` (`None`: the host's), the
/// user namespace at `userns` (`None`: the host's; it must own `netns`). No
/// cgroup namespace, as containerd's sandbox.
pub(crate) fn pod_namespaces(
    id: &str,
    netns: Option<&Path>,
    userns: Option<&Path>,
    options: Option<&v1::NamespaceOption>,
) -> Result<Vec<LinuxNamespace>, Error> {
    const FIELD: &str = "linux.security_context.namespace_options";
    let mode = |m: i32, name: &str| {
        v1::NamespaceMode::try_from(m)
            .map_err(|_| invalid(id, format!("{FIELD}.{name}"), format!("unknown mode {m}")))
    };
    let o = options.cloned().unwrap_or_default();
    let network = mode(o.network, "network")?;
    let ipc = mode(o.ipc, "ipc")?;
    let pid = mode(o.pid, "pid")?;
    // kubelet sends pid CONTAINER for every pod that does not share its
    // process namespace: the pause then gets one of its own, as for POD.
    for (m, name) in [(ipc, "ipc"), (pid, "pid")] {
        let allowed = matches!(m, v1::NamespaceMode::Pod | v1::NamespaceMode::Node)
            || (name == "pid" && m == v1::NamespaceMode::Container);
        if !allowed {
            return Err(invalid(
                id,
                format!("{FIELD}.{name}"),
                format!("{} is not a pod namespace mode", m.as_str_name()),
            ));
        }
    }
    let mut out = vec![ns(LinuxNamespaceType::Mount, None)];
    if let Some(path) = userns {
        out.push(ns(LinuxNamespaceType::User, Some(path.to_owned())));
    }
    match (network, netns) {
        (v1::NamespaceMode::Node, None) => {}
        (v1::NamespaceMode::Node, Some(_)) | (_, None) => {
            return Err(invalid(
                id,
                format!("{FIELD}.network"),
                "the network namespace given does not fit the pod's network mode",
            ))
        }
        (_, Some(path)) => {
            out.push(ns(LinuxNamespaceType::Network, Some(path.to_owned())));
            out.push(ns(LinuxNamespaceType::Uts, None));
        }
    }
    if ipc != v1::NamespaceMode::Node {
        out.push(ns(LinuxNamespaceType::Ipc, None));
    }
    if pid != v1::NamespaceMode::Node {
        out.push(ns(LinuxNamespaceType::Pid, None));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> SandboxInfo {
        SandboxInfo {
            id: "pod".into(),
            pid: 42,
            netns: Some("/run/berth/netns/pod".into()),
            ..Default::default()
        }
    }

    fn pid_mode(mode: v1::NamespaceMode) -> v1::NamespaceOption {
        v1::NamespaceOption {
            pid: mode as i32,
            target_id: "other".into(),
            ..Default::default()
        }
    }

    fn find(nss: &[LinuxNamespace], t: LinuxNamespaceType) -> Option<Option<PathBuf>> {
        nss.iter().find(|n| n.typ() == t).map(|n| n.path().clone())
    }

    #[test]
    fn kubelets_default_pod_pid_mode_gives_the_pause_its_own() {
        // kubelet: network POD, pid CONTAINER (no shared process
        // namespace), ipc POD.
        let o = v1::NamespaceOption {
            pid: v1::NamespaceMode::Container as i32,
            ..Default::default()
        };
        let nss = pod_namespaces(
            "pod",
            Some(Path::new("/run/berth/netns/pod")),
            None,
            Some(&o),
        )
        .unwrap();
        assert_eq!(find(&nss, LinuxNamespaceType::Pid), Some(None));
        let o = v1::NamespaceOption {
            ipc: v1::NamespaceMode::Container as i32,
            ..Default::default()
        };
        assert!(pod_namespaces("pod", Some(Path::new("/x")), None, Some(&o)).is_err());
    }

    #[test]
    fn pod_namespaces_are_joined() {
        let nss = namespaces("c", &sandbox(), None, None, false, None).unwrap();
        assert_eq!(find(&nss, LinuxNamespaceType::Mount), Some(None));
        assert_eq!(
            find(&nss, LinuxNamespaceType::Network),
            Some(Some(PathBuf::from("/run/berth/netns/pod")))
        );
        assert_eq!(
            find(&nss, LinuxNamespaceType::Uts),
            Some(Some("/proc/42/ns/uts".into()))
        );
        assert_eq!(
            find(&nss, LinuxNamespaceType::Ipc),
            Some(Some("/proc/42/ns/ipc".into()))
        );
        assert_eq!(
            find(&nss, LinuxNamespaceType::Pid),
            Some(Some("/proc/42/ns/pid".into()))
        );
        assert_eq!(find(&nss, LinuxNamespaceType::Cgroup), None);
        assert_eq!(find(&nss, LinuxNamespaceType::User), None);
    }

    #[test]
    fn host_namespaces_are_left_out() {
        let sb = SandboxInfo {
            netns: None,
            host_ipc: true,
            host_pid: true,
            ..sandbox()
        };
        let nss = namespaces("c", &sb, None, None, false, None).unwrap();
        let types: Vec<_> = nss.iter().map(|n| n.typ()).collect();
        assert_eq!(types, vec![LinuxNamespaceType::Mount]);
    }

    #[test]
    fn pid_modes() {
        let sb = sandbox();
        let pid = |mode, target| {
            let nss = namespaces("c", &sb, Some(&pid_mode(mode)), target, false, None).unwrap();
            find(&nss, LinuxNamespaceType::Pid)
        };
        assert_eq!(
            pid(v1::NamespaceMode::Pod, None),
            Some(Some("/proc/42/ns/pid".into()))
        );
        assert_eq!(pid(v1::NamespaceMode::Container, None), Some(None));
        assert_eq!(pid(v1::NamespaceMode::Node, None), None);
        assert_eq!(
            pid(v1::NamespaceMode::Target, Some(77)),
            Some(Some("/proc/77/ns/pid".into()))
        );
    }

    #[test]
    fn target_without_pid_is_invalid() {
        let e = namespaces(
            "c",
            &sandbox(),
            Some(&pid_mode(v1::NamespaceMode::Target)),
            None,
            false,
            None,
        )
        .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(
            e.to_string().contains("target_id") && e.to_string().contains("other"),
            "{e}"
        );
    }

    #[test]
    fn no_pause_pid_is_invalid() {
        let sb = SandboxInfo {
            pid: 0,
            ..sandbox()
        };
        assert!(namespaces("c", &sb, None, None, false, None).is_err());
    }

    #[test]
    fn a_pod_without_a_pause_is_joined_by_its_pins() {
        let sb = SandboxInfo {
            pid: 0,
            uts_ns: Some("/run/berth/podns/pod/uts".into()),
            ipc_ns: Some("/run/berth/podns/pod/ipc".into()),
            ..sandbox()
        };
        let o = pid_mode(v1::NamespaceMode::Container);
        let nss = namespaces("c", &sb, Some(&o), None, false, None).unwrap();
        assert_eq!(
            find(&nss, LinuxNamespaceType::Uts),
            Some(Some("/run/berth/podns/pod/uts".into()))
        );
        assert_eq!(
            find(&nss, LinuxNamespaceType::Ipc),
            Some(Some("/run/berth/podns/pod/ipc".into()))
        );
        assert_eq!(find(&nss, LinuxNamespaceType::Pid), Some(None));
        // A shared PID namespace needs a process: refused, not guessed.
        let o = pid_mode(v1::NamespaceMode::Pod);
        assert!(namespaces("c", &sb, Some(&o), None, false, None).is_err());
    }

    #[test]
    fn cgroup_namespace_when_asked() {
        let nss = namespaces("c", &sandbox(), None, None, true, None).unwrap();
        assert_eq!(find(&nss, LinuxNamespaceType::Cgroup), Some(None));
    }

    #[test]
    fn the_pods_user_namespace_is_joined_through_the_pause() {
        let pod = crate::userns::UserNamespace {
            uids: crate::userns::IdRange {
                container_id: 0,
                host_id: 100000,
                length: 65536,
            },
            gids: crate::userns::IdRange {
                container_id: 0,
                host_id: 100000,
                length: 65536,
            },
        };
        let nss = namespaces("c", &sandbox(), None, None, false, Some(&pod)).unwrap();
        assert_eq!(
            find(&nss, LinuxNamespaceType::User),
            Some(Some("/proc/42/ns/user".into()))
        );
        // A container that asks for the host's in such a pod: refused.
        let mut o = pid_mode(v1::NamespaceMode::Pod);
        o.userns_options = Some(v1::UserNamespace {
            mode: v1::NamespaceMode::Node as i32,
            ..Default::default()
        });
        let e = namespaces("c", &sandbox(), Some(&o), None, false, Some(&pod)).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        // NODE in a NODE pod is fine; POD in a NODE pod is not.
        assert!(namespaces("c", &sandbox(), Some(&o), None, false, None).is_ok());
        o.userns_options = Some(v1::UserNamespace {
            mode: v1::NamespaceMode::Pod as i32,
            ..Default::default()
        });
        assert!(namespaces("c", &sandbox(), Some(&o), None, false, None).is_err());
        // The pause joins the pinned namespace by path.
        let nss = pod_namespaces(
            "pod",
            Some(Path::new("/run/berth/netns/pod")),
            Some(Path::new("/run/berth/userns/pod")),
            None,
        )
        .unwrap();
        assert_eq!(
            find(&nss, LinuxNamespaceType::User),
            Some(Some("/run/berth/userns/pod".into()))
        );
    }
}
