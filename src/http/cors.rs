//! CORS for the answers browsers on other origins read (media, WHIP, the player's status): any
//! origin may read them, with the headers each one exposes, and the preflight answer.

use hyper::header::{self, HeaderValue};
use hyper::http::response::Builder;
use hyper::{Response, StatusCode};

use crate::http::listener::Body;

/// A browser may cache a preflight answer this long (a day; Chromium caps it at 2 hours).
const MAX_AGE: &str = "86400";

/// Lets any origin read `resp` (media and WHIP take no cookies: nothing is shared but what a
/// URL already grants).
pub fn any_origin(resp: &mut Response<Body>) {
    resp.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
}

/// [`any_origin`], and the response headers script may read beyond the CORS-safelisted ones.
pub fn any_origin_exposing(resp: &mut Response<Body>, exposed: &'static str) {
    any_origin(resp);
    resp.headers_mut().insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(exposed),
    );
}

/// The start of a preflight answer (`204`): the methods and request headers allowed.
pub fn preflight(methods: &'static str, allowed_headers: &'static str) -> Builder {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, methods)
        .header(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed_headers)
        .header(header::ACCESS_CONTROL_MAX_AGE, MAX_AGE)
}
