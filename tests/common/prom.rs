//! A strict reader of the Prometheus text exposition format (0.0.4), and a
//! bare HTTP/1.0 GET, to check berth's `/metrics` endpoint.

use std::collections::{BTreeMap, HashMap};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Family name → its TYPE.
    pub types: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the sample `name` whose labels include all of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        t => t.parse().map_err(|_| format!("bad value {t:?}")),
    }
}

/// `{a="x",b="y"}` → labels, and the rest of the line after `}`.
fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text
        .strip_prefix('{')
        .ok_or_else(|| format!("expected {{ in {text:?}"))?;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = rest
            .split_once('=')
            .ok_or_else(|| format!("label without = in {text:?}"))?;
        if !valid_name(name.trim()) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut chars = after
            .strip_prefix('"')
            .ok_or_else(|| format!("unquoted label value in {text:?}"))?
            .char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in {text:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in {text:?}")),
            }
        };
        if labels.insert(name.trim().to_string(), value).is_some() {
            return Err(format!("duplicate label {name:?} in {text:?}"));
        }
        rest = &after[1 + end + 1..];
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        }
    }
}

/// The family a sample belongs to (histogram and summary series share one).
fn family<'a>(name: &'a str, types: &HashMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if matches!(
                types.get(base).map(String::as_str),
                Some("histogram" | "summary")
            ) {
                return base;
            }
        }
    }
    name
}

/// Parses and checks an exposition: names, labels, values, TYPE lines before
/// their samples, and histograms whose buckets are cumulative and end in
/// `+Inf` equal to `_count`.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut exp = Exposition::default();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.trim_start().splitn(3, ' ').collect();
            match words.first().copied() {
                Some("TYPE") => {
                    let (name, kind) = (words.get(1), words.get(2));
                    let (Some(name), Some(kind)) = (name, kind) else {
                        return Err(format!("short TYPE line {line:?}"));
                    };
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(kind) {
                        return Err(format!("unknown type in {line:?}"));
                    }
                    if exp
                        .types
                        .insert(name.to_string(), kind.to_string())
                        .is_some()
                    {
                        return Err(format!("second TYPE for {name}"));
                    }
                }
                Some("HELP") if words.len() < 2 => return Err(format!("short HELP {line:?}")),
                _ => {}
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if !valid_name(name) {
            return Err(format!("bad metric name in {line:?}"));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..])?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let mut fields = rest.split_whitespace();
        let value = parse_value(
            fields
                .next()
                .ok_or_else(|| format!("no value in {line:?}"))?,
        )?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|_| format!("bad timestamp in {line:?}"))?;
        }
        if fields.next().is_some() {
            return Err(format!("trailing text in {line:?}"));
        }
        let fam = family(name, &exp.types);
        if !exp.types.contains_key(fam) {
            return Err(format!("sample {name} before its TYPE line"));
        }
        exp.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    check_histograms(&exp)?;
    Ok(exp)
}

/// A series' labels, in order.
type LabelPairs = Vec<(String, String)>;

fn check_histograms(exp: &Exposition) -> Result<(), String> {
    for (fam, kind) in &exp.types {
        if kind != "histogram" {
            continue;
        }
        let bucket = format!("{fam}_bucket");
        let count = format!("{fam}_count");
        // Group the buckets by their labels without `le`.
        let mut series: BTreeMap<LabelPairs, Vec<(f64, f64)>> = BTreeMap::new();
        for s in exp.samples.iter().filter(|s| s.name == bucket) {
            let le = s
                .labels
                .get("le")
                .ok_or_else(|| format!("{bucket} without le"))?;
            let key = s
                .labels
                .iter()
                .filter(|(k, _)| *k != "le")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            series
                .entry(key)
                .or_default()
                .push((parse_value(le)?, s.value));
        }
        for (key, buckets) in series {
            if buckets
                .windows(2)
                .any(|w| w[1].0 <= w[0].0 || w[1].1 < w[0].1)
            {
                return Err(format!("{fam} {key:?}: buckets not cumulative"));
            }
            let Some(&(le, inf)) = buckets.last() else {
                continue;
            };
            if le != f64::INFINITY {
                return Err(format!("{fam} {key:?}: no +Inf bucket"));
            }
            let total = exp
                .samples
                .iter()
                .find(|s| {
                    s.name == count
                        && s.labels
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect::<LabelPairs>()
                            == key
                })
                .ok_or_else(|| format!("{fam} {key:?}: no _count"))?;
            if total.value != inf {
                return Err(format!("{fam} {key:?}: +Inf bucket differs from _count"));
            }
        }
    }
    Ok(())
}

/// `GET path` over HTTP/1.0: the status code, the Content-Type and the body.
pub async fn http_get(addr: &str, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut raw),
    )
    .await
    .expect("the endpoint answers in time")
    .unwrap();
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers end");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    (status, content_type, body.to_string())
}
