//! The one policy for outbound URLs — PULL sources, HTML overlay pages (and what they load), the
//! relay to other nodes: which schemes each use may name, which hosts are refused (link-local
//! and cloud-metadata addresses, unless `pull_allow_link_local`), the DNS guard run right before
//! connecting, the one outbound HTTP client ([`client`]) that checks every hop, and [`redact`],
//! the one helper every log line passes secrets through (URL credentials, query tokens, publish
//! names). Inputs: a URL (text or parsed) and, for the guard, the addresses its name resolved
//! to; outputs: the parsed URL or a [`UrlPolicyError`].
//!
//! Everything but [`guard`], [`resolve`] and [`client`] is sans-IO, so each rule is
//! table-tested below.

pub mod client;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use url::{Host, Url};

/// A DNS answer slower than this fails the attempt; the next source is tried instead.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(5);

/// AWS's IPv6 instance metadata address (IMDS), outside the link-local range.
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
/// Alibaba Cloud's metadata address, outside the link-local range.
const ALIBABA_METADATA_V4: [u8; 4] = [100, 100, 100, 200];

/// What a URL is for: each use has its own schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A PULL stream's source URL, as the record's `uri` names it.
    PullSource,
    /// A URL an HTTP(S) PULL source leads to: a playlist entry or a redirect. The gateway
    /// fetches it over HTTP, so nothing else can be followed.
    PullHttpHop,
    /// An HTML page rendered into the picture (overlays), and what it loads (`page_proxy`).
    WebPage,
    /// A request relayed to the node serving a stream (`http::relay`).
    Relay,
    /// An endpoint the daemon POSTs to: a customer's webhook, the publish authorization hook.
    Webhook,
    /// A server a live stream is sent on to (a restream's target).
    Restream,
}

impl Purpose {
    pub fn schemes(self) -> &'static [&'static str] {
        match self {
            Purpose::PullSource => &["rtmp", "rtmps", "srt", "http", "https"],
            Purpose::Restream => &["rtmp", "rtmps", "srt"],
            Purpose::PullHttpHop | Purpose::WebPage | Purpose::Relay | Purpose::Webhook => {
                &["http", "https"]
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UrlPolicyError {
    #[error("not a URL: {0}")]
    NotUrl(#[from] url::ParseError),
    #[error("{}", scheme_message(scheme, *purpose))]
    Scheme { scheme: String, purpose: Purpose },
    #[error("no host")]
    NoHost,
    #[error("{0} is a link-local or metadata address (set pull_allow_link_local to allow)")]
    Blocked(IpAddr),
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("DNS lookup of {host} timed out")]
    DnsTimeout { host: String },
    #[error("DNS lookup of {host} failed: {source}")]
    Dns {
        host: String,
        source: std::io::Error,
    },
}

fn scheme_message(scheme: &str, purpose: Purpose) -> String {
    match purpose {
        // The gateway's words: the hop itself may be fine, just not over HTTP.
        Purpose::PullHttpHop => format!("scheme `{scheme}` is not fetched over HTTP"),
        _ => format!(
            "scheme `{scheme}` is not allowed ({})",
            purpose.schemes().join(", ")
        ),
    }
}

/// Parses a URL as a user wrote it (a record's `uri`, a page address) and checks its scheme
/// and that it names a host. No address rule here: names are checked when resolved ([`guard`]).
pub fn parse(raw: &str, purpose: Purpose) -> Result<Url, UrlPolicyError> {
    let url = Url::parse(raw)?;
    check_scheme(&url, purpose)?;
    // WHATWG parsing repairs `http:///x` and `http:x` into `http://x/`; a URL someone wrote
    // must name its host explicitly, or what is fetched is not what they typed.
    let explicit_host = raw
        .get(url.scheme().len()..)
        .and_then(|rest| rest.strip_prefix("://"))
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
    if !explicit_host || url.host_str().is_none_or(str::is_empty) {
        return Err(UrlPolicyError::NoHost);
    }
    Ok(url)
}

fn check_scheme(url: &Url, purpose: Purpose) -> Result<(), UrlPolicyError> {
    if purpose.schemes().contains(&url.scheme()) {
        Ok(())
    } else {
        Err(UrlPolicyError::Scheme {
            scheme: url.scheme().to_owned(),
            purpose,
        })
    }
}

/// Checks a parsed URL (one a server or playlist handed us) without I/O: its scheme, that it
/// has a host, and, if that host is an address literal, the address. Names pass here and are
/// checked on what they resolve to, at connect ([`guard`], or the gateway's resolver).
pub fn check(url: &Url, purpose: Purpose, allow_link_local: bool) -> Result<(), UrlPolicyError> {
    check_scheme(url, purpose)?;
    let ip = literal(url).ok_or(UrlPolicyError::NoHost)?;
    match ip {
        Some(ip) if !allow_link_local => check_addrs([ip]),
        _ => Ok(()),
    }
}

/// The host's address if it is a literal (`None` inside for a name); `None` without a host.
/// Non-special schemes (rtmp, srt) keep an IPv4 literal as an opaque name: parsed here.
fn literal(url: &Url) -> Option<Option<IpAddr>> {
    match url.host()? {
        Host::Ipv4(v4) => Some(Some(IpAddr::V4(v4))),
        Host::Ipv6(v6) => Some(Some(IpAddr::V6(v6))),
        Host::Domain("") => None,
        Host::Domain(name) => Some(name.parse().ok()),
    }
}

/// Addresses a URL may not lead to: link-local (which holds the cloud metadata services,
/// 169.254.169.254 and fe80::/10), the other well-known metadata addresses, and addresses that
/// are no single host (unspecified, broadcast, multicast).
pub fn blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.octets() == ALIBABA_METADATA_V4
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return blocked(IpAddr::V4(v4));
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6 == AWS_METADATA_V6
        }
    }
}

