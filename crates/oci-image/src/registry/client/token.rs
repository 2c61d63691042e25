//! Authorization: basic credentials as they are, bearer tokens from the
//! realm a registry's challenge names (anonymous, basic or refresh token).

use base64::Engine;
use reqwest::header::HeaderValue;
use reqwest::Url;

use super::{
    origin_of, read_capped, HostClient, ReadError, MAX_ERROR_BODY, MAX_TOKEN, SMALL_TIMEOUT,
};
use crate::error::Error;
use crate::registry::auth::{parse_challenge, Creds};

impl HostClient {
    /// The `Authorization` header answering `challenge`, if we have one.
    pub(super) async fn authorize(
        &self,
        challenge: Option<&str>,
    ) -> Result<Option<HeaderValue>, Error> {
        let Some((scheme, params)) = challenge.and_then(parse_challenge) else {
            return Ok(None);
        };
        match (scheme.as_str(), &self.creds) {
            ("basic", Creds::Basic(user, pass)) => Ok(basic(user, pass)),
            ("bearer", Creds::Bearer(_)) | ("basic", _) => Ok(None),
            ("bearer", _) => {
                let token = self.fetch_token(&params).await?;
                Ok(bearer(&token))
            }
            _ => Ok(None),
        }
    }

    /// A bearer token from the realm the registry names.
    async fn fetch_token(
        &self,
        params: &std::collections::BTreeMap<String, String>,
    ) -> Result<String, Error> {
        let realm = params
            .get("realm")
            .ok_or_else(|| self.unauth("bearer challenge without a realm".into()))?;
        let realm_url = self.token_realm(realm)?;
        // The realm is the registry's own host (any port): its TLS settings
        // apply. Another host is verified with the system's roots only.
        let own_host = self
            .origin
            .as_ref()
            .and_then(|o| o.host_str())
            .zip(realm_url.host_str())
            .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b));
        let http = if own_host {
            &self.http
        } else {
            &self.realm_http
        };
        // Messages name the realm by its origin, and quote its answers only
        // when it is the registry's own host.
        let realm = &origin_of(&realm_url);
        let scope = format!("repository:{}:pull", self.repository);
        let service = params.get("service");
        let req = match &self.creds {
            Creds::Refresh(refresh) => {
                let mut form = vec![
                    ("grant_type", "refresh_token".to_string()),
                    ("refresh_token", refresh.clone()),
                    ("client_id", "berth".to_string()),
                    ("scope", scope),
                ];
                if let Some(s) = service {
                    form.push(("service", s.clone()));
                }
                http.post(realm_url).form(&form)
            }
            creds => {
                let mut query = vec![("scope", scope)];
                if let Some(s) = service {
                    query.push(("service", s.clone()));
                }
                let req = http.get(realm_url).query(&query);
                match creds {
                    Creds::Basic(u, p) => req.basic_auth(u, Some(p)),
                    _ => req,
                }
            }
        };
        let res = req
            .timeout(SMALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.net_err("token", &e))?;
        self.token_of(res, realm, own_host).await
    }

    /// `Unauthenticated` for this host, with `message`.
    fn unauth(&self, message: String) -> Error {
        Error::Unauthenticated {
            reference: self.reference.clone(),
            registry: self.spec.host.clone(),
            message,
        }
    }

    /// The URL of a token `realm`, if credentials may be sent there: HTTPS
    /// (HTTP only from a plain-HTTP registry), and an address the host may
    /// reach.
    fn token_realm(&self, realm: &str) -> Result<Url, Error> {
        let realm_url = Url::parse(realm)
            .map_err(|_| self.unauth(format!("bearer realm {realm:?} is not a URL")))?;
        match realm_url.scheme() {
            "https" => {}
            "http" if self.spec.plain_http => {}
            _ => {
                return Err(self.unauth(format!(
                "bearer realm {realm:?}: refusing to send credentials to it from an HTTPS registry"
            )))
            }
        }
        self.may_reach(&realm_url)
            .map_err(|m| self.unauth(format!("bearer realm: {m}")))?;
        Ok(realm_url)
    }

    /// The token in the answer `res` of the token endpoint `realm` (its
    /// error body quoted only when it is the registry's `own_host`).
    async fn token_of(
        &self,
        res: reqwest::Response,
        realm: &str,
        own_host: bool,
    ) -> Result<String, Error> {
        let status = res.status();
        if !status.is_success() {
            let body = if own_host {
                match read_capped(res, MAX_ERROR_BODY).await {
                    Ok(b) => String::from_utf8_lossy(&b)
                        .trim()
                        .chars()
                        .take(300)
                        .collect(),
                    Err(_) => String::new(),
                }
            } else {
                String::new()
            };
            return Err(self.unauth(
                format!("token endpoint {realm}: {status}: {body}")
                    .trim_end_matches([' ', ':'])
                    .to_string(),
            ));
        }
        let body = match read_capped(res, MAX_TOKEN).await {
            Ok(b) => b,
            Err(ReadError::TooLarge) => {
                return Err(Error::bad(
                    &self.reference,
                    "",
                    format!("token endpoint {realm}: answer larger than {MAX_TOKEN} bytes"),
                ))
            }
            Err(ReadError::Net(e)) => return Err(self.net_err("token", &e)),
        };
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            #[serde(default)]
            token: String,
            #[serde(default)]
            access_token: String,
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| self.unauth(format!("token endpoint {realm}: not a token answer")))?;
        let token = if answer.access_token.is_empty() {
            answer.token
        } else {
            answer.access_token
        };
        if token.is_empty() {
            return Err(self.unauth(format!("token endpoint {realm}: no token in the answer")));
        }
        Ok(token)
    }
}

fn basic(user: &str, pass: &str) -> Option<HeaderValue> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    sensitive(&format!("Basic {b64}"))
}

pub(super) fn bearer(token: &str) -> Option<HeaderValue> {
    sensitive(&format!("Bearer {token}"))
}

fn sensitive(value: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(value).ok()?;
    v.set_sensitive(true);
    Some(v)
}
