//! The on-disk record of each attachment, so DEL and CHECK work after a
//! daemon restart: the network configuration used, the capability arguments
//! and `CNI_ARGS` given, and (once ADD succeeded) the final result, kept as the
//! raw JSON the last plugin printed.
//!
//! One file per (network, container id, interface):
//! `<cache_dir>/<network>+<container id>+<ifname>.json`. Network names and
//! container ids cannot contain `+`, so the name is unambiguous. Files are
//! written atomically (temp file, rename), not fsynced, as libcni writes its
//! own cache (containerd, CRI-O): a daemon that crashes still finds them;
//! what a power cut could lose is only needed while the attachment lives
//! (its netns, veth and port mappings go with the boot), and DEL works
//! without it (the current network, no `prevResult`).
//! The entry is written *before* the first plugin runs, so a crash in the
//! middle of ADD still leaves what DEL needs (e.g. portmap's port mappings).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{io_err, Error};

const KIND: &str = "berth-cni-attachment";
const VERSION: u32 = 1;

/// One attachment as recorded on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    pub kind: String,
    pub version: u32,
    pub network: String,
    pub container_id: String,
    pub if_name: String,
    pub netns: PathBuf,
    pub cni_args: String,
    /// The network configuration list used for ADD.
    pub config: Value,
    pub capability_args: Map<String, Value>,
    /// The final ADD result; None until every plugin succeeded.
    pub result: Option<Value>,
}

impl Entry {
    pub(crate) fn new(
        network: &str,
        container_id: &str,
        if_name: &str,
        netns: &Path,
        cni_args: String,
        config: Value,
        capability_args: Map<String, Value>,
    ) -> Entry {
        Entry {
            kind: KIND.into(),
            version: VERSION,
            network: network.into(),
            container_id: container_id.into(),
            if_name: if_name.into(),
            netns: netns.into(),
            cni_args,
            config,
            capability_args,
            result: None,
        }
    }
}

/// A cache file found for an attachment; `entry` is None if it is unreadable.
#[derive(Debug)]
pub(crate) struct Found {
    pub path: PathBuf,
    pub entry: Option<Entry>,
}

/// The cache directory.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Cache { dir }
    }

    fn path(&self, network: &str, container_id: &str, if_name: &str) -> PathBuf {
        self.dir
            .join(format!("{network}+{container_id}+{if_name}.json"))
    }

    /// Writes the entry atomically, not fsynced (see the module doc);
    /// returns its path.
    pub(crate) fn write(&self, entry: &Entry) -> Result<PathBuf, Error> {
        let path = self.path(&entry.network, &entry.container_id, &entry.if_name);
        let bytes = serde_json::to_vec(entry)
            .map_err(|e| io_err("encode CNI cache entry", &path, std::io::Error::other(e)))?;
        std::fs::create_dir_all(&self.dir).map_err(|e| io_err("create directory", &self.dir, e))?;
        berth_atomic_file::write_volatile(&path, &bytes, 0o600)
            .map_err(|e| io_err("write", &path, e))?;
        Ok(path)
    }

    fn read(&self, path: PathBuf) -> Result<Option<Found>, Error> {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("read CNI cache entry", path, e)),
        };
        let entry = match serde_json::from_slice::<Entry>(&bytes) {
            Ok(entry) if entry.kind == KIND && entry.version == VERSION => Some(entry),
            Ok(_) => {
                tracing::warn!(
                    "ignoring CNI cache entry {} of unknown kind or version",
                    path.display()
                );
                None
            }
            Err(e) => {
                tracing::warn!(
                    "ignoring unreadable CNI cache entry {}: {e}",
                    path.display()
                );
                None
            }
        };
        Ok(Some(Found { path, entry }))
    }

    /// The entry of (container, interface): under `network` if given and
    /// present, else under whichever network it was attached to.
    pub(crate) fn find(
        &self,
        network: Option<&str>,
        container_id: &str,
        if_name: &str,
    ) -> Result<Option<Found>, Error> {
        if let Some(network) = network {
            if let Some(found) = self.read(self.path(network, container_id, if_name))? {
                return Ok(Some(found));
            }
        }
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("read CNI cache dir", &self.dir, e)),
        };
        let suffix = format!("+{container_id}+{if_name}.json");
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read CNI cache dir", &self.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(network) = name.strip_suffix(&suffix) else {
                continue;
            };
            if !network.is_empty() && !network.contains('+') {
                if let Some(found) = self.read(entry.path())? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// (container id, interface) of every entry, from the file names.
    pub(crate) fn list(&self) -> Result<Vec<(String, String)>, Error> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("read CNI cache dir", &self.dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read CNI cache dir", &self.dir, e))?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let [network, container_id, if_name] = stem.split('+').collect::<Vec<_>>()[..] {
                if !network.is_empty() && !network.starts_with('.') {
                    found.push((container_id.to_string(), if_name.to_string()));
                }
            }
        }
        Ok(found)
    }

    /// Removes an entry; a missing one is fine.
    pub(crate) fn remove(&self, path: &Path) -> Result<(), Error> {
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove CNI cache entry", path, e)),
        }
    }
}

/// Writes `bytes` to `path` (inside `dir`) so that a crash leaves either the
/// old or the new content: temp file in `dir`, fsync, rename, fsync `dir`.
pub(crate) fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| io_err("create directory", dir, e))?;
    berth_atomic_file::write(path, bytes, 0o600).map_err(|e| io_err("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(network: &str, container: &str, ifname: &str) -> Entry {
        Entry::new(
            network,
            container,
            ifname,
            Path::new("/run/netns/x"),
            "IgnoreUnknown=1".into(),
            json!({"name": network}),
            Map::new(),
        )
    }

    #[test]
    fn lists_attachments() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_path_buf());
        cache.write(&entry("net", "c1", "eth0")).unwrap();
        std::fs::write(dir.path().join(".net+c2+eth0.json.tmp-1-1"), "x").unwrap();
        std::fs::write(dir.path().join("junk"), "x").unwrap();
        assert_eq!(
            cache.list().unwrap(),
            vec![("c1".to_string(), "eth0".to_string())]
        );
    }

    #[test]
    fn write_find_remove() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("cache"));
        assert!(cache.find(Some("net"), "c1", "eth0").unwrap().is_none());

        let mut e = entry("net", "c1", "eth0");
        e.result = Some(json!({"ips": []}));
        let path = cache.write(&e).unwrap();
        assert_eq!(path, dir.path().join("cache/net+c1+eth0.json"));
        let found = cache.find(Some("net"), "c1", "eth0").unwrap().unwrap();
        assert_eq!(found.entry.unwrap(), e);
        // Found under its own network when another one is current now.
        let found = cache.find(Some("other"), "c1", "eth0").unwrap().unwrap();
        assert_eq!(found.path, path);
        assert!(cache.find(None, "c1", "eth1").unwrap().is_none());
        // "c1" must not match a container "xc1" or "c1x".
        cache.write(&entry("net", "xc1", "eth0")).unwrap();
        assert!(cache.find(None, "1", "eth0").unwrap().is_none());

        // No temp files left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".tmp")), "{names:?}");

        cache.remove(&path).unwrap();
        cache.remove(&path).unwrap();
        assert!(cache.find(Some("net"), "c1", "eth0").unwrap().is_none());
    }

    #[test]
    fn unreadable_entries_are_found_but_empty() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned());
        std::fs::write(dir.path().join("net+c1+eth0.json"), b"{garbage").unwrap();
        let found = cache.find(None, "c1", "eth0").unwrap().unwrap();
        assert!(found.entry.is_none());
    }
}