/// The DNS guard's decision, sans-IO: every address a name resolved to must be allowed (one
/// bad answer among good ones would let a rebinding name pick it on a later connect).
pub fn check_addrs(addrs: impl IntoIterator<Item = IpAddr>) -> Result<(), UrlPolicyError> {
    match addrs.into_iter().find(|ip| blocked(*ip)) {
        Some(ip) => Err(UrlPolicyError::Blocked(ip)),
        None => Ok(()),
    }
}

/// Resolves `host` and checks every address ([`check_addrs`]); the caller connects to what
/// this returns, so the checked answer is the one used.
pub async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, UrlPolicyError> {
    let addrs: Vec<SocketAddr> =
        tokio::time::timeout(DNS_TIMEOUT, tokio::net::lookup_host((host, port)))
            .await
            .map_err(|_| UrlPolicyError::DnsTimeout {
                host: host.to_owned(),
            })?
            .map_err(|source| UrlPolicyError::Dns {
                host: host.to_owned(),
                source,
            })?
            .collect();
    check_addrs(addrs.iter().map(SocketAddr::ip))?;
    Ok(addrs)
}

/// The DNS guard for a URL a non-HTTP client (rtmp2src, srtsrc) connects to itself, right
/// before it does: the host's addresses now must all be allowed.
pub async fn guard(url: &Url, allow_link_local: bool) -> Result<(), UrlPolicyError> {
    if allow_link_local {
        return Ok(());
    }
    match literal(url).ok_or(UrlPolicyError::NoHost)? {
        Some(ip) => check_addrs([ip]),
        None => {
            let host = url.host_str().unwrap_or_default();
            let port = url.port().unwrap_or_else(|| default_port(url.scheme()));
            resolve(host, port).await.map(drop)
        }
    }
}

/// The default port of a scheme, for resolving the host.
fn default_port(scheme: &str) -> u16 {
    match scheme {
        "rtmp" => 1935,
        "rtmps" | "https" => 443,
        "srt" => 9000,
        _ => 80,
    }
}

