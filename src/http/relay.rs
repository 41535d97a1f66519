//! Requests for a stream or a video another node serves, passed to that node: the same method,
//! path and query, the request headers that matter, and its answer streamed back as it comes —
//! a blocking playlist reload waits there, the growing LL-DASH segment arrives chunk by chunk.
//! One URL then works on every node, behind any load balancer.
//!
//! The relaying node vouches for the request ([`crate::cluster::node_auth`]): the user's
//! credentials stay with the node they were given to, and the serving node accepts the
//! signature instead. Which node serves a stream is the cluster's to say (its leases); this
//! module only carries the request there and the answer back.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::cluster::node_auth::{NodeAuth, NodeAuthError, Relayed};
use crate::cluster::Cluster;
use crate::http::error::{error_response, ApiError};
use crate::http::listener::Body;
use crate::url_policy;
use crate::url_policy::client::{self, OutboundClient};

/// The serving node's address must answer this fast; its answer may take as long as a
/// blocking reload does (no overall limit).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest silence inside an answer before the relayed request is given up: a node that froze
/// (paused VM, stopped process) would otherwise hold it for ever. Well above the longest wait
/// the origin makes itself (a blocking reload: 3 target durations, 6 s with 2 s segments);
/// nginx's `proxy_read_timeout` in deploy/nginx-livepack.conf is the same.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Request headers passed on: ranges, revalidation, content negotiation, and for the control
/// API its body type. Never `Authorization`: the user's key stays with the node it was given
/// to; the signature stands for it.
const PASSED_ON: [HeaderName; 7] = [
    // The viewer's, so that the serving node counts players behind another node apart
    // (`package::audience`), with `X-Forwarded-For` below.
    header::USER_AGENT,
    header::RANGE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::ACCEPT,
    header::ORIGIN,
    header::CONTENT_TYPE,
];
/// Who a request came through: the relay appends the address it was asked from.
pub const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// A relayed request body (control API writes) is read whole first, up to the API's own limit.
const MAX_BODY: usize = crate::http::body::MAX_JSON_BYTES;
/// Hop-by-hop headers (RFC 9110 §7.6.1) are the connection's, not the answer's.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

pub struct Relay {
    /// Which node serves a stream, or holds a video: the cluster's leases and nodes say.
    cluster: Arc<Cluster>,
    auth: NodeAuth,
    client: OutboundClient,
}

impl Relay {
    pub fn new(cluster: Arc<Cluster>, auth: NodeAuth) -> Arc<Relay> {
        let client = client::build(client::Outbound::relay(), |b| {
            b.connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(READ_TIMEOUT)
        })
        .expect("a client without TLS settings builds");
        Arc::new(Relay {
            cluster,
            auth,
            client,
        })
    }

    /// A request that claims to come from another node: accepted (marked [`Relayed`] in its
    /// extensions, which the API takes for authentication) when its signature holds, else why
    /// not (answered with [`refused`]). Any other request passes unchanged.
    pub fn admit(&self, mut req: Request<Incoming>) -> Result<Request<Incoming>, NodeAuthError> {
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let verdict = self.auth.verify(
            req.method().as_str(),
            path,
            req.headers(),
            SystemTime::now(),
            Instant::now(),
        );
        match verdict {
            None => Ok(req),
            Some(Ok(relayed)) => {
                req.extensions_mut().insert(relayed);
                Ok(req)
            }
            Some(Err(e)) => {
                tracing::warn!(path = %req.uri().path(), error = %e, "relayed request refused");
                Err(e)
            }
        }
    }

    /// Where a request for stream `id` goes: `None` to answer it here (this node serves the
    /// stream, nobody does, or the request was relayed already: two nodes that disagree on an
    /// owner for a moment never pass a request around), else the serving node's URL.
    pub async fn stream_owner<B>(&self, id: i64, req: &Request<B>) -> Option<String> {
        if is_relayed(req) {
            return None;
        }
        // Reads (media, the API's GETs: anyone may send them, for any id) use the cluster's
        // second-old snapshot of every live lease; a change (PATCH, DELETE, a recording's
        // start: authenticated) looks the serving node up afresh, or its live effect could land
        // on a node that just lost or has not yet seen the stream.
        let read = matches!(*req.method(), hyper::Method::GET | hyper::Method::HEAD);
        self.cluster.serving_node(id, !read).await
    }

    /// Whether this node holds stream `id`'s lease (it serves the stream, or is starting to).
    pub fn holds(&self, id: i64) -> bool {
        self.cluster.holds(id)
    }

    /// Whether stream `id` is moving between nodes (see [`Cluster::moving`]).
    pub async fn moving(&self, id: i64) -> bool {
        self.cluster.moving(id).await
    }

    /// Where a request for a video recorded on `node` goes: `None` to answer it here.
    pub async fn node_url(&self, node: Option<&str>, req: &Request<Incoming>) -> Option<String> {
        let node = node?;
        if is_relayed(req) {
            return None;
        }
        self.cluster.node_url(node).await
    }

