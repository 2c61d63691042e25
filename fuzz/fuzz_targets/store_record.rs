//! Records on disk (`<dir>/<id>.json`, as berth keeps pods and containers):
//! any file content loads as a record or an error, never a panic.
#![no_main]

use std::sync::OnceLock;

use berth_store::{Record, RecordDir};
// (save, with its fsync, would bound this target to a few hundred runs a
// second; what save writes is serde_json's own output.)
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

type AnyRecord = Record<Value, Value>;

fn dir() -> &'static (tempfile::TempDir, RecordDir<AnyRecord>) {
    static DIR: OnceLock<(tempfile::TempDir, RecordDir<AnyRecord>)> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let records = RecordDir::open(tmp.path()).unwrap();
        (tmp, records)
    })
}

fuzz_target!(|data: &[u8]| {
    let (tmp, records) = dir();
    std::fs::write(tmp.path().join("r.json"), data).unwrap();
    let _ = records.load("r");
});
