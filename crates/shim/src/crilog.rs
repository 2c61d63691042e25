//! The CRI container log: kubelet's line format, line splitting, and the log
//! file that kubelet rotates.
//!
//! Each record is `TIMESTAMP STREAM TAG CONTENT\n`: an RFC 3339 timestamp in
//! UTC with nine fraction digits, `stdout` or `stderr`, `F` for a full line or
//! `P` for part of one, and the line without its `\n` (or `\r\n`). Lines
//! longer than [`MAX_LINE`] are cut into `P` records ending with an `F` one; a
//! last unterminated piece at the end of the stream is written with `P`, as
//! containerd does.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// The container's log file, shared by the stdout and stderr copiers; each
/// record goes out in one write, and [`LogFile::reopen`] swaps the file.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: Mutex<File>,
}

impl LogFile {
    /// Opens (creating, appending) the log at `path`.
    pub fn open(path: &Path) -> io::Result<LogFile> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Mutex::new(open_log(path)?),
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one record.
    pub fn write(&self, stream: Stream, tag: Tag, content: &[u8]) -> io::Result<()> {
        let rec = format_record(SystemTime::now(), stream, tag, content);
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&rec)
    }

    /// Opens the path again (kubelet moved the old file away) and writes there from now on.
    pub fn reopen(&self) -> io::Result<()> {
        let new = open_log(&self.path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(())
    }
}

fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let log = LogFile::open(&path).unwrap();
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
}
