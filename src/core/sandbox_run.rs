//! RunPodSandbox: a ready pod with its network, files and either a pause
//! process or (where nothing needs one) its UTS and IPC namespaces pinned, or
//! an error with nothing left behind — except what a failed cleanup could
//! not give back, which stays recorded for the next Stop/Remove to finish.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_shim::ShimOptions;
use berth_store::Locked;
use cri_api::v1;
use prost::Message;

use super::mechanisms::{EventKind, PodFileContent, UsernsPin};
use super::rollback::Rollback;
use super::{new_id, now_nanos, retry, timed, Core};
use crate::error::Error;
use crate::failpoint;
use crate::objects::{self, StoreExt};
use crate::sandbox::facts::{sandbox_name, PodFacts};
use crate::sandbox::{Sandbox, SandboxMeta, SandboxState, SandboxStatus};

/// What RunPodSandbox is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRequest {
    pub config: v1::PodSandboxConfig,
    /// Empty: the default handler.
    pub runtime_handler: String,
}

impl Core {
    /// Makes a ready pod sandbox; its id.
    pub async fn run_pod_sandbox(self: &Arc<Self>, req: SandboxRequest) -> Result<String, Error> {
        let name = sandbox_name(&req.config)?;
        let (handler_name, runtime) = self.handler_of(&req.runtime_handler)?;
        let id = new_id();
        let facts = self.pod_facts(&req.config, &id)?;
        let reserve = || self.sandboxes.reserve_name(&name, &id).map_err(|e| e.key);
        if let Some(existing) =
            retry::reserve_or_join(&self.pods_in_flight, "pod sandbox", &name, &req, reserve)
                .await?
        {
            return Ok(existing);
        }
        let running = self.pods_in_flight.begin(&name, &req, &id);
        let mut undo = Rollback::new(self, &id);
        undo.push_forget(
            "release the sandbox name",
            name.clone(),
            |core, id, name| async move {
                core.sandboxes.release_name_of(&name, &id);
                Ok(())
            },
        );
        let meta = self.sandbox_meta(&id, &name, req, handler_name, facts);
        let runnable = self.check_runnable(&meta, &runtime);
        // Plugins being synchronized see the pod whole, or hear of it.
        let sync = self.mech.plugins.block_sync().await;
        let built = match runnable.and_then(|()| self.pause_spec(&meta)) {
            Ok(spec) => self.build_sandbox(&mut undo, meta, spec, &runtime).await,
            Err(e) => Err(e),
        };
        let result = self.settle(undo, built, &id, &name).await;
        drop(sync);
        retry::end(&self.pods_in_flight, running, &name, &id, result.is_ok());
        result
    }

    /// The handler a pod asks for (empty: the default): its name and its
    /// runtime binary.
    fn handler_of(&self, requested: &str) -> Result<(String, String), Error> {
        let name = match requested {
            "" => self.config.runtime.default_handler.clone(),
            h => h.to_string(),
        };
        match self.config.runtime.handlers.get(&name) {
            Some(handler) => Ok((name.clone(), handler.binary.clone())),
            None => Err(Error::UnknownHandler(name)),
        }
    }

    /// What the pod's config says about it, with whether it goes without a
    /// pause and its cgroup parent.
    fn pod_facts(&self, config: &v1::PodSandboxConfig, id: &str) -> Result<PodFacts, Error> {
        let mut facts = PodFacts::of(config, || {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default()
        })?;
        facts.pinned = self.config.runtime.drop_infra_ctr && !facts.needs_pause(config);
        facts.cgroup_parent = berth_spec::pod_cgroup_parent(id, config, &self.spec_options)?;
        Ok(facts)
    }

    /// The record of the pod about to be made.
    fn sandbox_meta(
        &self,
        id: &str,
        name: &str,
        req: SandboxRequest,
        handler_name: String,
        facts: PodFacts,
    ) -> SandboxMeta {
        let config = req.config;
        SandboxMeta {
            id: id.to_string(),
            name: name.to_string(),
            config: config.encode_to_vec(),
            runtime_handler: handler_name,
            requested_handler: Some(req.runtime_handler),
            netns: (!facts.host_network).then(|| self.layout.netns(id)),
            created_at: now_nanos(),
            facts: Some(facts),
            decoded: config.into(),
            derived: Default::default(),
        }
    }

