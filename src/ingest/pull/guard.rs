//! Which PULL source URLs the daemon may fetch (sans-IO): allowed schemes only, and — unless
//! turned off — no host that resolves to a link-local or cloud-metadata address, so a stream
//! record cannot make the daemon read its own cloud credentials.

use std::net::IpAddr;

use url::Url;

/// The schemes a PULL source may use (the API refuses others when the record is written).
pub const SCHEMES: [&str; 5] = ["rtmp", "rtmps", "srt", "http", "https"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuardError {
    #[error("not a URL: {0}")]
    NotUrl(String),
    #[error("scheme `{0}` is not allowed (rtmp, rtmps, srt, http, https)")]
    Scheme(String),
    #[error("no host")]
    NoHost,
    #[error("{0} is a link-local or metadata address (set pull_allow_link_local to allow)")]
    Blocked(IpAddr),
}

/// Parses a source URL and checks its scheme and host.
pub fn check_url(uri: &str) -> Result<Url, GuardError> {
    let url = Url::parse(uri).map_err(|e| GuardError::NotUrl(e.to_string()))?;
    if !SCHEMES.contains(&url.scheme()) {
        return Err(GuardError::Scheme(url.scheme().to_owned()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(GuardError::NoHost);
    }
    Ok(url)
}

/// The default port of a scheme, for resolving the host.
pub fn default_port(scheme: &str) -> u16 {
    match scheme {
        "rtmp" => 1935,
        "rtmps" => 443,
        "https" => 443,
        "srt" => 9000,
        _ => 80,
    }
}

/// Addresses a source may not resolve to: link-local (which holds the cloud metadata services,
/// 169.254.169.254 and fe80::/10), the other well-known metadata addresses, and addresses that
/// are no single host (unspecified, broadcast, multicast).
pub fn blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.octets() == [100, 100, 100, 200] // Alibaba Cloud metadata
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return blocked(IpAddr::V4(v4));
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6
                    == "fd00:ec2::254"
                        .parse::<std::net::Ipv6Addr>()
                        .expect("valid") // AWS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_and_hosts() {
        for ok in [
            "rtmp://a/live/x",
            "rtmps://a:443/live/x",
            "srt://127.0.0.1:9000?streamid=x",
            "https://cdn.example/live/index.m3u8",
            "http://127.0.0.1:8000/x.mpd",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            check_url("file:///etc/passwd").unwrap_err(),
            GuardError::Scheme("file".into())
        );
        assert!(matches!(
            check_url("gopher://x/"),
            Err(GuardError::Scheme(_))
        ));
        assert!(matches!(check_url("not a url"), Err(GuardError::NotUrl(_))));
    }

    #[test]
    fn link_local_and_metadata_are_blocked() {
        for bad in [
            "169.254.169.254",
            "169.254.1.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "100.100.100.200",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "::",
        ] {
            assert!(blocked(bad.parse().unwrap()), "{bad}");
        }
        for ok in ["127.0.0.1", "10.0.0.1", "203.0.113.7", "::1", "2001:db8::1"] {
            assert!(!blocked(ok.parse().unwrap()), "{ok}");
        }
    }
}
