//! A regular file's data: copied in chunks within the free-space reserve,
//! GNU sparse files with their holes left unwritten, and writeback started
//! as the data goes so the layer's closing syncfs waits for less.

use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::limits::Meter;
use super::{Applier, Result, UnpackError};

/// Chunk in which file data is copied (sparse holes are read as zeros).
const COPY_CHUNK: usize = 1 << 20;
/// Bytes of one file written between two starts of its writeback
/// ([`start_writeback`]); a file that ends with fewer waits for the syncfs.
pub(crate) const WRITEBACK_EVERY: u64 = 4 << 20;

impl Applier {
    /// Writes a regular file, keeping the free-space reserve.
    pub(super) fn copy_data<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        mut file: &std::fs::File,
        meter: &Meter<'_>,
        path: &Path,
    ) -> Result<()> {
        self.copy_buf.resize(COPY_CHUNK, 0);
        let mut unflushed = 0u64;
        loop {
            let n = match entry.read(&mut self.copy_buf) {
                Ok(0) => {
                    if unflushed >= COPY_CHUNK as u64 {
                        start_writeback(file.as_fd());
                    }
                    return Ok(());
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(UnpackError::Read(e)),
            };
            meter.check_space(file.as_fd(), n as u64, path)?;
            io::Write::write_all(&mut file, &self.copy_buf[..n]).map_err(|e| UnpackError::Io {
                entry: path.to_path_buf(),
                op: "write",
                source: e,
            })?;
            unflushed += n as u64;
            if unflushed >= WRITEBACK_EVERY {
                start_writeback(file.as_fd());
                unflushed = 0;
            }
        }
    }

    /// Writes a GNU sparse file: chunks of zeros (the holes, which the tar
    /// reader hands out as zeros) are skipped, not written, and the length
    /// is set at the end. Cancellation is checked between chunks, since
    /// reading holes does not touch the stream.
    pub(super) fn copy_sparse<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        file: &std::fs::File,
        meter: &Meter<'_>,
        path: &Path,
    ) -> Result<()> {
        self.copy_buf.resize(COPY_CHUNK, 0);
        self.zeros.resize(COPY_CHUNK, 0);
        let buf = &mut self.copy_buf[..];
        let mut pos = 0u64;
        loop {
            if (meter.cancelled)() {
                return Err(UnpackError::Cancelled);
            }
            let n = match entry.read(buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(UnpackError::Read(e)),
            };
            let chunk = &buf[..n];
            if chunk != &self.zeros[..n] {
                meter.check_space(file.as_fd(), n as u64, path)?;
                file.write_all_at(chunk, pos).map_err(|e| UnpackError::Io {
                    entry: path.to_path_buf(),
                    op: "write",
                    source: e,
                })?;
            }
            pos += n as u64;
        }
        file.set_len(pos).map_err(|e| UnpackError::Io {
            entry: path.to_path_buf(),
            op: "set length",
            source: e,
        })
    }
}

/// Starts writing back the dirty pages of `fd` without waiting for them
/// (`sync_file_range(2)`, `SYNC_FILE_RANGE_WRITE`), as dpkg does while it
/// unpacks: the disk works while the layer is still being decompressed, and
/// the layer's closing syncfs (which makes it durable) waits for less.
/// Best effort: a failure leaves it all to that syncfs.
pub(crate) fn start_writeback(fd: BorrowedFd<'_>) {
    // SAFETY: a valid fd; the call touches no memory of ours.
    unsafe {
        libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}
