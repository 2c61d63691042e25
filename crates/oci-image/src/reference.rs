//! Image references, normalised as containerd and kubelet do:
//! `busybox` → `docker.io/library/busybox:latest`, `quay.io/a/b@sha256:…`,
//! `name:tag@sha256:…`. Our own parser of the docker reference grammar.

use std::fmt;

use crate::error::Error;

/// The registry of names without a domain.
pub const DEFAULT_DOMAIN: &str = "docker.io";
/// The host that serves `docker.io` names.
pub const DOCKER_HUB_HOST: &str = "registry-1.docker.io";
const MAX_NAME_LEN: usize = 255;

/// A normalised image reference: always a domain, a path, and a tag, a
/// digest or both.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    domain: String,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl Reference {
    /// Parses and normalises `text`. A reference without tag or digest gets
    /// the tag `latest`.
    pub fn parse(text: &str) -> Result<Reference, Error> {
        let bad = |reason: &str| Error::invalid_reference(text, reason);
        if text.is_empty() {
            return Err(bad("empty reference"));
        }
        if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad(
                "a 64-character hex string is an image id, not a reference",
            ));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => {
                check_digest(digest).map_err(|r| bad(&r))?;
                (rest, Some(digest.to_string()))
            }
            None => (text, None),
        };
        let (name, tag) = match rest.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => {
                check_tag(tag).map_err(|r| bad(&r))?;
                (name, Some(tag.to_string()))
            }
            _ => (rest, None),
        };
        if name.is_empty() {
            return Err(bad("empty name"));
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, remainder))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.chars().any(|c| c.is_ascii_uppercase()) =>
            {
                (first.to_string(), remainder.to_string())
            }
            _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
        };
        // Host names are case-insensitive: `REGISTRY.K8S.IO/pause` is
        // `registry.k8s.io/pause`, and must find that registry's mirrors and
        // hosts.toml (docker's grammar allows upper case in the domain; the
        // path stays case-sensitive, and lowercase). A domain that would
        // not be one in lower case (`MYHOST/app`: no dot, no port) keeps its
        // case, so that the name parses back to itself; the registry
        // configuration is looked up case-folded anyway (`hosts.rs`).
        let lower = domain.to_ascii_lowercase();
        let domain = if lower.contains(['.', ':']) || lower == "localhost" {
            lower
        } else {
            domain
        };
        let domain = if domain == "index.docker.io" {
            DEFAULT_DOMAIN.to_string()
        } else {
            domain
        };
        crate::config::check_host(&domain).map_err(|r| bad(&format!("domain {domain:?}: {r}")))?;
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        for component in path.split('/') {
            check_component(component).map_err(|r| bad(&r))?;
        }
        if domain.len() + 1 + path.len() > MAX_NAME_LEN {
            return Err(bad("name longer than 255 characters"));
        }
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(Reference {
            domain,
            path,
            tag,
            digest,
        })
    }

    /// The registry as written in names: `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The repository path within the registry: `library/busybox`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest (`sha256:…`), if any.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// `domain/path`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// `domain/path:tag`, when there is a tag.
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.name()))
    }

    /// `domain/path@digest` for any digest of this repository.
    pub fn with_digest(&self, digest: &str) -> String {
        format!("{}@{digest}", self.name())
    }

    /// Docker's short form (`busybox:latest`, `user/app:1`,
    /// `quay.io/a/b:c`): what `docker images` shows and `docker save`
    /// writes as `RepoTags`.
    pub fn familiar(&self) -> String {
        let mut name = self.name();
        if self.domain == DEFAULT_DOMAIN {
            name = match self.path.strip_prefix("library/") {
                Some(short) if !short.contains('/') => short.to_string(),
                _ => self.path.clone(),
            };
        }
        if let Some(tag) = &self.tag {
            name = format!("{name}:{tag}");
        }
        if let Some(digest) = &self.digest {
            name = format!("{name}@{digest}");
        }
        name
    }

    /// The host that serves this registry (`registry-1.docker.io` for `docker.io`).
    pub fn upstream_host(&self) -> &str {
        if self.domain == DEFAULT_DOMAIN {
            DOCKER_HUB_HOST
        } else {
            &self.domain
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Checks `sha256:<64 lowercase hex>`, the only digest algorithm berth accepts.
pub(crate) fn check_digest(digest: &str) -> Result<(), String> {
    match digest.split_once(':') {
        Some(("sha256", hex)) if is_sha256_hex(hex) => Ok(()),
        Some(("sha256", _)) => Err(format!("digest {digest:?}: not 64 lowercase hex digits")),
        Some((alg, _)) => Err(format!("digest {digest:?}: unsupported algorithm {alg:?}")),
        None => Err(format!("digest {digest:?}: missing algorithm")),
    }
}

/// 64 lowercase hex digits.
pub(crate) fn is_sha256_hex(hex: &str) -> bool {
    hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_tag(tag: &str) -> Result<(), String> {
    let mut chars = tag.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok
        || tag.len() > 128
        || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return Err(format!("invalid tag {tag:?}"));
    }
    Ok(())
}

/// A path component: lowercase alphanumerics separated by `.`, `_`, `__` or dashes.
fn check_component(component: &str) -> Result<(), String> {
    let bad = || {
        if component.chars().any(|c| c.is_ascii_uppercase()) {
            format!("repository name component {component:?} must be lowercase")
        } else {
            format!("invalid repository name component {component:?}")
        }
    };
    let bytes = component.as_bytes();
    if bytes.is_empty() {
        return Err(bad());
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    loop {
        let start = i;
        while i < bytes.len() && alnum(bytes[i]) {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        if i == bytes.len() {
            return Ok(());
        }
        let sep_start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &component[sep_start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
        if !ok || i == bytes.len() {
            return Err(bad());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn familiar_names_are_dockers_short_ones() {
        let f = |s: &str| Reference::parse(s).unwrap().familiar();
        assert_eq!(f("docker.io/library/busybox:1"), "busybox:1");
        assert_eq!(f("busybox"), "busybox:latest");
        assert_eq!(f("docker.io/user/app:2"), "user/app:2");
        assert_eq!(f("docker.io/library/a/b:3"), "library/a/b:3");
        assert_eq!(f("127.0.0.1:5000/x/y:4"), "127.0.0.1:5000/x/y:4");
    }

    fn norm(s: &str) -> String {
        Reference::parse(s).unwrap().to_string()
    }

    #[test]
    fn short_names_are_normalised() {
        assert_eq!(norm("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("busybox:1.28"), "docker.io/library/busybox:1.28");
        assert_eq!(norm("library/busybox"), "docker.io/library/busybox:latest");
        assert_eq!(
            norm("docker.io/busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            norm("index.docker.io/busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(norm("user/app:v1"), "docker.io/user/app:v1");
        assert_eq!(
            norm("registry.k8s.io/e2e-test-images/busybox:1.29-2"),
            "registry.k8s.io/e2e-test-images/busybox:1.29-2"
        );
        assert_eq!(norm("localhost/app"), "localhost/app:latest");
        assert_eq!(norm("127.0.0.1:5000/a/b"), "127.0.0.1:5000/a/b:latest");
        assert_eq!(norm("localhost:5000/app:1"), "localhost:5000/app:1");
        assert_eq!(
            norm("a__b/c-d/e.f/g---h"),
            "docker.io/a__b/c-d/e.f/g---h:latest"
        );
    }

    #[test]
    fn registry_hosts_are_case_folded() {
        assert_eq!(
            norm("REGISTRY.K8S.IO/pause"),
            "registry.k8s.io/pause:latest"
        );
        assert_eq!(norm("Quay.IO/a/b:V1"), "quay.io/a/b:V1");
        assert_eq!(norm("LOCALHOST:5000/app"), "localhost:5000/app:latest");
        assert_eq!(
            norm("Docker.IO/busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            norm("INDEX.DOCKER.IO/busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            Reference::parse("REGISTRY.K8S.IO/pause").unwrap().domain(),
            "registry.k8s.io"
        );
        // Every name parses back to itself.
        for text in [
            "REGISTRY.K8S.IO/pause",
            "MYHOST/app",
            "LocalHost/app",
            "Busybox/x",
        ] {
            let r = Reference::parse(text).unwrap();
            assert_eq!(Reference::parse(&r.to_string()).unwrap(), r, "{text}");
        }
        assert_eq!(norm("MYHOST/app"), "MYHOST/app:latest");
    }

    #[test]
    fn digests_and_tags() {
        let r = Reference::parse(&format!("busybox@{D}")).unwrap();
        assert_eq!(r.tag(), None);
        assert_eq!(r.digest(), Some(D));
        assert_eq!(r.to_string(), format!("docker.io/library/busybox@{D}"));
        let r = Reference::parse(&format!("quay.io/x/y:v2@{D}")).unwrap();
        assert_eq!(r.tag(), Some("v2"));
        assert_eq!(r.tagged().unwrap(), "quay.io/x/y:v2");
        assert_eq!(r.with_digest(D), format!("quay.io/x/y@{D}"));
        assert_eq!(r.upstream_host(), "quay.io");
        assert_eq!(
            Reference::parse("busybox").unwrap().upstream_host(),
            DOCKER_HUB_HOST
        );
    }

    #[test]
    fn bad_references_are_refused() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "busybox@sha256:abc",
            "busybox@md5:0123",
            "busybox@",
            "a//b",
            "a/b/",
            "-a",
            "a-",
            "a..b",
            "http://x/y",
            "x y",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "bad_host:99999/a",
        ] {
            let e = Reference::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{bad:?}");
        }
        let long = format!("a/{}", "b".repeat(300));
        assert!(Reference::parse(&long).is_err());
    }
}