    /// A pod without a pause runs no runtime yet: a handler whose binary
    /// cannot run is refused now, not at its first container. A pod with a
    /// pause warms the runtime up (the pause's runc moves it into the pod's
    /// cgroups).
    fn check_runnable(&self, meta: &SandboxMeta, runtime: &str) -> Result<(), Error> {
        match meta.facts().pinned {
            true => self.mech.runtime.check(&meta.id, runtime),
            false => {
                self.mech.runtime.warm_up(&meta.id);
                Ok(())
            }
        }
    }

    /// The end of RunPodSandbox: a built pod is announced and kept; a failed
    /// one is unwound, and what its cleanup could not give back stays
    /// recorded, not ready, for a retry.
    async fn settle(
        &self,
        undo: Rollback,
        built: Result<(), Error>,
        id: &str,
        name: &str,
    ) -> Result<String, Error> {
        match built {
            Ok(()) => {
                undo.disarm();
                self.sandbox_event(id, EventKind::Created).await;
                self.sandbox_event(id, EventKind::Started).await;
                tracing::info!(pod = %id, %name, "pod sandbox is ready");
                Ok(id.to_string())
            }
            Err(e) => {
                let e = undo.unwind(e).await;
                if matches!(e, Error::Cleanup { .. }) {
                    if let Ok(sandbox) = self.sandboxes.lookup(id) {
                        let _ = objects::save(&sandbox, move |s| s.state = SandboxState::NotReady)
                            .await;
                    }
                }
                Err(e)
            }
        }
    }

    /// Every step after the name is reserved; each registers its undo first.
    ///
    /// CNI ADD (the plugins' execs, most of the call) runs side by side with
    /// what does not need the pod's network: its files, then its pinned
    /// namespaces or its pause (which joins the netns, made before both).
    /// Their undo is registered before either starts, so a failure of one
    /// (or both) unwinds all of it.
    async fn build_sandbox(
        &self,
        undo: &mut Rollback,
        meta: SandboxMeta,
        spec: oci_spec::runtime::Spec,
        runtime: &str,
    ) -> Result<(), Error> {
        // Held until the pod is built or rolled back.
        let ((sandbox, _lifecycle), netns) = self.record_with_netns(undo, meta).await?;
        let attachment = match netns {
            Some(path) => {
                failpoint::hit("run_pod_sandbox:after_netns");
                Some(self.push_cni_del(undo, &sandbox, &path))
            }
            None => {
                self.pin_host_network_userns(undo, &sandbox).await?;
                None
            }
        };
        self.push_pod_setup_undo(undo, &sandbox, runtime);
        let id = &sandbox.meta.id;
        let network = async {
            match &attachment {
                Some(attachment) => timed("cni.add", self.mech.network.add(id, attachment)).await,
                None => Ok(Vec::new()),
            }
        };
        let (ips, pause) = tokio::join!(network, self.set_up_pod(&sandbox, &spec, runtime));
        if let (Err(_), Err(e)) = (&ips, &pause) {
            tracing::debug!(pod = %id, error = %e, "the pod's set-up failed beside CNI ADD");
        }
        let ips = ips?;
        failpoint::hit("run_pod_sandbox:after_cni");
        let pause = pause?;
        failpoint::hit("run_pod_sandbox:after_pause");
        self.run_pod_hook(undo, &sandbox).await?;
        self.mark_ready(&sandbox, ips, pause).await
    }

