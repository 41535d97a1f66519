//! Legacy MPEG-TS HLS (`/mpegts/…`): muxed only while asked for, so its first request waits for
//! the muxers to start at a keyframe and complete a segment; then its master playlist, each
//! variant's playlist and segments.

use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};

use super::{
    duration_requested, endlist, load, locate, media_body, not_found, plain, playlist_response,
    IMMUTABLE,
};
use crate::http::listener::Body;
use crate::package::{hls, Output, Package, PackageState};

/// The TS master playlist, once every TS variant has a segment.
pub(super) async fn master(package: &Arc<Package>, query: Option<&str>) -> Response<Body> {
    let _demand = package.request_ts();
    let with_duration = duration_requested(query);
    let ready = |p: &PackageState| {
        (!p.ts_renditions().is_empty()
            && package.ts_live()
            && p.ts_renditions()
                .iter()
                .all(|r| r.last_complete_msn().is_some()))
        .then(|| crate::package::ts::render_master(p, with_duration))
    };
    match package.wait_for(ts_timeout(package), ready).await {
        Some(text) => playlist_response(text),
        None => plain(StatusCode::SERVICE_UNAVAILABLE, "stream is starting\n"),
    }
}

/// A TS variant's playlist. TS is muxed on demand: the first request waits for its first
/// segment.
pub(super) async fn playlist(
    package: &Arc<Package>,
    name: &str,
    query: Option<&str>,
) -> Response<Body> {
    let _demand = package.request_ts();
    let with_duration = duration_requested(query);
    let render = |p: &PackageState| {
        if p.ts_renditions().is_empty() && !p.ended() {
            return None; // the pipeline is not built yet: the stream is starting
        }
        let Some(r) = p.ts_renditions().iter().find(|r| r.name == name) else {
            return Some(None);
        };
        let ready = p.ended() || (package.ts_live() && r.last_complete_msn().is_some());
        ready.then(|| {
            let ends = endlist(p);
            Some(crate::package::ts::render_media(p, r, with_duration, ends))
        })
    };
    match package.wait_for(ts_timeout(package), render).await {
        Some(Some(text)) => playlist_response(text),
        Some(None) => not_found(),
        None => plain(StatusCode::SERVICE_UNAVAILABLE, "stream is starting\n"),
    }
}

pub(super) async fn segment(
    package: &Arc<Package>,
    name: &str,
    msn: u64,
    range: Option<&HeaderValue>,
) -> Response<Body> {
    let _demand = package.request_ts();
    let source = package.read(|p| {
        p.ts_renditions()
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.segment(msn))
            .map(|s| locate(Output::Ts, name, s))
    });
    media_body(load(package, source).await, "video/mp2t", IMMUTABLE, range)
}

/// How long the first TS-HLS request waits: muxing starts at the next keyframe (up to a
/// segment away) and the first segment is complete at the one after.
fn ts_timeout(package: &Package) -> Duration {
    package.read(|p| p.config().segment * 2 + hls::block_timeout(p))
}
