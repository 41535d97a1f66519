//! The head of an answer carrying a finished file (a recorded video's, from disk or from the
//! object store): its type, `immutable` caching, and an optional single byte range (RFC 9110
//! §14).

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::{parse_range, with_common, RangeSpec};
use crate::http::listener::{empty, Body};

/// A finished video never changes.
pub const IMMUTABLE: &str = "public, max-age=86400, immutable";

/// The head of a `len`-byte file's answer with an optional single byte range (RFC 9110 §14):
/// the builder, the first byte and the byte count to send; or the whole answer when there is
/// no body to send (HEAD, empty, unsatisfiable).
pub fn ranged(
    len: u64,
    content_type: &'static str,
    range: Option<&HeaderValue>,
    head: bool,
) -> Result<(hyper::http::response::Builder, u64, u64), Box<Response<Body>>> {
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, IMMUTABLE)
        .header(header::ACCEPT_RANGES, "bytes");
    let (builder, start, end) = match range
        .and_then(|r| r.to_str().ok())
        .map(|r| parse_range(r, len))
    {
        Some(RangeSpec::Satisfiable(start, end)) => (
            builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{len}")),
            start,
            end,
        ),
        Some(RangeSpec::Unsatisfiable) => {
            return Err(Box::new(with_common(
                builder
                    .status(StatusCode::RANGE_NOT_SATISFIABLE)
                    .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                    .body(empty())
                    .expect("valid response"),
            )))
        }
        Some(RangeSpec::Ignore) | None if len == 0 => (builder, 0, 0),
        Some(RangeSpec::Ignore) | None => (builder, 0, len - 1),
    };
    let count = if len == 0 { 0 } else { end - start + 1 };
    let builder = builder.header(header::CONTENT_LENGTH, count);
    if head || count == 0 {
        return Err(Box::new(with_common(
            builder.body(empty()).expect("valid response"),
        )));
    }
    Ok((builder, start, count))
}
