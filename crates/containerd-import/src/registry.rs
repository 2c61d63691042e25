//! Registries: containerd's `registry.*`, `max_concurrent_downloads` and
//! `image_pull_progress_timeout` (the images plugin in version 3). TLS
//! settings and credentials have no inline form in berth: their notes say
//! which `hosts.toml` line or `auth_file` entry to write.

use std::path::Path;

use toml::Value;

use super::reasons::Group;
use super::values::{berth_duration, inline, is_empty, segment};
use super::Import;

impl Import<'_> {
    /// `[registry]`: hosts.toml dir, mirrors, downloads, progress timeout;
    /// TLS settings and credentials are told where to go.
    pub(super) fn registry(&mut self) {
        let (_, i, _) = self.roots();
        let reg = ["plugins", i, "registry"];
        let config_path = [&reg[..], &["config_path"]].concat();
        let mut uses_config_path = false;
        if let Some(value) = self.lookup(&config_path) {
            if let Some(text) = self.string(&config_path) {
                let dirs: Vec<&str> = text.split(':').filter(|d| !d.is_empty()).collect();
                match dirs.as_slice() {
                    [] => self.note(
                        &config_path,
                        value,
                        Group::Nothing,
                        "empty: no hosts.toml directory, as in berth by default",
                    ),
                    [dir] if Path::new(dir).is_absolute() => {
                        uses_config_path = true;
                        self.put(
                            "registry",
                            "config_path",
                            Value::String(dir.to_string()),
                            &[&config_path],
                            "its hosts.toml files are read as they are",
                        );
                    }
                    [_] => self.note(
                        &config_path,
                        value,
                        Group::Check,
                        "not an absolute path, which berth needs for registry.config_path",
                    ),
                    _ => self.note(
                        &config_path,
                        value,
                        Group::Check,
                        "berth reads one hosts.toml directory: merge these into one and set \
                         registry.config_path to it",
                    ),
                }
            }
        }
        self.mirrors(&reg, uses_config_path);
        self.registry_configs(&reg);
        let downloads = ["plugins", i, "max_concurrent_downloads"];
        if let Some(n) = self.integer(&downloads) {
            if n >= 1 {
                self.put(
                    "registry",
                    "max_concurrent_downloads",
                    Value::Integer(n),
                    &[&downloads],
                    "",
                );
            } else {
                self.note(
                    &downloads,
                    &Value::Integer(n),
                    Group::Check,
                    "berth needs at least 1 for registry.max_concurrent_downloads",
                );
            }
        }
        let timeout = ["plugins", i, "image_pull_progress_timeout"];
        if let Some(text) = self.string(&timeout) {
            let value = Value::String(text.into());
            match berth_duration(text) {
                Ok((_, d)) => self.put(
                    "registry",
                    "progress_timeout",
                    Value::String(d),
                    &[&timeout],
                    "",
                ),
                Err(e) => self.note(&timeout, &value, Group::Check, e),
            }
        }
    }

    /// `registry.mirrors."HOST".endpoint`.
    fn mirrors(&mut self, reg: &[&str], uses_config_path: bool) {
        let base = [reg, &["mirrors"]].concat();
        for host in self.table_keys(&base) {
            let path = [&base[..], &[host.as_str(), "endpoint"]].concat();
            let Some(value) = self.lookup(&path) else {
                continue;
            };
            let Some(endpoints) = self.strings(&path) else {
                continue;
            };
            if uses_config_path {
                self.note(
                    &path,
                    value,
                    Group::Check,
                    "containerd refuses mirrors together with config_path, and so does berth: \
                     write them as hosts.toml files",
                );
                continue;
            }
            let mut check = berth_oci_image::RegistryConfig::default();
            check.mirrors.insert(
                host.clone(),
                berth_oci_image::Mirror {
                    endpoints: endpoints.clone(),
                    mirror_only: false,
                },
            );
            if let Err(e) = check.validate() {
                self.note(&path, value, Group::Check, format!("berth refuses it: {e}"));
                continue;
            }
            self.put(
                &format!("registry.mirrors.{}", segment(&host)),
                "endpoints",
                Value::Array(endpoints.into_iter().map(Value::String).collect()),
                &[&path],
                "then the registry itself, as containerd",
            );
        }
    }

    /// `registry.configs."HOST".tls|auth` and `registry.auths`: berth has
    /// no inline TLS or credentials; each key says where it goes.
    fn registry_configs(&mut self, reg: &[&str]) {
        let configs = [reg, &["configs"]].concat();
        let auths = [reg, &["auths"]].concat();
        let leaves: Vec<(Vec<String>, &Value)> = self
            .leaves
            .iter()
            .filter(|(p, _)| {
                (p.len() > configs.len() && p[..configs.len()] == configs[..])
                    || (p.len() > auths.len() && p[..auths.len()] == auths[..])
            })
            .cloned()
            .collect();
        for (path, value) in leaves {
            let segments: Vec<&str> = path.iter().map(String::as_str).collect();
            let rest = &segments[reg.len()..];
            let (group, why) = match rest {
                ["configs", host, "tls", key] => {
                    let tls = [&configs[..], &[host, "tls"]].concat();
                    let file = |k: &str| {
                        let path = [&tls[..], &[k]].concat();
                        self.lookup(&path).and_then(Value::as_str).unwrap_or("")
                    };
                    let pair = (file("cert_file"), file("key_file"));
                    tls_recipe(host, key, value, pair)
                }
                ["configs", host, "auth", key] | ["auths", host, key] => {
                    let host = host
                        .trim_start_matches("https://")
                        .trim_start_matches("http://");
                    let shown = if *key == "username" {
                        value.clone()
                    } else {
                        Value::String("<redacted>".into())
                    };
                    let why = format!(
                        "berth has no inline credentials: write them for {host:?} into a docker \
                         config.json (mode 0600; {{\"auths\": {{\"{host}\": {{\"auth\": \
                         \"BASE64(user:password)\"}}}}}}, or \"identitytoken\") and set \
                         registry.auth_file to it"
                    );
                    self.note(&segments, &shown, Group::Check, why);
                    continue;
                }
                _ => (
                    Group::Check,
                    "unknown to berth's importer (not a registry key that it knows)".into(),
                ),
            };
            self.note(&segments, value, group, why);
        }
    }
}

