//! Small pieces of the import: containerd's keys and values as TOML text,
//! Go durations, and the berth file being written (sections of `key =
//! value` lines, each with where it came from).

use std::time::Duration;

/// One key as it is written in TOML: bare when it can be, else quoted.
pub fn key_segment(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        key.to_string()
    } else {
        toml::Value::String(key.to_string()).to_string()
    }
}

pub(crate) use key_segment as segment;

/// A dotted key as containerd's file spells it:
/// `plugins."io.containerd.grpc.v1.cri".cni.conf_dir`.
pub fn dotted<S: AsRef<str>>(path: &[S]) -> String {
    path.iter()
        .map(|s| segment(s.as_ref()))
        .collect::<Vec<_>>()
        .join(".")
}

/// A value as one line of TOML (arrays and tables inline).
pub fn inline(value: &toml::Value) -> String {
    match value {
        toml::Value::Table(t) => {
            let items: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{} = {}", segment(k), inline(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        toml::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(inline).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// Whether a value is what an unset key decodes to: `""`, `0`, `false`,
/// an empty array or table.
pub fn is_empty(value: &toml::Value) -> bool {
    match value {
        toml::Value::String(s) => s.is_empty(),
        toml::Value::Integer(i) => *i == 0,
        toml::Value::Float(f) => *f == 0.0,
        toml::Value::Boolean(b) => !b,
        toml::Value::Array(a) => a.is_empty(),
        toml::Value::Table(t) => t.is_empty(),
        toml::Value::Datetime(_) => false,
    }
}

/// Parses a Go duration (`time.ParseDuration`): `"4h0m0s"`, `"1.5s"`,
/// `"300ms"`, `"0"`. Negative durations are refused.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a Go duration");
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(format!("{text:?} is negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad());
        }
        let n: f64 = number.parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += n * scale;
        rest = &rest[unit_len..];
    }
    if nanos > u64::MAX as f64 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// A Go duration written as berth writes durations (`"4h"`, `"1m30s"`,
/// `"500ms"`); refused when it is finer than a millisecond.
pub fn berth_duration(text: &str) -> Result<(Duration, String), String> {
    let d = go_duration(text)?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!(
            "{text:?} is finer than a millisecond, berth's precision"
        ));
    }
    Ok((d, berth_oci_image::format_duration(d)))
}

/// The berth file being written: the top-level keys, then sections, in the
/// order they were first written to.
#[derive(Debug, Default)]
pub struct Out {
    sections: Vec<(String, Vec<String>)>,
}

impl Out {
    /// Sets `key` of `section` (`""`: the top level; `runtime.handlers.runc`
    /// as already-quoted TOML), with an end-of-line comment `why`.
    pub fn set(&mut self, section: &str, key: &str, value: toml::Value, why: &str) {
        let line = format!("{} = {}", segment(key), inline(&value));
        let line = match why.is_empty() {
            true => line,
            false => format!("{line}  # {why}"),
        };
        self.lines(section).push(line);
    }

    /// Adds a comment line to `section`, above the keys that follow.
    pub fn comment(&mut self, section: &str, text: &str) {
        for line in text.lines() {
            self.lines(section).push(format!("# {line}"));
        }
    }

    fn lines(&mut self, section: &str) -> &mut Vec<String> {
        let at = match self.sections.iter().position(|(s, _)| s == section) {
            Some(at) => at,
            None => {
                // The top level must come before every table.
                let at = if section.is_empty() {
                    0
                } else {
                    self.sections.len()
                };
                self.sections.insert(at, (section.to_string(), Vec::new()));
                at
            }
        };
        &mut self.sections[at].1
    }

    /// The file's text: the top level, then the sections in berth's order
    /// (`berth config default`'s), each kind in the order written.
    pub fn render(&self) -> String {
        let mut sections: Vec<&(String, Vec<String>)> = self.sections.iter().collect();
        sections.sort_by_key(|(section, _)| rank(section));
        let mut text = String::new();
        for (section, lines) in sections {
            if !section.is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&format!("[{section}]\n"));
            }
            for line in lines {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }
}

/// Where a section goes in the output.
fn rank(section: &str) -> usize {
    const ORDER: [&str; 9] = [
        "runtime",
        "runtime.handlers.",
        "cni",
        "registry",
        "registry.mirrors.",
        "streaming",
        "metrics",
        "nri",
        "nri.default_validator",
    ];
    if section.is_empty() {
        return 0;
    }
    ORDER
        .iter()
        .position(|s| match s.strip_suffix('.') {
            Some(prefix) => section.starts_with(prefix) && section.len() > prefix.len(),
            None => section == *s,
        })
        .map_or(ORDER.len() + 1, |n| n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_containerd_writes_them() {
        assert_eq!(
            go_duration("4h0m0s").unwrap(),
            Duration::from_secs(4 * 3600)
        );
        assert_eq!(go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(go_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(go_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(go_duration("2m30s").unwrap(), Duration::from_secs(150));
        assert_eq!(go_duration("300us").unwrap(), Duration::from_micros(300));
        assert!(go_duration("-1s").is_err());
        assert!(go_duration("10").is_err());
        assert!(go_duration("").is_err());
        assert!(go_duration("1d").is_err());
        assert_eq!(berth_duration("4h0m0s").unwrap().1, "4h");
        assert_eq!(berth_duration("90s").unwrap().1, "1m30s");
        assert!(berth_duration("300us").is_err());
    }

    #[test]
    fn keys_are_quoted_only_when_needed() {
        let path = ["plugins", "io.containerd.grpc.v1.cri", "cni", "conf_dir"];
        assert_eq!(
            dotted(&path),
            "plugins.\"io.containerd.grpc.v1.cri\".cni.conf_dir"
        );
    }
}
