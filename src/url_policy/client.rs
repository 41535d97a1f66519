//! The one builder of outbound HTTP clients (overlay page pre-checks, PULL's gateway, the relay,
//! webhook deliveries; restreams next): the caller names its [`Outbound`] policy, and every hop of
//! every request is checked against it — the first URL ([`OutboundClient::request`]), each
//! redirect's `Location` (bounded hops), and each name's resolved addresses (the resolver
//! returns only checked addresses, so the address connected to is one that was checked).
//! Inputs: a policy and the caller's timeouts; output: an [`OutboundClient`].

use std::sync::Arc;

use reqwest::{ClientBuilder, Method, RequestBuilder};
use url::Url;

use super::{check, resolve, Purpose, UrlPolicyError};

/// What happens to a redirect answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Followed here, at most this many hops, each `Location` checked first.
    Follow(usize),
    /// Handed back as the answer: the caller passes it on (the relay, to its client) or follows
    /// it itself through [`OutboundClient::request`] (PULL's gateway, through its own port).
    ToCaller,
}

/// One caller's policy: its purpose (the schemes), its address rule and its redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbound {
    pub purpose: Purpose,
    /// Link-local and metadata addresses allowed: PULL's `pull_allow_link_local`, and the relay,
    /// whose peers are nodes the operator runs (the cluster table, not a user's URL).
    pub allow_link_local: bool,
    pub redirects: Redirects,
}

/// Hops an overlay page may redirect through before the pre-check gives up (browsers: 20).
pub const MAX_PAGE_REDIRECTS: usize = 10;

impl Outbound {
    /// Overlay pages (the pre-check before WebKit renders one).
    pub fn web_page() -> Outbound {
        Outbound {
            purpose: Purpose::WebPage,
            allow_link_local: false,
            redirects: Redirects::Follow(MAX_PAGE_REDIRECTS),
        }
    }

    /// PULL's gateway: each redirect goes back to GStreamer through the gateway's own port.
    pub fn pull(allow_link_local: bool) -> Outbound {
        Outbound {
            purpose: Purpose::PullHttpHop,
            allow_link_local,
            redirects: Redirects::ToCaller,
        }
    }

    /// Webhook deliveries: a redirect is an answer like any other non-2xx (not followed: the
    /// signed body would go where the owner never registered).
    pub fn webhook() -> Outbound {
        Outbound {
            purpose: Purpose::Webhook,
            allow_link_local: false,
            redirects: Redirects::ToCaller,
        }
    }

    /// The publish authorization hook: the operator's own service (configured, not a user's
    /// URL), so any address; a redirect is not followed (fail closed: a refusal).
    pub fn publish_auth() -> Outbound {
        Outbound {
            purpose: Purpose::Webhook,
            allow_link_local: true,
            redirects: Redirects::ToCaller,
        }
    }

    /// The relay to other nodes: their answers, redirects included, go back as they are.
    pub fn relay() -> Outbound {
        Outbound {
            purpose: Purpose::Relay,
            allow_link_local: true,
            redirects: Redirects::ToCaller,
        }
    }
}

/// A client that checks each request's URL against its policy before sending it.
#[derive(Clone)]
pub struct OutboundClient {
    client: reqwest::Client,
    policy: Outbound,
}

impl OutboundClient {
    /// A request to `url`, once it passes the policy (scheme, address literal).
    pub fn request(&self, method: Method, url: &Url) -> Result<RequestBuilder, UrlPolicyError> {
        check(url, self.policy.purpose, self.policy.allow_link_local)?;
        Ok(self.client.request(method, url.clone()))
    }

    pub fn get(&self, url: &Url) -> Result<RequestBuilder, UrlPolicyError> {
        self.request(Method::GET, url)
    }

    /// Whether `page` answers 2xx, after its redirects (each checked): the overlay page
    /// pre-check. The reason (URLs redacted) when it does not.
    pub async fn pre_check(&self, page: &str) -> Result<(), String> {
        let url = Url::parse(page).map_err(|e| e.to_string())?;
        let answer = self.get(&url).map_err(|e| e.to_string())?.send().await;
        let answer = answer.map_err(|e| super::describe(&e))?;
        if answer.status().is_success() {
            return Ok(());
        }
        // reqwest hands back, unfollowed, a redirect to a scheme other than http(s): say why.
        let location = answer
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| answer.url().join(l).ok());
        match location {
            Some(to) if answer.status().is_redirection() => {
                let why = check(&to, self.policy.purpose, self.policy.allow_link_local)
                    .err()
                    .map_or_else(|| "not followed".to_owned(), |e| e.to_string());
                Err(format!("redirect to {}: {why}", super::redact(to.as_str())))
            }
            _ => Err(format!("HTTP {}", answer.status())),
        }
    }
}

