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

pub(crate) mod content;
pub(crate) mod image;
mod records;

use berth_lock::MutexExt;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use futures_util::future::{BoxFuture, FutureExt, Shared};

use crate::config::RegistryConfig;
use crate::error::Error;
use crate::pull::progress::{PullWatcher, Reporter};
use crate::reference::{self, Reference};
use crate::registry::auth::Auth;
use crate::registry::client::ClientCache;
use content::{Paths, Usage};
use image::Image;

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
    pub(crate) clients: ClientCache,
    pub(crate) same_owner: bool,
    /// What readers see; replaced whole by a writer (see the module's doc).
    pub(super) images: Mutex<Images>,
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
    pub(super) gc_roots: RwLock<Option<GcRoots>>,
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
    pub(super) leases: HashMap<String, usize>,
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
        let mut pulls = self.inner.pulls.lock_unpoisoned();
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
                let mut pulls = inner.pulls.lock_unpoisoned();
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
        self.images.lock_unpoisoned().clone()
    }

    /// Replaces the images with `f` of a copy of them; with the writers'
    /// lock held (`_writer`), so that no change is lost.
    pub(super) fn publish(
        &self,
        _writer: &Writer<'_>,
        f: impl FnOnce(&mut BTreeMap<String, Arc<Image>>),
    ) {
        let mut map = (*self.snapshot().0).clone();
        f(&mut map);
        *self.images.lock_unpoisoned() = Images(Arc::new(map));
    }

    pub(crate) fn writer(&self) -> Writer<'_> {
        self.writer.lock_unpoisoned()
    }

    pub(crate) fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock_unpoisoned()
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
        let mut locks = self.locks.lock_unpoisoned();
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(key.to_string()).or_default().clone()
    }
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