    /// The pod's record, locked, and its netns (its path) if it has its own
    /// network.
    ///
    /// Persisted before anything that outlives a reboot is made (the CNI
    /// plugins' leases, files on disk), so a crash leaves a record to clean
    /// up from; the netns (gone with a reboot, and swept as an orphan after a
    /// crash that leaves it without a record) is made meanwhile. The record's
    /// undo is registered first (it runs last, and not when a later undo
    /// failed: see push_forget), and deletes the record once it is made.
    /// Locked from the moment it is visible: a Stop or Remove racing this
    /// call waits until it has finished or rolled back. A pod with its own
    /// network is recorded as attached from the start: a crash or a failure
    /// from here on runs CNI DEL (idempotent, also before any ADD), and ADD
    /// needs no record write of its own.
    async fn record_with_netns(
        &self,
        undo: &mut Rollback,
        meta: SandboxMeta,
    ) -> Result<(Locked<SandboxMeta, SandboxStatus>, Option<PathBuf>), Error> {
        let made = Arc::new(std::sync::OnceLock::<Arc<Sandbox>>::new());
        undo.push_forget(
            "delete the sandbox record",
            made.clone(),
            |core, _, made| async move {
                match made.get() {
                    Some(sandbox) => objects::delete(core.sandboxes.clone(), sandbox).await,
                    None => Ok(()),
                }
            },
        );
        let (id, netns) = (meta.id.clone(), meta.netns.clone());
        let userns = meta.facts().userns.map(|mapping| UsernsPin {
            path: self.layout.pod_userns(&id).ns(),
            mapping,
        });
        if let Some(path) = &netns {
            undo.push(
                "remove the network namespace",
                path.clone(),
                |core, id, path| async move { core.mech.namespaces.remove_netns(&id, &path).await },
            );
        }
        let status = SandboxStatus {
            network_attached: netns.is_some(),
            ..Default::default()
        };
        let record = objects::create(self.sandboxes.clone(), meta, status);
        let netns_made = async {
            match &netns {
                Some(path) => {
                    let create = self
                        .mech
                        .namespaces
                        .create_netns(&id, path, userns.as_ref());
                    timed("netns.create", create).await
                }
                None => Ok(()),
            }
        };
        let (record, netns_made) = tokio::join!(record, netns_made);
        if let (Err(_), Err(e)) = (&record, &netns_made) {
            tracing::debug!(pod = %id, error = %e, "the netns failed beside the record");
        }
        let record = record?;
        let _ = made.set(record.0.clone());
        failpoint::hit("run_pod_sandbox:after_record");
        netns_made?;
        Ok((record, netns))
    }

    /// Records the pod ready, with its IPs and, if it has one, its pause.
    async fn mark_ready(
        &self,
        sandbox: &Arc<Sandbox>,
        ips: Vec<String>,
        pause: Option<u32>,
    ) -> Result<(), Error> {
        let shm = !sandbox.meta.facts().host_ipc;
        let socket = pause
            .is_some()
            .then(|| berth_shim::ShimPaths::new(self.layout.shim_dir(&sandbox.meta.id)).socket());
        objects::save(sandbox, move |s| {
            s.state = SandboxState::Ready;
            s.ips = ips;
            s.shm_mounted = shm;
            if let Some(pid) = pause {
                s.pid = Some(pid);
                s.shim_socket = socket;
            }
        })
        .await?;
        Ok(())
    }

    /// Registers the undo of [`Core::set_up_pod`]'s steps, before any of them
    /// runs: the pod's files (and its userns tree), then its pinned
    /// namespaces or its pause.
    fn push_pod_setup_undo(&self, undo: &mut Rollback, sandbox: &Sandbox, runtime: &str) {
        let id = &sandbox.meta.id;
        let facts = sandbox.meta.facts();
        undo.push(
            "remove the sandbox files",
            self.layout.sandbox_files(id),
            |core, id, files| async move { core.mech.pod_files.remove_pod_files(&id, &files).await },
        );
        // A userns pod's processes cannot search berth's 0700 dirs: what
        // they reach by path is bound into the pod's userns tree (the pause's
        // rootfs too), undone with the tree.
        if facts.userns.is_some() {
            undo.push(
                "remove the pod's userns tree",
                self.layout.pod_userns(id).root,
                |core, id, root| async move { core.mech.binds.remove_mounted_tree(&id, &root).await },
            );
        }
        if facts.pinned {
            undo.push(
                "remove the pinned namespaces",
                self.layout.pod_ns(id),
                |core, id, dir| async move { core.mech.namespaces.unpin(&id, &dir).await },
            );
        } else {
            undo.push(
                "stop the pause process",
                runtime.to_string(),
                |core, id, runtime| async move { core.destroy_pause(&id, &runtime).await },
            );
        }
    }

