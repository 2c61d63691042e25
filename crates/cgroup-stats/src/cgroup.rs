//! One cgroup: its directories in the mounted hierarchies, found from a
//! process id or from a cgroups path, and the reading of its [`Stats`].
//!
//! On a hybrid host the v1 controllers answer for CPU, memory, pids and
//! hugetlb; the v2 (unified) directory is only used for pressure stall
//! information, and only when the process sits at the same path there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::mount::Hierarchy;
use crate::stats;
use crate::{Error, Mounts, Stats};

/// A cgroup in one hierarchy: the hierarchy and the cgroup's path in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dir {
    hierarchy: Hierarchy,
    /// As `/proc/<pid>/cgroup` shows it: `/berth/abc`.
    path: String,
}

impl Dir {
    fn dir(&self) -> PathBuf {
        self.hierarchy.dir_of(&self.path)
    }

    fn is_root(&self) -> bool {
        let p = self.path.trim_end_matches('/');
        p.is_empty() || p == self.hierarchy.root.trim_end_matches('/')
    }

    fn parent(&self) -> Option<Dir> {
        if self.is_root() {
            return None;
        }
        let p = self.path.trim_end_matches('/');
        let parent = match p.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &p[..i],
        };
        Some(Dir {
            hierarchy: self.hierarchy.clone(),
            path: parent.to_string(),
        })
    }
}

/// One cgroup, in every hierarchy it appears in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// v1: controller name → the cgroup in that controller's hierarchy.
    v1: BTreeMap<String, Dir>,
    /// The cgroup in the v2 hierarchy.
    v2: Option<Dir>,
}

const STAT_CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "memory", "pids", "hugetlb"];

impl Cgroup {
    /// The cgroup of process `pid`, from `/proc/<pid>/cgroup`.
    pub fn for_pid(mounts: &Mounts, pid: u32) -> Result<Cgroup, Error> {
        let path = PathBuf::from(format!("/proc/{pid}/cgroup"));
        let text = std::fs::read_to_string(&path).map_err(Error::read(path))?;
        Cgroup::from_proc_cgroup(mounts, &text).ok_or(Error::NoCgroup { pid })
    }

