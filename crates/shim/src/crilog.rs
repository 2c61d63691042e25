//! The CRI container log: kubelet's line format, line splitting, and the log
//! file that kubelet rotates.
//!
//! Each record is `TIMESTAMP STREAM TAG CONTENT\n`: an RFC 3339 timestamp in
//! UTC with nine fraction digits, `stdout` or `stderr`, `F` for a full line or
//! `P` for part of one, and the line without its `\n` (or `\r\n`). Lines
//! longer than [`MAX_LINE`] are cut into `P` records ending with an `F` one; a
//! last unterminated piece at the end of the stream is written with `P`, as
//! containerd does.

use berth_lock::MutexExt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fchmod, fstat, mkdirat, Mode};

/// kubelet's (and containerd's) longest log record content: 16 KiB.
pub const MAX_LINE: usize = 16 * 1024;

/// Which stream a record comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// The stream's name in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Whether a record is a whole line or a piece of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// `F`: the record ends a line.
    Full,
    /// `P`: more of the line follows (or the stream ended mid-line).
    Partial,
}

impl Tag {
    fn as_str(self) -> &'static str {
        match self {
            Tag::Full => "F",
            Tag::Partial => "P",
        }
    }
}

/// `t` as RFC 3339 in UTC with nanoseconds: `2016-10-06T00:17:09.669794202Z`.
pub fn format_timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// One record, ready to write.
pub fn format_record(t: SystemTime, stream: Stream, tag: Tag, content: &[u8]) -> Vec<u8> {
    let ts = format_timestamp(t);
    let mut rec = Vec::with_capacity(ts.len() + content.len() + 12);
    rec.extend_from_slice(ts.as_bytes());
    rec.push(b' ');
    rec.extend_from_slice(stream.as_str().as_bytes());
    rec.push(b' ');
    rec.extend_from_slice(tag.as_str().as_bytes());
    rec.push(b' ');
    rec.extend_from_slice(content);
    rec.push(b'\n');
    rec
}

/// Cuts a byte stream into log records.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes; calls `emit` for every record they complete.
    pub fn feed(&mut self, mut data: &[u8], emit: &mut impl FnMut(Tag, &[u8])) {
        while !data.is_empty() {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.pending.extend_from_slice(&data[..i]);
                    data = &data[i + 1..];
                    if self.pending.last() == Some(&b'\r') {
                        self.pending.pop();
                    }
                    let mut line = &self.pending[..];
                    while line.len() > MAX_LINE {
                        emit(Tag::Partial, &line[..MAX_LINE]);
                        line = &line[MAX_LINE..];
                    }
                    emit(Tag::Full, line);
                    self.pending.clear();
                }
                None => {
                    self.pending.extend_from_slice(data);
                    data = &[];
                }
            }
            // A line that keeps growing is written out in pieces (`>` keeps a
            // line of exactly MAX_LINE bytes whole until its `\n` comes).
            while self.pending.len() > MAX_LINE {
                emit(Tag::Partial, &self.pending[..MAX_LINE]);
                self.pending.drain(..MAX_LINE);
            }
        }
    }

    /// The stream ended: a last unterminated piece becomes a `P` record.
    pub fn finish(&mut self, emit: &mut impl FnMut(Tag, &[u8])) {
        if !self.pending.is_empty() {
            emit(Tag::Partial, &self.pending);
            self.pending.clear();
        }
    }
}

/// Where a container's CRI log goes: `file`, a relative path below `dir`,
/// the pod's log directory kubelet named (`PodSandboxConfig.log_directory`).
///
/// The file is only ever reached from `dir` through real directories:
/// `dir` itself must not be a symbolic link (its parents, kubelet's
/// `/var/log/pods` and above, are followed), nor may any component below it
/// or the file. Whoever can write to `/var/log/pods` (a log agent) thus
/// cannot turn the container's output into a write by root to a file
/// elsewhere, at start or at any reopen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTarget {
    dir: PathBuf,
    file: PathBuf,
}

