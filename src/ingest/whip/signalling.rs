//! The HTTP side of WebRTC signalling that WHIP ingest (RFC 9725) and WHEP playback
//! (draft-ietf-wish-whep, the same resource model) share: refusals in the daemon's JSON error
//! shape with CORS, the offer read under its size limit and checked before any WebRTC state
//! exists, session ids, the `201 Created` answer and the preflight.

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::ice_server::IceServer;
use super::sdp::SdpError;
use crate::http::body::BodyError;
use crate::http::error::ApiError;
use crate::http::listener::{empty, full, Body};

/// A refusal on its way out of a step of `POST` (boxed: a response is large to move).
pub type Refusal = Box<Response<Body>>;

/// [`refuse`], boxed for a step's `Err`.
pub fn refused(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refusal {
    Box::new(refuse(status, code, message))
}

/// A refusal: the daemon's JSON error shape, with a stable code.
pub fn refuse(
    status: StatusCode,
    code: &'static str,
    message: impl Into<String>,
) -> Response<Body> {
    let mut r = ApiError::new(status, code, message).response();
    cors(&mut r);
    r
}

/// RFC 9725 §4.2: browsers on another origin push (and play), so the session headers must be
/// readable.
pub fn cors(r: &mut Response<Body>) {
    crate::http::cors::any_origin_exposing(r, "Location, ETag, Link, Accept-Patch");
}

/// The offer comes as `Content-Type: application/sdp`, or `415` naming what is accepted.
pub fn require_sdp(req: &Request<hyper::body::Incoming>) -> Result<(), Refusal> {
    let sdp = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/sdp"));
    if sdp {
        return Ok(());
    }
    let mut r = refuse(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "the offer must be sent as Content-Type: application/sdp",
    );
    r.headers_mut()
        .insert("accept-post", HeaderValue::from_static("application/sdp"));
    Err(Box::new(r))
}

/// A session id: 128 random bits, the capability that lets its holder DELETE the session.
pub fn session_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The offer, read under the size limit and checked (`check`, sans-IO) before anything is
/// allocated for it.
pub async fn read_offer(
    req: Request<hyper::body::Incoming>,
    limit: usize,
    check: impl Fn(&[u8]) -> Result<(), SdpError>,
) -> Result<String, Refusal> {
    let offer: Bytes = crate::http::body::read(req, limit)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge(limit) => refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the offer exceeds {limit} bytes"),
            ),
            e @ BodyError::Timeout => {
                refused(StatusCode::REQUEST_TIMEOUT, "body_timeout", e.to_string())
            }
            e => refused(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("reading the offer: {e}"),
            ),
        })?;
    if let Err(e) = check(&offer) {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let code = if e.status() == 406 {
            "unsupported_codecs"
        } else {
            "invalid_sdp"
        };
        return Err(refused(status, code, e.to_string()));
    }
    // The offer is UTF-8 (checked above).
    Ok(String::from_utf8_lossy(&offer).into_owned())
}

/// `201 Created`: the answer, and the session's URL (`location`). RFC 9725 §4.6: the server
/// MAY return its STUN/TURN servers as `Link` headers, so the client can use them for this
/// session (validated at start-up).
pub fn created(
    location: &str,
    sid: &str,
    answer: String,
    ice_servers: &[IceServer],
) -> Response<Body> {
    let mut r = Response::builder()
        .status(StatusCode::CREATED)
        .header(header::CONTENT_TYPE, "application/sdp")
        .header(header::LOCATION, location)
        .header(header::ETAG, format!("\"{sid}\""))
        .header(header::CACHE_CONTROL, "no-store");
    for server in ice_servers {
        r = r.header(header::LINK, server.link());
    }
    let mut r = r.body(full(answer)).expect("valid response headers");
    cors(&mut r);
    r
}

/// `PATCH` on a session: `405` (RFC 9725 §4.3.1 lets a server refuse trickle ICE and ICE
/// restarts; our answers carry every candidate).
pub fn no_trickle() -> Response<Body> {
    let mut r = refuse(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "trickle ICE and ICE restarts are not supported: the answer carries every candidate",
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("DELETE, OPTIONS"));
    r
}

/// Any other method on an endpoint (`session` false) or a session resource, of `what`
/// (`WHIP`, `WHEP`).
pub fn method_not_allowed(session: bool, what: &str) -> Response<Body> {
    let mut r = refuse(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("method not allowed on this {what} resource"),
    );
    let allow = if session {
        "DELETE, PATCH, OPTIONS"
    } else {
        "POST, OPTIONS"
    };
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// CORS preflight (RFC 9725 §4.2 allows OPTIONS on the endpoint and on sessions).
pub fn options(session: bool) -> Response<Body> {
    let methods = if session {
        "DELETE, PATCH, OPTIONS"
    } else {
        "POST, OPTIONS"
    };
    let mut r = crate::http::cors::preflight(methods, "Authorization, Content-Type, If-Match")
        .header(header::ALLOW, methods)
        .header("accept-post", "application/sdp")
        .body(empty())
        .expect("valid response headers");
    cors(&mut r);
    r
}
