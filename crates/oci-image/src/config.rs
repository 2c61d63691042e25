//! Registry configuration: mirrors per registry host (inline, or a
//! containerd `hosts.toml` directory), mirror-only mode, node credentials,
//! plain-HTTP hosts, download concurrency and the no-progress timeout. It is
//! the `[registry]` table of berth's config file:
//!
//! ```toml
//! [registry]
//! plain_http = ["registry.local:5000"]
//! max_concurrent_downloads = 3
//! progress_timeout = "5m"
//! auth_file = "/etc/berth/auth.json"
//!
//! [registry.mirrors."registry.k8s.io"]
//! endpoints = ["http://127.0.0.1:5000"]
//! mirror_only = true
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;
use crate::unpack::UnpackLimits;

/// How images are fetched from registries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// Mirrors by registry host as written in image names (`docker.io`,
    /// `registry.k8s.io`, `host:port`; `*` applies to hosts without an entry).
    /// Their endpoints are tried in order, then the registry itself (unless
    /// the mirror is `mirror_only`). Cannot be combined with `config_path`.
    pub mirrors: BTreeMap<String, Mirror>,
    /// A directory of `<host>/hosts.toml` files in containerd's format
    /// (`_default/hosts.toml` for hosts without one); read at each pull.
    /// Empty: not used.
    pub config_path: PathBuf,
    /// Never contact a registry that is not configured as a host: the
    /// implicit fallback to the image's own registry is dropped for every
    /// registry (inline mirrors and `hosts.toml` files without `server`).
    pub mirror_only: bool,
    /// A docker `config.json` whose `auths` give credentials per registry
    /// host, used when the pull carries none for that host; read at each
    /// pull. Empty: not used.
    pub auth_file: PathBuf,
    /// Registry hosts (`host` or `host:port`) spoken to over plain HTTP.
    /// `localhost`, `127.0.0.1` and `::1` always are, on any port.
    pub plain_http: Vec<String>,
    /// Layers downloaded at once by one pull (at least 1).
    pub max_concurrent_downloads: usize,
    /// A pull that receives no data for this long fails with
    /// DeadlineExceeded (`"0s"` turns the check off). Written as `"5m"`,
    /// `"30s"`, `"1m30s"`, `"500ms"`.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub progress_timeout: Duration,
    /// Bounds on what one layer may expand to (`[registry.unpack]`).
    pub unpack: UnpackLimits,
}

/// The mirrors of one registry host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mirror {
    /// `http://host:port`, `https://host[:port]` or `host[:port]` (HTTPS
    /// unless the host is plain HTTP). No path.
    pub endpoints: Vec<String>,
    /// Only the endpoints: the registry itself is never contacted.
    pub mirror_only: bool,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            mirrors: BTreeMap::new(),
            config_path: PathBuf::new(),
            mirror_only: false,
            auth_file: PathBuf::new(),
            plain_http: Vec::new(),
            max_concurrent_downloads: 3,
            progress_timeout: Duration::from_secs(300),
            unpack: UnpackLimits::default(),
        }
    }
}

impl RegistryConfig {
    /// Checks every value; the error names the offending key.
    pub fn validate(&self) -> Result<(), Error> {
        self.unpack.validate().map_err(Error::Config)?;
        if self.max_concurrent_downloads == 0 {
            return Err(Error::Config(
                "max_concurrent_downloads: must be at least 1".into(),
            ));
        }
        for (host, mirror) in &self.mirrors {
            if host != "*" {
                check_host(host).map_err(|m| Error::Config(format!("mirrors.{host:?}: {m}")))?;
            }
            for endpoint in &mirror.endpoints {
                parse_endpoint(endpoint, self).map_err(|m| {
                    Error::Config(format!("mirrors.{host:?}.endpoints: {endpoint:?}: {m}"))
                })?;
            }
        }
        if !self.config_path.as_os_str().is_empty() {
            if !self.mirrors.is_empty() {
                return Err(Error::Config(
                    "mirrors and config_path cannot both be set: write the mirrors as hosts.toml files"
                        .into(),
                ));
            }
            if !self.config_path.is_absolute() {
                return Err(Error::Config(format!(
                    "config_path: {:?} is not an absolute path",
                    self.config_path
                )));
            }
        }
        if !self.auth_file.as_os_str().is_empty() && !self.auth_file.is_absolute() {
            return Err(Error::Config(format!(
                "auth_file: {:?} is not an absolute path",
                self.auth_file
            )));
        }
        for host in &self.plain_http {
            check_host(host).map_err(|m| Error::Config(format!("plain_http: {host:?}: {m}")))?;
        }
        Ok(())
    }

