//! The image store: pulls (single-flight, concurrent layers, no-progress
//! timeout), image records, lookup, removal and garbage collection.
//!
//! Records are one JSON file per image (`images/<config-hex>.json`), written
//! atomically before memory is changed. A node holds tens to hundreds of
//! images, each record changes on its own, and a torn write can only ever
//! lose the one record being written: an embedded database would add a
//! dependency and a recovery story for no gain at this size.
//!
//! Blobs and snapshots are shared between images. A pull *leases* every
//! digest and chain id it is about to use before it looks at the disk, and the
//! garbage collector never takes a leased or referenced item: it checks the
//! lease and renames a victim away under the leases' lock (one item at a
//! time), and deletes it after.
//!
//! Three locks, so that a reader never waits for a disk: readers (ListImages,
//! ImageStatus, CreateContainer's lookup) take the images' lock only to clone
//! one `Arc` (the images are replaced whole on a change, copy on write);
//! writers (records, removal, garbage collection) are serialised by the
//! writers' lock, held across their record writes, fsyncs and renames; leases
//! and snapshot sizes have a lock of their own, held for one map change or one
//! check-and-rename. Order: writers, then images or leases; never the reverse.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::StreamExt;
use tokio::sync::{mpsc, Semaphore};

use crate::artifact;
use crate::auth::Auth;
use crate::client::ClientCache;
use crate::config::RegistryConfig;
use crate::content::{self, Paths, Usage, TMP_PREFIX};
use crate::error::Error;
use crate::image::{self, Image};
use crate::layer::{self, Active, ChannelReader, LayerJob, Msg, Progress};
use crate::parse;
use crate::progress::{ByteTicker, LayerState, PullWatcher, Reporter, ResolvedImage};
use crate::reference::{self, Reference};
use crate::remote::{self, Remote};

/// Disk used by the image store (blobs, snapshots and records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsUsage {
    /// The store's root directory (CRI `FilesystemIdentifier.mountpoint`).
    pub path: PathBuf,
    /// Bytes allocated.
    pub used_bytes: u64,
    /// Inodes used.
    pub inodes_used: u64,
}

/// Chain ids of snapshots the garbage collector must keep even when no image
/// names them (e.g. the lowerdirs of running containers whose image was
/// removed). Called with the store's writers' lock held: it may read the
/// store, never change it.
///
/// `None` means "not known yet" (the users of snapshots have not been
/// loaded): garbage collection then removes nothing at all.
pub type GcRoots = Arc<dyn Fn() -> Option<Vec<String>> + Send + Sync>;

type PullFuture = Shared<BoxFuture<'static, Result<Image, Error>>>;

/// A pull under way: its number (a later pull of the same key is
/// another), its result and its progress.
struct PullEntry {
    id: u64,
    result: PullFuture,
    reporter: Arc<Reporter>,
}

/// Images on disk, and the way to get more.
#[derive(Clone)]
pub struct ImageStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) paths: Paths,
    pub(crate) cfg: RegistryConfig,
    clients: ClientCache,
    pub(crate) same_owner: bool,
    /// What readers see; replaced whole by a writer (see the module's doc).
    images: Mutex<Images>,
    /// Held by every writer across its disk work: the generation of the
    /// last record written.
    writer: Mutex<u64>,
    /// Leases and snapshot sizes.
    disk: Mutex<Disk>,
    /// Test hook: called after each record is written, before it is seen.
    #[cfg(test)]
    pub(crate) after_record: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    pulls: Mutex<HashMap<String, PullEntry>>,
    next_pull: AtomicU64,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    gc_roots: RwLock<Option<GcRoots>>,
}

/// The store's images at one moment, ordered by id: taking it costs one
/// `Arc` clone, and it stays as it was while the store changes.
#[derive(Clone, Default)]
pub struct Images(Arc<BTreeMap<String, Arc<Image>>>);

impl Images {
    /// The images, ordered by id.
    pub fn iter(&self) -> impl Iterator<Item = &Image> + '_ {
        self.0.values().map(|i| &**i)
    }

    /// How many images.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No image at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Leases and the sizes of snapshots.
#[derive(Default)]
pub(crate) struct Disk {
    leases: HashMap<String, usize>,
    pub(crate) usage: HashMap<String, Usage>,
}

/// The writers' lock, held: the generation of the last record written.
pub(crate) type Writer<'a> = MutexGuard<'a, u64>;

/// One image to record ([`Inner::register`]): the record to start from
/// when the store has none for its id, and the names to add.
pub(crate) struct Registration {
    pub fresh: Image,
    pub tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub manifests: Vec<String>,
}

/// Keeps digests and chain ids from the garbage collector while held.
pub(crate) struct Lease {
    inner: Arc<Inner>,
    keys: Vec<String>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut disk = self.inner.disk();
        for key in &self.keys {
            if let Some(n) = disk.leases.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    disk.leases.remove(key);
                }
            }
        }
    }
}

pub(crate) fn join_err(e: tokio::task::JoinError) -> Error {
    Error::Internal(format!("background task failed: {e}"))
}

impl ImageStore {
    /// Opens (creating if needed) the store under `root`: loads the image
    /// records, removes leftovers of interrupted pulls and collects garbage.
    pub async fn open(root: &Path, cfg: RegistryConfig) -> Result<ImageStore, Error> {
        Self::open_with_roots(root, cfg, None).await
    }

