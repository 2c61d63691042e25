//! An entry's metadata: read from its header and PAX records (owner, mode,
//! mtime, xattrs; PAX sparse files and `trusted.overlay.*` xattrs refused),
//! and set on what was created for it.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::BorrowedFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fchmod, Mode};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, fchownat, Gid, Uid};

use super::fd::set_xattr;
use super::{hostile, io_err, Applier, Result, UnpackError};

/// Metadata of one entry, from its header and PAX records.
pub(super) struct Meta {
    pub(super) mode: u32,
    uid: u64,
    gid: u64,
    pub(super) mtime: TimeSpec,
    xattrs: Vec<(String, Vec<u8>)>,
}

impl Applier {
    pub(super) fn meta<R: Read>(&self, entry: &mut tar::Entry<'_, R>, path: &Path) -> Result<Meta> {
        let header = entry.header();
        let bad = |what: &str, e: io::Error| hostile(path, format!("bad {what}: {e}"));
        let mut meta = Meta {
            mode: header.mode().map_err(|e| bad("mode", e))? & 0o7777,
            uid: header.uid().map_err(|e| bad("uid", e))?,
            gid: header.gid().map_err(|e| bad("gid", e))?,
            mtime: TimeSpec::new(header.mtime().map_err(|e| bad("mtime", e))? as i64, 0),
            xattrs: Vec::new(),
        };
        if let Some(exts) = entry.pax_extensions().map_err(UnpackError::Read)? {
            for ext in exts {
                let ext = ext.map_err(|e| bad("PAX record", e))?;
                let Ok(key) = ext.key() else { continue };
                if key.starts_with("GNU.sparse.") {
                    return Err(hostile(
                        path,
                        format!(
                            "PAX sparse file ({key} record) is not supported; \
                             GNU sparse (type 'S') entries are"
                        ),
                    ));
                }
                if let Some(name) = key.strip_prefix("SCHILY.xattr.") {
                    if name.starts_with("trusted.overlay.") {
                        return Err(hostile(path, format!("xattr {name} would steer overlayfs")));
                    }
                    meta.xattrs
                        .push((name.to_string(), ext.value_bytes().to_vec()));
                    continue;
                }
                let value = ext.value().unwrap_or("");
                match key {
                    "uid" => meta.uid = value.parse().map_err(|_| hostile(path, "bad PAX uid"))?,
                    "gid" => meta.gid = value.parse().map_err(|_| hostile(path, "bad PAX gid"))?,
                    "mtime" => {
                        meta.mtime =
                            parse_pax_time(value).ok_or_else(|| hostile(path, "bad PAX mtime"))?
                    }
                    _ => {}
                }
            }
        }
        Ok(meta)
    }

    /// Owner, mode and xattrs of an open file or directory (mode after owner:
    /// chown clears set-id bits).
    pub(super) fn set_fd_meta(&self, fd: BorrowedFd<'_>, meta: &Meta, path: &Path) -> Result<()> {
        if self.same_owner {
            fchown(fd, Some(uid(meta.uid, path)?), Some(gid(meta.gid, path)?))
                .map_err(io_err(path, "chown"))?;
        }
        fchmod(fd, Mode::from_bits_truncate(meta.mode)).map_err(io_err(path, "chmod"))?;
        for (name, value) in &meta.xattrs {
            match set_xattr(fd, name, value) {
                Ok(()) => {}
                Err(Errno::ENOTSUP) => {
                    tracing::warn!(entry = %path.display(), xattr = %name, "xattr not supported here; skipped");
                }
                Err(e) => return Err(io_err(path, "set xattr")(e)),
            }
        }
        Ok(())
    }

    pub(super) fn chown_at(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        meta: &Meta,
        path: &Path,
    ) -> Result<()> {
        if !self.same_owner {
            return Ok(());
        }
        fchownat(
            parent,
            name,
            Some(uid(meta.uid, path)?),
            Some(gid(meta.gid, path)?),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io_err(path, "chown"))
    }
}

fn uid(id: u64, path: &Path) -> Result<Uid> {
    u32::try_from(id)
        .map(Uid::from_raw)
        .map_err(|_| hostile(path, format!("uid {id} out of range")))
}

fn gid(id: u64, path: &Path) -> Result<Gid> {
    u32::try_from(id)
        .map(Gid::from_raw)
        .map_err(|_| hostile(path, format!("gid {id} out of range")))
}

fn parse_pax_time(value: &str) -> Option<TimeSpec> {
    let (secs, frac) = value.split_once('.').unwrap_or((value, ""));
    let secs: i64 = secs.parse().ok()?;
    let mut nanos: i64 = 0;
    if !frac.is_empty() {
        let digits: String = frac.chars().take(9).collect();
        if !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        nanos = format!("{digits:0<9}").parse().ok()?;
    }
    Some(TimeSpec::new(secs, nanos))
}