/// The one redaction helper: what of a string that may carry a secret a log line shows.
///
/// - A URL (PULL sources, overlay pages, relayed requests) keeps its scheme, host, port and
///   path: user info (`rtmp://user:pass@…`) and the query (where tokens and SRT passphrases
///   live) go. The port stays: it tells two sources on one host apart.
/// - Anything else is a publish name or request target — RTMP `{id}?{token}`, SRT
///   `{id}#{token}` or `#!::r={id},…,t={token}`, WHIP `/whip/{id}?token=…`: it is cut at the
///   first `?` or `#`, which is where every token we accept starts.
pub fn redact(text: &str) -> String {
    match redact_url(text) {
        Some(shown) => shown,
        None if text.contains("://") || text.contains('@') => "<invalid URL>".into(),
        None => match text.find(['?', '#']) {
            Some(at) => format!("{}{}<redacted>", &text[..at], &text[at..=at]),
            None => text.to_owned(),
        },
    }
}

/// A URL with a host as [`redact`] shows it; `None` for anything else, which a caller that
/// expects a URL (a setting that may hold a password) must not echo at all.
pub fn redact_url(text: &str) -> Option<String> {
    match Url::parse(text) {
        // Only URLs with a host: `user:pass@host` parses as scheme `user` and path `pass@host`.
        Ok(u) if u.has_host() => Some(format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or_default(),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path()
        )),
        _ => None,
    }
}

