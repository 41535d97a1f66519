//! Request bodies read under the connection's limits: a size bound, answered only after the
//! rest of the body is drained (so a client that writes its whole body before it reads, as
//! Python's urllib does, sees the `413` instead of a reset), and a total deadline set by the
//! listener when the request arrived.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, EXPECT};
use hyper::Request;
use tokio::time::Instant;

/// Beyond its limit a body is read and discarded up to this many bytes before the refusal, as
/// nginx's lingering close does; a larger declared body is refused at once (its client sees
/// the connection close).
pub const MAX_DRAIN_BYTES: u64 = 16 * 1024 * 1024;

/// Largest JSON request body read (the control API's, and a relayed one, read whole before it
/// is passed on); any record fits in a few KiB.
pub const MAX_JSON_BYTES: usize = 1024 * 1024;

/// When the request's body must be complete; put in the request's extensions by the listener.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Instant);

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body exceeds {0} bytes")]
    TooLarge(usize),
    #[error("the body was not received in time")]
    Timeout,
    #[error("cannot read the body: {0}")]
    Read(#[from] hyper::Error),
}

/// The whole body of `req`, at most `limit` bytes, before the listener's deadline.
pub async fn read(req: Request<Incoming>, limit: usize) -> Result<Bytes, BodyError> {
    let deadline = req.extensions().get::<BodyDeadline>().map(|d| d.0);
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // A client waiting for `100 Continue` sends nothing until the body is polled: refusing
    // now, unpolled, answers it without the transfer (RFC 9110 §10.1.1).
    let expects_continue = req
        .headers()
        .get(EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if declared.is_some_and(|n| n > limit as u64)
        && (expects_continue || declared > Some(MAX_DRAIN_BYTES))
    {
        return Err(BodyError::TooLarge(limit));
    }
    let collect = collect(req.into_body(), limit);
    match deadline {
        Some(at) => tokio::time::timeout_at(at, collect)
            .await
            .unwrap_or(Err(BodyError::Timeout)),
        None => collect.await,
    }
}

async fn collect(mut body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    let mut kept = bytes::BytesMut::new();
    let mut seen: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            // The connection's stall timeout (no byte for that long) is this body's deadline too.
            let stalled = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
            if stalled {
                BodyError::Timeout
            } else {
                BodyError::Read(e)
            }
        })?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        seen += data.len() as u64;
        if seen > MAX_DRAIN_BYTES {
            break;
        }
        if seen <= limit as u64 {
            kept.extend_from_slice(&data);
        }
    }
    if seen > limit as u64 {
        return Err(BodyError::TooLarge(limit));
    }
    Ok(kept.freeze())
}
