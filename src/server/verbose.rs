//! What the verbose status answers carry besides berth's own facts, in the
//! shapes containerd gives them (`crictl inspect`, Falco's CRI engine and
//! scripts read them): the CRI config as JSON and the OCI spec as run.

use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

use base64::Engine;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, ReflectMessage, Value};
use serde_json::Value as Json;

/// Largest spec file read back for the info.
const MAX_SPEC_BYTES: u64 = 16 << 20;

/// A CRI message (`runtime.v1.<name>`, protobuf-encoded) as containerd's Go
/// `encoding/json` writes the cri-api struct: the proto field names
/// (snake_case), zero values and unset messages left out, enums as
/// numbers, 64-bit integers as numbers, bytes in base64 but a `KeyValue`'s
/// value, a string (cri-api's own `MarshalJSON`, each byte that is not
/// UTF-8 a U+FFFD). `None` when the bytes do not decode.
pub fn cri_json(name: &str, bytes: &[u8]) -> Option<Json> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| DescriptorPool::decode(cri_api::FILE_DESCRIPTOR_SET).ok());
    let desc = pool
        .as_ref()?
        .get_message_by_name(&format!("runtime.v1.{name}"))?;
    let message = DynamicMessage::decode(desc, bytes).ok()?;
    Some(message_json(&message))
}

fn message_json(message: &DynamicMessage) -> Json {
    let key_value = message.descriptor().full_name() == "runtime.v1.KeyValue";
    let fields = message.fields().map(|(field, value)| {
        let json = match value {
            Value::Bytes(b) if key_value => Json::from(berth_spec::env_value(b)),
            _ => value_json(value),
        };
        (field.name().to_string(), json)
    });
    Json::Object(fields.collect())
}

fn value_json(value: &Value) -> Json {
    match value {
        Value::Bool(b) => Json::from(*b),
        Value::I32(n) | Value::EnumNumber(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(n) => Json::from(*n),
        Value::F64(n) => Json::from(*n),
        Value::String(s) => Json::from(s.as_str()),
        Value::Bytes(b) => Json::from(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::Message(m) => message_json(m),
        Value::List(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Map(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (map_key(k), value_json(v)))
                .collect(),
        ),
    }
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// The OCI spec a bundle was run with (its `config.json`), read on a
/// blocking thread; `None` when it is missing, too large or not JSON.
pub async fn runtime_spec(bundle: PathBuf) -> Option<Json> {
    let read = move || -> std::io::Result<Json> {
        let file = std::fs::File::open(bundle.join("config.json"))?;
        let mut bytes = Vec::new();
        file.take(MAX_SPEC_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_SPEC_BYTES {
            return Err(std::io::Error::other("config.json too large"));
        }
        Ok(serde_json::from_slice(&bytes)?)
    };
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(spec)) => Some(spec),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading a bundle's spec for the verbose info");
            None
        }
        Err(_) => None,
    }
}

/// Whether the network namespace pinned at `path` is gone (a host-network
/// pod has none: false, as containerd), checked on a blocking thread.
pub async fn netns_closed(path: Option<PathBuf>) -> bool {
    let Some(path) = path else { return false };
    let open = tokio::task::spawn_blocking(move || berth_netns::is_namespace(&path));
    !matches!(open.await, Ok(Ok(true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::v1;
    use prost::Message;

    /// What containerd 2.4.2's `info.config` holds for this config (Go's
    /// encoding/json of cri-api v0.37.0's struct, run once to write this).
    #[test]
    fn a_container_config_as_go_writes_it() {
        let config = v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: "web".into(),
                attempt: 0,
            }),
            image: Some(v1::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            envs: vec![v1::KeyValue {
                key: "A".into(),
                value: b"\xff1".to_vec(),
            }],
            labels: [("app".to_string(), "x".to_string())].into(),
            linux: Some(v1::LinuxContainerConfig {
                security_context: Some(v1::LinuxContainerSecurityContext {
                    privileged: true,
                    run_as_user: Some(v1::Int64Value { value: 0 }),
                    ..Default::default()
                }),
                resources: Some(v1::LinuxContainerResources {
                    memory_limit_in_bytes: 1 << 40,
                    ..Default::default()
                }),
            }),
            stop_signal: v1::Signal::Sigkill as i32,
            ..Default::default()
        };
        let json = cri_json("ContainerConfig", &config.encode_to_vec()).unwrap();
        let want = serde_json::json!({
            "metadata": {"name": "web"},
            "image": {"image": "busybox"},
            "envs": [{"key": "A", "value": "\u{fffd}1"}],
            "labels": {"app": "x"},
            "linux": {
                "resources": {"memory_limit_in_bytes": 1099511627776_i64},
                "security_context": {"privileged": true, "run_as_user": {}},
            },
            "stop_signal": v1::Signal::Sigkill as i32,
        });
        assert_eq!(json, want);
        assert!(cri_json("ContainerConfig", b"\xff\xff").is_none());
        assert!(cri_json("NoSuchMessage", b"").is_none());
    }
}
