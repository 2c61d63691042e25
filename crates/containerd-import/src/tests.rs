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
    for text in ["version = 5\n", "version = \n", "root = \"/x\"\n"] {
        let e = import_toml(text, path).unwrap_err().to_string();
        assert!(
            e.starts_with("containerd config /etc/containerd/config.toml: "),
            "{e}"
        );
    }
}

#[test]
fn each_key_version_4_moved_into_a_plugin_is_read_there_as_the_key_it_was() {
    for (plugin, key, old) in keys::MOVED_V4 {
        let moved = ["plugins", plugin, key];
        let old: Vec<&str> = old.split('.').collect();
        let output = import_one(4, &moved, &[]);
        // The metrics address is carried over (here refused as not
        // IP:PORT), as `[metrics] address` is in version 3.
        let reason = match keys::TOP
            .iter()
            .find(|(pattern, ..)| keys::matches(pattern, &old))
        {
            Some((_, _, reason)) => reason,
            None if *plugin == keys::METRICS => "berth needs IP:PORT for metrics.address",
            None => panic!("no row for {old:?}"),
        };
        assert_noted(&output, &moved, reason);
        // Where version 3 had it, version 4 does not read it.
        let output = import_one(4, &old, &[]);
        let (id, at) = keys::moved_to(&old).unwrap();
        let not_read = format!(
            "containerd reads this key only in files of version 2 and 3; in version 4 it is \
             plugins.{}.{at}, so it was not in effect",
            key_segment(id)
        );
        assert_eq!(keys::moved_from(id, &[at]), Some(old.join(".").as_str()));
        assert_noted(&output, &old, &not_read);
    }
}
