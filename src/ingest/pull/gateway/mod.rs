//! The loopback HTTP gateway every HTTP(S) PULL source is fetched through. GStreamer's HLS/DASH
//! demuxers download playlists and segments with their own libsoup helper, which has no size
//! cap, follows redirects anywhere and offers no hook; so the pipeline is pointed at
//! `http://127.0.0.1:<port>/<path>` instead, and each request is made upstream by us:
//!
//! - every URL, the first and each playlist entry or redirect after it, passes the outbound-URL
//!   policy ([`crate::url_policy`]: scheme, no link-local/metadata address — checked on the
//!   resolved addresses, at connect);
//! - a playlist (HLS or DASH, by content type or by its first bytes) is read whole up to
//!   `max_playlist_bytes`, a segment is streamed through up to `max_segment_bytes`, every read
//!   waits at most [`IDLE_TIMEOUT`]; over a cap the request fails (502, or the response is cut);
//! - each upstream origin gets its own loopback port that mirrors its paths one to one, so
//!   relative references (`seg1.ts`, `../a/b`, `/root`) resolve as they would upstream, and only
//!   absolute ones in playlists and `Location` headers are rewritten to the origin's port.
//!
//! A session lives as long as one attempt on one source; dropping it closes its ports.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::shutdown::{Shutdown, Stopping};
use bytes::BytesMut;
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use url::Url;

mod answer;

use super::rewrite::{self, PlaylistKind, RewriteError, Sniffed};
use crate::http::listener::{self as server, Body};
use crate::url_policy::client::{self, OutboundClient};
use crate::url_policy::{self, redact, Purpose, UrlPolicyError};
use answer::{is_redirect, location, passed_headers, read_playlist, sniff};

/// Each upstream read (response head, then every body chunk) waits at most this long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// An LL-HLS blocking playlist reload is held by the server for up to three target durations.
const BLOCKING_RELOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Distinct upstream origins one source may lead to (a master playlist, its CDNs, redirects).
pub const MAX_ORIGINS: usize = 16;
/// Playlists one attempt reads into memory at once; GStreamer reads one per stream at a time.
const PLAYLIST_READS: usize = 4;
/// Redirects followed when probing a source (GStreamer follows ours through the gateway).
const MAX_REDIRECTS: usize = 10;
/// Connections GStreamer may hold open to one origin's port.
const MAX_CONNECTIONS: usize = 16;
/// The gateway's own connections are closed after this long without a byte moving: beyond any
/// upstream wait (a blocking reload is 30 s).
const GATEWAY_STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a one-segment live HLS playlist is held waiting for its second segment; below
/// souphttpsrc's and the demuxer's 10 s request timeouts.
const SHORT_PLAYLIST_HOLD: Duration = Duration::from_secs(8);
/// Bytes read before a response is classified as playlist or media.
const SNIFF_BYTES: usize = 4096;
pub const DEFAULT_MAX_PLAYLIST_BYTES: usize = 4 << 20;
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 128 << 20;