    /// What a pod needs besides its network (undone as
    /// [`Core::push_pod_setup_undo`] registered): its files, and either its
    /// UTS and IPC namespaces pinned (side by side with the files: neither
    /// needs the other) or its pause (after them: it mounts them). The
    /// pause's pid, if it has one.
    async fn set_up_pod(
        &self,
        sandbox: &Arc<Sandbox>,
        spec: &oci_spec::runtime::Spec,
        runtime: &str,
    ) -> Result<Option<u32>, Error> {
        let id = &sandbox.meta.id;
        let facts = sandbox.meta.facts();
        if facts.pinned {
            let dir = self.layout.pod_ns(id);
            let pin = timed(
                "ns.pin",
                self.mech
                    .namespaces
                    .pin(id, &dir, facts.pins(sandbox.meta.netns.as_deref())),
            );
            let (files, pinned) = tokio::join!(self.make_pod_files(sandbox), pin);
            files?;
            pinned?;
            return Ok(None);
        }
        self.make_pod_files(sandbox).await?;
        self.start_pause(sandbox, spec, runtime).await.map(Some)
    }

    /// Files shared by the pod's containers (undone with the sandbox files
    /// and the pod's userns tree).
    async fn make_pod_files(&self, sandbox: &Sandbox) -> Result<(), Error> {
        let id = &sandbox.meta.id;
        let (config, facts) = (sandbox.meta.config(), sandbox.meta.facts());
        let files = self.layout.sandbox_files(id);
        let content = PodFileContent {
            hostname: facts.hostname.clone(),
            host_network: facts.host_network,
            dns: config.dns_config.clone(),
            shm: !facts.host_ipc,
        };
        timed(
            "pod.files",
            self.mech.pod_files.write_pod_files(id, &files, content),
        )
        .await?;
        // The pod's files idmapped into its userns tree (so they show owned
        // by root inside, and nothing is chowned).
        if facts.userns.is_none() {
            return Ok(());
        }
        let tree = self.layout.pod_userns(id);
        self.mech
            .binds
            .idmapped_bind(id, &files.root, &tree.files(), &tree.ns())
            .await?;
        if !facts.host_ipc {
            self.mech
                .binds
                .idmapped_bind(id, &files.shm(), &tree.shm(), &tree.ns())
                .await?;
        }
        Ok(())
    }

    /// The pause process, from its bundle (undone by stopping the pause);
    /// its pid.
    async fn start_pause(
        &self,
        sandbox: &Arc<Sandbox>,
        spec: &oci_spec::runtime::Spec,
        runtime: &str,
    ) -> Result<u32, Error> {
        let id = &sandbox.meta.id;
        let facts = sandbox.meta.facts();
        let files = self.layout.sandbox_files(id);
        let shim_dir = self.layout.shim_dir(id);
        timed(
            "pause.bundle",
            self.mech
                .pod_files
                .write_pause_bundle(id, &files.bundle(), spec),
        )
        .await?;
        if facts.userns.is_some() {
            let target = self.layout.pod_userns(id).pause_rootfs();
            self.mech
                .binds
                .bind(id, &files.bundle().join("rootfs"), &target)
                .await?;
        }
        let mut opts = ShimOptions::new(id, files.bundle(), &shim_dir);
        opts.runtime = PathBuf::from(runtime);
        opts.runtime_root = self.layout.runtime_root();
        opts.systemd_cgroup = self.spec_options.cgroup_driver_systemd;
        // One runtime exec: `run --detach`.
        opts.run_detached = true;
        let task = timed("pause.shim", self.mech.runtime.create(opts)).await?;
        timed("pause.start", task.start()).await
    }

    /// The pod's CNI attachment, with CNI DEL registered as its undo, for
    /// ADD to use.
    fn push_cni_del(
        &self,
        undo: &mut Rollback,
        sandbox: &Arc<Sandbox>,
        path: &Path,
    ) -> berth_cni::Attachment {
        let attachment = attachment(&sandbox.meta.id, path, sandbox.meta.config());
        let args = (attachment.clone(), sandbox.clone());
        // Recorded as attached when the record was made: a crash or a
        // failure during ADD still DELs.
        undo.push(
            "CNI DEL",
            args,
            |core, id, (attachment, sandbox)| async move {
                core.mech.network.del(&id, &attachment).await?;
                objects::save(&sandbox, move |s| s.network_attached = false).await?;
                Ok(())
            },
        );
        attachment
    }

