//! RuntimeService.RunPodSandbox: a ready pod with its network, files and
//! pause process, or an error with nothing left behind.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use cri_api::v1;
use prost::Message;

use super::Cri;
use crate::error::Error;
use crate::failpoint;
use crate::objects::StoreExt;
use crate::sandbox::files::SandboxFiles;
use crate::sandbox::spec::{pause_spec, PauseSpec};
use crate::sandbox::{pause, SandboxMeta, SandboxState, SandboxStatus};
use crate::undo::Undo;

/// A fresh 64-hex-digit id.
pub fn new_id() -> String {
    let mut bytes = [0u8; 32];
    if let Err(e) = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
    {
        // Fall back to time and pid: ids must still be unique, not secret.
        tracing::warn!(error = %e, "reading /dev/urandom");
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
            ^ u128::from(std::process::id());
        bytes[..16].copy_from_slice(&seed.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Nanoseconds since the epoch.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// Checks the pod's metadata and returns its sandbox name.
fn sandbox_name(config: &v1::PodSandboxConfig) -> Result<String, Error> {
    let md = config
        .metadata
        .as_ref()
        .ok_or_else(|| Error::InvalidArgument("pod sandbox config has no metadata".into()))?;
    for (field, value) in [
        ("name", &md.name),
        ("namespace", &md.namespace),
        ("uid", &md.uid),
    ] {
        if value.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "pod sandbox metadata.{field} is empty"
            )));
        }
        if value.contains('_') && field != "uid" || value.contains('/') {
            return Err(Error::InvalidArgument(format!(
                "pod sandbox metadata.{field} {value:?} contains a character that is not allowed"
            )));
        }
    }
    Ok(format!(
        "{}_{}_{}_{}",
        md.name, md.namespace, md.uid, md.attempt
    ))
}

