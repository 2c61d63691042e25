//! The NRI mechanism: [`crate::core::mechanisms::Plugins`] over berth-nri.
//! Built by the composition root over the record stores and a channel to
//! the core's update path ([`host::ContainerUpdates`]), before the core
//! (which calls it); started once the core has recovered; until then (and
//! with NRI disabled) every hook is a no-op. NRI keeps no state a restart
//! needs: plugins reconnect (pre-installed ones are relaunched) and are
//! synchronized from the records.

mod adjust;
pub mod convert;
mod host;

use berth_lock::MutexExt;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use berth_nri::api::Event;
use berth_nri::Nri;
use cri_api::v1;
use oci_spec::runtime::Spec;
use tonic::async_trait;

use crate::container::Container;
use crate::core::mechanisms::{ContainerEvent, Plugins, PodEvent, SyncBlock};
use crate::error::Error;
use crate::sandbox::Sandbox;
pub use host::{serve_updates, update_channel, ContainerUpdates, Records};
use host::{NriHost, UpdateSender};

/// NRI plugins, once started.
pub struct NriPlugins {
    /// Set once, when NRI has started.
    nri: OnceLock<Nri>,
    records: Records,
    updates: UpdateSender,
    cdi_dirs: Vec<PathBuf>,
    views: SpecViews,
}

/// At most this many containers' spec views are kept ([`SpecViews`]);
/// past it the cache starts again empty.
const MAX_SPEC_VIEWS: usize = 4096;

/// What NRI shows of each container's spec, read from its bundle once and
/// kept until its resources change, rather than read and parsed again for
/// each of its events (PostCreate, Start, PostStart, ... each read it). A
/// view is valid while the container's applied resources (its record's,
/// which every update of the spec changes, under the container's lock, as
/// every event is sent) are the ones it was read with; the Remove event
/// drops it.
#[derive(Default)]
struct SpecViews(Mutex<HashMap<String, KeptView>>);

/// A kept view, and the record's resources it was read with.
type KeptView = (Vec<u8>, Arc<convert::SpecView>);

impl SpecViews {
    /// The view of container `id` whose record's resources are now
    /// `resources`, from `read` when none is kept for them.
    fn get(
        &self,
        id: &str,
        resources: &[u8],
        read: impl FnOnce() -> Option<convert::SpecView>,
    ) -> Option<Arc<convert::SpecView>> {
        let lock = || self.0.lock_unpoisoned();
        if let Some((key, view)) = lock().get(id) {
            if key[..] == *resources {
                return Some(view.clone());
            }
        }
        let view = Arc::new(read()?);
        self.put(id, resources, view.clone());
        Some(view)
    }

    /// Keeps `view` as container `id`'s while its record's resources are
    /// `resources`.
    fn put(&self, id: &str, resources: &[u8], view: Arc<convert::SpecView>) {
        let mut views = self.0.lock_unpoisoned();
        if views.len() >= MAX_SPEC_VIEWS {
            views.clear();
        }
        views.insert(id.to_string(), (resources.to_vec(), view));
    }

