//! The bounds on what one layer may expand to ([`UnpackLimits`]), and the
//! metering that enforces them as the layer is read: the [`Meter`] under
//! the tar parser, and the free-space and free-inode reserves of the store's
//! file system.

use std::cell::{Cell, RefCell};
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Result, UnpackError, MAX_PATH};

/// Bounds on what one layer may expand to, with defaults no real image
/// reaches. Layers are unpacked before their digest is verified: these
/// bounds are what makes that safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UnpackLimits {
    /// Most bytes of one layer, counted three ways, each bounded by this:
    /// the compressed blob (the manifest's size), the uncompressed tar
    /// stream, and the sum of the entries' sizes, where a sparse file counts
    /// at its apparent size, holes included. Default 64 GiB.
    pub max_layer_bytes: u64,
    /// Most entries (files, directories, links, …) in one layer.
    /// Default 2 Mi (2,097,152).
    pub max_entries: u64,
    /// Most layers of one image or artifact, checked on its manifest before
    /// any blob is fetched. Default 128 (docker builds at most 127; an
    /// overlay stacks at most 500).
    pub max_layers: u64,
    /// Most bytes of headers in front of one entry: its PAX records, GNU
    /// long name and link name, and GNU sparse map, which the tar reader
    /// holds in memory. Default 1 MiB.
    pub max_entry_header_bytes: u64,
    /// Space the store's file system keeps free (at most 5% of its size, for
    /// small file systems): unpacking and storing the blob fail once less is
    /// left, checked at the first write of a layer and every 16 MiB after.
    /// 5% of the inodes are kept free too (checked every 64 Ki entries).
    /// Whatever the other bounds allow, a pull never fills the disk.
    /// Default 1 GiB; 0 turns both checks off.
    pub min_free_bytes: u64,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_layer_bytes: 64 << 30,
            max_entries: 2 << 20,
            max_layers: 128,
            max_entry_header_bytes: 1 << 20,
            min_free_bytes: 1 << 30,
        }
    }
}

impl UnpackLimits {
    /// Refuses bounds that would refuse every layer.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.max_layer_bytes == 0 || self.max_entries == 0 || self.max_layers == 0 {
            return Err(
                "unpack limits max_layer_bytes, max_entries and max_layers must be above 0".into(),
            );
        }
        if self.max_entry_header_bytes < 64 << 10 {
            return Err(format!(
                "unpack limit max_entry_header_bytes must be at least 65536 \
                 (a PAX header with a {MAX_PATH}-byte path and xattrs), not {}",
                self.max_entry_header_bytes
            ));
        }
        Ok(())
    }
}

/// Bytes written between two checks of the free space.
const FREE_CHECK_EVERY: u64 = 16 << 20;

/// Checks that the file system of `fd` keeps `limits.min_free_bytes` free,
/// at the first call and then every [`FREE_CHECK_EVERY`] bytes written
/// (`written` carries the count between calls, `u64::MAX` at first).
pub(crate) fn check_free_space(
    fd: BorrowedFd<'_>,
    limits: &UnpackLimits,
    written: &Cell<u64>,
    n: u64,
) -> io::Result<std::result::Result<(), String>> {
    if limits.min_free_bytes == 0 {
        return Ok(Ok(()));
    }
    let since = written.get().saturating_add(n);
    if since < FREE_CHECK_EVERY {
        written.set(since);
        return Ok(Ok(()));
    }
    written.set(0);
    let st = nix::sys::statvfs::fstatvfs(fd)?;
    let frsize = st.fragment_size() as u64;
    let free = (st.blocks_available() as u64).saturating_mul(frsize);
    let size = (st.blocks() as u64).saturating_mul(frsize);
    let reserve = limits.min_free_bytes.min(size / 20);
    if free < reserve {
        return Ok(Err(format!(
            "the store's file system has {} free, less than the {} it must keep \
             (unpack limit min_free_bytes, at most 5% of the file system)",
            show_bytes(free),
            show_bytes(reserve)
        )));
    }
    Ok(Ok(()))
}

/// Entries created between two checks of the free inodes.
const INODE_CHECK_EVERY: u64 = 64 << 10;

/// Checks that the file system of `fd` keeps 5% of its inodes free (file
/// systems that make inodes on demand report none and pass). Off, like the
/// space reserve, when `limits.min_free_bytes` is 0.
pub(crate) fn check_free_inodes(
    fd: BorrowedFd<'_>,
    limits: &UnpackLimits,
) -> io::Result<std::result::Result<(), String>> {
    if limits.min_free_bytes == 0 {
        return Ok(Ok(()));
    }
    let st = nix::sys::statvfs::fstatvfs(fd)?;
    let (files, free) = (st.files() as u64, st.files_available() as u64);
    if files > 0 && free < files / 20 {
        return Ok(Err(format!(
            "the store's file system has {free} of {files} inodes free, less than the 5% \
             it must keep (unpack limit min_free_bytes, 0 turns this off)"
        )));
    }
    Ok(Ok(()))
}

