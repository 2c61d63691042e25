//! Registry credentials as CRI's `AuthConfig` carries them, and as a
//! node's docker `config.json` lists them per registry host; their
//! translation into what the registry client sends: basic auth, a registry
//! token used as a bearer token, or an identity token (an OAuth2 refresh
//! token) exchanged for an access token at the registry's token endpoint
//! (see `client.rs`). Secrets never appear in `Debug` or in errors.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::Engine;

use crate::error::Error;

/// Credentials for one pull (CRI `AuthConfig`). Empty fields are unset;
/// the first non-empty of `registry_token`, `identity_token`,
/// `username`/`password`, `auth` is used.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Auth {
    pub username: String,
    pub password: String,
    /// base64 of `username:password`.
    pub auth: String,
    pub server_address: String,
    /// OAuth2 refresh token, exchanged for an access token.
    pub identity_token: String,
    /// A bearer token sent as is.
    pub registry_token: String,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &str| if s.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("server_address", &self.server_address)
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}

impl Auth {
    /// Username and password.
    pub fn basic(username: &str, password: &str) -> Auth {
        Auth {
            username: username.into(),
            password: password.into(),
            ..Auth::default()
        }
    }

    /// A stable fingerprint (no secrets in clear) that tells pulls with
    /// different credentials apart.
    pub(crate) fn fingerprint(auth: Option<&Auth>) -> String {
        match auth {
            None => String::new(),
            Some(a) => crate::store::content::sha256_digest(
                [
                    &a.username,
                    &a.password,
                    &a.auth,
                    &a.identity_token,
                    &a.registry_token,
                ]
                .map(|s| s.as_str())
                .join("\0")
                .as_bytes(),
            ),
        }
    }

    /// The credentials to send, by precedence: registry token, identity
    /// token, username and password, `auth`.
    pub(crate) fn creds(&self) -> Result<Creds, Error> {
        if !self.registry_token.is_empty() {
            return Ok(Creds::Bearer(self.registry_token.clone()));
        }
        if !self.identity_token.is_empty() {
            return Ok(Creds::Refresh(self.identity_token.clone()));
        }
        if !self.username.is_empty() {
            return Ok(Creds::Basic(self.username.clone(), self.password.clone()));
        }
        if !self.auth.is_empty() {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(self.auth.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    Error::InvalidAuth("`auth` is not base64 of user:password".into())
                })?;
            let (user, pass) = decoded.split_once(':').ok_or_else(|| {
                Error::InvalidAuth("`auth` does not decode to user:password".into())
            })?;
            return Ok(Creds::Basic(user.to_string(), pass.to_string()));
        }
        Ok(Creds::Anonymous)
    }

    fn is_empty(&self) -> bool {
        [
            &self.username,
            &self.password,
            &self.auth,
            &self.identity_token,
            &self.registry_token,
        ]
        .iter()
        .all(|s| s.is_empty())
    }
}

/// What the registry client authenticates with.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Creds {
    Anonymous,
    /// Username and password: sent as basic auth, or to the token endpoint.
    Basic(String, String),
    /// A registry token, sent as the bearer token.
    Bearer(String),
    /// An OAuth2 refresh token, exchanged at the token endpoint.
    Refresh(String),
}

impl fmt::Debug for Creds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Creds::Anonymous => "Anonymous",
            Creds::Basic(..) => "Basic(<redacted>)",
            Creds::Bearer(_) => "Bearer(<redacted>)",
            Creds::Refresh(_) => "Refresh(<redacted>)",
        })
    }
}

/// Node-level credentials: the `auths` of a docker `config.json`.
#[derive(Default)]
pub(crate) struct NodeAuths {
    /// (key as written, key as a host name, credentials), in file order.
    entries: Vec<(String, String, Auth)>,
}

#[derive(serde::Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(serde::Deserialize, Default)]
struct DockerAuth {
    #[serde(default)]
    auth: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    identitytoken: String,
    #[serde(default)]
    registrytoken: String,
}

/// What docker's `ConvertToHostname` makes of an `auths` key: without
/// `http://` or `https://` and without any path.
fn key_host(key: &str) -> &str {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    rest.split('/').next().unwrap_or(rest)
}

