//! The guarded forward proxy that WPE WebKit, which renders the HTML overlays, makes every request
//! through: the page and everything it loads (images, scripts, frames, XHR). WebKit resolves names
//! and connects by itself, so the overlay pre-check's DNS guard would cover only the page's own
//! URL; a page could then load `http://169.254.169.254/…` (cloud credentials) or a name that
//! resolves there into a picture every viewer sees. WebKit's network process reads the proxy
//! from `http_proxy`/`https_proxy`, so the daemon binds this proxy on loopback while it is still
//! single-threaded ([`install`]), points those variables at it, and serves it ([`serve`]). Each
//! request's host is resolved here and every address checked by [`crate::url_policy`]; a refused
//! one gets `403` and a log line.
//!
//! Plain HTTP comes in absolute form (`GET http://host/path`) and goes out in origin form with
//! `Connection: close`, so one client connection never carries requests for two hosts; HTTPS
//! comes as `CONNECT host:443` and is tunnelled as bytes. The head parsing is sans-IO
//! ([`parse_head`]) and table-tested.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::url_policy;

/// A request head longer than this is refused (WebKit's are about 1 KiB).
const MAX_HEAD: usize = 16 * 1024;
/// A client that has not sent its whole head by then is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Connecting upstream (all addresses of the name) gives up after this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once; more wait to be accepted. Ten pages a stream open a few each.
const MAX_CONNECTIONS: usize = 512;

/// The proxy variables this module sets (the lower-case names, which libproxy and GLib read).
const PROXY_VARS: [&str; 2] = ["http_proxy", "https_proxy"];
/// Loopback goes direct: the daemon's own GStreamer HTTP clients (`souphttpsrc` reading the PULL
/// gateway) read the same variables, and the URL policy allows loopback anyway.
const DIRECT: &str = "localhost,127.0.0.1,::1";

/// Binds the proxy on 127.0.0.1 and points this process's proxy variables (inherited by the
/// WebKit processes the overlays start) at it. Must run while the process is single-threaded.
/// `None` when the operator set a proxy of their own: theirs is kept (and then guards, or not,
/// what the pages reach).
pub fn install() -> std::io::Result<Option<std::net::TcpListener>> {
    let operator_proxy = PROXY_VARS
        .iter()
        .chain(&["HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"])
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    if operator_proxy {
        return Ok(None);
    }
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    for var in PROXY_VARS {
        std::env::set_var(var, &url);
    }
    // The operator's own bypass list would let pages around the guard: replaced.
    std::env::set_var("no_proxy", DIRECT);
    std::env::remove_var("NO_PROXY");
    Ok(Some(listener))
}

/// Serves the proxy until the task returned is aborted; its relays end with it.
pub fn serve(listener: std::net::TcpListener) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::from_std(listener)?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        let relays = crate::tasks::Owned::default();
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            match listener.accept().await {
                Ok((conn, _)) => {
                    relays.spawn(async move {
                        relay(conn).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "overlay page proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

/// What a client asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `CONNECT host:port`: a byte tunnel (HTTPS).
    Tunnel { host: String, port: u16 },
    /// A plain HTTP request in absolute form, with the head to send upstream.
    Forward {
        host: String,
        port: u16,
        head: Vec<u8>,
    },
}

/// Why a request head is refused before anything is resolved.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("malformed request head")]
    Malformed,
    #[error("scheme not proxied: {0}")]
    Scheme(String),
}

/// Reads a complete request head (`…\r\n\r\n`, at most [`MAX_HEAD`] bytes) into a
/// [`Request`]. Sans-IO: `head` ends with the blank line.
pub fn parse_head(head: &[u8]) -> Result<Request, HeadError> {
    let text = std::str::from_utf8(head).map_err(|_| HeadError::Malformed)?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err(HeadError::Malformed);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() {
        return Err(HeadError::Malformed);
    }
    if method == "CONNECT" {
        let (host, port) = split_authority(target).ok_or(HeadError::Malformed)?;
        return Ok(Request::Tunnel { host, port });
    }
    let url = url::Url::parse(target).map_err(|_| HeadError::Malformed)?;
    if url.scheme() != "http" {
        return Err(HeadError::Scheme(url.scheme().to_owned()));
    }
    let host = match url.host() {
        Some(url::Host::Ipv6(v6)) => v6.to_string(),
        Some(h) => h.to_string(),
        None => return Err(HeadError::Malformed),
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let mut out = format!("{method} {path} {version}\r\n");
    let mut upgrade = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or(HeadError::Malformed)?;
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "connection" => upgrade |= value.to_ascii_lowercase().contains("upgrade"),
            "proxy-connection" | "proxy-authorization" | "keep-alive" => {}
            _ => {
                out.push_str(line);
                out.push_str("\r\n");
            }
        }
    }
    // One request per upstream connection; a WebSocket upgrade keeps the connection.
    out.push_str(if upgrade {
        "Connection: Upgrade\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    Ok(Request::Forward {
        host,
        port,
        head: out.into_bytes(),
    })
}

/// `host:port` or `[v6]:port`.
fn split_authority(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

/// One client connection: read the head, check the target, relay.
async fn relay(mut client: TcpStream) {
    let Ok(Ok((head, rest))) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await
    else {
        return;
    };
    let request = match parse_head(&head) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "overlay page proxy: request refused");
            let _ = respond(&mut client, "400 Bad Request", &e.to_string()).await;
            return;
        }
    };
    let (host, port) = match &request {
        Request::Tunnel { host, port } | Request::Forward { host, port, .. } => (host, *port),
    };
    let addrs = match url_policy::resolve(host, port).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(host = %host, port, error = %e, "overlay page: a request refused by the URL policy");
            let _ = respond(&mut client, "403 Forbidden", &e.to_string()).await;
            return;
        }
    };
    let Some(mut upstream) = connect(&addrs).await else {
        let _ = respond(&mut client, "502 Bad Gateway", "cannot connect").await;
        return;
    };
    let sent = match &request {
        Request::Tunnel { .. } => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
        }
        Request::Forward { head, .. } => upstream.write_all(head).await,
    };
    if sent.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Reads up to the end of the head; returns the head and whatever followed it.