/// The namespace options of a pod (defaults: pod-level namespaces).
pub fn namespace_options(config: &v1::PodSandboxConfig) -> v1::NamespaceOption {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// The cgroup path of the pause: `<cgroup_parent>/<id>` (cgroupfs driver).
fn cgroups_path(config: &v1::PodSandboxConfig, id: &str) -> String {
    let parent = config
        .linux
        .as_ref()
        .map(|l| l.cgroup_parent.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/berth");
    format!("{}/{id}", parent.trim_end_matches('/'))
}

impl Cri {
    pub async fn run_pod_sandbox(
        self: &Arc<Self>,
        req: v1::RunPodSandboxRequest,
    ) -> Result<v1::RunPodSandboxResponse, Error> {
        let config = req
            .config
            .ok_or_else(|| Error::InvalidArgument("RunPodSandbox needs a config".into()))?;
        let name = sandbox_name(&config)?;
        let handler_name = if req.runtime_handler.is_empty() {
            self.config.runtime.default_handler.clone()
        } else {
            req.runtime_handler.clone()
        };
        let handler = self
            .config
            .runtime
            .handlers
            .get(&handler_name)
            .cloned()
            .ok_or_else(|| {
                Error::InvalidArgument(format!("unknown runtime handler {handler_name:?}"))
            })?;
        let ns = namespace_options(&config);
        let host_network = ns.network == v1::NamespaceMode::Node as i32;
        let host_ipc = ns.ipc == v1::NamespaceMode::Node as i32;
        let host_pid = ns.pid == v1::NamespaceMode::Node as i32;

        let id = new_id();
        self.sandboxes.reserve(&name, &id)?;
        let mut undo = Undo::new();
        {
            let cri = self.clone();
            let name = name.clone();
            undo.push("release the sandbox name", async move {
                cri.sandboxes.release_name(&name);
                Ok(())
            });
        }

        let netns = (!host_network).then(|| self.netns_dir().join(&id));
        let meta = SandboxMeta {
            id: id.clone(),
            name: name.clone(),
            config: config.encode_to_vec(),
            runtime_handler: handler_name.clone(),
            netns: netns.clone(),
            created_at: now_nanos(),
            decoded: config.clone().into(),
        };
        match self
            .build_sandbox(
                &mut undo,
                meta,
                &config,
                &handler.binary,
                host_ipc,
                host_pid,
            )
            .await
        {
            Ok(()) => {
                undo.disarm();
                self.sandbox_ready(&id).await;
                tracing::info!(pod = %id, %name, "pod sandbox is ready");
                Ok(v1::RunPodSandboxResponse { pod_sandbox_id: id })
            }
            Err(e) => Err(undo.unwind(e).await),
        }
    }

    /// Every step after the name is reserved; each registers its undo first.
    async fn build_sandbox(
        self: &Arc<Self>,
        undo: &mut Undo,
        meta: SandboxMeta,
        config: &v1::PodSandboxConfig,
        runtime_binary: &str,
        host_ipc: bool,
        host_pid: bool,
    ) -> Result<(), Error> {
        let id = meta.id.clone();
        // Persist before creating anything, so a crash leaves a record to clean up from.
        let sandbox = self.sandboxes.create(meta, SandboxStatus::default())?;
        failpoint::hit("run_pod_sandbox:after_record");
        {
            let cri = self.clone();
            let sandbox = sandbox.clone();
            undo.push("delete the sandbox record", async move {
                cri.sandboxes.delete(&sandbox).map_err(|e| e.to_string())
            });
        }

        // Network namespace and CNI.
        if let Some(path) = sandbox.meta.netns.clone() {
            {
                let path = path.clone();
                undo.push("remove the network namespace", async move {
                    remove_netns(path).await.map_err(|e| e.to_string())
                });
            }
            create_netns(path.clone()).await?;
            failpoint::hit("run_pod_sandbox:after_netns");

            let attachment = self.attachment(&sandbox.meta.id, &path, config);
            {
                let cri = self.clone();
                let attachment = attachment.clone();
                undo.push("CNI DEL", async move {
                    cri.cni.del(&attachment).await.map_err(|e| e.to_string())
                });
            }
            let result = self.cni.add(&attachment).await.map_err(|e| {
                Error::Internal(format!("sandbox {id}: setting up the pod network: {e}"))
            })?;
            let ips: Vec<String> = result
                .sandbox_ips(&attachment.ifname)
                .iter()
                .map(|ip| ip.to_string())
                .collect();
            sandbox.update(|s| {
                s.ips = ips;
                s.network_attached = true;
            })?;
            failpoint::hit("run_pod_sandbox:after_cni");
        }

        // Files shared by the pod's containers.
        let files = SandboxFiles::new(&self.config.root, &self.config.state, &id);
        {
            let files = files.clone();
            undo.push("remove the sandbox files", async move {
                tokio::task::spawn_blocking(move || files.remove())
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            });
        }
        let hostname = if sandbox.meta.netns.is_some() {
            config.hostname.clone()
        } else {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let host_network = sandbox.meta.netns.is_none();
        let dns = config.dns_config.clone();
        {
            let root = files.root.display().to_string();
            let files = files.clone();
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                files.write(&hostname, host_network, dns.as_ref())?;
                if !host_ipc {
                    files.mount_shm()?;
                }
                Ok(())
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(|e| Error::Internal(format!("sandbox {id}: writing files in {root}: {e}")))?;
        }

        // The pause process.
        let security = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.clone())
            .unwrap_or_default();
        let spec = pause_spec(&PauseSpec {
            id: id.clone(),
            hostname: config.hostname.clone(),
            netns: sandbox.meta.netns.clone(),
            host_ipc,
            host_pid,
            shm: if host_ipc {
                PathBuf::from("/dev/shm")
            } else {
                files.shm()
            },
            cgroups_path: cgroups_path(config, &id),
            sysctls: config
                .linux
                .as_ref()
                .map(|l| l.sysctls.clone())
                .unwrap_or_default(),
            run_as_user: security.run_as_user.map(|u| u.value as u32),
            run_as_group: security.run_as_group.map(|g| g.value as u32),
            annotations: HashMap::from([
                (
                    "io.kubernetes.cri.container-type".to_string(),
                    "sandbox".to_string(),
                ),
                ("io.kubernetes.cri.sandbox-id".to_string(), id.clone()),
            ]),
        })?;
        let paths = self.pause_paths(&id);
        {
            let paths = paths.clone();
            let runtime = runtime_binary.to_string();
            undo.push("stop the pause process", async move {
                pause::destroy(&paths, &runtime)
                    .await
                    .map_err(|e| e.to_string())
            });
        }
        let started = pause::start(&paths, runtime_binary, &spec).await?;
        failpoint::hit("run_pod_sandbox:after_pause");
        sandbox.update(|s| {
            s.state = SandboxState::Ready;
            s.pid = Some(started.pid);
            s.shim_socket = Some(paths.socket());
            s.shm_mounted = !host_ipc;
        })?;
        Ok(())
    }

    /// The CNI attachment of a sandbox.
    pub fn attachment(
        &self,
        id: &str,
        netns: &std::path::Path,
        config: &v1::PodSandboxConfig,
    ) -> berth_cni::Attachment {
        let md = config.metadata.clone().unwrap_or_default();
        let mut att = berth_cni::Attachment::new(
            id,
            netns,
            berth_cni::PodArgs {
                namespace: md.namespace,
                name: md.name,
                uid: md.uid,
                infra_container_id: id.to_string(),
            },
        );
        att.capabilities.port_mappings = config
            .port_mappings
            .iter()
            .filter(|p| p.host_port > 0)
            .map(|p| berth_cni::PortMapping {
                host_port: p.host_port as u16,
                container_port: p.container_port as u16,
                protocol: match v1::Protocol::try_from(p.protocol) {
                    Ok(v1::Protocol::Udp) => "udp",
                    Ok(v1::Protocol::Sctp) => "sctp",
                    _ => "tcp",
                }
                .to_string(),
                host_ip: p.host_ip.clone(),
            })
            .collect();
        if let Some(dns) = &config.dns_config {
            att.capabilities.dns = Some(berth_cni::DnsCapability {
                servers: dns.servers.clone(),
                searches: dns.searches.clone(),
                options: dns.options.clone(),
            });
        }
        att
    }
}

/// Creates a netns on a dedicated thread (never a tokio worker).
async fn create_netns(path: PathBuf) -> Result<(), Error> {
    tokio::task::spawn_blocking(move || {
        let dir = path.parent().map(PathBuf::from).unwrap_or_default();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        berth_netns::NetNs::create(&dir, &name)
            .map(|_| ())
            .map_err(|e| {
                Error::Internal(format!(
                    "creating network namespace {}: {e}",
                    path.display()
                ))
            })
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
}

/// Removes a netns; absent is fine.
pub async fn remove_netns(path: PathBuf) -> Result<(), Error> {
    tokio::task::spawn_blocking(move || {
        berth_netns::remove_path(&path).map_err(|e| {
            Error::Internal(format!(
                "removing network namespace {}: {e}",
                path.display()
            ))
        })
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
}