/// Why the gateway could not start, refused a request or found a source unusable. Each is the
/// reason logged for the request or the attempt; URLs in them are redacted.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("PULL HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Policy(#[from] UrlPolicyError),
    #[error("more than {MAX_ORIGINS} origins")]
    TooManyOrigins,
    #[error("gateway port: {0}")]
    Port(#[source] std::io::Error),
    #[error("no response within {0:?}")]
    NoResponse(Duration),
    #[error("no data for {0:?}")]
    NoData(Duration),
    /// reqwest's top-level error says "error sending request"; the cause (refused, the URL
    /// policy's resolver) is below, so the whole chain is shown (its URL redacted).
    #[error("{}", url_policy::describe(.0))]
    Upstream(reqwest::Error),
    #[error("HTTP {0}")]
    Status(StatusCode),
    #[error("{0} without a usable Location")]
    NoLocation(StatusCode),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    #[error("text in an encoding other than UTF-8")]
    NotUtf8Text,
    #[error("a playlist that is not UTF-8")]
    NotUtf8Playlist,
    #[error("nothing but whitespace")]
    Blank,
    #[error("a live playlist still listing one segment after {0:?} (GStreamer's HLS demuxer cannot follow one)")]
    ShortLivePlaylist(Duration),
    #[error("attempt over")]
    AttemptOver,
    #[error("playlist over pull_max_playlist_bytes ({0})")]
    PlaylistOverCap(usize),
    #[error("rewritten playlist over twice pull_max_playlist_bytes ({0})")]
    RewrittenOverCap(usize),
    #[error("segment of {size} bytes over pull_max_segment_bytes ({cap})")]
    SegmentOverCap { size: u64, cap: u64 },
    #[error("redirect to {url}: {source}")]
    Redirect {
        url: String,
        source: Box<GatewayError>,
    },
    /// A playlist entry the gateway will not fetch.
    #[error("{url}: {source}")]
    Reference {
        url: String,
        source: Box<GatewayError>,
    },
    #[error("playlist refused: {0}")]
    PlaylistRefused(#[source] RewriteError),
}

#[derive(Debug, Clone, Copy)]
pub struct GatewayLimits {
    pub max_playlist_bytes: usize,
    pub max_segment_bytes: u64,
    pub allow_link_local: bool,
}

impl Default for GatewayLimits {
    fn default() -> Self {
        GatewayLimits {
            max_playlist_bytes: DEFAULT_MAX_PLAYLIST_BYTES,
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            allow_link_local: false,
        }
    }
}

/// The daemon's upstream HTTP client (one connection pool for all PULL streams).
pub struct Gateway {
    client: OutboundClient,
    limits: GatewayLimits,
}

impl Gateway {
    pub fn new(limits: GatewayLimits) -> Result<Arc<Gateway>, GatewayError> {
        // Our own redirect handling: each hop goes back through the gateway and its checks.
        let client = client::build(client::Outbound::pull(limits.allow_link_local), |b| {
            b.connect_timeout(IDLE_TIMEOUT)
                .read_timeout(IDLE_TIMEOUT)
                .user_agent("livepack-pull")
        })
        .map_err(GatewayError::Client)?;
        Ok(Arc::new(Gateway { client, limits }))
    }

    /// Opens a session for one attempt on `source`; returns it with the URL to give GStreamer.
    pub fn session(
        self: &Arc<Self>,
        stream: i64,
        source: &Url,
    ) -> Result<(Session, Url), GatewayError> {
        let (shutdown, closed) = Shutdown::new();
        let inner = Arc::new(Inner {
            gateway: self.clone(),
            stream,
            source: source.clone(),
            source_chain: Mutex::new(vec![source.clone()]),
            playlist_reads: tokio::sync::Semaphore::new(PLAYLIST_READS),
            origins: Mutex::new(HashMap::new()),
            closed,
        });
        let local = inner.local_url(source)?;
        Ok((Session { inner, shutdown }, local))
    }
}

/// The scheme and, for an address literal, the address (names are checked when resolved).
fn check_target(url: &Url, allow_link_local: bool) -> Result<(), GatewayError> {
    Ok(url_policy::check(
        url,
        Purpose::PullHttpHop,
        allow_link_local,
    )?)
}

/// One attempt's gateway; dropping it closes its loopback ports and their connections.
pub struct Session {
    inner: Arc<Inner>,
    shutdown: Shutdown,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shutdown.close_now();
    }
}

impl Session {
    /// What the source URL serves: a playlist of either kind, or media (`None`). GStreamer's
    /// own typefinding misses some manifests (ffmpeg's MPDs, read from a socket), so the
    /// pipeline is told. Redirects are followed here (each hop checked); errors say why the
    /// source is unusable before a pipeline is built.
    pub async fn probe(&self) -> Result<Option<PlaylistKind>, GatewayError> {
        let gateway = &self.inner.gateway;
        let mut url = self.inner.source.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut resp = tokio::time::timeout(IDLE_TIMEOUT, gateway.client.get(&url)?.send())
                .await
                .map_err(|_| GatewayError::NoResponse(IDLE_TIMEOUT))?
                .map_err(GatewayError::Upstream)?;
            let status = resp.status();
            if is_redirect(status) {
                url = location(&resp, &url)?;
                continue;
            }
            if !status.is_success() {
                return Err(GatewayError::Status(status));
            }
            return match sniff(&mut resp, gateway.limits.max_playlist_bytes)
                .await
                .map_err(|r| r.1)?
                .0
            {
                Sniffed::Playlist(kind) => Ok(Some(kind)),
                Sniffed::Media => Ok(None),
                Sniffed::Refused => Err(GatewayError::NotUtf8Text),
            };
        }
        Err(GatewayError::TooManyRedirects)
    }

    /// How many upstream origins this session has opened a port for.
    #[cfg(test)]
    pub fn origins(&self) -> usize {
        self.inner.origins().len()
    }
}