impl LogTarget {
    /// The log `file` below `dir`: `dir` absolute, `file` relative, cleaned
    /// lexically (`c/../d/0.log` is `d/0.log`); a `file` that climbs out of
    /// `dir` or names no file is refused.
    pub fn new(dir: impl Into<PathBuf>, file: impl AsRef<Path>) -> Result<LogTarget, String> {
        let dir = dir.into();
        let given = file.as_ref();
        if !dir.is_absolute() {
            return Err(format!(
                "log directory {} is not an absolute path",
                dir.display()
            ));
        }
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for part in given.components() {
            match part {
                Component::Normal(p) => parts.push(p),
                Component::CurDir => {}
                Component::ParentDir if !parts.is_empty() => {
                    parts.pop();
                }
                _ => {
                    return Err(format!(
                        "log file {} is not a relative path inside the log directory {}",
                        given.display(),
                        dir.display()
                    ))
                }
            }
        }
        if parts.is_empty() {
            return Err(format!(
                "log file {:?} names no file in {}",
                given,
                dir.display()
            ));
        }
        Ok(LogTarget {
            dir,
            file: parts.iter().collect(),
        })
    }

    /// The pod's log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log file, relative to [`LogTarget::dir`], clean.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The log file's full path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.file)
    }
}

/// Why the CRI log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Something at the log's place (the log directory, a directory below
    /// it, or the file) is what a log may not be opened through: a
    /// symbolic link, not a directory, not a regular file, a hard link.
    #[error("CRI log {}: refused: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
    /// A system call failed.
    #[error("CRI log: {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl LogError {
    /// Whether the log was refused for what is at its place (rather than
    /// failing for an I/O reason).
    pub fn is_refused(&self) -> bool {
        matches!(self, LogError::Refused { .. })
    }
}

/// Mode of the directories the shim creates on the way to the log (as
/// kubelet and containerd make them).
const DIR_MODE: u32 = 0o755;
/// Mode of a log file the shim creates (containerd's).
const FILE_MODE: u32 = 0o640;

/// The container's log file, shared by the stdout and stderr copiers; each
/// record goes out in one write, and [`LogFile::reopen`] swaps the file.
#[derive(Debug)]
pub struct LogFile {
    target: LogTarget,
    /// The log directory, opened once at start: a reopen walks from it, so
    /// the directory kubelet named cannot be swapped for a symlink later.
    dir: OwnedFd,
    file: Mutex<File>,
}

impl LogFile {
    /// Opens (creating, appending) the log of `target`, creating missing
    /// directories on the way (mode 0755).
    pub fn open(target: &LogTarget) -> Result<LogFile, LogError> {
        let dir = open_log_dir(target.dir())?;
        let file = open_below(&dir, target)?;
        Ok(LogFile {
            target: target.clone(),
            dir,
            file: Mutex::new(file),
        })
    }

    /// Where the log is.
    pub fn target(&self) -> &LogTarget {
        &self.target
    }

    /// The log's path.
    pub fn path(&self) -> PathBuf {
        self.target.path()
    }

    /// Writes one record.
    pub fn write(&self, stream: Stream, tag: Tag, content: &[u8]) -> io::Result<()> {
        let rec = format_record(SystemTime::now(), stream, tag, content);
        let mut file = self.file.lock_unpoisoned();
        file.write_all(&rec)
    }

    /// Opens the log again (kubelet moved the old file away) and writes
    /// there from now on. On an error the old file stays in use.
    pub fn reopen(&self) -> Result<(), LogError> {
        let new = open_below(&self.dir, &self.target)?;
        *self.file.lock_unpoisoned() = new;
        Ok(())
    }
}

