//! The tables of `keys` as the import reads them: every row is reached by a
//! file that sets its key.

use std::path::Path;

use toml::Value;

use super::keys::{self, Owner};
use super::*;

/// The import of a file that sets only `path` (to `"x"`, with `extra`
/// beside it), under `version`.
fn import_one(version: i64, path: &[&str], extra: &[(&[&str], &str)]) -> String {
    let mut doc = toml::Table::new();
    doc.insert("version".into(), Value::Integer(version));
    let mut set = |path: &[&str], value: &str| {
        let (last, parents) = path.split_last().unwrap();
        let mut table = &mut doc;
        for p in parents {
            table = table
                .entry(p.to_string())
                .or_insert_with(|| Value::Table(toml::Table::new()))
                .as_table_mut()
                .unwrap();
        }
        table.insert(last.to_string(), Value::String(value.into()));
    };
    for (path, value) in extra {
        set(path, value);
    }
    set(path, "x");
    import_toml(&doc.to_string(), Path::new("/etc/containerd/config.toml")).unwrap()
}

/// A key the pattern matches: the first spelling of each segment.
fn first_key(pattern: &str) -> Vec<&str> {
    pattern
        .split('.')
        .filter(|s| *s != "**")
        .map(|s| s.split('|').next().unwrap_or(s))
        .collect()
}

fn assert_noted(output: &str, path: &[&str], reason: &str) {
    let line = format!(
        "# containerd {} = \"x\": not mapped: {reason}\n",
        dotted(path)
    );
    assert!(output.contains(&line), "no {line:?} in:\n{output}");
}

#[test]
fn every_row_of_the_tables_gives_its_reason() {
    for (pattern, _, reason) in keys::TOP {
        let path = first_key(pattern);
        assert_noted(&import_one(3, &path, &[]), &path, reason);
    }
    for (plugin, (pattern, _, reason)) in keys::PLUGINS {
        let path = [&["plugins", plugin][..], &first_key(pattern)].concat();
        assert_noted(&import_one(3, &path, &[]), &path, reason);
    }
    for (owner, (pattern, _, reason)) in keys::CRI {
        let (version, plugin) = match owner {
            Owner::V2 => (2, CRI),
            Owner::Runtime | Owner::Either => (3, RUNTIME),
            Owner::Images => (3, IMAGES),
            Owner::Server => (3, CRI),
        };
        let path = [&["plugins", plugin][..], &first_key(pattern)].concat();
        assert_noted(&import_one(version, &path, &[]), &path, reason);
    }
    let handler = ["plugins", RUNTIME, "containerd", "runtimes", "runc"];
    let runc = [&handler[..], &["runtime_type"]].concat();
    for (pattern, _, reason) in keys::HANDLER {
        let path = [&handler[..], &first_key(pattern)].concat();
        let output = import_one(3, &path, &[(&runc, "io.containerd.runc.v2")]);
        assert_noted(&output, &path, reason);
    }
}

#[test]
fn errors_name_the_file() {
    let path = Path::new("/etc/containerd/config.toml");
    for text in ["version = 4\n", "version = \n", "root = \"/x\"\n"] {
        let e = import_toml(text, path).unwrap_err().to_string();
        assert!(
            e.starts_with("containerd config /etc/containerd/config.toml: "),
            "{e}"
        );
    }
}