    /// [`ImageStore::open`] with the callback that names the snapshots other
    /// users (containers) hold, in force from the first collection on.
    pub async fn open_with_roots(
        root: &Path,
        cfg: RegistryConfig,
        roots: Option<GcRoots>,
    ) -> Result<ImageStore, Error> {
        cfg.validate()?;
        let inner = Arc::new(Inner {
            paths: Paths::new(root),
            cfg,
            clients: ClientCache::default(),
            same_owner: nix::unistd::geteuid().is_root(),
            images: Mutex::new(Images::default()),
            writer: Mutex::new(0),
            disk: Mutex::new(Disk::default()),
            #[cfg(test)]
            after_record: Mutex::new(None),
            pulls: Mutex::new(HashMap::new()),
            next_pull: AtomicU64::new(0),
            locks: Mutex::new(HashMap::new()),
            gc_roots: RwLock::new(roots),
        });
        let loader = inner.clone();
        tokio::task::spawn_blocking(move || loader.load())
            .await
            .map_err(join_err)??;
        Ok(ImageStore { inner })
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.inner.paths.root
    }

    /// The registry configuration in use.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.cfg
    }

    /// Pulls `reference` (normalised: `busybox` is
    /// `docker.io/library/busybox:latest`) and returns the image. Concurrent
    /// pulls of one reference with the same credentials share one download;
    /// the pull runs on its own task, so a caller that goes away does not
    /// cut it short for the others.
    pub async fn pull(&self, reference: &str, auth: Option<Auth>) -> Result<Image, Error> {
        self.start_pull(reference, auth)?.result().await
    }

    /// Starts [`ImageStore::pull`] (or joins the same pull under way) and
    /// returns at once, with a watcher of its progress. Dropping the
    /// [`Pulling`] does not stop the pull.
    pub fn start_pull(&self, reference: &str, auth: Option<Auth>) -> Result<Pulling, Error> {
        let parsed = Reference::parse(reference)?;
        let key = format!("{parsed}\n{}", Auth::fingerprint(auth.as_ref()));
        let mut pulls = self.inner.pulls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = pulls.get(&key) {
            return Ok(Pulling {
                watcher: entry.reporter.watch(),
                result: entry.result.clone(),
            });
        }
        let id = self.inner.next_pull.fetch_add(1, Ordering::Relaxed);
        let reporter = Arc::new(Reporter::default());
        let watcher = reporter.watch();
        let (inner, task_key, task_reporter) = (self.inner.clone(), key.clone(), reporter.clone());
        // The task forgets itself when done, whoever still waits.
        let task = tokio::spawn(async move {
            // Its watchers hear the end however the task ends (a panic too).
            let end = EndOnDrop(task_reporter);
            let result = inner.clone().pull(parsed, auth, &end.0).await;
            {
                let mut pulls = inner.pulls.lock().unwrap_or_else(|p| p.into_inner());
                if pulls.get(&task_key).is_some_and(|e| e.id == id) {
                    pulls.remove(&task_key);
                }
            }
            drop(end);
            result
        });
        let f = async move { task.await.map_err(join_err)? }
            .boxed()
            .shared();
        pulls.insert(
            key,
            PullEntry {
                id,
                result: f.clone(),
                reporter,
            },
        );
        Ok(Pulling { watcher, result: f })
    }

    /// The image named by `reference_or_id`: a full id (`sha256:…`), a
    /// reference (tag or digest, normalised), or a unique id prefix.
    pub fn get(&self, reference_or_id: &str) -> Option<Image> {
        self.with(reference_or_id, Image::clone)
    }

    /// `f` of the image named by `reference_or_id`, without copying the
    /// image (for callers that need one field of it, many times over).
    /// Never waits for a pull, a removal or a collection in progress.
    pub fn with<R>(&self, reference_or_id: &str, f: impl FnOnce(&Image) -> R) -> Option<R> {
        let images = self.inner.snapshot();
        find(&images, reference_or_id).map(|i| f(i))
    }

    /// Every image, ordered by id: a snapshot, not a copy (see [`Images`]).
    pub fn list(&self) -> Images {
        self.inner.snapshot()
    }

    /// Removes the image named by `reference_or_id` with all its tags, then
    /// the blobs and snapshots no image uses any more. `Ok(false)` when there
    /// was no such image.
    pub async fn remove(&self, reference_or_id: &str) -> Result<bool, Error> {
        let inner = self.inner.clone();
        let query = reference_or_id.to_string();
        tokio::task::spawn_blocking(move || inner.remove(&query))
            .await
            .map_err(join_err)?
    }

    /// Sets the pinned flag of an image; `Ok(false)` when there is no such image.
    pub async fn set_pinned(&self, reference_or_id: &str, pinned: bool) -> Result<bool, Error> {
        let inner = self.inner.clone();
        let query = reference_or_id.to_string();
        tokio::task::spawn_blocking(move || {
            let mut writer = inner.writer();
            let Some(mut image) = find(&inner.snapshot(), &query).map(|i| (**i).clone()) else {
                return Ok(false);
            };
            image.pinned = pinned;
            inner.write_records(&mut writer, vec![image])?;
            Ok(true)
        })
        .await
        .map_err(join_err)?
    }

    /// Imports the images of a docker archive, an OCI archive (tar files)
    /// or an OCI layout directory at `path` (absolute; a symlink, device or
    /// FIFO is refused) with their names, as a pull would record them.
    /// All or nothing: on an error no image is recorded (see `archive.rs`).
    pub async fn import(&self, path: &Path) -> Result<Vec<Image>, Error> {
        let inner = self.inner.clone();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || inner.import(&path))
            .await
            .map_err(join_err)?
    }

    /// Writes the images named by `images` (references or ids) as an OCI
    /// archive with Docker's `manifest.json` to `out`, on a blocking thread
    /// (`out` may block): under the names asked for, or with `all_tags`
    /// under every name of each image (see `archive.rs`).
    pub async fn export<W: std::io::Write + Send + 'static>(
        &self,
        images: Vec<String>,
        all_tags: bool,
        out: W,
    ) -> Result<(), Error> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.export(&images, all_tags, out))
            .await
            .map_err(join_err)?
    }

    /// Collects unused blobs and snapshots now (also done by `remove`).
    pub async fn gc(&self) -> Result<(), Error> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let victims = inner.collect_garbage(&inner.writer())?;
            inner.delete(victims);
            Ok(())
        })
        .await
        .map_err(join_err)?
    }

    /// The dirs of snapshots `chain_ids`, in the order given.
    pub fn snapshot_dirs(&self, chain_ids: &[String]) -> Vec<PathBuf> {
        chain_ids
            .iter()
            .map(|c| self.inner.paths.snapshot_fs(c))
            .collect()
    }

    /// The overlay lowerdirs of `image`, top layer first (overlayfs order).
    pub fn lowerdirs(&self, image: &Image) -> Vec<PathBuf> {
        image
            .chain_ids()
            .iter()
            .rev()
            .map(|c| self.inner.paths.snapshot_fs(c))
            .collect()
    }

    /// Bytes and inodes used by the store.
    pub fn fs_info(&self) -> FsUsage {
        let mut used = {
            let disk = self.inner.disk();
            disk.usage.values().fold(Usage::default(), |a, u| Usage {
                bytes: a.bytes + u.bytes,
                inodes: a.inodes + u.inodes,
            })
        };
        for dir in [&self.inner.paths.blobs, &self.inner.paths.images] {
            if let Ok(u) = content::measure(dir) {
                used.bytes += u.bytes;
                used.inodes += u.inodes;
            }
        }
        FsUsage {
            path: self.inner.paths.root.clone(),
            used_bytes: used.bytes,
            inodes_used: used.inodes,
        }
    }
}

