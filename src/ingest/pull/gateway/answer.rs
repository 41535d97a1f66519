//! Reading one upstream answer for the gateway: the headers passed on, its first bytes and
//! what they are, a playlist whole under its cap, a segment pumped through a bounded channel;
//! every read waits at most [`IDLE_TIMEOUT`]; a live playlist too short to start from, held
//! and read again until it is not.

use bytes::{Bytes, BytesMut};
use hyper::{header, Response, StatusCode};
use url::Url;

use std::time::Duration;

use super::{GatewayError, Inner, Refused, IDLE_TIMEOUT, SHORT_PLAYLIST_HOLD, SNIFF_BYTES};
use crate::ingest::pull::rewrite::{self, PlaylistKind, Sniffed};

/// The answer's status and the headers a demuxer needs. Date matters: DASH's
/// http-head/http-xsdate clock sync reads the time server's.
pub(super) fn passed_headers(resp: &reqwest::Response) -> hyper::http::response::Builder {
    let mut out = Response::builder().status(resp.status());
    for name in [
        header::CONTENT_TYPE,
        header::CONTENT_RANGE,
        header::ACCEPT_RANGES,
        header::DATE,
        header::LAST_MODIFIED,
        header::ETAG,
        header::CACHE_CONTROL,
    ] {
        if let Some(v) = resp.headers().get(&name) {
            out = out.header(name, v);
        }
    }
    out
}

/// The rest of a playlist response after its first bytes, whole, at most `cap` bytes, UTF-8.
pub(super) async fn read_playlist(
    resp: &mut reqwest::Response,
    mut first: BytesMut,
    declared: Option<u64>,
    cap: usize,
) -> Result<String, Refused> {
    if declared.is_some_and(|n| n > cap as u64) || first.len() > cap {
        return Err(Refused::bad_gateway(GatewayError::PlaylistOverCap(cap)));
    }
    while let Some(c) = next_chunk(resp).await? {
        if first.len() + c.len() > cap {
            return Err(Refused::bad_gateway(GatewayError::PlaylistOverCap(cap)));
        }
        first.extend_from_slice(&c);
    }
    String::from_utf8(first.to_vec()).map_err(|_| Refused::forbidden(GatewayError::NotUtf8Playlist))
}

/// Where a redirect points, resolved against the URL that answered it.
pub(super) fn location(resp: &reqwest::Response, base: &Url) -> Result<Url, GatewayError> {
    resp.headers()
        .get(header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .and_then(|l| base.join(l).ok())
        .ok_or_else(|| GatewayError::NoLocation(resp.status()))
}

/// HTTP redirects with a Location to follow (not 300 Multiple Choices, not 304).
pub(super) fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// The response's first bytes, and what they are.
pub(super) async fn sniff(
    resp: &mut reqwest::Response,
    blank_cap: usize,
) -> Result<(Sniffed, BytesMut), Refused> {
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut first = BytesMut::new();
    // Past leading whitespace too: a manifest may hide behind any amount of it.
    while first.len() < SNIFF_BYTES || (rewrite::blank(&first) && first.len() <= blank_cap) {
        match next_chunk(resp).await? {
            Some(c) => first.extend_from_slice(&c),
            None => break,
        }
    }
    if first.len() > blank_cap && rewrite::blank(&first) {
        return Err(Refused::bad_gateway(GatewayError::Blank));
    }
    Ok((rewrite::sniff(&content_type, &first), first))
}

pub(super) async fn next_chunk(resp: &mut reqwest::Response) -> Result<Option<Bytes>, Refused> {
    tokio::time::timeout(IDLE_TIMEOUT, resp.chunk())
        .await
        .map_err(|_| Refused::bad_gateway(GatewayError::NoData(IDLE_TIMEOUT)))?
        .map_err(|e| Refused::bad_gateway(GatewayError::Upstream(e)))
}

/// Sends a segment's body, its sniffed `first` bytes then the rest, into `tx`; ends with the
/// response or a reader that stops reading, and cuts a body over `cap` (`who`: the stream and
/// the redacted URL, for the log).
pub(super) async fn pump(
    mut resp: reqwest::Response,
    first: BytesMut,
    cap: Option<u64>,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    who: (i64, String),
) {
    let (stream, url) = who;
    let send = |chunk| async {
        matches!(
            tokio::time::timeout(IDLE_TIMEOUT, tx.send(chunk)).await,
            Ok(Ok(()))
        )
    };
    let mut sent = first.len() as u64;
    if !send(Ok(first.freeze())).await {
        return;
    }
    loop {
        let chunk = match next_chunk(&mut resp).await {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(Refused(_, reason)) => {
                send(Err(std::io::Error::other(reason))).await;
                return;
            }
        };
        sent += chunk.len() as u64;
        if let Some(cap) = cap.filter(|cap| sent > *cap) {
            tracing::warn!(stream, %url, cap, "PULL segment over pull_max_segment_bytes; cut");
            send(Err(std::io::Error::other("over pull_max_segment_bytes"))).await;
            return;
        }
        if !send(Ok(chunk)).await {
            return; // GStreamer closed the connection or stopped reading
        }
    }
}

impl Inner {
    /// Holds a live HLS media playlist of fewer than two segments (see
    /// [`rewrite::short_live_playlist`]) until upstream lists two, re-reading it every quarter
    /// target duration for up to [`SHORT_PLAYLIST_HOLD`]; still short then, it is refused
    /// (503: the demuxer retries an update, the fetcher a first playlist), never passed on.
    pub(super) async fn until_two_segments(
        &self,
        upstream: &Url,
        mut text: String,
        cap: usize,
    ) -> Result<String, Refused> {
        let deadline = tokio::time::Instant::now() + SHORT_PLAYLIST_HOLD;
        while let Some(target) = rewrite::short_live_playlist(&text) {
            let poll = (target / 4).clamp(Duration::from_millis(250), Duration::from_secs(1));
            if tokio::time::Instant::now() + poll > deadline {
                return Err(Refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    GatewayError::ShortLivePlaylist(SHORT_PLAYLIST_HOLD),
                ));
            }
            tokio::time::sleep(poll).await;
            let again = async {
                let request = self.gateway.client.get(upstream).ok()?;
                let mut resp = tokio::time::timeout(IDLE_TIMEOUT, request.send())
                    .await
                    .ok()?
                    .ok()?;
                if !resp.status().is_success() {
                    return None;
                }
                let declared = resp.content_length();
                read_playlist(&mut resp, BytesMut::new(), declared, cap)
                    .await
                    .ok()
            };
            match again.await {
                // Still a playlist (a failed re-read leaves the one already read).
                Some(t)
                    if rewrite::sniff("", t.as_bytes()) == Sniffed::Playlist(PlaylistKind::Hls) =>
                {
                    text = t
                }
                _ => {}
            }
        }
        Ok(text)
    }
}