/// An HTTP client error and its causes for a log line or an error body, with the URL reqwest
/// writes into its message ("error sending request for url (…)") redacted.
pub fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), &redact(url.as_str()));
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_per_purpose() {
        use Purpose::*;
        let table: &[(&str, Purpose, bool)] = &[
            ("rtmp://a/live/x", PullSource, true),
            ("rtmps://a:443/live/x", PullSource, true),
            ("srt://127.0.0.1:9000?streamid=x", PullSource, true),
            ("https://cdn.example/live/index.m3u8", PullSource, true),
            ("http://127.0.0.1:8000/x.mpd", PullSource, true),
            ("file:///etc/passwd", PullSource, false),
            ("gopher://x/", PullSource, false),
            ("ftp://a/x", PullSource, false),
            ("javascript:alert(1)", PullSource, false),
            ("https://cdn.example/x.m3u8", PullHttpHop, true),
            ("rtmp://a/live/x", PullHttpHop, false),
            ("srt://a:9000", PullHttpHop, false),
            ("https://overlay.example/page", WebPage, true),
            ("http://overlay.example/page", WebPage, true),
            ("rtmp://a/live/x", WebPage, false),
            ("file:///srv/page.html", WebPage, false),
        ];
        for &(url, purpose, ok) in table {
            let got = parse(url, purpose);
            assert_eq!(got.is_ok(), ok, "{url} as {purpose:?}: {got:?}");
            if !ok {
                assert!(matches!(got, Err(UrlPolicyError::Scheme { .. })), "{url}");
            }
        }
    }

    #[test]
    fn a_written_url_names_its_host() {
        for (raw, want) in [
            ("rtmp://", "no host"),
            ("http:///x", "no host"),
            ("http:x.example/a", "no host"),
            ("not a url", "not a URL: relative URL without a base"),
            (
                "file:///etc/passwd",
                "scheme `file` is not allowed (rtmp, rtmps, srt, http, https)",
            ),
        ] {
            let e = parse(raw, Purpose::PullSource).unwrap_err();
            assert_eq!(e.to_string(), want, "{raw}");
        }
    }

    #[test]
    fn messages_stay_as_logged() {
        let hop = Url::parse("rtmp://a/x").unwrap();
        assert_eq!(
            check(&hop, Purpose::PullHttpHop, false)
                .unwrap_err()
                .to_string(),
            "scheme `rtmp` is not fetched over HTTP"
        );
        assert_eq!(
            UrlPolicyError::Blocked("169.254.169.254".parse().unwrap()).to_string(),
            "169.254.169.254 is a link-local or metadata address (set pull_allow_link_local to allow)"
        );
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
            "ff02::1",
        ] {
            assert!(blocked(bad.parse().unwrap()), "{bad}");
        }
        for ok in [
            "127.0.0.1",
            "10.0.0.1",
            "203.0.113.7",
            "::1",
            "2001:db8::1",
            "fd00:ec2::253",
        ] {
            assert!(!blocked(ok.parse().unwrap()), "{ok}");
        }
    }

    #[test]
    fn address_literals_are_checked_without_a_lookup() {
        let table: &[(&str, Purpose, bool, bool)] = &[
            // (url, purpose, allow_link_local, allowed)
            (
                "http://169.254.169.254/latest/meta-data/",
                Purpose::PullHttpHop,
                false,
                false,
            ),
            (
                "http://169.254.169.254/latest/meta-data/",
                Purpose::PullHttpHop,
                true,
                true,
            ),
            (
                "http://[fd00:ec2::254]/",
                Purpose::PullHttpHop,
                false,
                false,
            ),
            (
                "http://0.0.0.0:8080/y.m3u8",
                Purpose::PullHttpHop,
                false,
                false,
            ),
            (
                "http://127.0.0.1:8080/y.m3u8",
                Purpose::PullHttpHop,
                false,
                true,
            ),
            // Names pass: they are checked on what they resolve to.
            (
                "http://metadata.google.internal/",
                Purpose::PullHttpHop,
                false,
                true,
            ),
            // rtmp and srt keep hosts opaque; a literal in one is still an address.
            (
                "rtmp://169.254.169.254/live/x",
                Purpose::PullSource,
                false,
                false,
            ),
            (
                "srt://100.100.100.200:9000",
                Purpose::PullSource,
                false,
                false,
            ),
            ("srt://[fe80::1]:9000", Purpose::PullSource, false, false),
            ("srt://10.0.0.1:9000", Purpose::PullSource, false, true),
        ];
        for &(raw, purpose, allow, ok) in table {
            let url = Url::parse(raw).unwrap();
            let got = check(&url, purpose, allow);
            assert_eq!(got.is_ok(), ok, "{raw} allow={allow}: {got:?}");
        }
    }

    #[test]
    fn every_resolved_address_must_be_allowed() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(check_addrs([]).is_ok());
        assert!(check_addrs([ip("203.0.113.7"), ip("2001:db8::1")]).is_ok());
        // One bad answer among good ones refuses the name.
        assert!(matches!(
            check_addrs([ip("203.0.113.7"), ip("169.254.169.254")]),
            Err(UrlPolicyError::Blocked(b)) if b == ip("169.254.169.254")
        ));
    }

    #[tokio::test]
    async fn the_guard_checks_literals_and_honours_the_switch() {
        let url = |s: &str| Url::parse(s).unwrap();
        assert!(guard(&url("rtmp://127.0.0.1/live/x"), false).await.is_ok());
        assert!(guard(&url("rtmp://169.254.169.254/live/x"), false)
            .await
            .is_err());
        assert!(guard(&url("srt://[::]:9000"), false).await.is_err());
        assert!(guard(&url("rtmp://169.254.169.254/live/x"), true)
            .await
            .is_ok());
        assert!(guard(&url("rtmp://localhost/live/x"), false).await.is_ok());
    }

    #[test]
    fn redact_keeps_scheme_host_port_and_path_only() {
        for (raw, want) in [
            (
                "rtmp://user:pass@src.example:1935/live/key?token=t",
                "rtmp://src.example:1935/live/key",
            ),
            (
                "http://127.0.0.1:39609/dash/a.mpd",
                "http://127.0.0.1:39609/dash/a.mpd",
            ),
            (
                "https://cdn.example/x.m3u8?sig=secret#f",
                "https://cdn.example/x.m3u8",
            ),
            (
                "srt://10.0.0.1:9000?streamid=s&passphrase=p",
                "srt://10.0.0.1:9000",
            ),
            ("rtmp://bad host/x", "<invalid URL>"),
            // Publish names and request targets: cut where the token starts.
            ("42?abcdef", "42?<redacted>"),
            ("42b?token=abcdef", "42b?<redacted>"),
            ("7#s3cret", "7#<redacted>"),
            ("#!::r=7,m=publish,t=s3cret", "#<redacted>"),
            ("/whip/7?token=s3cret", "/whip/7?<redacted>"),
            ("in", "in"),
            ("user:pass@host", "<invalid URL>"),
        ] {
            assert_eq!(redact(raw), want, "{raw}");
        }
    }
}