/// Tells a pull's watchers it ended, when dropped.
struct EndOnDrop(Arc<Reporter>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// A pull under way ([`ImageStore::start_pull`]): its progress, and its
/// result.
pub struct Pulling {
    watcher: PullWatcher,
    result: PullFuture,
}

impl Pulling {
    /// The pull's progress, from where it stands.
    pub fn watcher(&mut self) -> &mut PullWatcher {
        &mut self.watcher
    }

    /// Waits for the pull's end: the image, or why not.
    pub async fn result(self) -> Result<Image, Error> {
        self.result.await
    }
}

/// Lookup: id, then reference, then unique id prefix.
pub(crate) fn find<'a>(images: &'a Images, query: &str) -> Option<&'a Arc<Image>> {
    let images = &images.0;
    if let Some(hex) = query.strip_prefix("sha256:") {
        if reference::is_sha256_hex(hex) {
            return images.get(query);
        }
    }
    // A stored tag as it is (kubelet asks by the name the pod spec gives,
    // often the full one): the stored tags are normalized, and a normalized
    // name parses to itself, so this finds what the parse below would,
    // without parsing.
    if let Some(found) = images
        .values()
        .find(|i| i.repo_tags.iter().any(|t| t == query))
    {
        return Some(found);
    }
    if let Ok(r) = Reference::parse(query) {
        let found = match r.digest() {
            Some(d) => {
                let wanted = r.with_digest(d);
                images.values().find(|i| i.repo_digests.contains(&wanted))
            }
            None => r
                .tagged()
                .and_then(|t| images.values().find(|i| i.repo_tags.contains(&t))),
        };
        if found.is_some() {
            return found;
        }
    }
    let hex = query.strip_prefix("sha256:").unwrap_or(query);
    if hex.is_empty()
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut matches = images.values().filter(|i| i.id_hex().starts_with(hex));
    match (matches.next(), matches.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

impl Inner {
    /// The images as they are now (the images' lock held for one clone).
    pub(crate) fn snapshot(&self) -> Images {
        self.images
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the images with `f` of a copy of them; with the writers'
    /// lock held (`_writer`), so that no change is lost.
    fn publish(&self, _writer: &Writer<'_>, f: impl FnOnce(&mut BTreeMap<String, Arc<Image>>)) {
        let mut map = (*self.snapshot().0).clone();
        f(&mut map);
        *self.images.lock().unwrap_or_else(|p| p.into_inner()) = Images(Arc::new(map));
    }

    pub(crate) fn writer(&self) -> Writer<'_> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lease(self: &Arc<Self>, keys: Vec<String>) -> Lease {
        let mut disk = self.disk();
        for key in &keys {
            *disk.leases.entry(key.clone()).or_default() += 1;
        }
        Lease {
            inner: self.clone(),
            keys,
        }
    }

    pub(crate) fn key_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(key.to_string()).or_default().clone()
    }

    /// Start-up: directories, leftovers, records, usage, garbage.
    fn load(&self) -> Result<(), Error> {
        let p = &self.paths;
        p.create_dirs()
            .map_err(|e| Error::io("create dirs under", &p.root, e))?;
        for entry in read_dir(&p.ingest)? {
            let _ = std::fs::remove_file(entry.path());
        }
        let mut writer = self.writer();
        let mut usages = HashMap::new();
        for entry in read_dir(&p.snapshots)? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TMP_PREFIX) {
                let _ = std::fs::remove_dir_all(entry.path());
            } else if reference::is_sha256_hex(&name) {
                let chain_id = format!("sha256:{name}");
                let usage = std::fs::read(entry.path().join("usage.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .or_else(|| content::measure(&entry.path().join("fs")).ok())
                    .unwrap_or_default();
                usages.insert(chain_id, usage);
            }
        }
        self.disk().usage.extend(usages);
        let mut images = BTreeMap::new();
        for entry in read_dir(&p.images)? {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let parsed = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| parse::image_record(&b));
            match parsed {
                Ok(image) => {
                    *writer = (*writer).max(image.generation);
                    images.insert(image.id.clone(), Arc::new(image));
                }
                Err(e) => {
                    // Kept aside for a human; its content is collected.
                    tracing::error!(path = %path.display(), error = %e, "unreadable image record set aside");
                    let _ = std::fs::rename(&path, path.with_extension("json.corrupt"));
                }
            }
        }
        // A crash between two record writes can leave a tag on two images:
        // the newer record keeps it.
        let mut owner: HashMap<String, (u64, String)> = HashMap::new();
        for image in images.values() {
            for tag in &image.repo_tags {
                let e = owner
                    .entry(tag.clone())
                    .or_insert((image.generation, image.id.clone()));
                if image.generation > e.0 {
                    *e = (image.generation, image.id.clone());
                }
            }
        }
        let mut fixed = Vec::new();
        for image in images.values() {
            let keep: Vec<String> = image
                .repo_tags
                .iter()
                .filter(|t| owner.get(*t).is_some_and(|(_, id)| id == &image.id))
                .cloned()
                .collect();
            if keep != image.repo_tags {
                let mut image = (**image).clone();
                image.repo_tags = keep;
                fixed.push(image);
            }
        }
        self.publish(&writer, |m| *m = images);
        if !fixed.is_empty() {
            self.write_records(&mut writer, fixed)?;
        }
        let victims = self.collect_garbage(&writer)?;
        drop(writer);
        self.delete(victims);
        Ok(())
    }

    /// Writes records (persist, then memory), with the writers' lock held:
    /// readers see the images written (all of them at once) only after.
    pub(crate) fn write_records(
        &self,
        writer: &mut Writer<'_>,
        images: Vec<Image>,
    ) -> Result<(), Error> {
        let mut written = Vec::with_capacity(images.len());
        let mut result = Ok(());
        for mut image in images {
            **writer += 1;
            image.generation = **writer;
            let path = self.paths.image_record(&image.id);
            let done = serde_json::to_vec_pretty(&image)
                .map_err(|e| Error::Internal(format!("encoding image record: {e}")))
                .and_then(|bytes| {
                    content::write_atomic(&path, &bytes).map_err(|e| Error::io("write", &path, e))
                });
            #[cfg(test)]
            if let Some(hook) = &*self.after_record.lock().unwrap() {
                hook();
            }
            match done {
                Ok(()) => written.push(image),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // What is on disk is what readers see, even when a later write failed.
        if !written.is_empty() {
            self.publish(writer, |m| {
                for image in written {
                    m.insert(image.id.clone(), Arc::new(image));
                }
            });
        }
        result
    }

    fn remove(&self, query: &str) -> Result<bool, Error> {
        let writer = self.writer();
        let Some(id) = find(&self.snapshot(), query).map(|i| i.id.clone()) else {
            return Ok(false);
        };
        let path = self.paths.image_record(&id);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &path, e)),
        }
        content::sync_dir(&self.paths.images)
            .map_err(|e| Error::io("fsync", &self.paths.images, e))?;
        self.publish(&writer, |m| {
            m.remove(&id);
        });
        let victims = self.collect_garbage(&writer)?;
        drop(writer);
        self.delete(victims);
        Ok(true)
    }

    /// Decides, with the writers' lock held (so no image comes or goes),
    /// what no image or root uses; removes such blobs and renames such
    /// snapshots away (deleted by [`Inner::delete`]), each after checking,
    /// under the leases' lock, that no pull or import has leased it since.
    pub(crate) fn collect_garbage(&self, _writer: &Writer<'_>) -> Result<Vec<PathBuf>, Error> {
        let mut keep: HashSet<String> = HashSet::new();
        for image in self.snapshot().iter() {
            keep.insert(image.id.clone());
            keep.extend(image.manifests.iter().cloned());
            keep.extend(image.artifact.iter().map(|a| a.config.clone()));
            for layer in &image.layers {
                keep.insert(layer.digest.clone());
                keep.insert(layer.chain_id.clone());
            }
        }
        let roots = self
            .gc_roots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(roots) = roots {
            match roots() {
                Some(in_use) => keep.extend(in_use),
                // Who uses what is not known yet: remove nothing.
                None => return Ok(Vec::new()),
            }
        }
        for entry in read_dir(&self.paths.blobs)? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let digest = format!("sha256:{name}");
            if !keep.contains(&digest) {
                let disk = self.disk();
                if disk.leases.contains_key(&digest) {
                    continue;
                }
                let path = entry.path();
                std::fs::remove_file(&path).map_err(|e| Error::io("remove blob", &path, e))?;
            }
        }
        let mut victims = Vec::new();
        for entry in read_dir(&self.paths.snapshots)? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let chain_id = format!("sha256:{name}");
            if keep.contains(&chain_id) {
                continue;
            }
            let mut disk = self.disk();
            if disk.leases.contains_key(&chain_id) {
                continue;
            }
            let away = self.paths.snapshots.join(format!("{TMP_PREFIX}gc-{name}"));
            std::fs::rename(entry.path(), &away)
                .map_err(|e| Error::io("move away snapshot", entry.path(), e))?;
            disk.usage.remove(&chain_id);
            victims.push(away);
        }
        Ok(victims)
    }

    pub(crate) fn delete(&self, victims: Vec<PathBuf>) {
        for dir in victims {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(path = %dir.display(), error = %e, "removing an unused snapshot failed; retried at next start");
            }
        }
    }

    /// One pull, with the no-progress watchdog around it.
    async fn pull(
        self: Arc<Self>,
        reference: Reference,
        auth: Option<Auth>,
        reporter: &Reporter,
    ) -> Result<Image, Error> {
        let started = std::time::Instant::now();
        let progress = Arc::new(Progress::new());
        let active = Arc::new(Active::default());
        let timeout = self.cfg.progress_timeout;
        let work =
            self.clone()
                .pull_work(&reference, auth, progress.clone(), active.clone(), reporter);
        let result = if timeout.is_zero() {
            work.await
        } else {
            tokio::select! {
                r = work => r,
                _ = progress.stalled(timeout) => Err(Error::ProgressTimeout {
                    reference: reference.to_string(),
                    timeout,
                }),
            }
        };
        if result.is_err() {
            progress.cancel();
            // Unpacking threads see their input vanish and clean up; wait so
            // that nothing of a failed pull is left when it answers.
            active.wait_idle(std::time::Duration::from_secs(60)).await;
        }
        match &result {
            Ok(image) => {
                let secs = started.elapsed().as_secs_f64();
                tracing::info!(image = %reference, id = %image.id, size = image.size, seconds = format!("{secs:.2}"), "pulled")
            }
            Err(e) => tracing::warn!(image = %reference, error = %e, "pull failed"),
        }
        result
    }

    async fn pull_work(
        self: Arc<Self>,
        reference: &Reference,
        auth: Option<Auth>,
        progress: Arc<Progress>,
        active: Arc<Active>,
        reporter: &Reporter,
    ) -> Result<Image, Error> {
        let name = reference.to_string();
        let (remote, resolved) = Remote::resolve(
            &self.cfg,
            &self.clients,
            reference,
            auth.as_ref(),
            &progress,
        )
        .await?;
        let bad = |digest: &str, reason: String| Error::bad(&name, digest, reason);
        let refused = |r: parse::Refused| bad(&r.digest, r.reason);
        let check = |digest: &str| reference::check_digest(digest).map_err(|r| bad(digest, r));
        check(&resolved.config.digest)?;
        // Before any blob is fetched: the layer count and sizes, and an
        // artifact's whole layer list (titles included).
        parse::check_layer_list(
            &resolved.manifest_digest,
            &resolved.layers,
            &self.cfg.unpack,
        )
        .map_err(refused)?;
        let artifact_type =
            parse::artifact_type(&resolved.config, resolved.artifact_type.as_deref());
        let artifact_layers = match artifact_type {
            Some(_) => Some(
                parse::artifact_layers(&resolved.manifest_digest, &resolved.layers)
                    .map_err(refused)?,
            ),
            None => None,
        };
        let manifest_digests: Vec<String> =
            resolved.documents.iter().map(|(d, _)| d.clone()).collect();
        let _manifest_lease = self.lease(manifest_digests.clone());
        for (digest, bytes) in &resolved.documents {
            let path = self.paths.blob(digest);
            content::store_blob(&self.paths, digest, bytes)
                .map_err(|e| Error::io("store blob", &path, e))?;
        }

        let config_desc = &resolved.config;
        let _config_lease = self.lease(vec![config_desc.digest.clone()]);
        let config_bytes = remote
            .small_blob(
                config_desc,
                &resolved.manifest_digest,
                remote::MAX_CONFIG,
                &progress,
            )
            .await?;
        // An artifact's config is kept as it is, never parsed.
        let (config, layers) = match artifact_layers {
            Some(layers) => (None, layers),
            None => {
                let config = parse::config(&config_bytes)
                    .map_err(|reason| bad(&config_desc.digest, reason))?;
                let layers = parse::layers(
                    &config,
                    &config_desc.digest,
                    &resolved.manifest_digest,
                    &resolved.layers,
                )
                .map_err(refused)?;
                (Some(config), layers)
            }
        };
        let config_path = self.paths.blob(&config_desc.digest);
        content::store_blob(&self.paths, &config_desc.digest, &config_bytes)
            .map_err(|e| Error::io("store blob", &config_path, e))?;

        let mut keys: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
        keys.extend(layers.iter().map(|l| l.chain_id.clone()));
        let _layer_lease = self.lease(keys);
        let id = match artifact_type {
            Some(_) => resolved.manifest_digest.clone(),
            None => config_desc.digest.clone(),
        };
        reporter.resolved(
            ResolvedImage {
                reference: name.clone(),
                digest: resolved.top_digest.clone(),
                id: id.clone(),
            },
            layers.iter().map(|l| (l.digest.clone(), l.size)).collect(),
        );

        // An artifact's files: their blobs are fetched only when the
        // snapshot of all of them is not there yet (leased above).
        let files = artifact_type
            .as_ref()
            .and_then(|_| artifact::files_of(&layers));
        let files_present = files
            .as_ref()
            .is_some_and(|(key, _)| self.paths.snapshot(key).is_dir());
        let downloads = Semaphore::new(self.cfg.max_concurrent_downloads);
        let unpacks = Semaphore::new(max_unpacks(self.cfg.max_concurrent_downloads));
        let this = &self;
        let jobs = layers.iter().enumerate().map(|(index, l)| {
            let is_file = artifact_type.is_some() && !parse::is_tar_layer(&l.media_type);
            let job = LayerJob {
                reference: name.clone(),
                digest: l.digest.clone(),
                size: l.size,
                diff_id: artifact_type.is_none().then(|| l.diff_id.clone()),
                chain_id: l.chain_id.clone(),
                same_owner: self.same_owner,
                file: is_file,
            };
            let ctx = LayerCtx {
                remote: &remote,
                progress: &progress,
                active: &active,
                downloads: &downloads,
                unpacks: &unpacks,
                report: LayerReport { reporter, index },
            };
            let present = is_file && files_present;
            async move {
                if present {
                    ctx.report.state(LayerState::AlreadyPresent);
                    return Ok(());
                }
                this.ensure_layer(ctx, job).await
            }
        });
        futures_util::future::try_join_all(jobs).await?;
        if let Some((key, files)) = files {
            self.ensure_files(key, files).await?;
        }

        let user = config
            .as_ref()
            .map(|c| c.image_config())
            .unwrap_or_default();
        let (uid, username) = image::split_user(&user.user);
        let size = config_bytes.len() as u64 + layers.iter().map(|l| l.size).sum::<u64>();
        let tag = reference.tagged();
        let repo_digest = reference.with_digest(&resolved.top_digest);
        let fresh = Image {
            id: id.clone(),
            repo_tags: Vec::new(),
            repo_digests: Vec::new(),
            size,
            uid,
            username,
            pinned: false,
            config: user,
            layers,
            manifests: Vec::new(),
            generation: 0,
            artifact: artifact_type.map(|artifact_type| image::Artifact {
                artifact_type,
                config: config_desc.digest.clone(),
            }),
        };
        let inner = self.clone();
        let registration = Registration {
            fresh,
            tags: tag.into_iter().collect(),
            repo_digests: vec![repo_digest],
            manifests: manifest_digests,
        };
        let mut images = tokio::task::spawn_blocking(move || inner.register(vec![registration]))
            .await
            .map_err(join_err)??;
        images
            .pop()
            .ok_or_else(|| Error::Internal(format!("{name}: registered no image")))
    }

    /// Records images (a pull's one, an archive's several) with their names,
    /// in one go under the lock: each record gains the tags, repo digests
    /// and manifests given; a tag moves from any other image that had it
    /// (that image stays, untagged, until removed, as in containerd).
    pub(crate) fn register(&self, new: Vec<Registration>) -> Result<Vec<Image>, Error> {
        let mut writer = self.writer();
        let current = self.snapshot();
        let mut changed: Vec<Image> = Vec::new();
        let mut ids = Vec::new();
        for reg in new {
            let id = reg.fresh.id.clone();
            let mut image = changed
                .iter()
                .find(|i| i.id == id)
                .cloned()
                .or_else(|| current.0.get(&id).map(|i| (**i).clone()))
                .unwrap_or(reg.fresh);
            for tag in &reg.tags {
                if !image.repo_tags.contains(tag) {
                    image.repo_tags.push(tag.clone());
                }
            }
            for d in reg.repo_digests {
                if !image.repo_digests.contains(&d) {
                    image.repo_digests.push(d);
                }
            }
            for d in reg.manifests {
                if !image.manifests.contains(&d) {
                    image.manifests.push(d);
                }
            }
            // The tags move: older images (and images changed before in
            // this same call) lose them.
            for tag in &reg.tags {
                for other in changed.iter_mut().filter(|o| o.id != id) {
                    other.repo_tags.retain(|t| t != tag);
                }
                for other in current.iter() {
                    if other.id != id
                        && other.repo_tags.contains(tag)
                        && !changed.iter().any(|c| c.id == other.id)
                    {
                        let mut other = other.clone();
                        other.repo_tags.retain(|t| t != tag);
                        changed.push(other);
                    }
                }
            }
            changed.retain(|c| c.id != id);
            changed.push(image);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        changed.retain(|c| current.0.get(&c.id).map(|i| &**i) != Some(c));
        self.write_records(&mut writer, changed)?;
        let now = self.snapshot();
        Ok(ids
            .iter()
            .filter_map(|id| now.0.get(id).map(|i| (**i).clone()))
            .collect())
    }

    /// Makes sure snapshot `job.chain_id` exists: from the stored blob if
    /// there is one, else downloaded and unpacked in one pass. A layer holds
    /// one of `unpacks` while it is unpacked, and one of `downloads` only
    /// while its bytes arrive: the next layer's download starts while this
    /// one finishes (its last chunks, the syncfs that makes it durable).
    async fn ensure_layer(self: &Arc<Self>, ctx: LayerCtx<'_>, job: LayerJob) -> Result<(), Error> {
        let LayerCtx {
            remote,
            progress,
            active,
            downloads,
            unpacks,
            report,
        } = ctx;
        // What the layer makes: a snapshot, or (an artifact's file) a blob.
        let (key, made) = match job.file {
            false => (&job.chain_id, self.paths.snapshot(&job.chain_id)),
            true => (&job.digest, self.paths.blob(&job.digest)),
        };
        let lock = self.key_lock(key);
        let _guard = lock.lock().await;
        if made.exists() {
            report.state(LayerState::AlreadyPresent);
            return Ok(());
        }
        let _unpacking = unpacks
            .acquire()
            .await
            .map_err(|_| Error::Internal("unpack semaphore closed".into()))?;
        let blob_path = self.paths.blob(&job.digest);
        if blob_path.is_file() {
            let (inner, progress, guard) = (self.clone(), progress.clone(), active.enter());
            let chain_id = job.chain_id.clone();
            let usage = tokio::task::spawn_blocking(move || {
                let _guard = guard;
                let file = File::open(&blob_path).map_err(|e| Error::io("open", &blob_path, e))?;
                layer::run_limited(
                    &job,
                    file,
                    false,
                    &inner.paths,
                    &progress,
                    &inner.cfg.unpack,
                )
            })
            .await
            .map_err(join_err)??;
            self.disk().usage.insert(chain_id, usage);
            report.state(LayerState::Unpacked);
            return Ok(());
        }

        let downloading = downloads
            .acquire()
            .await
            .map_err(|_| Error::Internal("download semaphore closed".into()))?;
        let blob = remote.blob_stream(&job.digest, job.size).await?;
        let (mut stream, host) = (blob.stream, blob.host);
        progress.touch();
        let started = std::time::Instant::now();
        let mut last_report = started;
        let (tx, rx) = mpsc::channel::<Msg>(16);
        let (inner, progress2, guard) = (self.clone(), progress.clone(), active.enter());
        let job2 = job.clone();
        let unpack = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            layer::run_limited(
                &job2,
                ChannelReader::new(rx),
                true,
                &inner.paths,
                &progress2,
                &inner.cfg.unpack,
            )
        });
        let mut received = 0u64;
        let mut ticker = ByteTicker::new();
        let download: Result<(), Error> = loop {
            match stream.next().await {
                Some(Ok(bytes)) => {
                    received += bytes.len() as u64;
                    progress.touch();
                    if ticker.due() {
                        report.bytes(received);
                    }
                    if last_report.elapsed() >= REPORT_EVERY {
                        last_report = std::time::Instant::now();
                        tracing::debug!(image = %job.reference, layer = %job.digest, from = %host, received, size = job.size, bytes_per_sec = rate(received, started), "downloading layer");
                    }
                    if received > job.size {
                        break Err(Error::bad(
                            &job.reference,
                            &job.digest,
                            "more bytes than the manifest says",
                        ));
                    }
                    if tx.send(Msg::Data(bytes)).await.is_err() {
                        break Ok(()); // the unpacker stopped: its error tells why
                    }
                }
                Some(Err(e)) => break Err(remote.stream_err(&job.digest, &host, &e)),
                None => {
                    let _ = tx.send(Msg::End).await;
                    report.state(LayerState::Downloaded);
                    break Ok(());
                }
            }
        };
        drop(tx);
        // What is left (at most the channel's chunks, then the syncfs) needs
        // no download slot.
        drop(downloading);
        let unpacked = unpack.await.map_err(join_err)?;
        download?;
        let usage = unpacked?;
        tracing::debug!(image = %job.reference, layer = %job.digest, from = %host, bytes = received, seconds = format!("{:.2}", started.elapsed().as_secs_f64()), bytes_per_sec = rate(received, started), "layer downloaded and unpacked");
        if !job.file {
            self.disk().usage.insert(job.chain_id, usage);
        }
        report.state(LayerState::Pulled);
        Ok(())
    }
}