    /// The user namespace of a pod in its own user namespace on the host's
    /// network (KEP-5607), pinned where a pod with its own network has it
    /// pinned with its netns; undone with the pod's userns tree. Nothing for
    /// other host-network pods.
    async fn pin_host_network_userns(
        &self,
        undo: &mut Rollback,
        sandbox: &Arc<Sandbox>,
    ) -> Result<(), Error> {
        let id = &sandbox.meta.id;
        let Some(mapping) = sandbox.meta.facts().userns else {
            return Ok(());
        };
        let tree = self.layout.pod_userns(id);
        undo.push(
            "remove the pod's userns tree",
            tree.root.clone(),
            |core, id, root| async move { core.mech.binds.remove_mounted_tree(&id, &root).await },
        );
        let pin = UsernsPin {
            path: tree.ns(),
            mapping,
        };
        timed(
            "userns.create",
            self.mech.namespaces.create_userns(id, &pin),
        )
        .await
    }

    /// The pause container's spec, from the one generator of specs; built
    /// before anything is created, so a bad request leaves nothing.
    fn pause_spec(&self, meta: &SandboxMeta) -> Result<oci_spec::runtime::Spec, Error> {
        let facts = meta.facts();
        let shm = self.shm_of(&meta.id, facts);
        let tree = self.layout.pod_userns(&meta.id);
        let (userns, pause_rootfs) = (tree.ns(), tree.pause_rootfs());
        let mut req = berth_spec::PauseRequest::new(
            &meta.id,
            meta.config(),
            meta.netns.as_deref(),
            &shm,
            &facts.cgroup_parent,
        );
        req.args = vec![berth_shim::PAUSE_PATH.into()];
        if facts.userns.is_some() {
            req.userns = Some(&userns);
            req.rootfs = &pause_rootfs;
        }
        Ok(berth_spec::pause_spec(
            &req,
            &self.spec_options_for(&meta.runtime_handler),
        )?)
    }

    /// The pinned namespace files of a pod without a pause (none for a pod
    /// with one).
    pub fn pod_pins(&self, sandbox: &Sandbox) -> berth_netns::pin::Pinned {
        let facts = sandbox.meta.facts();
        match facts.pinned {
            true => facts
                .pins(sandbox.meta.netns.as_deref())
                .files(&self.layout.pod_ns(&sandbox.meta.id)),
            false => Default::default(),
        }
    }

    /// The pod's /dev/shm: its own tmpfs, or the host's for host IPC.
    pub fn pod_shm(&self, sandbox: &Sandbox) -> PathBuf {
        self.shm_of(&sandbox.meta.id, sandbox.meta.facts())
    }

    fn shm_of(&self, id: &str, facts: &PodFacts) -> PathBuf {
        if facts.host_ipc {
            PathBuf::from("/dev/shm")
        } else if facts.userns.is_some() {
            self.layout.pod_userns(id).shm()
        } else {
            self.layout.sandbox_files(id).shm()
        }
    }

    /// Kills and deletes the pause and its shim, and removes their files.
    /// Idempotent: whatever is already gone is skipped.
    pub(super) async fn destroy_pause(&self, id: &str, runtime: &str) -> Result<(), Error> {
        let shim_dir = self.layout.shim_dir(id);
        if let Ok(task) = self.mech.runtime.connect(id, &shim_dir).await {
            if let Err(e) = task.kill(libc::SIGKILL, true).await {
                tracing::debug!(pod = %id, error = %e, "killing the pause (may have exited)");
            }
            if tokio::time::timeout(PAUSE_EXIT_TIMEOUT, task.wait())
                .await
                .is_err()
            {
                tracing::warn!(pod = %id, "the pause did not exit in {PAUSE_EXIT_TIMEOUT:?}");
            }
        }
        self.mech.runtime.delete(id, &shim_dir, runtime).await?;
        self.mech.files.remove_dir(id, &shim_dir).await?;
        self.mech
            .files
            .remove_dir(id, &self.layout.sandbox_files(id).bundle())
            .await
    }
}

/// How long a killed pause may take to go.
const PAUSE_EXIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The CNI attachment of a sandbox.
pub fn attachment(id: &str, netns: &Path, config: &v1::PodSandboxConfig) -> berth_cni::Attachment {
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
    // Ports were range-checked at RunPodSandbox (PodFacts::of).
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
    // Checked at RunPodSandbox (PodFacts::of).
    att.capabilities.bandwidth = crate::sandbox::facts::bandwidth(&config.annotations)
        .ok()
        .flatten();
    if let Some(dns) = &config.dns_config {
        att.capabilities.dns = Some(berth_cni::DnsCapability {
            servers: dns.servers.clone(),
            searches: dns.searches.clone(),
            options: dns.options.clone(),
        });
    }
    att
}