/// What a `registry.configs."HOST".tls.KEY` becomes in a hosts.toml.
/// `pair` is the host's (cert_file, key_file).
fn tls_recipe(host: &str, key: &str, value: &Value, pair: (&str, &str)) -> (Group, String) {
    let file = format!("{host}/hosts.toml under registry.config_path");
    let line = match key {
        "ca_file" => format!("ca = {}", inline(value)),
        "cert_file" | "key_file" => {
            let quoted = |f: &str| Value::String(f.to_string()).to_string();
            match pair {
                ("", _) | (_, "") => {
                    return (
                        Group::Check,
                        "containerd uses a client certificate only with both cert_file and \
                         key_file set"
                            .into(),
                    )
                }
                (cert, key) => format!("client = [[{}, {}]]", quoted(cert), quoted(key)),
            }
        }
        "insecure_skip_verify" => {
            if is_empty(value) {
                return (
                    Group::Nothing,
                    "berth verifies registries' certificates, as containerd with false".into(),
                );
            }
            "skip_verify = true".into()
        }
        _ => {
            return (
                Group::Check,
                "unknown to berth's importer (not a registry TLS key that it knows)".into(),
            )
        }
    };
    if is_empty(value) {
        return (Group::Nothing, "empty".into());
    }
    (
        Group::Check,
        format!(
            "berth has no inline registry TLS settings: put `{line}` under \
             [host.\"https://{host}\"] in {file} (berth reads TLS from hosts.toml only, and \
             config_path replaces inline mirrors)"
        ),
    )
}
