//! A video's files served from the object store (`storage_url`) by whichever node gets the
//! request: proxied with byte ranges, not redirected. The URL stays the node's own and
//! stable, so a CDN in front caches it like any other video file and the bucket stays
//! private; the cost is the node's bandwidth for what the CDN does not cache (a redirect to a
//! presigned URL would move those bytes off the node, but its URL changes with every
//! signature, which defeats CDN caching, and carries the store's own endpoint host, which
//! viewers may not reach).

use futures::StreamExt;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};

use super::ranges::ranged;
use crate::http::listener::{channel_body, full, Body};
use crate::storage::Storage;

pub async fn serve(
    storage: &Storage,
    video: i64,
    name: &str,
    content_type: &'static str,
    range: Option<&HeaderValue>,
    head: bool,
) -> Response<Body> {
    let len = match storage.size(video, name).await {
        Ok(len) => len,
        Err(e) if e.is_not_found() => return status(StatusCode::NOT_FOUND, "not found\n"),
        Err(e) => return unavailable(video, name, &e),
    };
    let (builder, start, count) = match ranged(len, content_type, range, head) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    let mut body = match storage.read(video, name, start, start + count - 1).await {
        Ok(b) => b,
        Err(e) => return unavailable(video, name, &e),
    };
    let (tx, out) = channel_body(4);
    tokio::spawn(async move {
        while let Some(chunk) = body.next().await {
            let end = chunk.is_err();
            if tx.send(chunk).await.is_err() || end {
                return; // the client went away, or the store's answer broke off
            }
        }
    });
    super::with_common(builder.body(out).expect("valid response"))
}

fn unavailable(video: i64, name: &str, e: &crate::storage::StorageError) -> Response<Body> {
    tracing::warn!(video, file = name, error = %e, "the object store did not answer");
    status(StatusCode::BAD_GATEWAY, "the video store is unavailable\n")
}

fn status(code: StatusCode, text: &'static str) -> Response<Body> {
    super::with_common(
        Response::builder()
            .status(code)
            .header(hyper::header::CONTENT_TYPE, "text/plain")
            .body(full(text))
            .expect("static response"),
    )
}