/// `scheme://host:port` of an upstream URL.
fn origin(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

struct Inner {
    gateway: Arc<Gateway>,
    stream: i64,
    /// The source URL itself: the one response that may be an endless media stream.
    source: Url,
    /// The source URL and where it redirected to: the responses that may be endless.
    source_chain: Mutex<Vec<Url>>,
    /// Playlists being read into memory at once (each up to `max_playlist_bytes`).
    playlist_reads: tokio::sync::Semaphore,
    origins: Mutex<HashMap<String, u16>>,
    closed: Stopping,
}

impl Inner {
    fn origins(&self) -> std::sync::MutexGuard<'_, HashMap<String, u16>> {
        self.origins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The loopback URL that fetches `upstream`, opening its origin's port if needed.
    fn local_url(self: &Arc<Self>, upstream: &Url) -> Result<Url, GatewayError> {
        check_target(upstream, self.gateway.limits.allow_link_local)?;
        let key = origin(upstream);
        let mut origins = self.origins();
        let port = match origins.get(&key) {
            Some(p) => *p,
            None => {
                if origins.len() >= MAX_ORIGINS {
                    return Err(GatewayError::TooManyOrigins);
                }
                let port = self.listen(upstream)?;
                origins.insert(key, port);
                port
            }
        };
        let mut local = Url::parse(&format!("http://127.0.0.1:{port}/")).expect("valid URL");
        local.set_path(upstream.path());
        local.set_query(upstream.query());
        Ok(local)
    }

    fn listen(self: &Arc<Self>, upstream: &Url) -> Result<u16, GatewayError> {
        let bind = || -> std::io::Result<tokio::net::TcpListener> {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(l)
        };
        let listener = bind().map_err(GatewayError::Port)?;
        let port = listener.local_addr().map_err(GatewayError::Port)?.port();
        let mut base = upstream.clone();
        base.set_path("/");
        base.set_query(None);
        base.set_fragment(None);
        // The accept loop holds a weak reference: the session, not its ports, owns the state.
        let weak = Arc::downgrade(self);
        let handler = move |req: Request<Incoming>, _peer: SocketAddr| {
            let (weak, base) = (weak.clone(), base.clone());
            async move {
                match weak.upgrade() {
                    Some(inner) => inner.handle(req, &base).await,
                    None => plain(StatusCode::GONE, "PULL attempt over"),
                }
            }
        };
        let limits = server::HttpLimits {
            header_timeout: IDLE_TIMEOUT,
            // Its only peer is our own GStreamer on loopback, which may wait as long as the
            // upstream does (a blocking playlist reload).
            body_timeout: GATEWAY_STALL_TIMEOUT,
            stall_timeout: GATEWAY_STALL_TIMEOUT,
        };
        let gate = crate::admission::Admission::new(
            "pull-gateway",
            MAX_CONNECTIONS,
            MAX_CONNECTIONS,
            None,
            Default::default(),
        );
        tokio::spawn(server::serve(
            listener,
            None,
            handler,
            limits,
            gate,
            self.closed.clone(),
        ));
        Ok(port)
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>, base: &Url) -> Response<Body> {
        let head = match *req.method() {
            Method::GET => false,
            Method::HEAD => true,
            _ => return plain(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD"),
        };
        // The path is copied, never joined: `//host/x` must stay a path on this origin.
        let mut upstream = base.clone();
        upstream.set_path(req.uri().path());
        upstream.set_query(req.uri().query());
        let range = req.headers().get(header::RANGE).cloned();
        match self.fetch(&upstream, range, head).await {
            Ok(resp) => resp,
            Err(Refused(status, reason)) => {
                tracing::warn!(
                    stream = self.stream,
                    url = %redact(upstream.as_str()),
                    %reason,
                    "PULL request refused"
                );
                plain(status, &reason.to_string())
            }
        }
    }

    /// One request upstream, answered to GStreamer: a redirect through this port, the headers
    /// a demuxer needs, then a playlist rewritten or a segment streamed.
    async fn fetch(
        self: &Arc<Self>,
        upstream: &Url,
        range: Option<header::HeaderValue>,
        head: bool,
    ) -> Result<Response<Body>, Refused> {
        let blocking = upstream
            .query_pairs()
            .any(|(k, _)| k == "_HLS_msn" || k == "_HLS_part");
        let mut resp = self.send(upstream, range, head, blocking).await?;
        let status = resp.status();
        if is_redirect(status) {
            return self.redirect(upstream, &resp);
        }
        let mut out = passed_headers(&resp);
        if head {
            if let Some(v) = resp.headers().get(header::CONTENT_LENGTH) {
                out = out.header(header::CONTENT_LENGTH, v);
            }
            return Ok(out.body(server::empty()).expect("valid response"));
        }
        if !status.is_success() {
            // Error bodies are of no use to a demuxer: the status says it.
            return Ok(out.body(server::empty()).expect("valid response"));
        }
        let declared = resp.content_length();
        let (sniffed, first) = sniff(&mut resp, self.gateway.limits.max_playlist_bytes).await?;
        let body = match sniffed {
            Sniffed::Refused => return Err(Refused::forbidden(GatewayError::NotUtf8Text)),
            Sniffed::Playlist(kind) => {
                let text = self
                    .playlist(upstream, kind, blocking, (resp, first, declared))
                    .await?;
                server::full(text)
            }
            Sniffed::Media => {
                if let Some(n) = self.segment_length(upstream, declared)? {
                    out = out.header(header::CONTENT_LENGTH, n);
                }
                self.relay(upstream, resp, first)
            }
        };
        Ok(out.body(body).expect("valid response"))
    }

    /// Sends the request upstream, waiting for its answer as long as the request may be held
    /// there (a blocking playlist reload) or else the idle timeout.
    async fn send(
        &self,
        upstream: &Url,
        range: Option<header::HeaderValue>,
        head: bool,
        blocking: bool,
    ) -> Result<reqwest::Response, Refused> {
        let wait = if blocking {
            BLOCKING_RELOAD_TIMEOUT
        } else {
            IDLE_TIMEOUT
        };
        let method = if head { Method::HEAD } else { Method::GET };
        let mut request = self
            .gateway
            .client
            .request(method, upstream)
            .map_err(|e| Refused::forbidden(e.into()))?;
        if let Some(range) = range {
            request = request.header(header::RANGE, range);
        }
        tokio::time::timeout(wait, request.send())
            .await
            .map_err(|_| Refused::bad_gateway(GatewayError::NoResponse(wait)))?
            .map_err(|e| Refused::bad_gateway(GatewayError::Upstream(e)))
    }

    /// A redirect, passed on to GStreamer as one to this port (checked there when it comes
    /// back); a hop of the source itself joins its chain.
    fn redirect(
        self: &Arc<Self>,
        upstream: &Url,
        resp: &reqwest::Response,
    ) -> Result<Response<Body>, Refused> {
        let target = location(resp, upstream).map_err(Refused::bad_gateway)?;
        {
            let mut chain = self.source_chain.lock().unwrap_or_else(|p| p.into_inner());
            if chain.contains(upstream) {
                // The source and its latest hops (a source may redirect to a fresh
                // tokenised URL on every reconnect).
                if chain.len() > MAX_REDIRECTS {
                    chain.remove(1);
                }
                chain.push(target.clone());
            }
        }
        let local = self.local_url(&target).map_err(|e| {
            Refused::forbidden(GatewayError::Redirect {
                url: redact(target.as_str()),
                source: Box::new(e),
            })
        })?;
        Ok(Response::builder()
            .status(resp.status())
            .header(header::LOCATION, local.as_str())
            .body(server::empty())
            .expect("valid response"))
    }

    /// A playlist read whole (bounded, one read at a time per session), every reference
    /// rewritten to this port; a short live HLS playlist is first held until it lists two
    /// segments. `read` is the response, its first bytes and its declared length.
    async fn playlist(
        self: &Arc<Self>,
        upstream: &Url,
        kind: PlaylistKind,
        blocking: bool,
        read: (reqwest::Response, BytesMut, Option<u64>),
    ) -> Result<String, Refused> {
        let (mut resp, first, declared) = read;
        let _permit = self
            .playlist_reads
            .acquire()
            .await
            .map_err(|_| Refused::bad_gateway(GatewayError::AttemptOver))?;
        let cap = self.gateway.limits.max_playlist_bytes;
        let mut text = read_playlist(&mut resp, first, declared, cap).await?;
        let mut map = |reference: &Url| {
            self.local_url(reference)
                .map(|u| u.to_string())
                .map_err(|e| {
                    GatewayError::Reference {
                        url: redact(reference.as_str()),
                        source: Box::new(e),
                    }
                    .into()
                })
        };
        let mut rewrite = |text: &str| {
            match kind {
                PlaylistKind::Hls => rewrite::rewrite_m3u8(text, upstream, &mut map),
                PlaylistKind::Dash => rewrite::rewrite_mpd(text, upstream, &mut map),
            }
            .map_err(|e| Refused::forbidden(GatewayError::PlaylistRefused(e)))
        };
        let mut rewritten = rewrite(&text)?;
        // Refused references fail fast; a short playlist waits, and what replaces it is
        // checked again.
        if kind == PlaylistKind::Hls && !blocking && rewrite::short_live_playlist(&text).is_some() {
            text = self.until_two_segments(upstream, text, cap).await?;
            rewritten = rewrite(&text)?;
        }
        // Loopback URLs are longer than `//a`: the output is bounded too.
        if rewritten.len() > cap.saturating_mul(2) {
            return Err(Refused::bad_gateway(GatewayError::RewrittenOverCap(cap)));
        }
        Ok(rewritten)
    }

    /// The cap on a segment's bytes: none for the source URL itself (or where it redirects),
    /// which may be a progressive live stream (HTTP-TS), endless by design.
    fn segment_cap(&self, upstream: &Url) -> Option<u64> {
        let progressive = self
            .source_chain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(upstream);
        (!progressive).then_some(self.gateway.limits.max_segment_bytes)
    }

    /// The declared length to pass on, refused when it is over the segment cap.
    fn segment_length(
        &self,
        upstream: &Url,
        declared: Option<u64>,
    ) -> Result<Option<u64>, Refused> {
        if let (Some(cap), Some(n)) = (self.segment_cap(upstream), declared) {
            if n > cap {
                return Err(Refused::bad_gateway(GatewayError::SegmentOverCap {
                    size: n,
                    cap,
                }));
            }
        }
        Ok(declared)
    }

    /// Streams a segment's body (after its sniffed `first` bytes) to GStreamer through a
    /// bounded channel; ends with the response, the session, or a reader that stops reading,
    /// and cuts a segment over the cap.
    fn relay(&self, upstream: &Url, resp: reqwest::Response, first: BytesMut) -> Body {
        let cap = self.segment_cap(upstream);
        let (tx, body) = server::channel_body(4);
        let (stream, url) = (self.stream, redact(upstream.as_str()));
        let mut closed = self.closed.clone();
        let pump = answer::pump(resp, first, cap, tx, (stream, url));
        tokio::spawn(async move {
            tokio::select! {
                _ = pump => {}
                _ = closed.until_closed() => {}
            }
        });
        body
    }
}

/// A request the gateway answers itself, with why.
struct Refused(StatusCode, GatewayError);

impl Refused {
    fn bad_gateway(reason: GatewayError) -> Refused {
        Refused(StatusCode::BAD_GATEWAY, reason)
    }
    fn forbidden(reason: GatewayError) -> Refused {
        Refused(StatusCode::FORBIDDEN, reason)
    }
}

/// An error and its causes on one line.
fn plain(status: StatusCode, text: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(server::full(text.to_owned()))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    static PLAYLIST_READS_SEEN: AtomicU64 = AtomicU64::new(0);

    /// A raw upstream: each path answers one way; counts the bytes it managed to write.
    async fn upstream(written: Arc<AtomicU64>, other_port: u16) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let written = written.clone();
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
                    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    let reply = |status: &str, headers: &str| {
                        format!("HTTP/1.1 {status}\r\nConnection: close\r\n{headers}\r\n")
                    };
                    let (head, endless): (String, &[u8]) = match path.as_str() {
                        "/big.m3u8" => (reply("200 OK", ""), b"#EXTM3U\n# padding\n"),
                        "/endless.ts" | "/source.ts" => (reply("200 OK", "Content-Type: video/mp2t\r\n"), &[0x47; 188]),
                        "/declared.ts" => (reply("200 OK", "Content-Length: 10000000000\r\n"), b""),
                        "/to-metadata" => (reply("302 Found", "Location: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\n"), b""),
                        "/to-file" => (reply("302 Found", "Location: file:///etc/passwd\r\nContent-Length: 0\r\n"), b""),
                        "/to-endless" => (reply("302 Found", "Location: /endless.ts\r\nContent-Length: 0\r\n"), b""),
                        "/to-other" => (reply("302 Found", &format!("Location: http://127.0.0.1:{other_port}/x/index.m3u8?t=1\r\nContent-Length: 0\r\n")), b""),
                        // One segment for the first two reads, two after; one forever; VOD.
                        "/growing.m3u8" | "/stuck.m3u8" | "/vod.m3u8" => {
                            let n = PLAYLIST_READS_SEEN.fetch_add(1, Ordering::Relaxed);
                            let mut body = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\ns0.ts\n".to_owned();
                            if path == "/growing.m3u8" && n >= 2 {
                                body.push_str("#EXTINF:1.0,\ns1.ts\n");
                            }
                            if path == "/vod.m3u8" {
                                body.push_str("#EXT-X-ENDLIST\n");
                            }
                            (reply("200 OK", &format!("Content-Length: {}\r\n", body.len())) + &body, b"")
                        }
                        "/master.m3u8" => {
                            let body = format!("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nhttp://127.0.0.1:{other_port}/x/index.m3u8\n#EXT-X-STREAM-INF:BANDWIDTH=2\nhttp://0.0.0.0:{other_port}/y.m3u8\n");
                            (reply("200 OK", &format!("Content-Length: {}\r\n", body.len())) + &body, b"")
                        }
                        _ => (reply("404 Not Found", "Content-Length: 0\r\n"), b""),
                    };
                    if s.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    if endless.is_empty() {
                        return;
                    }
                    let block = endless.repeat(64 * 1024 / endless.len());
                    while s.write_all(&block).await.is_ok() {
                        written.fetch_add(block.len() as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        port
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_request_is_bounded_and_checked() {
        const CAP: u64 = 2 << 20;
        let gateway = Gateway::new(GatewayLimits {
            max_playlist_bytes: 64 << 10,
            max_segment_bytes: CAP,
            allow_link_local: false,
        })
        .unwrap();
        let written = Arc::new(AtomicU64::new(0));
        let other = upstream(Arc::new(AtomicU64::new(0)), 0).await;
        let port = upstream(written.clone(), other).await;
        let source = Url::parse(&format!("http://127.0.0.1:{port}/source.ts")).unwrap();
        let (session, local) = gateway.session(1, &source).unwrap();
        assert_eq!(local.host_str(), Some("127.0.0.1"));
        assert_ne!(local.port(), Some(port));
        assert_eq!(local.path(), "/source.ts");
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let get = |path: &str| {
            let mut u = local.clone();
            u.set_path(path);
            client.get(u).send()
        };

        // A playlist without end: refused once over the cap; upstream stopped by backpressure.
        let r = get("/big.m3u8").await.unwrap();
        assert_eq!(r.status(), 502);
        assert!(r.text().await.unwrap().contains("pull_max_playlist_bytes"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let big = written.swap(0, Ordering::Relaxed);
        assert!(big < 16 << 20, "upstream wrote {big} bytes of playlist");

        // An endless segment is cut at the cap (the response aborts, not ends).
        let mut r = get("/endless.ts").await.unwrap();
        assert_eq!(r.status(), 200);
        let mut got = 0u64;
        let ended = loop {
            match r.chunk().await {
                Ok(Some(c)) => got += c.len() as u64,
                Ok(None) => break "ended",
                Err(_) => break "aborted",
            }
        };
        assert_eq!(ended, "aborted");
        assert!(
            (CAP - (64 << 10)..=CAP + (64 << 10)).contains(&got),
            "{got}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seg = written.swap(0, Ordering::Relaxed);
        assert!(
            seg < CAP + (16 << 20),
            "upstream wrote {seg} bytes of segment"
        );

        // A declared size over the cap is refused before reading.
        let r = get("/declared.ts").await.unwrap();
        assert_eq!(r.status(), 502);

        // The source URL itself may be endless (progressive HTTP-TS): read past the cap.
        let mut r = get("/source.ts").await.unwrap();
        let mut got = 0u64;
        while got <= CAP + (1 << 20) {
            got += r.chunk().await.unwrap().expect("not cut").len() as u64;
        }
        drop(r);
        // So may what the source URL redirects to — in a session of its own.
        let redirecting = Url::parse(&format!("http://127.0.0.1:{port}/to-endless")).unwrap();
        let (session2, local2) = gateway.session(2, &redirecting).unwrap();
        let r = client.get(local2.clone()).send().await.unwrap();
        assert_eq!(r.status(), 302);
        let mut r = client
            .get(r.headers()["location"].to_str().unwrap())
            .send()
            .await
            .unwrap();
        let mut got = 0u64;
        while got <= CAP + (1 << 20) {
            got += r.chunk().await.unwrap().expect("not cut").len() as u64;
        }
        drop((r, session2));

        // Redirects: to a metadata address refused, to another origin through a new port.
        let r = get("/to-metadata").await.unwrap();
        assert_eq!(r.status(), 403);
        assert!(r.text().await.unwrap().contains("169.254.169.254"));
        let r = get("/to-other").await.unwrap();
        assert_eq!(r.status(), 302);
        let location = Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
        assert_eq!(location.host_str(), Some("127.0.0.1"));
        assert!(![Some(port), Some(other)].contains(&location.port()));
        assert_eq!(
            (location.path(), location.query()),
            ("/x/index.m3u8", Some("t=1"))
        );
        assert_eq!(session.origins(), 2);

        // A playlist naming a blocked address is refused whole.
        let r = get("/master.m3u8").await.unwrap();
        assert_eq!(r.status(), 403);
        assert!(r.text().await.unwrap().contains("0.0.0.0"));

        // A path that looks like a host stays a path on this origin.
        let r = get("//169.254.169.254/latest/meta-data/").await.unwrap();
        assert_eq!(
            r.status(),
            404,
            "the path left its origin: {:?}",
            r.headers()
        );
        assert_eq!(session.origins(), 2);

        // Upstream errors pass through; only GET and HEAD are fetched.
        assert_eq!(get("/missing").await.unwrap().status(), 404);
        let r = client.post(local.clone()).send().await.unwrap();
        assert_eq!(r.status(), 405);

        // The session's end closes its ports.
        drop(session);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(get("/big.m3u8").await.is_err(), "port still open");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probe_follows_only_redirects_the_policy_allows() {
        let gateway = Gateway::new(GatewayLimits::default()).unwrap();
        let port = upstream(Arc::new(AtomicU64::new(0)), 0).await;
        let probe = |path: &str| {
            let source = Url::parse(&format!("http://127.0.0.1:{port}{path}")).unwrap();
            let (session, _) = gateway.session(1, &source).unwrap();
            async move { session.probe().await }
        };
        // An allowed redirect is followed to what it leads to (media here).
        assert!(matches!(probe("/to-endless").await, Ok(None)));
        // A metadata address or a scheme the gateway does not fetch: refused, not fetched.
        for (path, why) in [
            ("/to-metadata", "169.254.169.254 is a link-local"),
            ("/to-file", "scheme `file` is not fetched over HTTP"),
        ] {
            let e = probe(path).await.unwrap_err();
            assert!(
                matches!(e, GatewayError::Policy(_)) && e.to_string().contains(why),
                "{path}: {e}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_playlist_is_passed_on_once_it_lists_two_segments() {
        let gateway = Gateway::new(GatewayLimits::default()).unwrap();
        let port = upstream(Arc::new(AtomicU64::new(0)), 0).await;
        let source = Url::parse(&format!("http://127.0.0.1:{port}/growing.m3u8")).unwrap();
        let (_session, local) = gateway.session(1, &source).unwrap();
        let get = |path: &str| {
            let mut u = local.clone();
            u.set_path(path);
            async move {
                let started = std::time::Instant::now();
                let r = reqwest::get(u).await.unwrap();
                let status = r.status();
                (status, r.text().await.unwrap(), started.elapsed())
            }
        };

        // Held while upstream lists one segment, re-read every quarter target duration.
        PLAYLIST_READS_SEEN.store(0, Ordering::Relaxed);
        let (status, body, took) = get("/growing.m3u8").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body.matches("#EXTINF").count(), 2, "{body}");
        assert_eq!(PLAYLIST_READS_SEEN.load(Ordering::Relaxed), 3, "{took:?}");

        // A playlist that ended is passed at once, one segment or not.
        let (status, body, _) = get("/vod.m3u8").await;
        assert_eq!(status, 200, "{body}");

        // Still one segment at the end of the hold: refused, never passed on.
        let (status, body, took) = get("/stuck.m3u8").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("one segment"), "{body}");
        assert!(
            took >= SHORT_PLAYLIST_HOLD - Duration::from_secs(1),
            "{took:?}"
        );
    }
}
