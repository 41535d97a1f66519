//! The HTTP section's checks: the public base URL and the FastEdge app domain.

use url::Url;

use super::{invalid, ConfigError};

/// Base of every returned URL; absent or blank: derived from the bound HTTP address.
pub(super) fn public_url(u: Option<&str>) -> Result<Option<Url>, ConfigError> {
    base_url("public_url", u)
}

/// An http(s) base URL with a host and nothing after the path; blank is `None`.
pub(super) fn base_url(key: &'static str, u: Option<&str>) -> Result<Option<Url>, ConfigError> {
    let Some(u) = u.filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    let bad = |reason: String| invalid(key, u, reason);
    let url = Url::parse(u.trim()).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("must be an http(s) URL with a host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not carry a query or fragment".into()));
    }
    Ok(Some(url))
}

/// The publish authorization hook: an http(s) URL with a host (a query may carry what the
/// service checks the daemon by), or nothing.
pub(super) fn publish_auth(
    url: Option<&str>,
    timeout_ms: u64,
    cache_secs: u64,
) -> Result<Option<crate::live::PublishAuthConfig>, ConfigError> {
    let Some(raw) = url.filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    // The query may hold the daemon's key: shown redacted, and not at all when unreadable.
    let shown = match Url::parse(raw.trim()) {
        Ok(_) => crate::url_policy::redact(raw),
        Err(_) => "(not shown: not a URL)".to_owned(),
    };
    let bad = |reason: String| invalid("publish_auth_url", &shown, reason);
    let url = Url::parse(raw.trim()).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("must be an http(s) URL with a host".into()));
    }
    Ok(Some(crate::live::PublishAuthConfig {
        url,
        timeout: std::time::Duration::from_millis(timeout_ms),
        cache: std::time::Duration::from_secs(cache_secs),
    }))
}

/// App URLs are `https://{name}.{domain}`: the domain must be usable as a DNS name.
pub(super) fn dns_name(key: &'static str, domain: String) -> Result<String, ConfigError> {
    let ok = !domain.is_empty()
        && domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if !ok {
        return Err(invalid(key, domain, "must be a DNS name"));
    }
    Ok(domain)
}

/// A CDN resource in front of the daemon: a stream whose `cdn_id` names it gets its playback
/// URLs (and its videos') on `base_url`, so viewers fetch through the CDN.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdnResource {
    pub id: i64,
    /// `https://cdn.example.com` (a path prefix is kept; no trailing slash once checked).
    pub base_url: String,
    /// Every stream on this resource needs signed playback (env: `7=https://cdn… secure`).
    #[serde(default)]
    pub secure_playback: bool,
}

/// An ingest region: its own host for the push endpoints (`multi_region_push_urls`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestRegion {
    pub name: String,
    /// A DNS name or an IP address (IPv6 in brackets once checked), without a port.
    pub host: String,
}

/// At most this many of each: more is a configuration mistake.
const MAX_ENTRIES: usize = 1000;

/// `name=value,name=value`, as the environment writes these lists.
fn pairs(name: &str, v: &str) -> Result<Vec<(String, String)>, ConfigError> {
    super::split_keys(v)
        .into_iter()
        .map(|item| {
            item.split_once('=')
                .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()))
                .ok_or_else(|| ConfigError::Invalid {
                    origin: "environment",
                    key: name.to_owned(),
                    value: v.to_owned(),
                    reason: format!("`{item}` is not `key=value`"),
                })
        })
        .collect()
}

impl super::setting::FromEnv for Vec<CdnResource> {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        pairs(name, &v)?
            .into_iter()
            .map(|(id, base_url)| {
                let id = id.parse().map_err(|_| ConfigError::Invalid {
                    origin: "environment",
                    key: name.to_owned(),
                    value: v.clone(),
                    reason: format!("CDN resource id `{id}` is not an integer"),
                })?;
                let (base_url, secure_playback) = match base_url.split_once(' ') {
                    Some((url, "secure")) => (url.trim().to_owned(), true),
                    _ => (base_url, false),
                };
                Ok(CdnResource {
                    id,
                    base_url,
                    secure_playback,
                })
            })
            .collect()
    }
}

impl super::setting::FromEnv for Vec<IngestRegion> {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        Ok(pairs(name, &v)?
            .into_iter()
            .map(|(name, host)| IngestRegion { name, host })
            .collect())
    }
}