/// `n` bytes, with a binary unit when it is a round one (for errors).
pub(crate) fn show_bytes(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{n} bytes ({} {unit})", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// The entries of one layer so far, and the sum of their sizes, counted
/// against [`UnpackLimits::max_entries`] and
/// [`UnpackLimits::max_layer_bytes`] before each entry is applied.
#[derive(Default)]
pub(super) struct EntryCount {
    count: u64,
    apparent: u64,
}

impl EntryCount {
    /// Counts `entry`; fails when it crosses a limit, or when the file
    /// system of `root` is short of inodes (checked every
    /// [`INODE_CHECK_EVERY`] entries, from the first).
    pub(super) fn admit<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        root: BorrowedFd<'_>,
        limits: &UnpackLimits,
    ) -> Result<()> {
        self.count += 1;
        if self.count % INODE_CHECK_EVERY == 1 {
            let path = PathBuf::from(OsStr::from_bytes(&entry.path_bytes()));
            match check_free_inodes(root, limits) {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => {
                    return Err(UnpackError::NoSpace {
                        entry: path,
                        reason,
                    })
                }
                Err(e) => {
                    return Err(UnpackError::Io {
                        entry: path,
                        op: "statvfs",
                        source: e,
                    })
                }
            }
        }
        if self.count > limits.max_entries {
            return Err(UnpackError::Limit(format!(
                "the layer has more than {} entries (unpack limit max_entries)",
                limits.max_entries
            )));
        }
        self.apparent = self.apparent.saturating_add(entry.size());
        if self.apparent > limits.max_layer_bytes {
            let path = entry.path_bytes();
            return Err(UnpackError::Limit(format!(
                "entry {}: its size of {} brings the layer's files beyond the limit of {} \
                 (unpack limit max_layer_bytes; sparse files count at their apparent size)",
                String::from_utf8_lossy(&path),
                show_bytes(entry.size()),
                show_bytes(limits.max_layer_bytes)
            )));
        }
        Ok(())
    }
}

/// Counts the uncompressed tar stream as the tar parser reads it, and fails
/// the read that crosses a limit (or comes after cancellation), so that the
/// parser stops before it allocates or writes beyond the bounds. The error
/// the parser then returns is replaced by the one recorded here.
pub(crate) struct Meter<'a> {
    pub(super) limits: UnpackLimits,
    pub(super) cancelled: &'a dyn Fn() -> bool,
    /// Bytes of the stream read so far.
    read: Cell<u64>,
    /// Where the parser started reading the next entry's headers; `None`
    /// while an entry's data is read.
    headers_from: Cell<Option<u64>>,
    /// Why a read failed on purpose.
    tripped: RefCell<Option<UnpackError>>,
    /// Bytes written since the free space was last checked.
    written: Cell<u64>,
}

impl<'a> Meter<'a> {
    pub(super) fn new(limits: &UnpackLimits, cancelled: &'a dyn Fn() -> bool) -> Meter<'a> {
        Meter {
            limits: *limits,
            cancelled,
            read: Cell::new(0),
            headers_from: Cell::new(None),
            tripped: RefCell::new(None),
            written: Cell::new(u64::MAX),
        }
    }

    /// Before `n` more bytes are written to `fd`: the free-space reserve.
    pub(super) fn check_space(&self, fd: BorrowedFd<'_>, n: u64, path: &Path) -> Result<()> {
        match check_free_space(fd, &self.limits, &self.written, n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(UnpackError::NoSpace {
                entry: path.to_path_buf(),
                reason: why,
            }),
            Err(e) => Err(UnpackError::Io {
                entry: path.to_path_buf(),
                op: "statvfs",
                source: e,
            }),
        }
    }

    pub(super) fn headers_start(&self) {
        self.headers_from.set(Some(self.read.get()));
    }

    pub(super) fn headers_end(&self) {
        self.headers_from.set(None);
    }

    fn trip(&self, why: UnpackError) -> io::Error {
        let msg = why.to_string();
        self.tripped.borrow_mut().get_or_insert(why);
        io::Error::other(msg)
    }

    /// The recorded reason, if a read was failed on purpose, else `e`.
    pub(super) fn explain(&self, e: UnpackError) -> UnpackError {
        // Once a read failed on purpose, whatever the parser made of it
        // follows from that.
        self.tripped.borrow_mut().take().unwrap_or(e)
    }
}

/// The stream under the tar parser, read through a [`Meter`].
pub(super) struct Metered<'m, 'a, R> {
    pub(super) inner: R,
    pub(super) meter: &'m Meter<'a>,
}

impl<R: Read> Read for Metered<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let m = self.meter;
        if (m.cancelled)() {
            return Err(m.trip(UnpackError::Cancelled));
        }
        let n = self.inner.read(buf)?;
        let read = m.read.get() + n as u64;
        m.read.set(read);
        if read > m.limits.max_layer_bytes {
            return Err(m.trip(UnpackError::Limit(format!(
                "the uncompressed layer is larger than the limit of {} (unpack limit max_layer_bytes)",
                show_bytes(m.limits.max_layer_bytes)
            ))));
        }
        if let Some(from) = m.headers_from.get() {
            if read - from > m.limits.max_entry_header_bytes {
                return Err(m.trip(UnpackError::Limit(format!(
                    "the headers of the entry at offset {from} of the tar stream (PAX records, \
                     long names, sparse map) are larger than the limit of {} \
                     (unpack limit max_entry_header_bytes)",
                    show_bytes(m.limits.max_entry_header_bytes)
                ))));
            }
        }
        Ok(n)
    }
}
