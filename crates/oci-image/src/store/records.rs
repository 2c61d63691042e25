//! The store's records on disk and in memory: loading them at start,
//! writing them (persist, then publish), registering images under their
//! names, removal and garbage collection.

use berth_lock::RwLockExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::content::{self, TMP_PREFIX};
use super::image::Image;
use super::{find, Inner, Registration, Writer};
use crate::error::Error;
use crate::parse;
use crate::reference;

impl Inner {
    /// Start-up: directories, leftovers, records, usage, garbage.
    pub(super) fn load(&self) -> Result<(), Error> {
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

    pub(super) fn remove(&self, query: &str) -> Result<bool, Error> {
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
        let roots = self.gc_roots.read_unpoisoned().clone();
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
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>, Error> {
    std::fs::read_dir(dir)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::io("read dir", dir, e))
}
