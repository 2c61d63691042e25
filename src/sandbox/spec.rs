//! The OCI runtime spec of a pod's pause container.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    LinuxNamespaceType, Mount, MountBuilder, ProcessBuilder, RootBuilder, Spec, UserBuilder,
};

use crate::error::Error;

/// Inputs of the pause container's spec.
#[derive(Debug, Clone, Default)]
pub struct PauseSpec {
    pub id: String,
    pub hostname: String,
    /// The pod's netns; `None` for a host-network pod.
    pub netns: Option<PathBuf>,
    pub host_ipc: bool,
    pub host_pid: bool,
    /// The pod's /dev/shm (a tmpfs berth mounted), or the host's for host IPC.
    pub shm: PathBuf,
    /// Cgroup path for the pause (cgroupfs: `<parent>/<id>`).
    pub cgroups_path: String,
    pub sysctls: HashMap<String, String>,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
    pub annotations: HashMap<String, String>,
}

/// The command the pause container runs (a file berth writes into its rootfs).
pub const PAUSE_COMMAND: &str = "/pause";

fn spec_error(id: &str) -> impl Fn(oci_spec::OciSpecError) -> Error + '_ {
    move |e| Error::Internal(format!("sandbox {id}: building the pause spec: {e}"))
}

/// Builds the pause container's spec.
pub fn pause_spec(p: &PauseSpec) -> Result<Spec, Error> {
    let err = spec_error(&p.id);
    let mut spec = Spec::default();
    let user = UserBuilder::default()
        .uid(p.run_as_user.unwrap_or(0))
        .gid(p.run_as_group.unwrap_or(0))
        .build()
        .map_err(&err)?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .args(vec![PAUSE_COMMAND.to_string()])
        .env(vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ])
        .cwd("/")
        .user(user)
        .no_new_privileges(true)
        .capabilities(oci_spec::runtime::LinuxCapabilities::default())
        .build()
        .map_err(&err)?;
    spec.set_process(Some(process));
    spec.set_root(Some(
        RootBuilder::default()
            .path("rootfs")
            .readonly(true)
            .build()
            .map_err(&err)?,
    ));
    spec.set_hostname(if p.netns.is_some() {
        Some(p.hostname.clone())
    } else {
        None
    });

    let mut mounts: Vec<Mount> = spec
        .mounts()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.destination() != Path::new("/dev/shm"))
        .collect();
    mounts.push(
        MountBuilder::default()
            .destination("/dev/shm")
            .typ("bind")
            .source(&p.shm)
            .options(vec![
                "rbind".to_string(),
                "ro".to_string(),
                "nosuid".to_string(),
                "nodev".to_string(),
                "noexec".to_string(),
            ])
            .build()
            .map_err(&err)?,
    );
    spec.set_mounts(Some(mounts));

    let linux = spec.linux_mut().get_or_insert_with(Default::default);
    let mut namespaces = Vec::new();
    for ns in linux.namespaces().clone().unwrap_or_default() {
        match ns.typ() {
            LinuxNamespaceType::Network => {
                if let Some(path) = &p.netns {
                    let mut ns = ns.clone();
                    ns.set_path(Some(path.clone()));
                    namespaces.push(ns);
                }
            }
            // Host network means host UTS, as kubelet expects.
            LinuxNamespaceType::Uts if p.netns.is_none() => {}
            LinuxNamespaceType::Ipc if p.host_ipc => {}
            LinuxNamespaceType::Pid if p.host_pid => {}
            // No cgroup namespace: as containerd on cgroup v1 hosts.
            LinuxNamespaceType::Cgroup => {}
            _ => namespaces.push(ns),
        }
    }
    linux.set_namespaces(Some(namespaces));
    linux.set_cgroups_path(Some(PathBuf::from(&p.cgroups_path)));
    if !p.sysctls.is_empty() {
        linux.set_sysctl(Some(p.sysctls.clone()));
    }
    spec.set_annotations(Some(p.annotations.clone()));
    Ok(spec)
}

/// Whether `spec` joins a network namespace at `path`.
#[cfg(test)]
pub fn joins_netns(spec: &Spec, path: &Path) -> bool {
    spec.linux()
        .as_ref()
        .and_then(|l| l.namespaces().as_ref())
        .is_some_and(|nss: &Vec<oci_spec::runtime::LinuxNamespace>| {
            nss.iter().any(|ns| {
                ns.typ() == LinuxNamespaceType::Network && ns.path().as_deref() == Some(path)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(spec: &Spec) -> Vec<LinuxNamespaceType> {
        spec.linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| n.typ())
            .collect()
    }

    #[test]
    fn pod_network_spec() {
        let spec = pause_spec(&PauseSpec {
            id: "abc".into(),
            hostname: "web-0".into(),
            netns: Some("/run/berth/netns/abc".into()),
            shm: "/run/berth/sandboxes/abc/shm".into(),
            cgroups_path: "/kubepods/podX/abc".into(),
            ..Default::default()
        })
        .unwrap();
        assert!(joins_netns(&spec, Path::new("/run/berth/netns/abc")));
        assert_eq!(spec.hostname().as_deref(), Some("web-0"));
        let t = types(&spec);
        assert!(t.contains(&LinuxNamespaceType::Uts));
        assert!(t.contains(&LinuxNamespaceType::Ipc));
        assert!(t.contains(&LinuxNamespaceType::Pid));
        assert!(!t.contains(&LinuxNamespaceType::Cgroup));
        assert_eq!(
            spec.process().as_ref().unwrap().args().as_ref().unwrap(),
            &vec!["/pause".to_string()]
        );
        assert!(spec.process().as_ref().unwrap().oom_score_adj().is_none());
        let shm: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.destination() == Path::new("/dev/shm"))
            .collect();
        assert_eq!(shm.len(), 1);
        assert_eq!(
            shm[0].source().as_deref(),
            Some(Path::new("/run/berth/sandboxes/abc/shm"))
        );
    }

    #[test]
    fn host_namespaces_spec() {
        let spec = pause_spec(&PauseSpec {
            id: "abc".into(),
            netns: None,
            host_ipc: true,
            host_pid: true,
            shm: "/dev/shm".into(),
            cgroups_path: "/berth/abc".into(),
            ..Default::default()
        })
        .unwrap();
        let t = types(&spec);
        assert!(!t.contains(&LinuxNamespaceType::Network));
        assert!(!t.contains(&LinuxNamespaceType::Uts));
        assert!(!t.contains(&LinuxNamespaceType::Ipc));
        assert!(!t.contains(&LinuxNamespaceType::Pid));
        assert!(t.contains(&LinuxNamespaceType::Mount));
        assert!(spec.hostname().is_none());
    }
}