    /// Whether `host` (`host[:port]`) is spoken to over plain HTTP.
    pub fn is_plain_http(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let bare = strip_port(&host);
        matches!(bare, "localhost" | "127.0.0.1" | "::1" | "[::1]")
            || self.plain_http.iter().any(|h| {
                h.eq_ignore_ascii_case(&host) || (!h.contains(':') && h.eq_ignore_ascii_case(bare))
            })
    }
}

/// `host[:port]` without the port (IPv6 literals keep their brackets).
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

/// Accepts `host`, `host:port`, `[v6]:port`.
pub(crate) fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("empty host".into());
    }
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or("unclosed '['")?;
        if v6.is_empty() || !v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
            return Err("bad IPv6 address".into());
        }
        (None, after.strip_prefix(':'))
    } else {
        match host.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(host), None),
        }
    };
    if let Some(name) = name {
        let ok = !name.is_empty()
            && name
                .split('.')
                .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        if !ok {
            return Err("not a host name".into());
        }
    }
    if let Some(port) = port {
        if port.parse::<u16>().map(|p| p == 0).unwrap_or(true) {
            return Err("bad port".into());
        }
    }
    Ok(())
}

/// An inline mirror endpoint as (`host[:port]`, plain HTTP).
pub(crate) fn parse_endpoint(
    endpoint: &str,
    cfg: &RegistryConfig,
) -> Result<(String, bool), String> {
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, endpoint),
    };
    let host = rest.trim_end_matches('/');
    let host = host.strip_suffix("/v2").unwrap_or(host);
    if host.contains('/') {
        return Err("endpoints may not have a path".into());
    }
    check_host(host)?;
    let plain_http = match scheme {
        Some("http") => true,
        Some("https") => false,
        Some(other) => return Err(format!("unknown scheme {other:?}")),
        None => cfg.is_plain_http(host),
    };
    Ok((host.to_string(), plain_http))
}

