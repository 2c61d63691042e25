//! The address rule of every client: what kind of address a host is, and
//! a resolver that keeps names from reaching loopback, link-local or
//! metadata addresses on behalf of a registry that is not one itself.

#[cfg(test)]
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use reqwest::Url;

use crate::registry::hosts::HostSpec;

/// The cloud metadata service (AWS, GCP, Azure, OpenStack...).
const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// AWS's IPv6 metadata service.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// What kind of address a URL's host is, for the redirect and token realm
/// checks: anything but `Public` is reached only from a configured host of
/// the same kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    Public,
    /// 127.0.0.0/8, ::1, the unspecified addresses, `localhost`.
    Loopback,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// 169.254.169.254, fd00:ec2::254.
    Metadata,
}

/// The kind of `host` (a URL's host: a name, an IPv4 address or a
/// bracketed IPv6 one). The `url` crate has already turned the other
/// spellings of IPv4 addresses (`0x7f.1`, `2130706433`) into dotted ones.
pub(crate) fn reach(host: &str) -> Reach {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .trim_end_matches('.');
    match bare.parse::<IpAddr>() {
        Ok(ip) => reach_ip(ip),
        Err(_) => {
            let name = bare.to_ascii_lowercase();
            if name == "localhost" || name.ends_with(".localhost") {
                Reach::Loopback
            } else {
                Reach::Public
            }
        }
    }
}

pub(super) fn reach_ip(ip: IpAddr) -> Reach {
    match ip {
        IpAddr::V4(v4) if v4 == METADATA_V4 => Reach::Metadata,
        IpAddr::V4(v4) if v4.is_loopback() || v4.is_unspecified() => Reach::Loopback,
        IpAddr::V4(v4) if v4.is_link_local() => Reach::LinkLocal,
        IpAddr::V4(_) => Reach::Public,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => reach_ip(IpAddr::V4(v4)),
            None if v6 == METADATA_V6 => Reach::Metadata,
            None if v6.is_loopback() || v6.is_unspecified() => Reach::Loopback,
            None if v6.segments()[0] & 0xffc0 == 0xfe80 => Reach::LinkLocal,
            None => Reach::Public,
        },
    }
}

/// The host name of `url` (a URL or `scheme://host[:port]`), lowercase,
/// without brackets or a trailing dot.
pub(super) fn host_name(url: &str) -> Option<String> {
    let url = Url::parse(url).ok()?;
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

/// Addresses looked up by name in place of the system's resolver (tests).
#[cfg(test)]
pub(super) type DnsTable = std::sync::Arc<HashMap<String, Vec<IpAddr>>>;

/// The resolver of every client: a name that is not the configured host's
/// (or a proxy's) may not resolve to a loopback, link-local or metadata
/// address unless the configured host is one of the same kind: the address
/// rule of redirects and token realms, applied to what names resolve to
/// (`metadata.google.internal` is 169.254.169.254). Addresses of other
/// kinds among the answers are kept; a name with none is refused.
#[derive(Clone)]
pub(super) struct GuardedResolver {
    /// Names that may resolve to anything: the configured host, its proxy,
    /// the proxies of the environment.
    pub(super) trusted: Vec<String>,
    /// The kind of the configured host.
    pub(super) own: Reach,
    #[cfg(test)]
    pub(super) table: Option<DnsTable>,
}

impl GuardedResolver {
    pub(super) fn for_spec(spec: &HostSpec) -> GuardedResolver {
        let mut trusted: Vec<String> = Vec::new();
        trusted.extend(host_name(&spec.origin()));
        trusted.extend(spec.proxy.as_deref().and_then(host_name));
        for var in ["http_proxy", "https_proxy", "all_proxy"] {
            for var in [var.to_string(), var.to_ascii_uppercase()] {
                if let Ok(p) = std::env::var(var) {
                    let p = if p.contains("://") {
                        p
                    } else {
                        format!("http://{p}")
                    };
                    trusted.extend(host_name(&p));
                }
            }
        }
        let own = Url::parse(&spec.origin())
            .ok()
            .map(|u| reach(u.host_str().unwrap_or("")))
            .unwrap_or(Reach::Public);
        GuardedResolver {
            trusted,
            own,
            #[cfg(test)]
            table: None,
        }
    }

    /// The addresses of `name` that may be connected to.
    pub(super) fn filter(
        &self,
        name: &str,
        addrs: Vec<std::net::SocketAddr>,
    ) -> Result<Vec<std::net::SocketAddr>, String> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if self.trusted.contains(&name) {
            return Ok(addrs);
        }
        let found = addrs.len();
        let kept: Vec<_> = addrs
            .into_iter()
            .filter(|a| matches!(reach_ip(a.ip()), Reach::Public) || reach_ip(a.ip()) == self.own)
            .collect();
        if kept.is_empty() && found > 0 {
            return Err(format!(
                "refusing {name}: it resolves to loopback, link-local or metadata addresses only"
            ));
        }
        Ok(kept)
    }

    pub(super) async fn lookup(&self, name: &str) -> std::io::Result<Vec<std::net::SocketAddr>> {
        #[cfg(test)]
        if let Some(table) = &self.table {
            let ips = table.get(name).cloned().unwrap_or_default();
            return Ok(ips
                .into_iter()
                .map(|ip| std::net::SocketAddr::new(ip, 0))
                .collect());
        }
        Ok(tokio::net::lookup_host((name, 0)).await?.collect())
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs = this.lookup(&name).await?;
            let kept = this.filter(&name, addrs)?;
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}