/// `O_NOFOLLOW` on a symlink gives ELOOP; with `O_DIRECTORY`, a symlink or a
/// file gives ENOTDIR (or ELOOP).
fn not_a_real_dir(e: Errno) -> bool {
    matches!(e, Errno::ELOOP | Errno::ENOTDIR)
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens the pod's log directory: its last component must be a real
/// directory (not a symlink); its parents are kubelet's and are followed.
/// Missing, it is made (and its missing parents), mode 0755.
fn open_log_dir(dir: &Path) -> Result<OwnedFd, LogError> {
    match open(dir, dir_flags(), Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(e) if not_a_real_dir(e) => Err(LogError::Refused {
            path: dir.to_path_buf(),
            reason: "the log directory is a symbolic link or not a directory".into(),
        }),
        Err(Errno::ENOENT) => {
            let (parent, name) = match (dir.parent(), dir.file_name()) {
                (Some(parent), Some(name)) => (parent, name),
                _ => {
                    return Err(LogError::Refused {
                        path: dir.to_path_buf(),
                        reason: "the log directory has no name".into(),
                    })
                }
            };
            make_parents(parent)?;
            let parent_fd = open(
                parent,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(io_error("opening", parent))?;
            make_dir_at(&parent_fd, name, dir)
        }
        Err(e) => Err(io_error("opening", dir)(e)),
    }
}

/// Makes the missing parents of the log directory (kubelet's side of the
/// tree: followed, as kubelet named it), each mode 0755.
fn make_parents(dir: &Path) -> Result<(), LogError> {
    if dir.is_dir() {
        return Ok(());
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(io_error("making", dir)(Errno::ENOENT));
    };
    make_parents(parent)?;
    let parent_fd = open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_error("opening", parent))?;
    make_dir_at(&parent_fd, name, dir).map(drop)
}

/// Opens directory `name` of `parent` (never through a symlink), making it
/// with mode 0755 when it is missing; `path` is its full path, for errors.
fn make_dir_at(parent: &OwnedFd, name: &std::ffi::OsStr, path: &Path) -> Result<OwnedFd, LogError> {
    let made = match mkdirat(parent, name, Mode::from_bits_truncate(DIR_MODE)) {
        Ok(()) => true,
        Err(Errno::EEXIST) => false,
        Err(e) => return Err(io_error("making", path)(e)),
    };
    let fd = openat(parent, name, dir_flags(), Mode::empty()).map_err(|e| {
        if not_a_real_dir(e) {
            LogError::Refused {
                path: path.to_path_buf(),
                reason: "a directory on the way to the log is a symbolic link or not a directory"
                    .into(),
            }
        } else {
            io_error("opening", path)(e)
        }
    })?;
    if made {
        // The mode mkdir gave is less the umask: set it.
        fchmod(&fd, Mode::from_bits_truncate(DIR_MODE))
            .map_err(io_error("setting the mode of", path))?;
    }
    Ok(fd)
}

/// Opens (creating) the log file of `target` below the log directory
/// `dir`: every directory on the way is opened with `O_NOFOLLOW` (made when
/// missing), the file with `O_NOFOLLOW` too, and it must be a regular file
/// with one link (no hard link to a file elsewhere).
fn open_below(dir: &OwnedFd, target: &LogTarget) -> Result<File, LogError> {
    let mut parts: Vec<&std::ffi::OsStr> = target.file().iter().collect();
    let name = parts.pop().ok_or_else(|| LogError::Refused {
        path: target.path(),
        reason: "names no file".into(),
    })?;
    let mut path = target.dir().to_path_buf();
    let mut current: Option<OwnedFd> = None;
    for part in parts {
        path.push(part);
        let next = make_dir_at(current.as_ref().unwrap_or(dir), part, &path)?;
        current = Some(next);
    }
    let parent = current.as_ref().unwrap_or(dir);
    path.push(name);
    let flags = OFlag::O_WRONLY
        | OFlag::O_APPEND
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        // A FIFO put at the log's place fails (ENXIO) instead of blocking.
        | OFlag::O_NONBLOCK;
    let refused_link = |e: Errno, path: &Path| {
        if e == Errno::ELOOP {
            LogError::Refused {
                path: path.to_path_buf(),
                reason: "the log file is a symbolic link".into(),
            }
        } else {
            io_error("opening", path)(e)
        }
    };
    // Created (then its mode set, whatever the umask), or the existing file.
    let mode = Mode::from_bits_truncate(FILE_MODE);
    let (fd, created) = match openat(parent, name, flags | OFlag::O_CREAT | OFlag::O_EXCL, mode) {
        Ok(fd) => (fd, true),
        Err(Errno::EEXIST) => (
            openat(parent, name, flags, Mode::empty()).map_err(|e| refused_link(e, &path))?,
            false,
        ),
        Err(e) => return Err(refused_link(e, &path)),
    };
    let stat = fstat(&fd).map_err(io_error("checking", &path))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(LogError::Refused {
            path,
            reason: "the log file is not a regular file".into(),
        });
    }
    if stat.st_nlink > 1 {
        return Err(LogError::Refused {
            path,
            reason: format!("the log file has {} hard links", stat.st_nlink),
        });
    }
    if created {
        fchmod(&fd, mode).map_err(io_error("setting the mode of", &path))?;
    }
    let file = File::from(fd);
    crate::sys::set_blocking(file.as_raw_fd()).map_err(|e| LogError::Io {
        what: "setting blocking mode on",
        path: path.clone(),
        source: e,
    })?;
    Ok(file)
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(Errno) -> LogError {
    let path = path.to_path_buf();
    move |e| LogError::Io {
        what,
        path,
        source: io::Error::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::time::Duration;

    fn split(chunks: &[&[u8]]) -> Vec<(Tag, Vec<u8>)> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        let mut emit = |t: Tag, c: &[u8]| out.push((t, c.to_vec()));
        for c in chunks {
            s.feed(c, &mut emit);
        }
        s.finish(&mut emit);
        out
    }

    #[test]
    fn timestamps() {
        let t = UNIX_EPOCH + Duration::new(1_475_713_029, 669_794_202);
        assert_eq!(format_timestamp(t), "2016-10-06T00:17:09.669794202Z");
        assert_eq!(
            format_timestamp(UNIX_EPOCH),
            "1970-01-01T00:00:00.000000000Z"
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_timestamp(leap), "2000-02-29T00:00:00.000000000Z");
    }

    #[test]
    fn record_format() {
        let t = UNIX_EPOCH + Duration::new(1_475_713_029, 669_794_202);
        assert_eq!(
            format_record(t, Stream::Stderr, Tag::Full, b"text"),
            b"2016-10-06T00:17:09.669794202Z stderr F text\n"
        );
    }

    #[test]
    fn lines_across_chunks() {
        let out = split(&[b"hel", b"lo\nwor", b"ld\r\n\nend"]);
        assert_eq!(
            out,
            vec![
                (Tag::Full, b"hello".to_vec()),
                (Tag::Full, b"world".to_vec()),
                (Tag::Full, b"".to_vec()),
                (Tag::Partial, b"end".to_vec()),
            ]
        );
    }

    #[test]
    fn long_lines_are_cut() {
        let line = vec![b'x'; 2 * MAX_LINE + 5];
        let mut data = line.clone();
        data.push(b'\n');
        for chunks in [vec![&data[..]], data.chunks(1000).collect::<Vec<_>>()] {
            let out = split(&chunks);
            let tags: Vec<Tag> = out.iter().map(|(t, _)| *t).collect();
            assert_eq!(tags, [Tag::Partial, Tag::Partial, Tag::Full]);
            assert_eq!(out[0].1.len(), MAX_LINE);
            assert_eq!(out[2].1.len(), 5);
            assert_eq!(out.iter().map(|(_, c)| c.len()).sum::<usize>(), line.len());
        }
        // Exactly MAX_LINE is one full record.
        let mut exact = vec![b'y'; MAX_LINE];
        exact.push(b'\n');
        assert_eq!(split(&[&exact]), vec![(Tag::Full, vec![b'y'; MAX_LINE])]);
    }

    #[test]
    fn log_file_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let log = LogFile::open(&LogTarget::new(dir.path(), "0.log").unwrap()).unwrap();
        log.write(Stream::Stdout, Tag::Full, b"one").unwrap();
        std::fs::rename(&path, dir.path().join("0.log.1")).unwrap();
        log.write(Stream::Stdout, Tag::Full, b"two").unwrap();
        log.reopen().unwrap();
        log.write(Stream::Stderr, Tag::Partial, b"three").unwrap();
        let old = std::fs::read_to_string(dir.path().join("0.log.1")).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert!(old.ends_with(" stdout F one\n") || old.contains(" stdout F one\n"));
        assert!(old.ends_with(" stdout F two\n"), "{old}");
        assert_eq!(new.lines().count(), 1);
        assert!(new.ends_with(" stderr P three\n"), "{new}");
    }

    /// A pod log directory `pods/ns_pod_uid` with an `outside` file (what
    /// a log agent would aim at) beside `pods`.
    struct Scene {
        tmp: tempfile::TempDir,
    }

    impl Scene {
        fn new() -> Scene {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(tmp.path().join("pods/ns_pod_uid")).unwrap();
            std::fs::create_dir_all(tmp.path().join("etc")).unwrap();
            std::fs::write(tmp.path().join("etc/shadow"), "root:secret\n").unwrap();
            Scene { tmp }
        }
        fn pod_dir(&self) -> PathBuf {
            self.tmp.path().join("pods/ns_pod_uid")
        }
        fn outside(&self) -> PathBuf {
            self.tmp.path().join("etc/shadow")
        }
        fn target(&self, file: &str) -> LogTarget {
            LogTarget::new(self.pod_dir(), file).unwrap()
        }
        fn outside_untouched(&self) {
            assert_eq!(
                std::fs::read_to_string(self.outside()).unwrap(),
                "root:secret\n"
            );
            let entries: Vec<_> = std::fs::read_dir(self.tmp.path().join("etc"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(entries, ["shadow"], "something was made outside");
        }
    }

    fn refused(r: Result<impl std::fmt::Debug, LogError>, says: &str) {
        let e = r.unwrap_err();
        assert!(e.is_refused(), "{e:?}");
        assert!(e.to_string().contains(says), "{e}");
    }

    #[test]
    fn targets_stay_below_the_log_directory() {
        let t = LogTarget::new("/var/log/pods/x", "c/./../d//0.log").unwrap();
        assert_eq!(t.file(), Path::new("d/0.log"));
        assert_eq!(t.path(), Path::new("/var/log/pods/x/d/0.log"));
        for bad in ["../x.log", "/etc/passwd", "c/../../x.log", "", ".", "c/.."] {
            assert!(LogTarget::new("/var/log/pods/x", bad).is_err(), "{bad}");
        }
        assert!(LogTarget::new("var/log/pods/x", "0.log").is_err());
    }

    #[test]
    fn missing_directories_are_made() {
        let scene = Scene::new();
        let target = LogTarget::new(scene.tmp.path().join("new/pod"), "ctr/0.log").unwrap();
        let log = LogFile::open(&target).unwrap();
        log.write(Stream::Stdout, Tag::Full, b"hi").unwrap();
        let text = std::fs::read_to_string(target.path()).unwrap();
        assert!(text.ends_with(" stdout F hi\n"), "{text}");
        for dir in ["new", "new/pod", "new/pod/ctr"] {
            let meta = std::fs::metadata(scene.tmp.path().join(dir)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o7777, 0o755, "{dir}");
        }
        let meta = std::fs::metadata(target.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    }

    #[test]
    fn a_symlink_at_the_log_file_is_refused() {
        let scene = Scene::new();
        let link = scene.pod_dir().join("0.log");
        std::os::unix::fs::symlink(scene.outside(), &link).unwrap();
        refused(LogFile::open(&scene.target("0.log")), "symbolic link");
        scene.outside_untouched();

        // At a reopen: the file kubelet rotated away is replaced by a link.
        std::fs::remove_file(&link).unwrap();
        let log = LogFile::open(&scene.target("0.log")).unwrap();
        std::fs::rename(&link, scene.pod_dir().join("0.log.1")).unwrap();
        std::os::unix::fs::symlink(scene.outside(), &link).unwrap();
        refused(log.reopen(), "symbolic link");
        // The old file stays in use: the output goes on, never outside.
        log.write(Stream::Stdout, Tag::Full, b"after").unwrap();
        scene.outside_untouched();
        let old = std::fs::read_to_string(scene.pod_dir().join("0.log.1")).unwrap();
        assert!(old.ends_with(" stdout F after\n"), "{old}");
    }

    #[test]
    fn a_symlinked_directory_on_the_way_is_refused() {
        let scene = Scene::new();
        let ctr = scene.pod_dir().join("ctr");
        std::os::unix::fs::symlink(scene.tmp.path().join("etc"), &ctr).unwrap();
        refused(LogFile::open(&scene.target("ctr/shadow")), "symbolic link");
        scene.outside_untouched();

        // Between CreateContainer and a reopen.
        std::fs::remove_file(&ctr).unwrap();
        let log = LogFile::open(&scene.target("ctr/shadow")).unwrap();
        std::fs::rename(&ctr, scene.pod_dir().join("ctr.old")).unwrap();
        std::os::unix::fs::symlink(scene.tmp.path().join("etc"), &ctr).unwrap();
        refused(log.reopen(), "symbolic link");
        log.write(Stream::Stdout, Tag::Full, b"after").unwrap();
        scene.outside_untouched();
    }

    #[test]
    fn a_symlinked_log_directory_is_refused_and_a_swapped_one_not_followed() {
        let scene = Scene::new();
        let pods = scene.tmp.path().join("pods");
        let linked = pods.join("ns_other_uid");
        std::os::unix::fs::symlink(scene.tmp.path().join("etc"), &linked).unwrap();
        refused(
            LogFile::open(&LogTarget::new(&linked, "shadow").unwrap()),
            "symbolic link",
        );
        scene.outside_untouched();

        // The pod's directory, opened at start, is swapped for a link
        // afterwards: the reopen stays in the directory first opened.
        let log = LogFile::open(&scene.target("shadow")).unwrap();
        std::fs::rename(scene.pod_dir(), pods.join("moved")).unwrap();
        std::os::unix::fs::symlink(scene.tmp.path().join("etc"), scene.pod_dir()).unwrap();
        std::fs::rename(pods.join("moved/shadow"), pods.join("moved/shadow.1")).unwrap();
        log.reopen().unwrap();
        log.write(Stream::Stdout, Tag::Full, b"after").unwrap();
        scene.outside_untouched();
        let text = std::fs::read_to_string(pods.join("moved/shadow")).unwrap();
        assert!(text.ends_with(" stdout F after\n"), "{text}");
    }

    #[test]
    fn fifos_and_hard_links_are_refused() {
        let scene = Scene::new();
        // A FIFO with no reader: refused at once, not a hang.
        nix::unistd::mkfifo(
            &scene.pod_dir().join("fifo.log"),
            Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let e = LogFile::open(&scene.target("fifo.log")).unwrap_err();
        assert!(
            matches!(&e, LogError::Io { source, .. } if source.raw_os_error() == Some(libc::ENXIO)),
            "{e:?}"
        );
        // A FIFO with a reader: refused for what it is.
        let fifo = scene.pod_dir().join("fifo.log");
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        refused(
            LogFile::open(&scene.target("fifo.log")),
            "not a regular file",
        );
        // A hard link to a file elsewhere (where protected_hardlinks allows it).
        std::fs::hard_link(scene.outside(), scene.pod_dir().join("0.log")).unwrap();
        refused(LogFile::open(&scene.target("0.log")), "hard links");
        scene.outside_untouched();
    }
}