/// Parses `"5m"`, `"30s"`, `"1h30m"`, `"250ms"`, `"0s"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{text:?}: expected a number"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "" => return Err(format!("{text:?}: missing unit (ms, s, m or h)")),
            u => return Err(format!("{text:?}: unknown unit {u:?} (ms, s, m or h)")),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Writes a duration the way [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let (h, m, s, rem) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (rem, "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

fn serialize_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wrapper {
        registry: RegistryConfig,
    }

    #[test]
    fn mirror_table_in_the_documented_shape() {
        let text = r#"
            [registry.mirrors."registry.k8s.io"]
            endpoints = ["http://127.0.0.1:5000"]
        "#;
        let cfg = toml::from_str::<Wrapper>(text).unwrap().registry;
        cfg.validate().unwrap();
        assert_eq!(cfg.max_concurrent_downloads, 3);
        assert_eq!(cfg.progress_timeout, Duration::from_secs(300));
        let eps = crate::registry::hosts::hosts_for(&cfg, "registry.k8s.io").unwrap();
        let eps: Vec<_> = eps
            .iter()
            .map(|h| (h.host.as_str(), h.plain_http, h.upstream))
            .collect();
        assert_eq!(
            eps,
            [
                ("127.0.0.1:5000", true, false),
                ("registry.k8s.io", false, true)
            ]
        );
        assert_eq!(
            crate::registry::hosts::hosts_for(&cfg, "quay.io")
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(toml::from_str::<Wrapper>("[registry]\nmirror = {}\n").is_err());
        assert!(toml::from_str::<Wrapper>(
            "[registry.mirrors.\"a.io\"]\nendpoints = []\nextra = 1\n"
        )
        .is_err());
        let e = toml::from_str::<Wrapper>("[registry]\nprogress_timeout = \"5 parsecs\"\n")
            .err()
            .unwrap();
        assert!(e.to_string().contains("unit"), "{e}");
        let cfg =
            toml::from_str::<Wrapper>("[registry.mirrors.\"a.io\"]\nendpoints = [\"ftp://x\"]\n")
                .unwrap()
                .registry;
        assert!(cfg.validate().is_err());
        let cfg = toml::from_str::<Wrapper>("[registry]\nmax_concurrent_downloads = 0\n")
            .unwrap()
            .registry;
        assert!(cfg.validate().is_err());
        let both = "[registry]\nconfig_path = \"/etc/berth/certs.d\"\n\
                    [registry.mirrors.\"a.io\"]\nendpoints = [\"m.io\"]\n";
        let e = toml::from_str::<Wrapper>(both)
            .unwrap()
            .registry
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("config_path"), "{e}");
        let relative = "[registry]\nauth_file = \"auth.json\"\n";
        let e = toml::from_str::<Wrapper>(relative)
            .unwrap()
            .registry
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("auth_file"), "{e}");
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        #[derive(Serialize)]
        struct Out<'a> {
            registry: &'a RegistryConfig,
        }
        let mut cfg = RegistryConfig::default();
        let text = toml::to_string(&Out { registry: &cfg }).unwrap();
        assert!(text.contains("config_path = \"\""), "{text}");
        assert!(text.contains("mirror_only = false"), "{text}");
        assert_eq!(toml::from_str::<Wrapper>(&text).unwrap().registry, cfg);
        cfg.auth_file = "/etc/berth/auth.json".into();
        cfg.mirrors.insert(
            "gcr.io".into(),
            Mirror {
                endpoints: vec!["m.local".into()],
                mirror_only: true,
            },
        );
        let text = toml::to_string(&Out { registry: &cfg }).unwrap();
        let back = toml::from_str::<Wrapper>(&text).unwrap().registry;
        back.validate().unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn plain_http_hosts() {
        let cfg = RegistryConfig {
            plain_http: vec!["reg.local".into(), "other:5000".into()],
            ..Default::default()
        };
        assert!(cfg.is_plain_http("localhost:5000"));
        assert!(cfg.is_plain_http("127.0.0.1:41234"));
        assert!(cfg.is_plain_http("[::1]:5000"));
        assert!(cfg.is_plain_http("reg.local:8080"));
        assert!(cfg.is_plain_http("other:5000"));
        assert!(!cfg.is_plain_http("other:5001"));
        assert!(!cfg.is_plain_http("registry-1.docker.io"));
        let cfg = RegistryConfig {
            mirrors: [(
                "*".to_string(),
                Mirror {
                    endpoints: vec!["localhost:5000".into(), "https://m.io/".into()],
                    mirror_only: false,
                },
            )]
            .into(),
            ..Default::default()
        };
        let eps = crate::registry::hosts::hosts_for(&cfg, "docker.io").unwrap();
        assert_eq!(eps.len(), 3);
        assert!(eps[0].plain_http && !eps[1].plain_http && eps[1].host == "m.io");
        assert_eq!(eps[2].host, "registry-1.docker.io");
    }

    #[test]
    fn durations_round_trip() {
        for (text, d) in [
            ("5m", Duration::from_secs(300)),
            ("1m30s", Duration::from_secs(90)),
            ("250ms", Duration::from_millis(250)),
            ("2h", Duration::from_secs(7200)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text).unwrap(), d);
            assert_eq!(format_duration(d), text);
        }
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("").is_err());
    }
}
