//! A host made of maps, for unit tests of what asks the host.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::{Host, Ran};

/// Files, directories, executables and what each answers when run.
#[derive(Debug, Default)]
pub struct FakeHost {
    pub files: BTreeMap<PathBuf, String>,
    pub dirs: BTreeSet<PathBuf>,
    /// Each executable and how any run of it ends.
    pub executables: BTreeMap<PathBuf, Ran>,
    pub path: Vec<PathBuf>,
    pub kernel: String,
    pub euid: u32,
    pub exe_dir: Option<PathBuf>,
}

impl FakeHost {
    pub fn file(&mut self, path: &str, text: &str) {
        self.files.insert(path.into(), text.into());
    }
    pub fn exe(&mut self, path: &str, ran: Ran) {
        self.executables.insert(path.into(), ran);
    }
}

impl Host for FakeHost {
    fn read(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.dirs.contains(path)
    }
    fn is_executable(&self, path: &Path) -> bool {
        self.executables.contains_key(path)
    }
    fn list_dir(&self, path: &Path) -> Vec<PathBuf> {
        self.files
            .keys()
            .filter(|p| p.parent() == Some(path))
            .cloned()
            .collect()
    }
    fn path_dirs(&self) -> Vec<PathBuf> {
        self.path.clone()
    }
    fn run(&self, binary: &Path, _arg: &str) -> Ran {
        self.executables
            .get(binary)
            .cloned()
            .unwrap_or_else(|| Ran::Failed("no such file".into()))
    }
    fn kernel_release(&self) -> String {
        self.kernel.clone()
    }
    fn euid(&self) -> u32 {
        self.euid
    }
    fn exe_dir(&self) -> Option<PathBuf> {
        self.exe_dir.clone()
    }
}
