//! The documentation kept true, so that it cannot drift from the tree. No
//! root needed.
//!
//! - Links: every relative link of README.md and docs/*.md leads to a file
//!   or directory of the repository, and its `#anchor`, when it has one and
//!   leads to a Markdown file, to one of that file's headings (as GitHub
//!   names them). Links inside code are not links.
//! - Configuration: docs/configuration.md's tables (those with a `key`
//!   column) name exactly the keys of `berth config default`, and their
//!   `flag` column exactly the options of `berth --help`. Keys are dotted
//!   names; a name in capitals (`NAME`, `"HOST"`) stands for any entry of a
//!   map. A map that is empty in the defaults (`registry.mirrors`) has no
//!   entry to compare with: [`MAP_INSTANCES`] gives one, read back with
//!   `berth config show`, so its entries' keys are compared too; an empty
//!   table the defaults gain without an instance here fails as a key the
//!   page does not name.
//! - Architecture: every repository path docs/architecture.md names in
//!   backticks exists, and it names every crate and every entry of hack/
//!   (see [`repo_path`] for what counts as a path).
//! - The README stays a front door: at most 200 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::common::berth_bin;

/// The repository's root, where README.md is.
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &Path) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and docs/*.md, relative to the repository.
fn markdown_files() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| PathBuf::from("docs").join(e.expect("docs/ entry").file_name()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(docs);
    files
}

// ---- Markdown, as much of it as these checks need ----

/// The lines of a Markdown file outside fenced code blocks (``` or ~~~),
/// with their line numbers (from 1).
fn prose(md: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<(u8, usize)> = None;
    for (i, line) in md.lines().enumerate() {
        let t = line.trim_start();
        let c = t.bytes().next().unwrap_or(b' ');
        let n = t.bytes().take_while(|b| *b == c).count();
        if (c == b'`' || c == b'~') && n >= 3 {
            match fence {
                None => {
                    fence = Some((c, n));
                    continue;
                }
                Some((fc, fnum)) if fc == c && n >= fnum && t[n..].trim().is_empty() => {
                    fence = None;
                    continue;
                }
                Some(_) => {}
            }
        }
        if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// A paragraph of prose (lines between blank lines or fences), and the
/// line it starts on.
struct Para {
    line: usize,
    text: String,
}

impl Para {
    /// The line of byte `at` of the paragraph.
    fn line_of(&self, at: usize) -> usize {
        self.line + self.text[..at].matches('\n').count()
    }
}

fn paragraphs(md: &str) -> Vec<Para> {
    let mut out = Vec::new();
    let mut cur: Option<Para> = None;
    let mut last = 0;
    for (no, line) in prose(md) {
        let follows = no == last + 1;
        last = no;
        if line.trim().is_empty() || !follows {
            out.extend(cur.take());
            if line.trim().is_empty() {
                continue;
            }
        }
        match &mut cur {
            Some(p) => {
                p.text.push('\n');
                p.text.push_str(line);
            }
            None => {
                cur = Some(Para {
                    line: no,
                    text: line.to_string(),
                })
            }
        }
    }
    out.extend(cur);
    out
}

/// A paragraph's code spans (their text, line breaks as spaces, and the
/// line each starts on), and the paragraph with each span blanked out, so
/// that nothing inside code is taken for a link. A run of backticks that no
/// run of the same length closes is plain text, as in CommonMark.
fn code_spans(p: &Para) -> (Vec<(usize, String)>, String) {
    let text = &p.text;
    let b = text.as_bytes();
    let run = |at: usize| b[at..].iter().take_while(|c| **c == b'`').count();
    let mut spans = Vec::new();
    let mut rest = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            let next = text[i..].find('`').map_or(b.len(), |k| i + k);
            rest.push_str(&text[i..next]);
            i = next;
            continue;
        }
        let n = run(i);
        let mut j = i + n;
        let mut close = None;
        while j < b.len() {
            if b[j] == b'`' {
                let m = run(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                spans.push((p.line_of(i), text[i + n..j].replace('\n', " ")));
                rest.extend(
                    text[i..j + n]
                        .chars()
                        .map(|c| if c == '\n' { '\n' } else { ' ' }),
                );
                i = j + n;
            }
            None => {
                rest.push_str(&text[i..i + n]);
                i += n;
            }
        }
    }
    (spans, rest)
}

/// The targets of a paragraph's links and images (`[text](target "title")`,
/// and reference definitions `[label]: target`), with their lines; `rest`
/// is the paragraph with its code blanked out.
fn link_targets(p: &Para, rest: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = rest[from..].find("](") {
        let start = from + k + 2;
        let mut depth = 0;
        let mut end = None;
        for (o, c) in rest[start..].char_indices() {
            match c {
                '\n' => break,
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(start + o);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else {
            from = start;
            continue;
        };
        let inner = rest[start..end].trim();
        let target = match inner.strip_prefix('<') {
            Some(t) => t.split('>').next().unwrap_or(""),
            None => inner.split_whitespace().next().unwrap_or(""),
        };
        out.push((p.line_of(start), target.to_string()));
        from = end;
    }
    let mut at = 0;
    for line in rest.split('\n') {
        let t = line.trim_start();
        if let (Some(body), Some(k)) = (t.strip_prefix('['), t.find("]:")) {
            if !body.starts_with('^') && k > 1 {
                if let Some(target) = t[k + 2..].split_whitespace().next() {
                    out.push((p.line_of(at), target.to_string()));
                }
            }
        }
        at += line.len() + 1;
    }
    out
}

/// The anchors GitHub gives a Markdown file's headings: the heading's text
/// in lower case, with spaces as `-` and every character but letters,
/// digits, `-` and `_` dropped; a repeated one gets `-1`, `-2`, …
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(md) {
        let t = line.trim_start();
        let hashes = t.bytes().take_while(|b| *b == b'#').count();
        let text = &t[hashes..];
        if !(1..=6).contains(&hashes) || !(text.is_empty() || text.starts_with(' ')) {
            continue;
        }
        let text = text.trim().trim_end_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

/// `path` with `.` and `..` resolved, or None when it leaves the repository.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// What is wrong with link `target` of Markdown file `file`, if anything.
fn broken_link(file: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let path = path.replace("%20", " ");
    let joined = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        PathBuf::from(from_root)
    } else {
        file.parent().unwrap_or(Path::new("")).join(&path)
    };
    let Some(rel) = normalize(&joined) else {
        return Some(format!("{path} leaves the repository"));
    };
    let full = repo().join(&rel);
    if !full.exists() {
        return Some(format!("{} does not exist", rel.display()));
    }
    let anchor = anchor?;
    if full.extension().is_some_and(|e| e == "md") && !anchors(&read(&rel)).contains(anchor) {
        return Some(format!("{} has no heading #{anchor}", rel.display()));
    }
    None
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for p in paragraphs(&read(&file)) {
            let (_, rest) = code_spans(&p);
            for (line, target) in link_targets(&p, &rest) {
                checked += 1;
                if let Some(why) = broken_link(&file, &target) {
                    broken.push(format!("{}:{line}: ({target}): {why}", file.display()));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the scanner broken?"
    );
    assert!(
        broken.is_empty(),
        "broken links in the documentation:\n{}",
        broken.join("\n")
    );
}

// ---- docs/configuration.md against `berth config default` ----

/// For each map that is empty in the defaults, a configuration with one
/// entry of it (the least that parses), whose keys `berth config show`
/// then prints with their defaults.
const MAP_INSTANCES: &[&str] =
    &["[registry.mirrors.\"mirror.test\"]\nendpoints = [\"http://127.0.0.1:5000\"]\n"];

/// A name that stands for any entry of a map: capitals (`NAME`, `HOST`).
fn is_placeholder(name: &str) -> bool {
    name.bytes().any(|b| b.is_ascii_uppercase())
        && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
}

/// A dotted key split into its names, quotes removed:
/// `registry.mirrors."HOST".endpoints` is registry, mirrors, HOST, endpoints.
fn split_key(key: &str) -> Vec<String> {
    let mut names = vec![String::new()];
    let mut quoted = false;
    for c in key.chars() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => names.push(String::new()),
            c => names.last_mut().expect("a name").push(c),
        }
    }
    names
}

/// Every leaf key of a TOML document, as its names; an empty table is a
/// leaf of its own.
fn toml_keys(text: &str) -> BTreeSet<Vec<String>> {
    fn walk(prefix: &mut Vec<String>, table: &toml::Table, out: &mut BTreeSet<Vec<String>>) {
        for (k, v) in table {
            prefix.push(k.clone());
            match v {
                toml::Value::Table(t) if !t.is_empty() => walk(prefix, t, out),
                _ => {
                    out.insert(prefix.clone());
                }
            }
            prefix.pop();
        }
    }
    let table: toml::Table = toml::from_str(text).expect("berth prints valid TOML");
    let mut out = BTreeSet::new();
    walk(&mut Vec::new(), &table, &mut out);
    out
}

fn berth(args: &[&str]) -> String {
    let out = Command::new(berth_bin())
        .args(args)
        .output()
        .expect("run berth");
    assert!(
        out.status.success(),
        "berth {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The keys berth has: those of `berth config default`, and the entries'
/// keys of each map in [`MAP_INSTANCES`]; an empty table that an entry
/// fills is not a key of its own.
fn berth_keys() -> BTreeSet<Vec<String>> {
    let mut keys = toml_keys(&berth(&["config", "default"]));
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, instance) in MAP_INSTANCES.iter().enumerate() {
        let file = dir.path().join(format!("instance-{i}.toml"));
        std::fs::write(&file, instance).expect("write instance");
        let file = file.to_str().expect("UTF-8 path");
        keys.extend(toml_keys(&berth(&["config", "show", "--config", file])));
    }
    let filled: Vec<Vec<String>> = keys
        .iter()
        .filter(|k| keys.iter().any(|o| o.len() > k.len() && o.starts_with(k)))
        .cloned()
        .collect();
    for k in filled {
        keys.remove(&k);
    }
    keys
}

/// One row of a table with a `key` column: its line, its flags (the first
/// word of each code span of the `flag` column) and its keys (every code
/// span of the `key` column).
struct Row {
    line: usize,
    flags: Vec<String>,
    keys: Vec<String>,
}

fn cells(line: &str) -> Vec<&str> {
    let t = line.trim().trim_start_matches('|').trim_end_matches('|');
    t.split('|').map(str::trim).collect()
}

fn spans_of(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

fn config_rows(md: &str) -> Vec<Row> {
    let lines = prose(md);
    let mut rows = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let head = cells(lines[i].1);
        let key_col = head.iter().position(|c| *c == "key");
        if !lines[i].1.trim_start().starts_with('|') || key_col.is_none() {
            i += 1;
            continue;
        }
        let flag_col = head.iter().position(|c| *c == "flag");
        i += 2; // the header and the |---| line
        while i < lines.len() && lines[i].1.trim_start().starts_with('|') {
            let (line, text) = lines[i];
            let row = cells(text);
            assert_eq!(
                row.len(),
                head.len(),
                "docs/configuration.md:{line}: {} cells where the header has {} (a `|` in a cell?)",
                row.len(),
                head.len()
            );
            let words = |col: Option<usize>| -> Vec<String> {
                col.map(|c| spans_of(row[c]))
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string)
                    .collect()
            };
            rows.push(Row {
                line,
                flags: words(flag_col)
                    .iter()
                    .filter_map(|f| f.split_whitespace().next().map(str::to_string))
                    .collect(),
                keys: words(key_col),
            });
            i += 1;
        }
    }
    rows
}

/// A key as the page writes it: names joined by dots, a name with a dot
/// quoted.
fn dotted(key: &[String]) -> String {
    let names: Vec<String> = key
        .iter()
        .map(|n| {
            if n.contains('.') {
                format!("\"{n}\"")
            } else {
                n.clone()
            }
        })
        .collect();
    names.join(".")
}

/// Whether documented key `doc` (its names) stands for key `key`.
fn stands_for(doc: &[String], key: &[String]) -> bool {
    doc.len() == key.len()
        && doc
            .iter()
            .zip(key)
            .all(|(d, k)| d == k || is_placeholder(d))
}

#[test]
fn configuration_page_names_every_key_and_flag() {
    let page = Path::new("docs/configuration.md");
    let rows = config_rows(&read(page));
    let documented: Vec<(usize, String, Vec<String>)> = rows
        .iter()
        .flat_map(|r| r.keys.iter().map(|k| (r.line, k.clone(), split_key(k))))
        .collect();
    assert!(
        documented.len() > 20,
        "only {} keys found in {}: is its table still there, with a `key` column?",
        documented.len(),
        page.display()
    );
    let keys = berth_keys();
    let mut wrong = Vec::new();
    for key in &keys {
        if !documented.iter().any(|(_, _, d)| stands_for(d, key)) {
            wrong.push(format!(
                "`{}` is a key of berth's configuration that {} does not name",
                dotted(key),
                page.display()
            ));
        }
    }
    for (line, text, doc) in &documented {
        if !keys.iter().any(|k| stands_for(doc, k)) {
            wrong.push(format!(
                "{}:{line}: `{text}` is not a key of berth's configuration (`berth config default`)",
                page.display()
            ));
        }
    }

    let help = berth(&["--help"]);
    let options: BTreeSet<String> = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .flat_map(|l| l.split([' ', ',']))
        .filter(|w| w.starts_with("--"))
        .map(str::to_string)
        .filter(|w| w != "--help" && w != "--version")
        .collect();
    let flags: BTreeSet<String> = rows.iter().flat_map(|r| r.flags.clone()).collect();
    for o in options.difference(&flags) {
        wrong.push(format!(
            "`{o}` is an option of `berth --help` that {} does not name",
            page.display()
        ));
    }
    for f in flags.difference(&options) {
        wrong.push(format!(
            "{}: `{f}` is not an option of `berth --help`",
            page.display()
        ));
    }
    assert!(
        wrong.is_empty(),
        "{} and berth disagree:\n{}",
        page.display(),
        wrong.join("\n")
    );
}

// ---- docs/architecture.md against the tree ----

/// Whether a word of a code span is a repository path: it starts with a
/// letter, `.` or `_` (host paths are written absolute, `/var/lib/berth/…`,
/// or from a placeholder, `<root>/…`; flags, addresses and CIDRs start
/// otherwise), holds none of the characters of URLs, patterns, options and
/// placeholders, and has a `/` or ends in .rs, .sh or .md.
fn repo_path(word: &str) -> bool {
    let starts = word
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '.' || c == '_');
    let plain = !word.contains("...")
        && !word.chars().any(|c| {
            matches!(
                c,
                ':' | '*'
                    | '<'
                    | '>'
                    | '{'
                    | '}'
                    | '['
                    | ']'
                    | '('
                    | ')'
                    | '$'
                    | '='
                    | '|'
                    | '+'
                    | '…'
                    | '"'
                    | '\''
                    | ','
                    | '@'
                    | '#'
            )
        });
    starts
        && plain
        && (word.contains('/') || [".rs", ".sh", ".md"].iter().any(|e| word.ends_with(e)))
}

/// The names of every file and directory of the repository (but build
/// output and git's own).
fn all_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![repo().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "target" || name == ".git" {
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
            names.insert(name);
        }
    }
    names
}

/// The entries of directory `dir` of the repository, hidden ones left out.
fn entries(dir: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(repo().join(dir))
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    out.sort();
    out
}

#[test]
fn architecture_page_names_paths_that_exist() {
    let page = Path::new("docs/architecture.md");
    let mut paths = Vec::new();
    for p in paragraphs(&read(page)) {
        for (line, span) in code_spans(&p).0 {
            for word in span.split_whitespace().filter(|w| repo_path(w)) {
                paths.push((line, word.to_string()));
            }
        }
    }
    assert!(
        paths.len() > 40,
        "only {} paths found in {}: is the scanner broken?",
        paths.len(),
        page.display()
    );
    let names = all_names();
    let mut wrong = Vec::new();
    for (line, path) in &paths {
        let exists = if path.contains('/') {
            repo().join(path.trim_end_matches('/')).exists()
        } else {
            names.contains(path)
        };
        if !exists {
            wrong.push(format!(
                "{}:{line}: `{path}` is not in the repository",
                page.display()
            ));
        }
    }
    let named = |dir: &str, entry: &str| {
        let want = format!("{dir}/{entry}");
        paths.iter().any(|(_, p)| {
            let p = p.trim_end_matches('/');
            p == want || p.starts_with(&format!("{want}/"))
        })
    };
    for dir in ["crates", "hack"] {
        for entry in entries(dir) {
            if !named(dir, &entry) {
                wrong.push(format!(
                    "{}: `{dir}/{entry}` is in the tree but the page does not name it",
                    page.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn readme_is_a_front_door() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: keep it to what berth is, the two commands and \
         where the manual is (at most 200); the rest belongs in docs/"
    );
}