async fn read_head(conn: &mut TcpStream) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 2048];
    loop {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + at + 4;
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

async fn connect(addrs: &[SocketAddr]) -> Option<TcpStream> {
    for addr in addrs {
        if let Ok(Ok(conn)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await
        {
            return Some(conn);
        }
    }
    None
}

async fn respond(conn: &mut TcpStream, status: &str, why: &str) -> std::io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{why}",
        why.len()
    );
    conn.write_all(msg.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(head: &str) -> (String, u16, String) {
        match parse_head(head.as_bytes()) {
            Ok(Request::Forward { host, port, head }) => {
                (host, port, String::from_utf8(head).unwrap())
            }
            other => panic!("{head:?}: {other:?}"),
        }
    }

    #[test]
    fn plain_http_goes_out_in_origin_form_one_request_per_connection() {
        let (host, port, head) = forward(
            "GET http://pages.example:8080/a/b?x=1 HTTP/1.1\r\nHost: pages.example:8080\r\n\
             Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\
             Proxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!((host.as_str(), port), ("pages.example", 8080));
        assert_eq!(
            head,
            "GET /a/b?x=1 HTTP/1.1\r\nHost: pages.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        // Default port, IPv6 literal, WebSocket upgrade kept.
        let (host, port, head) = forward(
            "GET http://[::1]/ws HTTP/1.1\r\nHost: [::1]\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        );
        assert_eq!((host.as_str(), port), ("::1", 80));
        assert!(
            head.ends_with("Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
            "{head}"
        );
    }

    #[test]
    fn connect_names_the_tunnel() {
        let cases: &[(&str, Option<(&str, u16)>)] = &[
            (
                "CONNECT pages.example:443 HTTP/1.1\r\nHost: x\r\n\r\n",
                Some(("pages.example", 443)),
            ),
            (
                "CONNECT [fe80::1]:443 HTTP/1.1\r\n\r\n",
                Some(("fe80::1", 443)),
            ),
            (
                "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
                Some(("169.254.169.254", 80)),
            ),
            ("CONNECT pages.example HTTP/1.1\r\n\r\n", None),
            ("CONNECT :443 HTTP/1.1\r\n\r\n", None),
            ("CONNECT pages.example:99999 HTTP/1.1\r\n\r\n", None),
        ];
        for (head, want) in cases {
            let got = parse_head(head.as_bytes());
            match want {
                Some((h, p)) => assert_eq!(
                    got,
                    Ok(Request::Tunnel {
                        host: (*h).to_owned(),
                        port: *p
                    }),
                    "{head:?}"
                ),
                None => assert_eq!(got, Err(HeadError::Malformed), "{head:?}"),
            }
        }
    }

    #[test]
    fn what_is_not_proxied() {
        for (head, want) in [
            ("GET /relative HTTP/1.1\r\n\r\n", HeadError::Malformed),
            ("GET http://a/ HTTP/2\r\n\r\n", HeadError::Malformed),
            ("GET http://a/ HTTP/1.1 extra\r\n\r\n", HeadError::Malformed),
            (
                "GET http://a/ HTTP/1.1\r\nno colon\r\n\r\n",
                HeadError::Malformed,
            ),
            (
                "GET ftp://a/x HTTP/1.1\r\n\r\n",
                HeadError::Scheme("ftp".into()),
            ),
            (
                "GET https://a/x HTTP/1.1\r\n\r\n",
                HeadError::Scheme("https".into()),
            ),
            ("\u{0}\u{0}\r\n\r\n", HeadError::Malformed),
        ] {
            assert_eq!(parse_head(head.as_bytes()), Err(want), "{head:?}");
        }
    }

    /// End to end on loopback: a blocked address (0.0.0.0, which Linux routes to a local
    /// listener) is refused with 403 and never reached; an allowed one is relayed.
    #[tokio::test]
    async fn refuses_blocked_addresses_and_relays_allowed_ones() {
        let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = origin.local_addr().unwrap().port();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = origin.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = vec![0u8; 4096];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let body = format!("saw {line}");
                let _ = c
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        proxy.set_nonblocking(true).unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        serve(proxy).unwrap();
        let ask = |head: String| async move {
            let mut c = TcpStream::connect(proxy_addr).await.unwrap();
            c.write_all(head.as_bytes()).await.unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            out
        };
        let ok = ask(format!(
            "GET http://127.0.0.1:{port}/x?y HTTP/1.1\r\nHost: a\r\n\r\n"
        ))
        .await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("saw GET /x?y HTTP/1.1"),
            "{ok}"
        );
        for head in [
            format!("GET http://0.0.0.0:{port}/secret HTTP/1.1\r\nHost: a\r\n\r\n"),
            format!("CONNECT 0.0.0.0:{port} HTTP/1.1\r\n\r\n"),
            format!("CONNECT [::ffff:169.254.169.254]:{port} HTTP/1.1\r\n\r\n"),
        ] {
            let refused = ask(head.clone()).await;
            assert!(refused.starts_with("HTTP/1.1 403"), "{head}: {refused}");
        }
        let tunnel = ask(format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /t HTTP/1.1\r\n\r\n"
        ))
        .await;
        assert!(
            tunnel.starts_with("HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK"),
            "{tunnel}"
        );
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "only the allowed requests arrived"
        );
    }
}
