//! Records on disk (`<dir>/<id>.json`, as berth keeps pods and containers),
//! through `RecordDir::decode`, the decoding `load` runs on a file's bytes:
//! any content gives a record or an error, never a panic; a record that
//! decodes encodes (as `save` writes it) to bytes that decode the same.
//! The first byte picks the record's shape: berth's `Record` of meta and
//! status, or a typed one (numbers, enums, options) whose conversions can
//! fail where untyped JSON cannot.
#![no_main]

use std::sync::OnceLock;

use berth_store::{Record, RecordDir};
use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod scratch;

type AnyRecord = Record<Value, Value>;

/// A record with the field types berth's records use.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Typed {
    id: String,
    pid: Option<u32>,
    exit_code: i32,
    created_ns: i64,
    size: u64,
    state: State,
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    mounts: Vec<(String, bool)>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum State {
    Created,
    Running { since: i64 },
    Exited(i32),
}

fn dir<T: Serialize + serde::de::DeserializeOwned>(
    cell: &'static OnceLock<RecordDir<T>>,
    name: &str,
) -> &'static RecordDir<T> {
    cell.get_or_init(|| RecordDir::open(&scratch::dir().join(name)).unwrap())
}

fn round_trip<T>(records: &RecordDir<T>, data: &[u8], eq: impl Fn(&T, &T) -> bool)
where
    T: Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if let Ok(record) = records.decode("r", data) {
        let bytes = records.encode("r", &record).unwrap();
        let back = records.decode("r", &bytes).unwrap();
        assert!(eq(&record, &back), "{record:?} != {back:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    static ANY: OnceLock<RecordDir<AnyRecord>> = OnceLock::new();
    static TYPED: OnceLock<RecordDir<Typed>> = OnceLock::new();
    let Some((&kind, data)) = data.split_first() else {
        return;
    };
    if kind % 2 == 0 {
        round_trip(dir(&ANY, "any"), data, |a, b| {
            a.meta == b.meta && a.status == b.status
        });
    } else {
        round_trip(dir(&TYPED, "typed"), data, |a, b| a == b);
    }
});