/// What one layer of a pull works with ([`Inner::ensure_layer`]).
struct LayerCtx<'a> {
    remote: &'a Remote,
    progress: &'a Arc<Progress>,
    active: &'a Arc<Active>,
    downloads: &'a Semaphore,
    unpacks: &'a Semaphore,
    report: LayerReport<'a>,
}

/// One layer's line to its pull's [`Reporter`].
#[derive(Clone, Copy)]
struct LayerReport<'a> {
    reporter: &'a Reporter,
    index: usize,
}

impl LayerReport<'_> {
    fn state(&self, state: LayerState) {
        self.reporter.layer(self.index, state);
    }

    fn bytes(&self, received: u64) {
        self.reporter.bytes(self.index, received);
    }
}

/// Layers of one pull unpacked at once for `downloads` downloaded at once:
/// as many again finishing (their last chunks, their syncfs) while the next
/// ones download. Each holds bounded buffers (the channel, the decoder's and
/// the copy buffer: about 2 MiB).
fn max_unpacks(downloads: usize) -> usize {
    downloads.saturating_mul(2)
}

/// How often a long layer download logs its progress (at debug).
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Bytes per second since `since`.
fn rate(bytes: u64, since: std::time::Instant) -> u64 {
    let secs = since.elapsed().as_secs_f64();
    if secs > 0.0 {
        (bytes as f64 / secs) as u64
    } else {
        bytes
    }
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>, Error> {
    std::fs::read_dir(dir)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::io("read dir", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    /// Readers must answer within this while a writer is held (a bound on
    /// "not blocked", not a timing figure).
    const PROMPT: Duration = Duration::from_secs(2);

    fn image(n: u8, tag: &str) -> Image {
        Image {
            id: format!("sha256:{}", format!("{n:02x}").repeat(32)),
            repo_tags: vec![tag.to_string()],
            repo_digests: vec![],
            size: 1,
            uid: None,
            username: String::new(),
            pinned: false,
            config: Default::default(),
            layers: vec![],
            manifests: vec![],
            generation: 0,
            artifact: None,
        }
    }

    #[test]
    fn a_stored_tag_as_it_is_finds_what_its_parse_finds() {
        let images = Images(Arc::new(
            [
                image(1, "docker.io/library/busybox:latest"),
                image(2, "127.0.0.1:5000/pause:3.10"),
                image(3, "docker.io/library/busybox:1.36"),
            ]
            .into_iter()
            .map(|i| (i.id.clone(), Arc::new(i)))
            .collect(),
        ));
        let id = |q: &str| find(&images, q).map(|i| i.id[7..9].to_string());
        for (query, want) in [
            // As stored: the exact match.
            ("docker.io/library/busybox:latest", Some("01")),
            ("127.0.0.1:5000/pause:3.10", Some("02")),
            // Not as stored: through the parse, the same images.
            ("busybox", Some("01")),
            ("library/busybox:1.36", Some("03")),
            ("busybox:1.37", None),
            ("sha256:02", Some("02")),
        ] {
            assert_eq!(id(query).as_deref(), want, "{query}");
        }
    }

    fn registration(image: Image) -> Registration {
        Registration {
            tags: image.repo_tags.clone(),
            fresh: Image {
                repo_tags: vec![],
                ..image
            },
            repo_digests: vec![],
            manifests: vec![],
        }
    }

    /// What the readers (ListImages, ImageStatus, CreateContainer's
    /// lookup) see, asked on another thread: `None` when they did not
    /// answer within [`PROMPT`].
    fn read_promptly(store: &ImageStore, query: &str) -> Option<(usize, Option<String>)> {
        let (tx, rx) = std_mpsc::channel();
        let (store, query) = (store.clone(), query.to_string());
        std::thread::spawn(move || {
            let listed = store.list().len();
            let found = store.with(&query, |i| i.id.clone());
            let got = store.get(&query).map(|i| i.id);
            assert_eq!(found, got);
            let _ = tx.send((listed, found));
        });
        rx.recv_timeout(PROMPT).ok()
    }

    /// A hook that tells `entered` and waits for `release`.
    fn gate() -> (
        Box<dyn Fn() + Send + Sync>,
        std_mpsc::Receiver<()>,
        std_mpsc::SyncSender<()>,
    ) {
        let (entered_tx, entered) = std_mpsc::channel::<()>();
        let (release, release_rx) = std_mpsc::sync_channel::<()>(0);
        let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
        let hook = move || {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = release_rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(30));
        };
        (Box::new(hook), entered, release)
    }

    /// A pull held in the middle of recording its image (its record written
    /// and synced, not yet seen: where the store's one lock used to be
    /// held): the image readers answer at once, with the images as they
    /// were; the new one shows when the write is done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_do_not_wait_for_a_record_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path(), RegistryConfig::default())
            .await
            .unwrap();
        let old = image(1, "docker.io/library/old:1");
        store
            .inner
            .register(vec![registration(old.clone())])
            .unwrap();

        let (hook, entered, release) = gate();
        *store.inner.after_record.lock().unwrap() = Some(hook);
        let inner = store.inner.clone();
        let new = image(2, "docker.io/library/new:1");
        let writer = std::thread::spawn(move || inner.register(vec![registration(new)]));
        entered
            .recv_timeout(PROMPT)
            .expect("the record write began");

        assert_eq!(
            read_promptly(&store, "old:1"),
            Some((1, Some(old.id.clone()))),
            "readers waited for a record write"
        );
        assert_eq!(read_promptly(&store, "new:1"), Some((1, None)));

        release.send(()).unwrap();
        *store.inner.after_record.lock().unwrap() = None;
        writer.join().unwrap().unwrap();
        assert_eq!(store.list().len(), 2);
        assert!(store.get("new:1").is_some());
    }

    /// RemoveImage held in its garbage collection (the snapshot users'
    /// callback blocks): readers answer at once and already miss the
    /// removed image; a snapshot leased while the collection runs (a pull
    /// starting) is not taken, one nobody leased is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_and_leases_do_not_wait_for_garbage_collection() {
        let dir = tempfile::tempdir().unwrap();
        let armed = Arc::new(Mutex::new(None::<Box<dyn Fn() + Send + Sync>>));
        let roots: GcRoots = {
            let armed = armed.clone();
            Arc::new(move || {
                if let Some(hook) = &*armed.lock().unwrap() {
                    hook();
                }
                Some(Vec::new())
            })
        };
        let store = ImageStore::open_with_roots(dir.path(), RegistryConfig::default(), Some(roots))
            .await
            .unwrap();
        let (gone, kept) = (
            image(1, "docker.io/library/gone:1"),
            image(2, "docker.io/library/kept:1"),
        );
        store
            .inner
            .register(vec![registration(gone.clone()), registration(kept.clone())])
            .unwrap();
        let snapshot = |n: u8| {
            let chain_id = format!("sha256:{}", format!("{n:02x}").repeat(32));
            let fs = store.inner.paths.snapshot_fs(&chain_id);
            std::fs::create_dir_all(&fs).unwrap();
            (chain_id, fs)
        };
        let (leased_id, leased_fs) = snapshot(0xa1);
        let (_, unused_fs) = snapshot(0xa2);

        let (hook, entered, release) = gate();
        *armed.lock().unwrap() = Some(hook);
        let remover = {
            let store = store.clone();
            tokio::spawn(async move { store.remove("gone:1").await })
        };
        tokio::task::spawn_blocking(move || entered.recv_timeout(PROMPT))
            .await
            .unwrap()
            .expect("the collection began");

        assert_eq!(
            read_promptly(&store, "kept:1"),
            Some((1, Some(kept.id.clone()))),
            "readers waited for a garbage collection"
        );
        assert_eq!(read_promptly(&store, "gone:1"), Some((1, None)));
        let (tx, rx) = std_mpsc::channel();
        let inner = store.inner.clone();
        std::thread::spawn(move || {
            let lease = inner.lease(vec![leased_id]);
            let _ = tx.send(());
            std::thread::sleep(Duration::from_millis(500));
            drop(lease);
        });
        rx.recv_timeout(PROMPT)
            .expect("a lease waited for a garbage collection");

        release.send(()).unwrap();
        *armed.lock().unwrap() = None;
        assert!(remover.await.unwrap().unwrap());
        assert!(leased_fs.is_dir(), "a leased snapshot was collected");
        assert!(!unused_fs.exists(), "an unused snapshot was kept");
        assert_eq!(
            store
                .list()
                .iter()
                .map(|i| i.id.clone())
                .collect::<Vec<_>>(),
            vec![kept.id]
        );
    }

    /// An image record whose id is a path (a damaged or planted file): the
    /// store sets it aside at start instead of making paths of it, so
    /// removing the image by its tag deletes nothing outside the store.
    #[tokio::test]
    async fn an_image_record_with_a_path_for_an_id_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let paths = Paths::new(&root);
        paths.create_dirs().unwrap();
        let victim = dir.path().join("victim.json");
        std::fs::write(&victim, b"keep").unwrap();
        let image = Image {
            id: "sha256:../../victim".into(),
            repo_tags: vec!["docker.io/library/x:1".into()],
            repo_digests: vec![],
            size: 1,
            uid: None,
            username: String::new(),
            pinned: false,
            config: Default::default(),
            layers: vec![],
            manifests: vec![],
            generation: 1,
            artifact: None,
        };
        let record = paths.images.join(format!("{}.json", "a".repeat(64)));
        std::fs::write(&record, serde_json::to_vec(&image).unwrap()).unwrap();

        let store = ImageStore::open(&root, RegistryConfig::default())
            .await
            .unwrap();
        assert!(store.list().is_empty());
        assert!(!store.remove("x:1").await.unwrap());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(record.with_extension("json.corrupt").exists());
    }
}
