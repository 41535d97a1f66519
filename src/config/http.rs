//! The HTTP section's checks: the public base URL and the FastEdge app domain.

use url::Url;

use super::{invalid, ConfigError};

/// Base of every returned URL; absent or blank: derived from the bound HTTP address.
pub(super) fn public_url(u: Option<&str>) -> Result<Option<Url>, ConfigError> {
    let Some(u) = u.filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    let bad = |reason: String| invalid("public_url", u, reason);
    let url = Url::parse(u.trim()).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("must be an http(s) URL with a host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not carry a query or fragment".into()));
    }
    Ok(Some(url))
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