/// Builds the client for `policy`. `tune` sets the caller's own timeouts and user agent; the
/// policy is applied after it, so no caller can undo the redirect rule, the resolver or the
/// proxy setting.
pub fn build(
    policy: Outbound,
    tune: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Result<OutboundClient, reqwest::Error> {
    let redirect = match policy.redirects {
        Redirects::ToCaller => reqwest::redirect::Policy::none(),
        Redirects::Follow(max) => {
            let (purpose, allow) = (policy.purpose, policy.allow_link_local);
            reqwest::redirect::Policy::custom(move |attempt| {
                // `previous` holds the first URL too: more than `max` means `max` hops taken.
                if attempt.previous().len() > max {
                    return attempt.error(UrlPolicyError::TooManyRedirects(max));
                }
                match check(attempt.url(), purpose, allow) {
                    Ok(()) => attempt.follow(),
                    Err(e) => attempt.error(e),
                }
            })
        }
    };
    let mut builder = tune(reqwest::Client::builder())
        .redirect(redirect)
        // A proxy would resolve names itself, past the guard.
        .no_proxy();
    if !policy.allow_link_local {
        builder = builder.dns_resolver(Arc::new(GuardedResolver));
    }
    Ok(OutboundClient {
        client: builder.build()?,
        policy,
    })
}

/// Names resolve only to addresses the URL policy allows, and the client connects to exactly
/// those; address literals never reach a resolver, so [`OutboundClient::request`] and the
/// redirect rule check those.
struct GuardedResolver;

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = resolve(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::url_policy::describe;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on 127.0.0.1 answering `GET /to?<location>` with a 302 to `<location>`
    /// (percent-decoded) and anything else with 200 `ok`.
    async fn redirector() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    let answer = match target.strip_prefix("/to?") {
                        Some(to) => {
                            let to = percent_encoding::percent_decode_str(to).decode_utf8_lossy();
                            format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        }
                        None => {
                            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                                .to_owned()
                        }
                    };
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        port
    }

    fn via(port: u16, location: &str) -> Url {
        let to: String =
            percent_encoding::utf8_percent_encode(location, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        Url::parse(&format!("http://127.0.0.1:{port}/to?{to}")).unwrap()
    }

    #[tokio::test]
    async fn the_page_pre_check_follows_only_allowed_redirects() {
        let port = redirector().await;
        // The overlay hub's client, as it builds it.
        let client = build(Outbound::web_page(), |b| b).unwrap();
        // Allowed hops still work: to an address, and to a name resolved through the guard.
        for ok in [
            format!("http://127.0.0.1:{port}/page"),
            format!("http://localhost:{port}/page"),
        ] {
            let r = client.get(&via(port, &ok)).unwrap().send().await.unwrap();
            assert_eq!(
                (r.status().as_u16(), r.url().path()),
                (200, "/page"),
                "{ok}"
            );
            assert_eq!(client.pre_check(via(port, &ok).as_str()).await, Ok(()));
        }
        // A metadata address, a link-local v6 one and a scheme pages may not use: refused
        // before any connection, and the reason says so.
        for (bad, why) in [
            (
                "http://169.254.169.254/latest/meta-data/",
                "169.254.169.254 is a link-local",
            ),
            ("http://[fe80::1]/", "fe80::1 is a link-local"),
            ("file:///etc/passwd", "scheme `file` is not allowed"),
        ] {
            let e = client.pre_check(via(port, bad).as_str()).await.unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // Hops are bounded: a chain of 12 redirects gives up.
        let mut chain = via(port, &format!("http://127.0.0.1:{port}/to?x"));
        for _ in 0..MAX_PAGE_REDIRECTS {
            chain = via(port, chain.as_str());
        }
        let e = client.pre_check(chain.as_str()).await.unwrap_err();
        assert!(e.contains("more than 10 redirects"), "{e}");
        // The first URL is checked too.
        let first = Url::parse("http://169.254.169.254/").unwrap();
        assert!(matches!(
            client.get(&first),
            Err(UrlPolicyError::Blocked(_))
        ));
    }

    #[tokio::test]
    async fn a_relay_or_gateway_client_hands_redirects_back() {
        let port = redirector().await;
        for policy in [Outbound::relay(), Outbound::pull(false)] {
            let client = build(policy, |b| b).unwrap();
            let r = client
                .get(&via(port, "http://169.254.169.254/"))
                .unwrap()
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 302, "{policy:?}");
        }
        // The relay's peers are the operator's nodes: no address rule.
        let relay = build(Outbound::relay(), |b| b).unwrap();
        assert!(relay
            .get(&Url::parse("http://169.254.1.1:8080/x").unwrap())
            .is_ok());
        let pull = build(Outbound::pull(false), |b| b).unwrap();
        assert!(pull
            .get(&Url::parse("http://169.254.1.1:8080/x").unwrap())
            .is_err());
    }

    #[test]
    fn describe_redacts_the_url_reqwest_writes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = build(Outbound::relay(), |b| b).unwrap();
        let url = Url::parse(&format!(
            "http://user:pw-s3cret@127.0.0.1:{port}/a?token=t0k3n"
        ))
        .unwrap();
        let e = rt.block_on(client.get(&url).unwrap().send()).unwrap_err();
        assert!(
            e.to_string().contains("t0k3n"),
            "reqwest shows the URL: {e}"
        );
        let text = describe(&e);
        assert!(
            !text.contains("pw-s3cret") && !text.contains("t0k3n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("http://127.0.0.1:{port}/a")),
            "{text}"
        );
    }
}