    /// The cgroup a `/proc/<pid>/cgroup` text describes; `None` when none
    /// of its hierarchies is mounted.
    pub fn from_proc_cgroup(mounts: &Mounts, text: &str) -> Option<Cgroup> {
        let mut v1 = BTreeMap::new();
        let mut v2 = None;
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if controllers.is_empty() {
                v2 = mounts.v2.clone().map(|hierarchy| Dir {
                    hierarchy,
                    path: path.to_string(),
                });
                continue;
            }
            for controller in controllers.split(',') {
                if !STAT_CONTROLLERS.contains(&controller) {
                    continue;
                }
                if let Some(hierarchy) = mounts.v1_hierarchy(controller) {
                    v1.insert(
                        controller.to_string(),
                        Dir {
                            hierarchy: hierarchy.clone(),
                            path: path.to_string(),
                        },
                    );
                }
            }
        }
        (!v1.is_empty() || v2.is_some()).then_some(Cgroup { v1, v2 })
    }

    /// The cgroup at an absolute cgroupfs path (`/kubepods/pod1`) in every
    /// mounted hierarchy.
    pub fn from_path(mounts: &Mounts, path: &str) -> Result<Cgroup, Error> {
        if !path.starts_with('/') {
            return Err(Error::NotAbsolute {
                path: path.to_string(),
            });
        }
        let dir = |hierarchy: &Hierarchy| Dir {
            hierarchy: hierarchy.clone(),
            path: path.to_string(),
        };
        let mut v1 = BTreeMap::new();
        for (controllers, hierarchy) in &mounts.v1 {
            for controller in controllers {
                if STAT_CONTROLLERS.contains(&controller.as_str()) {
                    v1.insert(controller.clone(), dir(hierarchy));
                }
            }
        }
        Ok(Cgroup {
            v1,
            v2: mounts.v2.as_ref().map(dir),
        })
    }

    /// A cgroup made of plain directories: v1 controller directories and/or
    /// a v2 directory (a copy of a real cgroup, for tests).
    pub fn from_dirs(v1: &[(&str, &Path)], v2: Option<&Path>) -> Cgroup {
        // Each directory is the cgroup `/<its name>` below its parent directory.
        let dir = |dir: &Path| Dir {
            hierarchy: Hierarchy {
                root: "/".into(),
                mountpoint: dir.parent().unwrap_or(Path::new("/")).to_path_buf(),
            },
            path: format!("/{}", dir.file_name().unwrap_or_default().to_string_lossy()),
        };
        Cgroup {
            v1: v1
                .iter()
                .map(|(controller, path)| (controller.to_string(), dir(path)))
                .collect(),
            v2: v2.map(dir),
        }
    }

    /// The parent cgroup (in every hierarchy); `None` at a hierarchy's root.
    pub fn parent(&self) -> Option<Cgroup> {
        let v1 = self
            .v1
            .iter()
            .map(|(c, d)| Some((c.clone(), d.parent()?)))
            .collect::<Option<BTreeMap<_, _>>>()?;
        let v2 = match &self.v2 {
            // On a hybrid host the unified directory only serves pressure.
            Some(d) if !v1.is_empty() => d.parent(),
            Some(d) => Some(d.parent()?),
            None => None,
        };
        Some(Cgroup { v1, v2 })
    }

    /// Whether the resource counters come from cgroup v2.
    pub fn is_v2(&self) -> bool {
        self.v1.is_empty()
    }

    /// The cgroup's path (of its memory controller on v1), for messages.
    pub fn path(&self) -> &str {
        self.v1
            .get("memory")
            .or(self.v2.as_ref())
            .or_else(|| self.v1.values().next())
            .map(|d| d.path.as_str())
            .unwrap_or("/")
    }

    /// The directory of a v1 controller, or the v2 directory on a v2 host.
    pub fn dir(&self, controller: &str) -> Option<PathBuf> {
        if self.is_v2() {
            return self.v2.as_ref().map(Dir::dir);
        }
        self.v1.get(controller).map(Dir::dir)
    }

    /// Where the resource counters are: memory's directory on v1, else the v2 one.
    fn main_dir(&self) -> Option<PathBuf> {
        self.dir("memory")
            .or_else(|| self.dir("cpuacct"))
            .or_else(|| self.v1.values().next().map(Dir::dir))
    }

    /// Whether the cgroup exists.
    pub fn exists(&self) -> bool {
        self.main_dir().is_some_and(|d| d.is_dir())
    }

    /// Cumulative CPU time in nanoseconds: one small read.
    pub fn cpu_usage_ns(&self) -> Result<u64, Error> {
        match (self.is_v2(), self.dir("cpuacct")) {
            (false, Some(dir)) => stats::cpu_usage_v1(&dir),
            (true, Some(dir)) => stats::cpu_usage_v2(&dir),
            (_, None) => Err(self.gone()),
        }
    }

    fn gone(&self) -> Error {
        Error::Read {
            path: self.main_dir().unwrap_or_default(),
            source: std::io::ErrorKind::NotFound.into(),
        }
    }

    /// Everything the kernel counts for this cgroup. A cgroup that does not
    /// exist is an error ([`Error::is_not_found`]); a controller that is not
    /// there (not mounted, or not enabled on v2) leaves its part `None`.
    pub fn stats(&self) -> Result<Stats, Error> {
        if !self.exists() {
            return Err(self.gone());
        }
        let v2 = self.is_v2();
        let cpu = self.part("cpuacct", "cpu.stat", |dir| {
            if v2 {
                stats::cpu_v2(dir)
            } else {
                stats::cpu_v1(dir, self.dir("cpu").as_deref())
            }
        })?;
        let memory_file = if v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        let memory = self.part("memory", memory_file, |dir| {
            if v2 {
                stats::memory_v2(dir)
            } else {
                stats::memory_v1(dir)
            }
        })?;
        let pressure = match self.pressure_dir() {
            Some(dir) => ignore_gone(stats::pressure(&dir))?.unwrap_or_default(),
            None => Default::default(),
        };
        Ok(Stats {
            cpu,
            memory,
            pids: self.part("pids", "pids.current", stats::pids)?,
            hugetlb: self
                .part("hugetlb", "", |dir| stats::hugetlb(dir, v2))?
                .unwrap_or_default(),
            pressure,
        })
    }

    /// Reads one controller's part when its directory (and `probe` file in
    /// it, on v2 where controllers share a directory) is there.
    fn part<T>(
        &self,
        controller: &str,
        probe: &str,
        read: impl FnOnce(&Path) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        let Some(dir) = self.dir(controller) else {
            return Ok(None);
        };
        let present = if self.is_v2() && !probe.is_empty() {
            dir.join(probe).exists()
        } else {
            dir.is_dir()
        };
        if !present {
            return Ok(None);
        }
        ignore_gone(read(&dir))
    }

    /// The v2 directory to read pressure from: on a v2 host the cgroup's
    /// own; on a hybrid host only when the process is at the same path in
    /// the unified hierarchy as in its memory controller; never a root.
    fn pressure_dir(&self) -> Option<PathBuf> {
        let v2 = self.v2.as_ref()?;
        if v2.is_root() {
            return None;
        }
        match self.v1.get("memory") {
            Some(memory) if memory.path != v2.path => None,
            _ => Some(v2.dir()),
        }
    }
}

