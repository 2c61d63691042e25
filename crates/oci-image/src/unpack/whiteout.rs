//! Overlayfs whiteouts from a layer's `.wh.` entries: `.wh.NAME` becomes a
//! whiteout (character device 0:0) named NAME, `.wh..wh..opq` sets
//! `trusted.overlay.opaque=y` on its directory, and other `.wh..wh.*` (aufs
//! metadata) entries are skipped.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::sys::stat::{makedev, mknodat, Mode, SFlag};

use super::fd::{remove_non_dir, set_xattr};
use super::meta::Meta;
use super::{hostile, io_err, Applier, Result};

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";
pub(super) const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

impl Applier {
    /// Applies the entry `name` (in the directory `parents`) when it is a
    /// whiteout, an opaque marker or aufs metadata, and then returns true;
    /// any other entry is left to the caller (false).
    pub(super) fn apply_whiteout(
        &mut self,
        name: &OsStr,
        parents: &[OsString],
        meta: &Meta,
        path: &Path,
    ) -> Result<bool> {
        let name_str = name.to_string_lossy();
        if name_str == OPAQUE_MARKER {
            let dir = self.open_dir(parents, true, path)?;
            set_xattr(dir.as_fd(), OPAQUE_XATTR, b"y").map_err(io_err(path, "set opaque xattr"))?;
            return Ok(true);
        }
        let Some(target) = name.as_bytes().strip_prefix(WHITEOUT_PREFIX.as_bytes()) else {
            return Ok(false);
        };
        if target.starts_with(WHITEOUT_PREFIX.as_bytes()) {
            return Ok(true); // aufs metadata (.wh..wh.plnk, …): nothing for overlayfs
        }
        if target.is_empty() || target == b"." || target == b".." {
            return Err(hostile(path, "whiteout without a name"));
        }
        let target = OsStr::from_bytes(target);
        let parent = self.parent(parents, path)?;
        remove_non_dir(parent.as_fd(), target, path)?;
        mknodat(
            parent.as_fd(),
            target,
            SFlag::S_IFCHR,
            Mode::empty(),
            makedev(0, 0),
        )
        .map_err(io_err(path, "mknod whiteout"))?;
        self.chown_at(parent.as_fd(), target, meta, path)?;
        Ok(true)
    }
}