    fn forget(&self, id: &str) {
        self.0.lock_unpoisoned().remove(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

fn failed(e: berth_nri::Error) -> Error {
    Error::Internal(format!("NRI: {e}"))
}

impl NriPlugins {
    /// NRI over `records`, asking the core's update path through
    /// `updates`, not started yet.
    pub fn new(records: Records, updates: UpdateSender, cdi_dirs: Vec<PathBuf>) -> Arc<NriPlugins> {
        Arc::new(NriPlugins {
            nri: OnceLock::new(),
            records,
            updates,
            cdi_dirs,
            views: SpecViews::default(),
        })
    }

    /// Starts NRI: pre-installed plugins launched and synchronized, the
    /// socket open for the others.
    pub async fn start(&self, cfg: berth_nri::Config) -> Result<(), Error> {
        let host = Arc::new(NriHost {
            records: self.records.clone(),
            updates: self.updates.clone(),
        });
        let nri = Nri::start(cfg, host).await.map_err(failed)?;
        let _ = self.nri.set(nri);
        Ok(())
    }

    /// The running NRI, if started.
    pub fn nri(&self) -> Option<&Nri> {
        self.nri.get()
    }

    /// Plugins' updates of other containers and evictions, from their reply
    /// to `event` about container `held` (whose lifecycle lock the caller
    /// holds), applied before the caller answers, as containerd does; a
    /// failed update is logged and the call goes on. They run on a task of
    /// their own, waited for up to the request timeout: one stuck behind
    /// another call's lock then finishes after the answer rather than
    /// being cut in half. Updates and evictions of `held` itself are
    /// refused (it is being created, or stopped).
    async fn apply_now(
        &self,
        event: &'static str,
        held: &str,
        mut updates: Vec<berth_nri::api::ContainerUpdate>,
        mut evict: Vec<berth_nri::api::ContainerEviction>,
    ) {
        if updates.is_empty() && evict.is_empty() {
            return;
        }
        let Some(nri) = self.nri() else { return };
        updates.retain(|u| {
            let own = u.container_id == held;
            if own {
                tracing::warn!(%event, container = %held, "NRI plugin's update of the container of the event itself refused");
            }
            !own
        });
        evict.retain(|e| {
            let own = e.container_id == held;
            if own {
                tracing::warn!(%event, container = %held, reason = %e.reason, "NRI plugin's eviction of the container of the event itself refused");
            }
            !own
        });
        let applied = self.updates.apply(event, updates, evict);
        match tokio::time::timeout(nri.request_timeout(), applied).await {
            Ok(failed) if failed.is_empty() => {}
            Ok(failed) => {
                let ids: Vec<&str> = failed.iter().map(|u| u.container_id.as_str()).collect();
                tracing::warn!(%event, failed = ?ids, "NRI plugins' updates failed");
            }
            Err(_) => tracing::warn!(
                %event,
                "NRI plugins' updates not done within the request timeout: they go on after the answer"
            ),
        }
    }

    /// What NRI shows of `container`'s spec (kept, see [`SpecViews`]).
    fn spec_of(&self, container: &Container) -> Option<Arc<convert::SpecView>> {
        let id = &container.meta.id;
        self.views.get(id, &container.status().resources, || {
            self.records.read_spec(id)
        })
    }
}

#[async_trait]
impl Plugins for NriPlugins {
    async fn block_sync(&self) -> SyncBlock {
        match self.nri() {
            Some(nri) => Box::new(nri.block_plugin_sync().await),
            None => Box::new(()),
        }
    }

    async fn pod_event(&self, event: PodEvent, pod: &Sandbox) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let wanted = match event {
            PodEvent::Run => Event::RUN_POD_SANDBOX,
            PodEvent::Stop => Event::STOP_POD_SANDBOX,
            PodEvent::Remove => Event::REMOVE_POD_SANDBOX,
            PodEvent::PostUpdate => Event::POST_UPDATE_POD_SANDBOX,
        };
        if !nri.wants(wanted) {
            return Ok(());
        }
        let p = convert::pod(pod);
        match event {
            PodEvent::Run => nri.run_pod_sandbox(&p).await,
            PodEvent::Stop => nri.stop_pod_sandbox(&p).await,
            PodEvent::Remove => nri.remove_pod_sandbox(&p).await,
            PodEvent::PostUpdate => nri.post_update_pod_sandbox(&p).await,
        }
        .map_err(failed)
    }

    async fn update_pod(
        &self,
        pod: &Sandbox,
        overhead: Option<&v1::LinuxContainerResources>,
        resources: Option<&v1::LinuxContainerResources>,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let overhead = overhead.map(convert::resources_from_cri);
        let resources = resources.map(convert::resources_from_cri);
        nri.update_pod_sandbox(&convert::pod(pod), overhead.as_ref(), resources.as_ref())
            .await
            .map_err(failed)
    }

    async fn create_container(
        &self,
        pod: &Sandbox,
        container: &Container,
        spec: &mut Spec,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        // Nothing to ask or check: no spec converted.
        if !nri.wants_create() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let view = convert::SpecView::of(spec);
        let (p, c) = (
            convert::pod(pod),
            convert::container(container, Some(&view)),
        );
        crate::counters::step_done("nri.create_container.convert", started.elapsed());
        let result =
            crate::counters::timed("nri.create_container.plugins", nri.create_container(&p, &c))
                .await
                .map_err(failed)?;
        let started = std::time::Instant::now();
        adjust::apply(
            &container.meta.id,
            spec,
            &result.adjust,
            &result.owners,
            &self.cdi_dirs,
        )?;
        crate::counters::step_done("nri.create_container.adjust", started.elapsed());
        let id = &container.meta.id;
        // The spec as it is written to the bundle: PostCreate and the events
        // after it show it without reading it back.
        let adjusted = Arc::new(convert::SpecView::of(spec));
        self.views.put(id, &container.status().resources, adjusted);
        self.apply_now("CreateContainer", id, result.updates, result.evict)
            .await;
        Ok(())
    }

    async fn update_container(
        &self,
        pod: &Sandbox,
        container: &Container,
        resources: &mut v1::LinuxContainerResources,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let c = convert::container(container, self.spec_of(container).as_deref());
        let asked = convert::resources_from_cri(resources);
        let result = nri
            .update_container(&convert::pod(pod), &c, &asked)
            .await
            .map_err(failed)?;
        let beyond = convert::beyond_cri(&result.resources);
        if !beyond.is_empty() {
            let id = &container.meta.id;
            let plugin = convert::owners_of(&result.owners, id, &beyond);
            return Err(Error::InvalidArgument(convert::refusal(
                &plugin, id, &beyond,
            )));
        }
        *resources = convert::overlay_cri(resources.clone(), &result.resources);
        let id = &container.meta.id;
        self.apply_now("UpdateContainer", id, result.updates, result.evict)
            .await;
        Ok(())
    }

    async fn container_event(
        &self,
        event: ContainerEvent,
        pod: &Sandbox,
        container: &Container,
    ) -> Result<(), Error> {
        let Some(nri) = self.nri() else { return Ok(()) };
        let wanted = match event {
            ContainerEvent::PostCreate => Event::POST_CREATE_CONTAINER,
            ContainerEvent::Start => Event::START_CONTAINER,
            ContainerEvent::PostStart => Event::POST_START_CONTAINER,
            ContainerEvent::PostUpdate => Event::POST_UPDATE_CONTAINER,
            ContainerEvent::Remove => Event::REMOVE_CONTAINER,
            ContainerEvent::Stop => Event::STOP_CONTAINER,
        };
        if event == ContainerEvent::Remove {
            self.views.forget(&container.meta.id);
        }
        // An event nobody listens to costs nothing (not even the spec read).
        if !nri.wants(wanted) {
            return Ok(());
        }
        let (p, c) = (
            convert::pod(pod),
            convert::container(container, self.spec_of(container).as_deref()),
        );
        match event {
            ContainerEvent::PostCreate => nri.post_create_container(&p, &c).await,
            ContainerEvent::Start => nri.start_container(&p, &c).await,
            ContainerEvent::PostStart => nri.post_start_container(&p, &c).await,
            ContainerEvent::PostUpdate => nri.post_update_container(&p, &c).await,
            ContainerEvent::Remove => nri.remove_container(&p, &c).await,
            ContainerEvent::Stop => {
                let result = nri.stop_container(&p, &c).await.map_err(failed)?;
                let id = &container.meta.id;
                self.apply_now("StopContainer", id, result.updates, Vec::new())
                    .await;
                Ok(())
            }
        }
        .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn view(arg: &str) -> convert::SpecView {
        convert::SpecView {
            args: vec![arg.to_string()],
            ..Default::default()
        }
    }

    #[test]
    fn a_spec_view_is_read_once_until_the_resources_change_or_it_is_forgotten() {
        let views = SpecViews::default();
        let reads = Cell::new(0);
        let read = |arg: &'static str| {
            let reads = &reads;
            move || {
                reads.set(reads.get() + 1);
                Some(view(arg))
            }
        };
        assert_eq!(views.get("c1", b"", read("a")).unwrap().args, ["a"]);
        assert_eq!(views.get("c1", b"", read("b")).unwrap().args, ["a"]);
        assert_eq!(reads.get(), 1, "kept while the resources are the same");
        // An update changed the resources (and the spec): read again.
        assert_eq!(views.get("c1", b"r2", read("b")).unwrap().args, ["b"]);
        assert_eq!(reads.get(), 2);
        views.forget("c1");
        assert_eq!(views.get("c1", b"r2", read("c")).unwrap().args, ["c"]);
        assert_eq!(reads.get(), 3, "forgotten at Remove");
        // No spec (no bundle): nothing kept, asked again next time.
        assert!(views.get("c2", b"", || None).is_none());
        assert_eq!(views.len(), 1);
    }

    #[test]
    fn a_view_kept_at_create_is_not_read_again() {
        let views = SpecViews::default();
        views.put("c1", b"", Arc::new(view("made")));
        let read = || -> Option<convert::SpecView> { panic!("the bundle was read again") };
        assert_eq!(views.get("c1", b"", read).unwrap().args, ["made"]);
        // Once an update changed the resources, the bundle is read.
        assert_eq!(
            views.get("c1", b"r2", || Some(view("new"))).unwrap().args,
            ["new"]
        );
    }

    #[test]
    fn spec_views_are_bounded() {
        let views = SpecViews::default();
        for i in 0..MAX_SPEC_VIEWS + 10 {
            views.get(&format!("c{i}"), b"", || Some(view("x")));
        }
        assert!(views.len() <= MAX_SPEC_VIEWS);
    }
}
