//! Readers of the kernel's cgroup file formats: single values, `max`
//! limits, flat `key value` files and pressure stall information.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use crate::{Error, Psi, PsiData};

/// v1 reports "no limit" as a huge page-aligned number; anything from 2^62 on is no limit.
const UNLIMITED_FROM: u64 = 1 << 62;

/// The text of a file.
pub(crate) fn read_text(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(Error::read(path))
}

/// The text of a file, or `None` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::read(path)(e)),
    }
}

fn parse_error(path: &Path, what: &'static str, text: &str) -> Error {
    Error::Parse {
        path: path.to_path_buf(),
        what,
        text: text.chars().take(80).collect(),
    }
}

/// A file holding one number.
pub(crate) fn read_u64(path: &Path) -> Result<u64, Error> {
    let text = read_text(path)?;
    text.trim()
        .parse()
        .map_err(|_| parse_error(path, "a number", &text))
}

/// A limit: a number, or `max` (v2) / a huge number (v1) for none.
pub(crate) fn parse_limit(path: &Path, text: &str) -> Result<Option<u64>, Error> {
    match text.trim() {
        "max" => Ok(None),
        t => match t.parse::<u64>() {
            Ok(n) if n >= UNLIMITED_FROM => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(parse_error(path, "a limit", text)),
        },
    }
}

/// A limit file that may be absent (absent: no limit).
pub(crate) fn read_limit(path: &Path) -> Result<Option<u64>, Error> {
    match read_optional(path)? {
        Some(text) => parse_limit(path, &text),
        None => Ok(None),
    }
}

/// A flat keyed file (`memory.stat`, `cpu.stat`, `memory.events`…):
/// `key value` per line; lines that are not that are skipped.
#[derive(Debug, Default)]
pub(crate) struct KeyValues(HashMap<String, u64>);

impl KeyValues {
    pub fn parse(text: &str) -> KeyValues {
        KeyValues(
            text.lines()
                .filter_map(|line| {
                    let (k, v) = line.split_once(' ')?;
                    Some((k.to_string(), v.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    pub fn read(path: &Path) -> Result<KeyValues, Error> {
        Ok(KeyValues::parse(&read_text(path)?))
    }

    /// The value of `key`, 0 when absent.
    pub fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// The value of `key`, if present.
    pub fn find(&self, key: &str) -> Option<u64> {
        self.0.get(key).copied()
    }
}

/// A `*.pressure` file: a `some` line and, on most resources, a `full` line.
pub(crate) fn parse_psi(text: &str) -> Option<Psi> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("some") => &mut some,
            Some("full") => &mut full,
            _ => continue,
        };
        let mut data = PsiData::default();
        for word in words {
            let Some((k, v)) = word.split_once('=') else {
                continue;
            };
            match k {
                "avg10" => data.avg10 = v.parse().ok()?,
                "avg60" => data.avg60 = v.parse().ok()?,
                "avg300" => data.avg300 = v.parse().ok()?,
                // Microseconds in the file; nanoseconds in CRI.
                "total" => data.total_ns = v.parse::<u64>().ok()?.saturating_mul(1000),
                _ => {}
            }
        }
        *slot = Some(data);
    }
    Some(Psi { some: some?, full })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        let p = Path::new("/x");
        assert_eq!(parse_limit(p, "max\n").unwrap(), None);
        assert_eq!(parse_limit(p, "16777216\n").unwrap(), Some(16 << 20));
        assert_eq!(parse_limit(p, "9223372036854771712\n").unwrap(), None);
        assert!(parse_limit(p, "lots").is_err());
    }

    #[test]
    fn key_values() {
        let kv = KeyValues::parse("anon 4096\nfile 8192\nbroken\nword x\n");
        assert_eq!(kv.get("anon"), 4096);
        assert_eq!(kv.get("file"), 8192);
        assert_eq!(kv.get("absent"), 0);
        assert_eq!(kv.find("word"), None);
    }

    #[test]
    fn psi() {
        let psi = parse_psi(
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        assert_eq!(psi.some.avg10, 1.5);
        assert_eq!(psi.some.avg60, 0.25);
        assert_eq!(psi.some.total_ns, 12_345_000);
        assert_eq!(psi.full.unwrap().total_ns, 7000);
        // Older kernels have no `full` line for CPU.
        let psi = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert!(psi.full.is_none());
        assert!(parse_psi("").is_none());
        assert!(parse_psi("some avg10=x\n").is_none());
    }
}