/// Ids are positive and distinct; base URLs are http(s) with a host, no query or fragment.
pub(super) fn cdn_resources(
    key: &'static str,
    list: Vec<CdnResource>,
) -> Result<Vec<CdnResource>, ConfigError> {
    if list.len() > MAX_ENTRIES {
        return Err(invalid(key, "", format!("at most {MAX_ENTRIES} entries")));
    }
    let mut seen = std::collections::HashSet::new();
    list.into_iter()
        .map(|r| {
            if r.id < 1 || !seen.insert(r.id) {
                return Err(invalid(
                    key,
                    r.id.to_string(),
                    "ids must be positive and distinct",
                ));
            }
            let bad = |reason: &str| invalid(key, r.base_url.clone(), reason);
            let url = Url::parse(r.base_url.trim()).map_err(|e| bad(&e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(bad("base_url must be an http(s) URL with a host"));
            }
            if url.query().is_some() || url.fragment().is_some() {
                return Err(bad("base_url must not carry a query or fragment"));
            }
            Ok(CdnResource {
                id: r.id,
                base_url: url.as_str().trim_end_matches('/').to_owned(),
                secure_playback: r.secure_playback,
            })
        })
        .collect()
}

/// Names are short identifiers, distinct; hosts are DNS names or IP addresses.
pub(super) fn ingest_regions(
    key: &'static str,
    list: Vec<IngestRegion>,
) -> Result<Vec<IngestRegion>, ConfigError> {
    if list.len() > MAX_ENTRIES {
        return Err(invalid(key, "", format!("at most {MAX_ENTRIES} entries")));
    }
    let mut seen = std::collections::HashSet::new();
    list.into_iter()
        .map(|r| {
            let name_ok = (1..=64).contains(&r.name.len())
                && r.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !name_ok || !seen.insert(r.name.clone()) {
                return Err(invalid(
                    key,
                    r.name,
                    "region names must be distinct, 1..=64 of A-Z a-z 0-9 - _",
                ));
            }
            let raw = r.host.trim();
            let unbracketed = raw.trim_start_matches('[').trim_end_matches(']');
            let host = match unbracketed.parse::<std::net::Ipv6Addr>() {
                Ok(v6) => format!("[{v6}]"),
                Err(_) => match url::Host::parse(raw) {
                    Ok(url::Host::Domain(d)) if !d.is_empty() && !d.contains(':') => d,
                    Ok(url::Host::Ipv4(v4)) => v4.to_string(),
                    _ => {
                        return Err(invalid(
                            key,
                            r.host,
                            "hosts must be DNS names or IP addresses, without a port",
                        ))
                    }
                },
            };
            Ok(IngestRegion { name: r.name, host })
        })
        .collect()
}

/// A secret every node must share; short ones are guessable. Blank counts as absent. Never
/// echoed in the error.
pub(super) fn node_secret(key: &'static str, v: String) -> Result<String, ConfigError> {
    let min = crate::cluster::node_auth::MIN_SECRET_LEN;
    let v = v.trim().to_owned();
    if !v.is_empty() && v.len() < min {
        return Err(invalid(
            key,
            "<hidden>",
            format!("must be at least {min} characters (e.g. `openssl rand -hex 32`)"),
        ));
    }
    Ok(v)
}

/// The playback signing key: 16–128 of `A–Z a–z 0–9 _ -`, so it can be written into an nginx
/// configuration as it is. Blank counts as absent. Never echoed in the error.
pub(super) fn playback_key(key: &'static str, v: String) -> Result<String, ConfigError> {
    let v = v.trim().to_owned();
    let fits = (16..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !v.is_empty() && !fits {
        return Err(invalid(
            key,
            "<hidden>",
            "must be 16 to 128 of A-Z a-z 0-9 _ - (e.g. `openssl rand -hex 32`)",
        ));
    }
    Ok(v)
}

/// A node id names the node in the store and in logs: 1–64 of `A–Z a–z 0–9 . _ -`.
pub(super) fn node_id(v: Option<&str>) -> Result<Option<String>, ConfigError> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let ok = v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(invalid(
            "node_id",
            v,
            "must be 1-64 characters of A-Z a-z 0-9 . _ -",
        ));
    }
    Ok(Some(v.to_owned()))
}

/// Addresses or CIDR networks, at most [`MAX_ENTRIES`].
pub(super) fn trusted_proxies(
    list: &[String],
) -> Result<crate::admission::TrustedProxies, ConfigError> {
    if list.len() > MAX_ENTRIES {
        return Err(invalid(
            "trusted_proxies",
            "",
            format!("at most {MAX_ENTRIES} entries"),
        ));
    }
    list.iter()
        .map(|item| {
            crate::admission::TrustedProxies::parse(item)
                .map_err(|reason| invalid("trusted_proxies", item, reason))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(crate::admission::TrustedProxies::new)
}
