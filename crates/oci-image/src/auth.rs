//! Registry credentials as CRI's `AuthConfig` carries them, and their
//! translation into what the registry client sends: basic auth, a registry
//! token used as a bearer token, or an identity token (an OAuth2 refresh
//! token) exchanged for an access token at the registry's token endpoint.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use base64::Engine;
use oci_client::secrets::RegistryAuth;

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
            Some(a) => crate::content::sha256_digest(
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

    /// What the registry client sends to `scheme://host` for `repository`.
    pub(crate) async fn to_registry_auth(
        &self,
        scheme: &str,
        host: &str,
        repository: &str,
        reference: &str,
    ) -> Result<RegistryAuth, Error> {
        if !self.registry_token.is_empty() {
            return Ok(RegistryAuth::Bearer(self.registry_token.clone()));
        }
        if !self.identity_token.is_empty() {
            let token = exchange_identity_token(scheme, host, repository, &self.identity_token)
                .await
                .map_err(|message| Error::Unauthenticated {
                    reference: reference.to_string(),
                    registry: host.to_string(),
                    message,
                })?;
            return Ok(RegistryAuth::Bearer(token));
        }
        if !self.username.is_empty() {
            return Ok(RegistryAuth::Basic(
                self.username.clone(),
                self.password.clone(),
            ));
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
            return Ok(RegistryAuth::Basic(user.to_string(), pass.to_string()));
        }
        Ok(RegistryAuth::Anonymous)
    }
}

/// Parses `WWW-Authenticate: Bearer realm="…",service="…"` into the scheme
/// (lowercase) and its parameters.
pub(crate) fn parse_challenge(header: &str) -> Option<(String, BTreeMap<String, String>)> {
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

/// OAuth2 refresh-token grant at the realm the registry names.
async fn exchange_identity_token(
    scheme: &str,
    host: &str,
    repository: &str,
    refresh_token: &str,
) -> Result<String, String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .user_agent("berth")
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    let ping = http
        .get(format!("{scheme}://{host}/v2/"))
        .send()
        .await
        .map_err(|e| format!("GET /v2/: {e}"))?;
    let challenge = ping
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_challenge)
        .filter(|(scheme, _)| scheme == "bearer")
        .ok_or("an identity token was given but the registry does not ask for a bearer token")?;
    let params = challenge.1;
    let realm = params
        .get("realm")
        .ok_or("bearer challenge without a realm")?;
    let mut form = vec![
        ("grant_type", "refresh_token".to_string()),
        ("refresh_token", refresh_token.to_string()),
        ("client_id", "berth".to_string()),
        ("scope", format!("repository:{repository}:pull")),
    ];
    if let Some(service) = params.get("service") {
        form.push(("service", service.clone()));
    }
    let res = http
        .post(realm)
        .form(&form)
        .send()
        .await
        .map_err(|e| format!("token endpoint {realm}: {e}"))?;
    let status = res.status();
    if !status.is_success() {
        let body = res.text().await.unwrap_or_default();
        return Err(format!("token endpoint {realm}: {status}: {}", body.trim()));
    }
    let body: serde_json::Value = res
        .json()
        .await
        .map_err(|e| format!("token endpoint {realm}: bad answer: {e}"))?;
    body.get("access_token")
        .or_else(|| body.get("token"))
        .and_then(|t| t.as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("token endpoint {realm}: no access_token in the answer"))
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

    #[tokio::test]
    async fn credentials_translate() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("u:p:x");
        let auth = Auth {
            auth: b64,
            ..Auth::default()
        };
        match auth
            .to_registry_auth("http", "h", "r", "ref")
            .await
            .unwrap()
        {
            RegistryAuth::Basic(u, p) => assert_eq!((u.as_str(), p.as_str()), ("u", "p:x")),
            _ => panic!("not basic"),
        }
        let auth = Auth {
            registry_token: "tok".into(),
            username: "ignored".into(),
            ..Auth::default()
        };
        assert!(matches!(
            auth.to_registry_auth("http", "h", "r", "ref").await.unwrap(),
            RegistryAuth::Bearer(t) if t == "tok"
        ));
        let bad = Auth {
            auth: "%%%".into(),
            ..Auth::default()
        };
        let e = bad
            .to_registry_auth("http", "h", "r", "ref")
            .await
            .err()
            .unwrap();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(!format!("{:?}", Auth::basic("u", "secret")).contains("secret"));
    }
}