/// A part that vanished while it was read (the container just exited) is absent.
fn ignore_gone<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::tests::{HYBRID, V2};

    #[test]
    fn hybrid_pid_cgroup() {
        let mounts = Mounts::parse(HYBRID);
        let text = "9:name=systemd:/\n8:pids:/berth/c1\n4:memory:/berth/c1\n2:cpuacct:/berth/c1\n1:cpu:/berth/c1\n0::/\n";
        let cg = Cgroup::from_proc_cgroup(&mounts, text).unwrap();
        assert!(!cg.is_v2());
        assert_eq!(cg.path(), "/berth/c1");
        assert_eq!(
            cg.dir("memory").unwrap(),
            Path::new("/sys/fs/cgroup/memory/berth/c1")
        );
        assert_eq!(
            cg.dir("cpuacct").unwrap(),
            Path::new("/sys/fs/cgroup/cpuacct/berth/c1")
        );
        // Not in the unified hierarchy: no pressure from the root there.
        assert_eq!(cg.pressure_dir(), None);
        let parent = cg.parent().unwrap();
        assert_eq!(parent.path(), "/berth");
        assert_eq!(
            parent.dir("pids").unwrap(),
            Path::new("/sys/fs/cgroup/pids/berth")
        );
        let root = parent.parent().unwrap();
        assert_eq!(root.path(), "/");
        assert!(root.parent().is_none());
    }

    #[test]
    fn hybrid_with_unified_path_has_pressure() {
        let mounts = Mounts::parse(HYBRID);
        let text = "4:memory:/berth/c1\n0::/berth/c1\n";
        let cg = Cgroup::from_proc_cgroup(&mounts, text).unwrap();
        assert_eq!(
            cg.pressure_dir().unwrap(),
            Path::new("/sys/fs/cgroup/unified/berth/c1")
        );
    }

    #[test]
    fn v2_pid_cgroup_and_path() {
        let mounts = Mounts::parse(V2);
        let cg = Cgroup::from_proc_cgroup(&mounts, "0::/kubepods/pod1/c1\n").unwrap();
        assert!(cg.is_v2());
        assert_eq!(
            cg.dir("memory").unwrap(),
            Path::new("/sys/fs/cgroup/kubepods/pod1/c1")
        );
        assert_eq!(cg.dir("cpu"), cg.dir("pids"));
        assert_eq!(
            cg.pressure_dir().unwrap(),
            Path::new("/sys/fs/cgroup/kubepods/pod1/c1")
        );
        assert_eq!(cg.parent().unwrap().path(), "/kubepods/pod1");
        assert_eq!(Cgroup::from_path(&mounts, "/kubepods/pod1/c1").unwrap(), cg);
        assert!(Cgroup::from_path(&mounts, "system.slice:berth:c1").is_err());
        assert!(Cgroup::from_proc_cgroup(&Mounts::default(), "0::/x\n").is_none());
    }

    #[test]
    fn missing_cgroup_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let cg = Cgroup::from_dirs(&[], Some(&dir.path().join("gone")));
        let err = cg.stats().unwrap_err();
        assert!(err.is_not_found(), "{err}");
        assert!(cg.cpu_usage_ns().unwrap_err().is_not_found());
    }
}