    /// Asks `base` (a node's URL) for the same path and query and streams its answer back;
    /// `502 Bad Gateway` (JSON error `node_unreachable`) when that node does not answer.
    pub async fn forward<B>(&self, req: Request<B>, base: &str) -> Response<Body>
    where
        B: hyper::body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.try_forward(req, base)
            .await
            .unwrap_or_else(|Unreachable(why)| unreachable_node(&why))
    }

    /// [`Relay::forward`], saying when `base` could not be reached (or its answer not passed
    /// on) rather than answering 502 for it.
    pub async fn try_forward<B>(
        &self,
        req: Request<B>,
        base: &str,
    ) -> Result<Response<Body>, Unreachable>
    where
        B: hyper::body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let Ok(url) = url::Url::parse(&url) else {
            return Err(Unreachable("the node's URL is not a URL".into()));
        };
        let method = match reqwest::Method::from_bytes(req.method().as_str().as_bytes()) {
            Ok(m) => m,
            Err(_) => reqwest::Method::GET,
        };
        // The query may hold a token (WHIP's `?token=`): logs show the URL redacted.
        let shown = url_policy::redact(url.as_str());
        let mut outbound = match self.client.request(method.clone(), &url) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(url = %shown, error = %e, "the node serving this is not a URL the relay may call");
                return Err(Unreachable(e.to_string()));
            }
        };
        for name in &PASSED_ON {
            if let Some(v) = req.headers().get(name) {
                outbound = outbound.header(name.as_str(), v.as_bytes());
            }
        }
        if let Some(peer) = req.extensions().get::<crate::http::listener::PeerAddr>() {
            let forwarded = match req.headers().get(&FORWARDED_FOR) {
                Some(v) => format!("{}, {}", String::from_utf8_lossy(v.as_bytes()), peer.0.ip()),
                None => peer.0.ip().to_string(),
            };
            outbound = outbound.header(FORWARDED_FOR.as_str(), forwarded);
        }
        let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => return Ok(too_large()),
        };
        // Signed once the body is known (its digest is in the signature).
        let signed = self.auth.sign(
            method.as_str(),
            &path,
            self.cluster.node_id(),
            &body,
            SystemTime::now(),
        );
        for (name, value) in signed {
            outbound = outbound.header(name, value);
        }
        if !body.is_empty() {
            outbound = outbound.body(body);
        }
        let answer = match outbound.send().await {
            Ok(a) => a,
            Err(e) => {
                let e = url_policy::describe(&e);
                tracing::warn!(url = %shown, error = %e, "the node serving this could not be reached");
                return Err(Unreachable(e));
            }
        };
        let mut resp = Response::builder().status(answer.status().as_u16());
        for (name, value) in answer.headers() {
            let Ok(name) = HeaderName::from_bytes(name.as_str().as_bytes()) else {
                continue;
            };
            if HOP_BY_HOP.contains(&name) {
                continue;
            }
            if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
                resp = resp.header(name, value);
            }
        }
        // Chunks pass on as they arrive (an LL-DASH segment is written while it is encoded).
        let chunks = futures::stream::unfold(answer, |mut answer| async move {
            match answer.chunk().await {
                Ok(Some(bytes)) => Some((Ok(Frame::data(bytes)), answer)),
                Ok(None) => None,
                Err(e) => Some((Err(std::io::Error::other(e)), answer)),
            }
        });
        resp.body(BodyExt::boxed(StreamBody::new(chunks)))
            .map_err(|_| Unreachable("the serving node's answer could not be passed on".into()))
    }
}

/// Why the node serving a request could not be reached.
#[derive(Debug)]
pub struct Unreachable(pub String);

/// The header a stopping node puts on its refusal of a stream's media asked by another node:
/// the stream is moving, and that node holds its viewer's request for it (see
/// [`moving_away`]).
pub const MOVING_HEADER: &str = "livepack-stream-moving";

/// Whether a relayed answer is a stopping node's refusal of a stream it has just given up.
pub fn moving_away(answer: &Response<Body>) -> bool {
    answer.status() == hyper::StatusCode::NOT_FOUND && answer.headers().contains_key(MOVING_HEADER)
}

/// Whether `req` came from another node (its signature checked by [`Relay::admit`]).
pub fn is_relayed<B>(req: &Request<B>) -> bool {
    req.extensions().get::<Relayed>().is_some()
}

/// The answer to a request [`Relay::admit`] refused: `401`, or `503` while too many changes are
/// remembered against replay.
pub fn refused(e: &NodeAuthError) -> Response<Body> {
    let status = match e {
        NodeAuthError::Busy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::UNAUTHORIZED,
    };
    error_response(&ApiError::new(status, "unauthorized", e.to_string()))
}

fn too_large() -> Response<Body> {
    error_response(&ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the body exceeds {MAX_BODY} bytes"),
    ))
}

fn unreachable_node(why: &str) -> Response<Body> {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "node_unreachable",
        format!("the node serving this did not answer: {why}"),
    )
    .response()
}