impl NodeAuths {
    /// Reads `path`; a missing file means no credentials. Errors name the
    /// file and never quote its content.
    pub(crate) fn load(path: &Path) -> Result<NodeAuths, Error> {
        let bytes = match crate::registry::hosts::read_small(path) {
            Ok(b) => b,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(path = %path.display(), "no registry auth file");
                return Ok(NodeAuths::default());
            }
            Err(e) => return Err(e),
        };
        let bad = |what: String| Error::Config(format!("auth_file {}: {what}", path.display()));
        let cfg: DockerConfig = serde_json::from_slice(&bytes).map_err(|e| {
            bad(format!(
                "not a docker config.json (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        let mut entries = Vec::new();
        for (key, value) in cfg.auths.unwrap_or_default() {
            let a: DockerAuth = serde_json::from_value(value)
                .map_err(|_| bad(format!("auths.{key:?}: not an auth entry")))?;
            let auth = Auth {
                username: a.username,
                password: a.password,
                auth: a.auth,
                server_address: key.clone(),
                identity_token: a.identitytoken,
                registry_token: a.registrytoken,
            };
            if auth.is_empty() {
                continue; // kept by a credential helper, which berth does not run
            }
            auth.creds()
                .map_err(|e| bad(format!("auths.{key:?}: {e}")))?;
            let host = key_host(&key).to_string();
            entries.push((key, host, auth));
        }
        Ok(NodeAuths { entries })
    }

    /// The credentials for the first of `hosts` that has an entry, matched
    /// as docker matches them: the key as written first, then the key's
    /// host name (`https://index.docker.io/v1/` is `index.docker.io`).
    pub(crate) fn lookup(&self, hosts: &[&str]) -> Option<&Auth> {
        for host in hosts {
            if let Some((_, _, a)) = self.entries.iter().find(|(k, _, _)| k == host) {
                return Some(a);
            }
            // Host names are case-insensitive.
            if let Some((_, _, a)) = self
                .entries
                .iter()
                .find(|(_, h, _)| h.eq_ignore_ascii_case(host))
            {
                return Some(a);
            }
        }
        None
    }
}

/// Parses `WWW-Authenticate: Bearer realm="…",service="…"` into the scheme
/// (lowercase) and its parameters (keys lowercase); `None` when a parameter
/// has no `=` or an unclosed quote. Public as `parse::challenge`.
pub fn parse_challenge(header: &str) -> Option<(String, BTreeMap<String, String>)> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, remainder) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        params.insert(key.trim().to_ascii_lowercase(), value.to_string());
        rest = remainder.trim_start().trim_start_matches(',').trim_start();
    }
    Some((scheme.to_ascii_lowercase(), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse() {
        let (scheme, p) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(scheme, "bearer");
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:a/b:pull");
        let (scheme, p) = parse_challenge(r#"Basic realm="berth-test""#).unwrap();
        assert_eq!(scheme, "basic");
        assert_eq!(p["realm"], "berth-test");
    }

    #[test]
    fn credentials_translate() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("u:p:x");
        let auth = Auth {
            auth: b64,
            ..Auth::default()
        };
        assert_eq!(
            auth.creds().unwrap(),
            Creds::Basic("u".into(), "p:x".into())
        );
        let auth = Auth {
            registry_token: "tok".into(),
            username: "ignored".into(),
            ..Auth::default()
        };
        assert_eq!(auth.creds().unwrap(), Creds::Bearer("tok".into()));
        let auth = Auth {
            identity_token: "refresh".into(),
            username: "ignored".into(),
            ..Auth::default()
        };
        assert_eq!(auth.creds().unwrap(), Creds::Refresh("refresh".into()));
        let bad = Auth {
            auth: "%%%".into(),
            ..Auth::default()
        };
        let e = bad.creds().err().unwrap();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(!format!("{:?}", Auth::basic("u", "secret")).contains("secret"));
        assert!(!format!("{:?}", Auth::basic("u", "secret").creds().unwrap()).contains("secret"));
    }

    #[test]
    fn docker_config_json_matches_hosts_like_docker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        std::fs::write(
            &path,
            serde_json::json!({
                "auths": {
                    "https://index.docker.io/v1/": {"auth": b64("hub:hubpw")},
                    "http://reg.local:5000/some/path": {"username": "u", "password": "p"},
                    "quay.io": {"identitytoken": "refresh-me"},
                    "helper.io": {},
                },
                "credsStore": "desktop",
                "HttpHeaders": {"X-Ignored": "1"},
            })
            .to_string(),
        )
        .unwrap();
        let auths = NodeAuths::load(&path).unwrap();
        let creds = |hosts: &[&str]| auths.lookup(hosts).map(|a| a.creds().unwrap());
        assert_eq!(
            creds(&["docker.io", "index.docker.io"]),
            Some(Creds::Basic("hub".into(), "hubpw".into()))
        );
        assert_eq!(
            creds(&["reg.local:5000"]),
            Some(Creds::Basic("u".into(), "p".into()))
        );
        assert_eq!(creds(&["reg.local"]), None);
        assert_eq!(
            creds(&["quay.io"]),
            Some(Creds::Refresh("refresh-me".into()))
        );
        assert_eq!(creds(&["helper.io"]), None);
        assert_eq!(creds(&["mirror.local"]), None);
        // Missing: no credentials. Broken: an error that names the file and
        // quotes nothing of it.
        assert!(NodeAuths::load(&dir.path().join("none.json"))
            .unwrap()
            .lookup(&["quay.io"])
            .is_none());
        std::fs::write(&path, r#"{"auths": {"a.io": {"auth": "c2VjcmV0"}}, "x": "#).unwrap();
        let e = NodeAuths::load(&path).err().unwrap();
        assert!(e.to_string().contains("config.json"), "{e}");
        std::fs::write(&path, r#"{"auths": {"a.io": {"auth": "c2VjcmV0"}}}"#).unwrap();
        let e = NodeAuths::load(&path).err().unwrap();
        assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    }
}
