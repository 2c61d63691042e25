//! berth's own settings: logging (`[debug]`), the streaming server (the CRI
//! plugin's `stream_*` keys), metrics and NRI.

use std::path::Path;

use toml::Value;

use super::reasons::Group;
use super::values::{berth_duration, dotted};
use super::{keys, Import, Version, NRI};

impl Import<'_> {
    /// `[debug] level` and `format`.
    pub(super) fn logging(&mut self) {
        if let Some(level) = self.string(&["debug", "level"]) {
            let value = Value::String(level.into());
            match level {
                "" => self.note(
                    &["debug", "level"],
                    &value,
                    Group::Nothing,
                    "empty: info, berth's default log_level",
                ),
                "trace" | "debug" | "info" | "warn" | "error" => {
                    self.put("", "log_level", value, &[&["debug", "level"]], "")
                }
                "warning" => self.put(
                    "",
                    "log_level",
                    Value::String("warn".into()),
                    &[&["debug", "level"]],
                    "",
                ),
                _ => self.note(
                    &["debug", "level"],
                    &value,
                    Group::Check,
                    "berth's log levels are error, warn, info, debug and trace",
                ),
            }
        }
        if let Some(format) = self.string(&["debug", "format"]) {
            let value = Value::String(format.into());
            match format {
                "" => self.note(
                    &["debug", "format"],
                    &value,
                    Group::Nothing,
                    "empty: text, berth's default log_format",
                ),
                "text" | "json" => self.put("", "log_format", value, &[&["debug", "format"]], ""),
                _ => self.note(
                    &["debug", "format"],
                    &value,
                    Group::Check,
                    "berth's log formats are text and json",
                ),
            }
        }
    }

    /// `[streaming]`: address, port, idle timeout, TLS.
    pub(super) fn streaming(&mut self) {
        let (_, _, s) = self.roots();
        self.stream_address(s);
        self.stream_port(s);
        self.stream_idle_timeout(s);
        self.stream_tls(s);
    }

    /// `streaming.address` from the CRI plugin `s`'s `stream_server_address`.
    fn stream_address(&mut self, s: &str) {
        let at = |key: &'static str| ["plugins", s, key];
        if let Some(address) = self.string(&at("stream_server_address")) {
            let value = Value::String(address.into());
            if address.parse::<std::net::IpAddr>().is_ok() {
                self.put(
                    "streaming",
                    "address",
                    value,
                    &[&at("stream_server_address")],
                    "",
                );
            } else if address.is_empty() {
                self.note(
                    &at("stream_server_address"),
                    &value,
                    Group::Check,
                    "empty: containerd listened on the address of the default route's interface; \
                     berth needs an IP address (streaming.address), so it keeps 127.0.0.1",
                );
            } else {
                self.note(
                    &at("stream_server_address"),
                    &value,
                    Group::Check,
                    "not an IP address, which berth needs for streaming.address",
                );
            }
        }
    }

    /// `streaming.port`: a string in version 2's files, an integer too.
    fn stream_port(&mut self, s: &str) {
        let at = |key: &'static str| ["plugins", s, key];
        if let Some(value) = self.take(&at("stream_server_port")) {
            let port = match value {
                Value::String(s) => s.parse::<u16>().ok(),
                Value::Integer(i) => u16::try_from(*i).ok(),
                _ => None,
            };
            match port {
                Some(port) => self.put(
                    "streaming",
                    "port",
                    Value::Integer(port.into()),
                    &[&at("stream_server_port")],
                    "",
                ),
                None => self.note(
                    &at("stream_server_port"),
                    value,
                    Group::Check,
                    "not a port number",
                ),
            }
        }
    }

    /// `streaming.idle_timeout`, which berth needs above 0.
    fn stream_idle_timeout(&mut self, s: &str) {
        let at = |key: &'static str| ["plugins", s, key];
        if let Some(text) = self.string(&at("stream_idle_timeout")) {
            let value = Value::String(text.into());
            match berth_duration(text) {
                Ok((d, _)) if d.is_zero() => self.note(
                    &at("stream_idle_timeout"),
                    &value,
                    Group::Check,
                    "containerd: no idle limit; berth needs one above 0 (streaming.idle_timeout)",
                ),
                Ok((_, d)) => self.put(
                    "streaming",
                    "idle_timeout",
                    Value::String(d),
                    &[&at("stream_idle_timeout")],
                    "",
                ),
                Err(e) => self.note(&at("stream_idle_timeout"), &value, Group::Check, e),
            }
        }
    }

    /// `streaming.enable_tls` and the certificate pair, carried over only
    /// as a pair of absolute paths with TLS on.
    fn stream_tls(&mut self, s: &str) {
        let at = |key: &'static str| ["plugins", s, key];
        let tls = self.boolean(&at("enable_tls_streaming"));
        if let Some(tls) = tls {
            self.put(
                "streaming",
                "enable_tls",
                Value::Boolean(tls),
                &[&at("enable_tls_streaming")],
                "",
            );
        }
        let pair = ["plugins", s, "x509_key_pair_streaming"];
        let cert_path = [&pair[..], &["tls_cert_file"]].concat();
        let key_path = [&pair[..], &["tls_key_file"]].concat();
        let cert = self.string(&cert_path).unwrap_or("");
        let key = self.string(&key_path).unwrap_or("");
        let files = [(&cert_path, cert), (&key_path, key)];
        let note_both = |this: &mut Self, group: Group, why: &str| {
            for (path, file) in files {
                if this.lookup(path).is_some() {
                    this.note(path, &Value::String(file.into()), group, why);
                }
            }
        };
        match (cert.is_empty(), key.is_empty()) {
            (true, true) => note_both(
                self,
                Group::Nothing,
                "empty: with enable_tls, berth makes a self-signed certificate, as containerd",
            ),
            _ if tls != Some(true) => note_both(
                self,
                Group::Nothing,
                "containerd uses it only with enable_tls_streaming, which is off",
            ),
            (false, false) if Path::new(cert).is_absolute() && Path::new(key).is_absolute() => {
                self.put(
                    "streaming",
                    "tls_cert_file",
                    Value::String(cert.into()),
                    &[&cert_path],
                    "",
                );
                self.put(
                    "streaming",
                    "tls_key_file",
                    Value::String(key.into()),
                    &[&key_path],
                    "",
                );
            }
            (false, false) => note_both(
                self,
                Group::Check,
                "berth needs absolute paths for streaming.tls_cert_file and tls_key_file",
            ),
            _ => note_both(
                self,
                Group::Check,
                "only one of the pair is set: berth needs both (or neither, for a self-signed \
                 certificate)",
            ),
        }
    }

    /// The metrics address: the metrics server plugin's in version 4 (and
    /// in older files that have it, as containerd 2.4 reads them), else
    /// `[metrics] address`.
    pub(super) fn metrics(&mut self) {
        let plugin = ["plugins", keys::METRICS, "address"];
        let top = ["metrics", "address"];
        let in_plugin = self.version == Version::V4 || self.lookup(&plugin).is_some();
        let path: &[&str] = if in_plugin { &plugin } else { &top };
        if in_plugin && self.version != Version::V4 {
            if let Some(value) = self.lookup(&top) {
                let why = format!("containerd 2.4 reads {} instead", dotted(&plugin));
                self.note(&top, value, Group::Nothing, why);
            }
        }
        if let Some(address) = self.string(path) {
            let value = Value::String(address.into());
            if address.is_empty() {
                self.note(
                    path,
                    &value,
                    Group::Nothing,
                    "empty: no metrics endpoint, as in berth by default",
                );
            } else if address.parse::<std::net::SocketAddr>().is_ok() {
                self.out.comment(
                    "metrics",
                    "berth serves /metrics, containerd served /v1/metrics: change the scrape path.",
                );
                self.put("metrics", "address", value, &[path], "");
            } else {
                self.note(
                    path,
                    &value,
                    Group::Check,
                    "berth needs IP:PORT for metrics.address",
                );
            }
        }
    }

    /// `[nri]` from `plugins."io.containerd.nri.v1.nri"`.
    pub(super) fn nri(&mut self) {
        let base = ["plugins", NRI];
        let disabled_by_list = matches!(
            self.lookup(&["disabled_plugins"]),
            Some(Value::Array(l)) if l.iter().any(|v| v.as_str() == Some(NRI))
        );
        let disable_path = [&base[..], &["disable"]].concat();
        let disable = self.boolean(&disable_path);
        let (enable, from, why): (bool, &[&[&str]], &str) = match (disabled_by_list, disable) {
            (true, _) => (false, &[&["disabled_plugins"]], "NRI is disabled"),
            (false, Some(d)) => (!d, &[&disable_path], "the opposite of disable"),
            (false, None) => match self.version {
                Version::V2 => (
                    false,
                    &[],
                    "containerd 1.x runs no NRI plugins unless NRI's disable = false",
                ),
                Version::V3 | Version::V4 => (true, &[], "containerd 2.x runs NRI by default"),
            },
        };
        if disabled_by_list {
            if let (Some(d), Some(value)) = (disable, self.lookup(&disable_path)) {
                if !d {
                    self.note(
                        &disable_path,
                        value,
                        Group::Nothing,
                        "NRI is in disabled_plugins all the same",
                    );
                }
            }
        }
        self.put("nri", "enable", Value::Boolean(enable), from, why);
        self.nri_settings();
        self.nri_validator();
    }

    /// The NRI plugin's paths, timeouts and `disable_connections`.
    fn nri_settings(&mut self) {
        let base = ["plugins", NRI];
        let at = |key: &'static str| [&base[..], &[key]].concat();
        for key in ["socket_path", "plugin_path", "plugin_config_path"] {
            if let Some(path) = self.absolute(&at(key), &format!("nri.{key}")) {
                self.put("nri", key, Value::String(path), &[&at(key)], "");
            }
        }
        for key in ["plugin_registration_timeout", "plugin_request_timeout"] {
            let path = at(key);
            let Some(value) = self.take(&path) else {
                continue;
            };
            // 1.7 wrote a Go duration string; an integer is nanoseconds.
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Integer(ns) => format!("{ns}ns"),
                _ => String::new(),
            };
            match berth_duration(&text) {
                Ok((d, _)) if d.is_zero() => self.note(
                    &path,
                    value,
                    Group::Check,
                    format!("berth needs nri.{key} above 0"),
                ),
                Ok((_, d)) => self.put("nri", key, Value::String(d), &[&path], ""),
                Err(e) => self.note(&path, value, Group::Check, e),
            }
        }
        if let Some(b) = self.boolean(&at("disable_connections")) {
            self.put(
                "nri",
                "disable_connections",
                Value::Boolean(b),
                &[&at("disable_connections")],
                "",
            );
        }
    }

    /// `[nri.default_validator]` from the NRI plugin's `default_validator`.
    fn nri_validator(&mut self) {
        let validator = ["plugins", NRI, "default_validator"];
        for key in [
            "enable",
            "reject_oci_hook_adjustment",
            "reject_runtime_default_seccomp_adjustment",
            "reject_unconfined_seccomp_adjustment",
            "reject_custom_seccomp_adjustment",
            "reject_namespace_adjustment",
            "reject_sysctl_adjustment",
        ] {
            let path = [&validator[..], &[key]].concat();
            if let Some(b) = self.boolean(&path) {
                self.put(
                    "nri.default_validator",
                    key,
                    Value::Boolean(b),
                    &[&path],
                    "",
                );
            }
        }
        let required = [&validator[..], &["required_plugins"]].concat();
        if let Some(list) = self.strings(&required) {
            let bad = list
                .iter()
                .find(|p| berth_nri::check_plugin_name(p).is_err());
            match bad {
                Some(p) => {
                    let value = self
                        .lookup(&required)
                        .cloned()
                        .unwrap_or(Value::Array(vec![]));
                    self.note(
                        &required,
                        &value,
                        Group::Check,
                        format!("{p:?} is not a plugin name berth accepts"),
                    );
                }
                None => self.put(
                    "nri.default_validator",
                    "required_plugins",
                    Value::Array(list.into_iter().map(Value::String).collect()),
                    &[&required],
                    "",
                ),
            }
        }
        let tolerate = [&validator[..], &["tolerate_missing_plugins_annotation"]].concat();
        if let Some(key) = self.string(&tolerate) {
            self.put(
                "nri.default_validator",
                "tolerate_missing_plugins_annotation",
                Value::String(key.into()),
                &[&tolerate],
                "",
            );
        }
    }
}
