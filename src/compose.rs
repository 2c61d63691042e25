//! The composition root: the one place that builds the Layout's users, the
//! record stores, the image store, the real mechanisms, the core, the CRI
//! layer and the streaming server, and wires them into a [`Node`], their
//! owner. Everything else receives them.
//!
//! The order removes every back-reference: the stores are opened first, so
//! the image store's garbage collection (which must keep the snapshots
//! containers use) and the event sink (which encodes statuses) read them
//! directly, and the core is built last, over what it uses.

use std::sync::Arc;

use crate::config::Config;
use crate::core::mechanisms::{EventSink, Images, Plugins};
use crate::core::{real, Core, Mechanisms, Stores};
use crate::error::Error;
use crate::layout::Layout;
use crate::node::{Node, Parts};
use crate::nri;
use crate::server::encode::Statuses;
use crate::server::events::{CoreEvents, Events};
use crate::server::stats::Collector;
use crate::server::Cri;

/// The on-disk layout of a configuration: the one place a `Layout` is made
/// (the daemon's start-up and the recovery dry run both take it from here).
pub fn layout(config: &Config) -> Layout {
    Layout::new(&config.root, &config.state)
}

/// The CNI client of a configuration.
fn cni_client(config: &Config, layout: &Layout) -> berth_cni::Cni {
    berth_cni::Cni::new(berth_cni::CniOptions {
        conf_dirs: vec![config.cni.conf_dir.clone()],
        bin_dirs: config.cni.bin_dirs.clone(),
        cache_dir: layout.cni_cache(),
        network_name: Some(config.cni.network_name.clone()).filter(|n| !n.is_empty()),
        timeout: std::time::Duration::from_secs(config.cni.timeout_secs),
    })
}

/// What the host supports and the configured policies.
fn spec_options(config: &Config) -> berth_spec::SpecOptions {
    let mut opts = berth_spec::SpecOptions::detect();
    opts.cgroup_driver_systemd =
        config.runtime.cgroup_driver == crate::config::CgroupDriver::Systemd;
    opts.cdi_spec_dirs = config.runtime.cdi_spec_dirs.clone();
    opts
}

/// The cgroup lock warm-up, if it is on and this host has use for it.
fn cgroup_warmup(config: &Config) -> Option<real::CgroupWarmup> {
    if !config.runtime.cgroup_warmup {
        return None;
    }
    match real::CgroupWarmup::probe() {
        Ok(w) => {
            tracing::info!(path = %w.procs().display(), "cgroup lock warm-up on");
            Some(w)
        }
        Err(why) => {
            tracing::info!(%why, "cgroup lock warm-up off");
            None
        }
    }
}

/// The real mechanisms over `cni`, with the given images and event sink.
fn mechanisms(
    config: &Config,
    layout: &Layout,
    cni: &berth_cni::Cni,
    images: Arc<dyn Images>,
    events: Arc<dyn EventSink>,
    plugins: Arc<dyn Plugins>,
) -> Mechanisms {
    Mechanisms {
        network: Arc::new(real::Cni(cni.clone())),
        namespaces: Arc::new(real::NetNs),
        pod_files: Arc::new(real::Host),
        mounts: Arc::new(real::Host),
        binds: Arc::new(real::Host),
        files: Arc::new(real::Host),
        runtime: Arc::new(real::Shims::new(
            layout.clone(),
            crate::core::shim_binary(config),
            config.runtime.shim_standby,
            cgroup_warmup(config),
        )),
        images,
        events,
        plugins,
    }
}

