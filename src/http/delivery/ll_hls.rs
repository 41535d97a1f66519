//! LL-HLS playlists and parts for the delivery routes: the master, each media playlist (plain,
//! or held by a blocking reload until the asked part exists) and a part, waited for when it is
//! the next one to be produced.

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::{
    not_found, plain, timeout, with_common, BLOCKING_PLAYLIST_CACHE, PLAYLIST_CACHE, PLAYLIST_TYPE,
};
use crate::http::listener::{full, Body};
use crate::package::hls::{self, Readiness};
use crate::package::state::{Rendition, RenditionKind};
use crate::package::{Package, PackageState};
use crate::shutdown::Stopping;

pub(super) fn playlist_response(text: impl Into<Bytes>) -> Response<Body> {
    with_common(
        Response::builder()
            .header(header::CONTENT_TYPE, PLAYLIST_TYPE)
            .header(header::CACHE_CONTROL, PLAYLIST_CACHE)
            .body(full(text))
            .expect("valid response"),
    )
}

pub(super) async fn master(package: &Package) -> Response<Body> {
    // A player that opens the stream right at publish waits for the first parts instead of
    // getting an empty ladder.
    let timeout = timeout(package);
    match package
        .wait_for(timeout, |p| p.ready().then(|| hls::render_master(p)))
        .await
    {
        Some(text) => playlist_response(text),
        None => plain(StatusCode::SERVICE_UNAVAILABLE, "stream is starting\n"),
    }
}

/// Whether an ended stream's playlist says so (EXT-X-ENDLIST). A node's stop never ends its
/// streams' packages (the streams go on elsewhere), so a playlist answered while it stops has
/// none.
pub(super) fn endlist(p: &PackageState) -> bool {
    p.ended() && p.endlist_tag()
}

/// Whether `r` gets no more parts at this node: its stream ended, or the node is stopping
/// (`moving`) and the stream's pipeline here is done. A request held for a part answers then
/// with what there is, as for an ended stream; the player asks for the part again, at the node
/// the stream moves to.
fn over_here(p: &PackageState, r: &Rendition, moving: bool) -> bool {
    p.ended() || (moving && r.awaiting_epoch())
}

/// A blocking media playlist request's answer if it can be given now: the playlist, or a
/// refusal of a request too far ahead; `None` while it must wait for the store to change.
/// `moving`: as for [`over_here`].
pub fn media_playlist_now(
    p: &PackageState,
    name: &str,
    q: &hls::MediaQuery,
    moving: bool,
) -> Option<Result<Bytes, StatusCode>> {
    let r = p.rendition(name)?;
    // Parts per segment; `part` is the longest part (whole frames), so round up.
    let part = p.config().part.as_nanos().max(1);
    let pps = p.config().segment.as_nanos().div_ceil(part) as u64;
    match hls::readiness(r, over_here(p, r, moving), q, pps.max(1)) {
        Readiness::Ready => Some(Ok(hls::media_playlist(p, r, q.skip, endlist(p)))),
        Readiness::Wait => None,
        Readiness::Bad(_) => Some(Err(StatusCode::BAD_REQUEST)),
    }
}

pub(super) async fn playlist(
    package: &Package,
    name: &str,
    query: Option<&str>,
    moving: &Stopping,
) -> Response<Body> {
    let q = match hls::parse_query(query) {
        Ok(q) => q,
        Err(hls::BadRequest(reason)) => {
            let _ = reason;
            return plain(
                StatusCode::BAD_REQUEST,
                "invalid LL-HLS delivery directive\n",
            );
        }
    };
    let Some((seen, part, leads)) = package.read(|p| {
        let r = p.rendition(name)?;
        Some((r.last_part(), p.config().part, leads_start(p, r)))
    }) else {
        return not_found();
    };
    if q.msn.is_none() && leads {
        // A plain request is answered when the next part lands (at most a part and a half
        // later): a player tuning in aims PART-HOLD-BACK behind the edge of the playlist it
        // got, and without blocking reload that edge is up to a part old — which hls.js, not
        // catching up by default, keeps as latency for the whole session.
        package
            .wait_for(part * 3 / 2, |p| {
                let r = p.rendition(name)?;
                (p.ended() || r.last_part() != seen).then_some(())
            })
            .await;
    }
    match package
        .wait_for(timeout(package), |p| {
            media_playlist_now(p, name, &q, moving.refusing())
        })
        .await
    {
        Some(Ok(text)) if q.msn.is_some() => {
            let mut resp = playlist_response(text);
            resp.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static(BLOCKING_PLAYLIST_CACHE),
            );
            resp
        }
        Some(Ok(text)) => playlist_response(text),
        Some(Err(_)) => plain(
            StatusCode::BAD_REQUEST,
            "_HLS_msn/_HLS_part beyond the live edge\n",
        ),
        // A plain request waited for a first complete segment that did not come in time (a
        // passthrough source with long GOPs): the parts there are beat a 503.
        None if q.msn.is_none() => match package.read(|p| {
            p.rendition(name)
                .map(|r| hls::media_playlist(p, r, q.skip, endlist(p)))
        }) {
            Some(text) => playlist_response(text),
            None => not_found(),
        },
        // §6.2.5.2: a request held longer than three target durations gets 503.
        None => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the requested part did not appear in time\n",
        ),
    }
}

/// Whether players take their start position from `r`'s playlist: a video rendition, or the
/// audio of a stream without video. The audio playlist of a stream with video is answered at
/// once: held for its own next part, it delayed the player's start by up to a part after the
/// start position was chosen (hls.js waits for both playlists), and that delay became latency.
fn leads_start(p: &PackageState, r: &crate::package::state::Rendition) -> bool {
    matches!(r.kind, RenditionKind::Video { .. })
        || !p
            .renditions()
            .iter()
            .any(|r| matches!(r.kind, RenditionKind::Video { .. }))
}

/// A part, waiting for it when it is the next one to be produced (the preload hint) and will
/// be produced here (`moving`: as for [`endlist`]).
pub(super) async fn part(
    package: &Package,
    (name, msn, idx): (&str, u64, usize),
    moving: &Stopping,
) -> Option<Bytes> {
    let timeout = timeout(package);
    package
        .wait_for(timeout, |p| {
            let r = p.rendition(name)?;
            if let Some(part) = r.segment(msn).and_then(|s| s.parts.get(idx)) {
                return Some(Some(part.data.clone()));
            }
            let (last_msn, last_idx) = r.last_part()?;
            let upcoming =
                (msn == last_msn && idx == last_idx + 1) || (msn == last_msn + 1 && idx == 0);
            if upcoming && !over_here(p, r, moving.refusing()) {
                None
            } else {
                Some(None)
            }
        })
        .await
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Players take their start from the video's playlist (the audio's when there is no
    /// video): only that one is held for a fresh edge.
    #[test]
    fn the_start_is_taken_from_the_video_or_the_only_audio() {
        use crate::package::state::tests::{stereo_audio, video_720p};
        use crate::package::PackagingConfig;
        let both = PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1), stereo_audio(1)],
        );
        assert!(leads_start(&both, &both.renditions()[0]));
        assert!(!leads_start(&both, &both.renditions()[1]));
        let radio = PackageState::new(PackagingConfig::default(), vec![stereo_audio(1)]);
        assert!(leads_start(&radio, &radio.renditions()[0]));
    }
}