/// The daemon, complete: its CRI layer over a core over the stores under
/// `layout`, and the parts its owner starts and stops.
pub async fn daemon(config: Config, layout: Layout) -> Result<Arc<Node>, Error> {
    let stores = Stores::open(&layout)?;
    // Snapshots that containers use are kept by image garbage collection.
    let roots: berth_oci_image::GcRoots = {
        let containers = stores.containers.clone();
        Arc::new(move || crate::core::snapshots_in_use(&containers))
    };
    let images = Arc::new(
        berth_oci_image::ImageStore::open_with_roots(
            &layout.images(),
            config.registry.clone(),
            Some(roots),
        )
        .await?,
    );
    let cni = cni_client(&config, &layout);
    let hub = Arc::new(Events::new());
    let statuses = Statuses {
        sandboxes: stores.sandboxes.clone(),
        containers: stores.containers.clone(),
        images: images.clone(),
    };
    let sink = Arc::new(CoreEvents {
        hub: hub.clone(),
        statuses: statuses.clone(),
    });
    // NRI is built before the core that calls it; its requests to the
    // core's update path wait in a channel served once the core is built.
    let nri = config.nri.enable.then(|| {
        let (sender, requests) = nri::update_channel();
        let records = nri::Records {
            sandboxes: stores.sandboxes.clone(),
            containers: stores.containers.clone(),
            layout: layout.clone(),
        };
        let cdi_dirs = config.runtime.cdi_spec_dirs.clone();
        (nri::NriPlugins::new(records, sender, cdi_dirs), requests)
    });
    let plugins: Arc<dyn Plugins> = match &nri {
        Some((nri, _)) => nri.clone(),
        None => Arc::new(real::NoPlugins),
    };
    let mech = mechanisms(&config, &layout, &cni, images.clone(), sink, plugins);
    // Host probes and the AppArmor profile load block: not on a worker.
    let options = {
        let (config, layout) = (config.clone(), layout.clone());
        tokio::task::spawn_blocking(move || {
            let mut options = spec_options(&config);
            let parser = crate::apparmor::find_parser();
            crate::apparmor::ensure_default(
                &mut options,
                parser.as_deref(),
                &layout.apparmor_profile(),
                std::path::Path::new(crate::apparmor::PROFILES),
            );
            options
        })
        .await
        .map_err(Error::join)?
    };
    let core = Core::new(config.clone(), layout.clone(), stores, mech, options);
    let nri = nri.map(|(plugins, requests)| {
        let port = Arc::new(CoreUpdates(core.clone()));
        let serving = tokio::spawn(nri::serve_updates(requests, port));
        (plugins, serving.abort_handle())
    });
    let streaming = crate::server::streaming::server(&config.streaming, &layout, core.clone())?;
    let stats = Arc::new(Collector::new(core.clone()));
    let cri = Cri::new(
        core.clone(),
        config.clone(),
        layout,
        statuses,
        hub.clone(),
        stats.clone(),
        Some(streaming.clone()),
    );
    Ok(Node::new(Parts {
        config,
        core,
        cri,
        images,
        events: hub,
        nri,
        streaming,
        stats,
    }))
}

/// The core's update path, as NRI's plugins use it.
struct CoreUpdates(Arc<Core>);

#[tonic::async_trait]
impl nri::ContainerUpdates for CoreUpdates {
    fn resources(&self, id: &str) -> Result<(String, cri_api::v1::LinuxContainerResources), Error> {
        let container = self.0.container(id)?;
        Ok((
            container.meta.id.clone(),
            self.0.current_resources(&container),
        ))
    }

    async fn update(
        &self,
        id: &str,
        resources: cri_api::v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        self.0.update_container_for_plugin(id, resources).await
    }

    async fn evict(&self, id: &str) -> Result<(), Error> {
        self.0.stop_container(id, std::time::Duration::ZERO).await
    }
}

/// What recovery would change, from the records on disk; changes nothing.
/// A dry run opens no image store (its start-up GC changes things) and
/// reports no events.
pub async fn recovery_plan(config: &Config, layout: Layout) -> Result<Vec<String>, Error> {
    let stores = Stores::open(&layout)?;
    let cni = cni_client(config, &layout);
    let mech = mechanisms(
        config,
        &layout,
        &cni,
        Arc::new(real::NoImages),
        Arc::new(real::NoEvents),
        Arc::new(real::NoPlugins),
    );
    let core = Core::new(config.clone(), layout, stores, mech, spec_options(config));
    Ok(core
        .plan()
        .await
        .into_iter()
        .map(|a| a.to_string())
        .collect())
}
