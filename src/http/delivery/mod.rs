//! Media delivery over HTTP: LL-HLS playlists (with blocking reload), init segments, parts and
//! segments from the registry's packages; CORS for browsers, byte ranges, cache headers.

mod ll_hls;
pub mod metrics;
mod mpegts;
pub mod player;
mod ranges;
mod stored;
pub mod videos;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::http::listener::{empty, full, Body};
use crate::live::Registry;
use crate::package::{dash, hls};
use crate::package::{Output, Package, PackageState, SegmentKey};
use crate::shutdown::Stopping;
use ll_hls::endlist;
pub use ll_hls::media_playlist_now;
use ll_hls::{master, part, playlist, playlist_response};

pub const PLAYLIST_TYPE: &str = "application/vnd.apple.mpegurl";
pub const MPD_TYPE: &str = "application/dash+xml";
/// Parts and segments never change once published, and a stream's package never reuses a
/// sequence number. A later package of the same stream numbers from 0 again, but it can only
/// start once the old one has lingered ([`crate::live::ENDED_LINGER`], 30 s) after its grace
/// period: so a cache may keep them that long and never serve one session's segment for the
/// next (checked by a test below).
const IMMUTABLE: &str = "public, max-age=30, immutable";
/// Playlists without delivery directives (and the master, the MPD, TS playlists, inits) change
/// with every part: a shared cache in front may keep one a second (AWS MediaPackage's LL-HLS
/// figure), which collapses a crowd's polls into one origin request per second; a player's own
/// cache keeps none (`max-age=0`), so a player that reloads after an error gets the news.
const PLAYLIST_CACHE: &str = "public, max-age=0, s-maxage=1";
/// The answer to a blocking request (`_HLS_msn`, `_HLS_part`) holds the asked part whatever
/// comes later, and within the caching bound of [`IMMUTABLE`] no other session reuses the
/// number, so the same URL is correctly answered from a cache: every viewer at the live edge
/// asks the same URL, and a CDN keyed on the query collapses them into one.
const BLOCKING_PLAYLIST_CACHE: &str = "public, max-age=30";
/// Longest rendition name accepted in a path; real ones are like `1080p` or `audio`.
const MAX_NAME: usize = 32;

/// Paths this module answers (after the method check).
pub fn owns(path: &str) -> bool {
    path.starts_with("/cmaf/") || path.starts_with("/mpegts/") || path.starts_with("/screenshots/")
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Master,
    Playlist(String),
    Init(String, u32),
    Segment(String, u64),
    Part(String, u64, usize),
    Screenshot,
    Mpd,
    TsMaster,
    TsPlaylist(String),
    TsSegment(String, u64),
}

/// `/cmaf/{id}/…` → (id, target). Anything else, including any `..` or percent-escape, is not a
/// resource: names are matched exactly, never used as file paths.
pub(crate) fn parse_path(path: &str) -> Option<(i64, Target)> {
    if let Some(rest) = path.strip_prefix("/screenshots/") {
        let id = rest.strip_suffix("/last.jpg")?;
        return Some((number(id).filter(|&n: &i64| n > 0)?, Target::Screenshot));
    }
    if let Some(rest) = path.strip_prefix("/mpegts/") {
        let mut parts = rest.split('/');
        let id: i64 = number(parts.next()?).filter(|&n: &i64| n > 0)?;
        let target = match (parts.next()?, parts.next(), parts.next()) {
            ("master_mpegts.m3u8", None, None) => Target::TsMaster,
            (name, Some(file), None) if valid_name(name) => {
                if file == "index.m3u8" {
                    Target::TsPlaylist(name.to_owned())
                } else {
                    let msn = file
                        .strip_prefix("seg_")
                        .and_then(|f| f.strip_suffix(".ts"))?;
                    Target::TsSegment(name.to_owned(), number(msn)?)
                }
            }
            _ => return None,
        };
        return Some((id, target));
    }
    let rest = path.strip_prefix("/cmaf/")?;
    let mut parts = rest.split('/');
    let id: i64 = number(parts.next()?).filter(|&n: &i64| n > 0)?;
    let a = parts.next()?;
    let b = parts.next();
    if parts.next().is_some() {
        return None;
    }
    let target = match (a, b) {
        ("master.m3u8", None) => Target::Master,
        ("index.mpd", None) => Target::Mpd,
        (name, Some(file)) => {
            let valid = !name.is_empty()
                && name.len() <= MAX_NAME
                && name.bytes().all(|c| c.is_ascii_alphanumeric());
            if !valid {
                return None;
            }
            let name = name.to_owned();
            if file == "index.m3u8" {
                Target::Playlist(name)
            } else if let Some(v) = file
                .strip_prefix("init_")
                .and_then(|f| f.strip_suffix(".mp4"))
            {
                Target::Init(name, number(v)?)
            } else if let Some(n) = file
                .strip_prefix("seg_")
                .and_then(|f| f.strip_suffix(".m4s"))
            {
                Target::Segment(name, number(n)?)
            } else if let Some(p) = file
                .strip_prefix("part_")
                .and_then(|f| f.strip_suffix(".m4s"))
            {
                let (msn, idx) = p.split_once('_')?;
                Target::Part(name, number(msn)?, number(idx)?)
            } else {
                return None;
            }
        }
        _ => return None,
    };
    Some((id, target))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && name.bytes().all(|c| c.is_ascii_alphanumeric())
}

/// Decimal without sign or leading zeros (so each resource has exactly one name).
fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty()
        || s.len() > 20
        || (s.len() > 1 && s.starts_with('0'))
        || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

/// Any origin may read the media, and the headers a player's range requests need.
pub(crate) fn with_common(mut resp: Response<Body>) -> Response<Body> {
    crate::http::cors::any_origin_exposing(
        &mut resp,
        "Content-Length, Content-Range, Accept-Ranges",
    );
    resp
}

pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    with_common(
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .header(header::CACHE_CONTROL, "no-store")
            .body(full(Bytes::from_static(text.as_bytes())))
            .expect("static response"),
    )
}

fn not_found() -> Response<Body> {
    plain(StatusCode::NOT_FOUND, "not found\n")
}

/// `time_url`: the absolute URL of `/time` on `public_url`, for the MPD's `UTCTiming`. Never
/// built from the request's `Host`: a hostile one would be written into the MPD that a cache
/// in front then serves to every viewer, and behind an HTTPS front `http://` is mixed content.
/// `stopping`: the node's stop; a request answered while it stops (one in flight when it
/// began) does not end the stream's playlists, since the stream moves to another node.
pub async fn handle<B>(
    registry: Arc<Registry>,
    time_url: &str,
    req: Request<B>,
    stopping: &Stopping,
) -> Response<Body> {
    if req.method() == Method::OPTIONS {
        // CORS preflight: any origin may read the media.
        return with_common(
            crate::http::cors::preflight("GET, HEAD, OPTIONS", "Range")
                .body(empty())
                .expect("static response"),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        resp.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, OPTIONS"),
        );
        return resp;
    }
    let head = req.method() == Method::HEAD;
    let Some((id, target)) = parse_path(req.uri().path()) else {
        return not_found();
    };
    // Unknown or not-live streams cost a map lookup and nothing else.
    let Some(package) = registry.package(id) else {
        return not_found();
    };
    // A stream that has just begun here (a publish, or a stream moving from a stopping node)
    // has no renditions until its source is known: a player's requests wait for them rather
    // than being told 404, which ends the show for it (hls.js retries no 4xx).
    let begun = |p: &PackageState| (!p.renditions().is_empty() || p.ended()).then_some(());
    if package.read(begun).is_none() {
        package.wait_for(timeout(&package), begun).await;
    }
    count_viewer(&package, &target, &req);
    let asked = (req.headers(), req.uri().query());
    let resp = answer(&package, target, asked, time_url, stopping).await;
    if head {
        let (parts, _) = resp.into_parts();
        return Response::from_parts(parts, empty());
    }
    resp
}

/// A manifest request counts its player among the stream's viewers (`package::audience`).
fn count_viewer<B>(package: &Package, target: &Target, req: &Request<B>) {
    use crate::package::audience::Output as Watched;
    let output = match target {
        Target::Master | Target::Playlist(_) => Watched::Hls,
        Target::Mpd => Watched::Dash,
        Target::TsMaster | Target::TsPlaylist(_) => Watched::HlsMpegts,
        _ => return,
    };
    let header = |name| {
        req.headers()
            .get(name)
            .map_or(&[][..], HeaderValue::as_bytes)
    };
    let peer = req
        .extensions()
        .get::<crate::http::listener::PeerAddr>()
        .map(|p| p.0.ip());
    let who = package.audience.who(
        peer,
        header(crate::http::relay::FORWARDED_FOR),
        header(header::USER_AGENT),
    );
    package
        .audience
        .seen(who, output, std::time::Instant::now());
}

/// The answer for `target` of a live stream's `package`, to a request with `headers` and
/// `query`.
async fn answer(
    package: &Arc<Package>,
    target: Target,
    (headers, query): (&hyper::HeaderMap, Option<&str>),
    time_url: &str,
    stopping: &Stopping,
) -> Response<Body> {
    let range = headers.get(header::RANGE);
    match target {
        Target::Master => master(package).await,
        Target::Playlist(name) => playlist(package, &name, query, stopping).await,
        Target::Init(name, v) => {
            let init = package.read(|p| p.rendition(&name).and_then(|r| r.init(v).cloned()));
            // Init versions restart with each session of the stream (its encoder may differ):
            // a cache keeps one no longer than a playlist.
            media_body(init, mp4_type(package, &name), PLAYLIST_CACHE, range)
        }
        Target::Mpd => mpd(package, headers, time_url).await,
        Target::Segment(name, msn)
            if growing(package, &name, msn, time::OffsetDateTime::now_utc()) =>
        {
            grow(package.clone(), name, msn).await
        }
        Target::Segment(name, msn) => segment(package, &name, msn, range).await,
        Target::TsMaster => mpegts::master(package, query).await,
        Target::TsPlaylist(name) => mpegts::playlist(package, &name, query).await,
        Target::TsSegment(name, msn) => mpegts::segment(package, &name, msn, range).await,
        Target::Screenshot => {
            let jpeg = package.read(|p| p.screenshot().cloned());
            // Renewed every 10 s: a short cache life keeps posters fresh without hammering.
            media_body(jpeg, "image/jpeg", "public, max-age=5", range)
        }
        Target::Part(name, msn, idx) => part(package, (&name, msn, idx), stopping)
            .await
            .map_or_else(not_found, |data| {
                media_body(Some(data), "video/iso.segment", IMMUTABLE, range)
            }),
    }
}

/// The MPD, once the stream has something to list.
async fn mpd(package: &Package, headers: &hyper::HeaderMap, time_url: &str) -> Response<Body> {
    let client = dash::DashClient::from_user_agent(
        headers
            .get(header::USER_AGENT)
            .and_then(|h| h.to_str().ok()),
    );
    let render = |p: &PackageState| {
        let now = time::OffsetDateTime::now_utc();
        dash::render_mpd(p, now, time_url, client)
    };
    match package.wait_for(timeout(package), render).await {
        Some(mpd) => with_common(
            Response::builder()
                .header(header::CONTENT_TYPE, MPD_TYPE)
                .header(header::CACHE_CONTROL, PLAYLIST_CACHE)
                // One attribute depends on the client (see `DashClient`): caches must
                // keep the variants apart.
                .header(header::VARY, "User-Agent")
                .body(full(mpd))
                .expect("valid response"),
        ),
        None => plain(StatusCode::SERVICE_UNAVAILABLE, "stream is starting\n"),
    }
}

/// A complete CMAF segment, once the one asked for is complete.
async fn segment(
    package: &Package,
    name: &str,
    msn: u64,
    range: Option<&HeaderValue>,
) -> Response<Body> {
    let source = package
        .wait_for(timeout(package), |p| {
            let r = p.rendition(name)?;
            match r.segment(msn) {
                Some(s) if s.complete => Some(Some(locate(Output::Cmaf, name, s))),
                Some(_) => None, // still being produced
                None => Some(None),
            }
        })
        .await
        .flatten();
    media_body(
        load(package, source).await,
        "video/iso.segment",
        IMMUTABLE,
        range,
    )
}

/// The segment being produced, or one still to come: LL-DASH clients ask for the next early
/// (`availabilityTimeOffset`) and receive its chunks as cmafmux emits them; an encoder behind
/// real time has not begun some the MPD already announced ([`dash::announced_msn`]).
fn growing(package: &Package, name: &str, msn: u64, now: time::OffsetDateTime) -> bool {
    package.read(|p| {
        p.rendition(name).is_some_and(|r| match r.segment(msn) {
            Some(s) => !s.complete,
            None if p.ended() || msn < r.next_msn() => false,
            None => msn == r.next_msn() || dash::announced_msn(p, now).is_some_and(|a| msn <= a),
        })
    })
}

/// What a request for a segment still to come waits on.
enum Awaited {
    Started,
    /// The rendition produced a part (its newest now): the segment is nearer.
    Progress(Option<(u64, usize)>),
    /// It can no longer begin: the stream ended or the numbers went past it.
    Never,
}

/// Streams a growing segment with chunked transfer: each part (= CMAF chunk, moof+mdat) is
/// written as soon as it exists; the response ends with the segment.
async fn grow(package: Arc<Package>, name: String, msn: u64) -> Response<Body> {
    let limit = timeout(&package);
    // Wait for the segment to start before committing to a 200: as long as the rendition keeps
    // producing (an encoder behind real time may be several segments from one the MPD
    // announced), and no longer than `limit` without a new part.
    let mut newest = None;
    loop {
        let step = package
            .wait_for(limit, |p| {
                let r = p.rendition(&name)?;
                Some(if r.segment(msn).is_some() {
                    Awaited::Started
                } else if p.ended() || r.next_msn() > msn {
                    Awaited::Never
                } else if r.last_part() != newest {
                    Awaited::Progress(r.last_part())
                } else {
                    return None;
                })
            })
            .await;
        match step {
            Some(Awaited::Started) => break,
            Some(Awaited::Progress(part)) => newest = part,
            Some(Awaited::Never) | None => return not_found(),
        }
    }
    let (tx, body) = crate::http::listener::channel_body(8);
    tokio::spawn(async move {
        let mut next = 0usize;
        loop {
            let step = package
                .wait_for(limit, |p| {
                    let s = p.rendition(&name)?.segment(msn)?;
                    match s.parts.get(next) {
                        Some(part) => Some(Some(part.data.clone())),
                        None if s.complete || p.ended() => Some(None),
                        None => None,
                    }
                })
                .await;
            // Done, or stalled past the hold limit.
            let Some(Some(chunk)) = step else { return };
            if tx.send(Ok(chunk)).await.is_err() {
                return; // the client went away
            }
            next += 1;
        }
    });
    with_common(
        Response::builder()
            .header(header::CONTENT_TYPE, "video/iso.segment")
            .header(header::CACHE_CONTROL, "no-cache")
            // nginx (and proxies that follow its convention) pass each chunk on at once
            // instead of buffering the response: the player's latency depends on it.
            .header("x-accel-buffering", "no")
            .body(body)
            .expect("valid response"),
    )
}

/// `GET /time`: the clock DASH players synchronise to (`urn:mpeg:dash:utc:http-iso:2014`).
pub fn time_response() -> Response<Body> {
    with_common(
        Response::builder()
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .header(header::CACHE_CONTROL, "no-store")
            .body(full(dash::utc_now_text(time::OffsetDateTime::now_utc())))
            .expect("valid response"),
    )
}

/// Where a segment's bytes are: still in memory, or only in the package's storage.
enum Source {
    Memory(Bytes),
    Stored(SegmentKey),
}

fn locate(output: Output, name: &str, s: &crate::package::state::Segment) -> Source {
    if s.in_memory() {
        Source::Memory(s.data())
    } else {
        Source::Stored(SegmentKey {
            output,
            rendition: name.to_owned(),
            msn: s.msn,
        })
    }
}

async fn load(package: &Package, source: Option<Source>) -> Option<Bytes> {
    match source? {
        Source::Memory(b) => Some(b),
        Source::Stored(key) => {
            let storage = package.storage()?;
            // A segment evicted between the lookup and the read is simply gone: 404.
            tokio::task::spawn_blocking(move || storage.get(&key).ok())
                .await
                .ok()
                .flatten()
        }
    }
}

/// `get_duration_sec=true` asks for `duration_sec=N` on every segment URI.
fn duration_requested(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .any(|(k, v)| k == "get_duration_sec" && v == "true")
}

fn mp4_type(package: &Package, name: &str) -> &'static str {
    let audio = package.read(|p| {
        p.rendition(name)
            .is_some_and(|r| matches!(r.kind, crate::package::RenditionKind::Audio { .. }))
    });
    if audio {
        "audio/mp4"
    } else {
        "video/mp4"
    }
}

/// Serves bytes with an optional single `Range` (RFC 9110 §14): 206 for a satisfiable range,
/// 416 otherwise; anything we cannot parse is ignored (200 with the whole body).
fn media_body(
    data: Option<Bytes>,
    content_type: &'static str,
    cache: &'static str,
    range: Option<&HeaderValue>,
) -> Response<Body> {
    let Some(data) = data else {
        return not_found();
    };
    let len = data.len() as u64;
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, cache)
        .header(header::ACCEPT_RANGES, "bytes");
    let resp = match range
        .and_then(|r| r.to_str().ok())
        .map(|r| parse_range(r, len))
    {
        Some(RangeSpec::Satisfiable(start, end)) => builder
            .status(StatusCode::PARTIAL_CONTENT)
            .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{len}"))
            .body(full(data.slice(start as usize..=end as usize))),
        Some(RangeSpec::Unsatisfiable) => builder
            .status(StatusCode::RANGE_NOT_SATISFIABLE)
            .header(header::CONTENT_RANGE, format!("bytes */{len}"))
            .body(empty()),
        Some(RangeSpec::Ignore) | None => builder.body(full(data)),
    };
    with_common(resp.expect("valid response"))
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RangeSpec {
    Satisfiable(u64, u64),
    Unsatisfiable,
    Ignore,
}

pub(crate) fn parse_range(value: &str, len: u64) -> RangeSpec {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return RangeSpec::Ignore;
    };
    if spec.contains(',') {
        return RangeSpec::Ignore; // multipart ranges: the whole body is a valid answer
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeSpec::Ignore;
    };
    let (a, b) = (a.trim(), b.trim());
    let parsed = match (a.is_empty(), b.is_empty()) {
        (false, _) => {
            let Ok(start) = a.parse::<u64>() else {
                return RangeSpec::Ignore;
            };
            let end = if b.is_empty() {
                Some(len.saturating_sub(1))
            } else {
                match b.parse::<u64>() {
                    Ok(e) if e >= start => Some(e.min(len.saturating_sub(1))),
                    _ => return RangeSpec::Ignore,
                }
            };
            (start < len).then_some((start, end.unwrap_or(0)))
        }
        (true, false) => {
            let Ok(n) = b.parse::<u64>() else {
                return RangeSpec::Ignore;
            };
            (n > 0 && len > 0).then(|| (len.saturating_sub(n), len - 1))
        }
        (true, true) => return RangeSpec::Ignore,
    };
    match parsed {
        Some((s, e)) => RangeSpec::Satisfiable(s, e),
        None => RangeSpec::Unsatisfiable,
    }
}

/// How long a blocking request may be held: three target durations (§6.2.5.2).
fn timeout(package: &Package) -> Duration {
    package.read(hls::block_timeout)
}

#[cfg(test)]
mod tests {
    /// An encoder behind real time: the MPD's clock, started 9 s ago, already announces segment
    /// 4 while segment 2 is being made. A request for it is held until the encoder begins it,
    /// then streamed whole; one for a segment the MPD has not announced is refused at once.
    #[tokio::test]
    async fn a_segment_the_mpd_announced_is_held_until_a_late_encoder_begins_it() {
        use crate::package::state::tests::{part, video_720p};
        use crate::package::{PackagingConfig, PartIn};
        use http_body_util::BodyExt;
        use time::OffsetDateTime;

        let pkg = Arc::new(Package::new(PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(1_000_000)],
        )));
        let sink = pkg.sink(Output::Cmaf, "720p").unwrap();
        sink.init(Bytes::from_static(b"ftyp+moov"), None);
        let t0 = OffsetDateTime::now_utc() - Duration::from_secs(9);
        let push = |n: u64| {
            let at = t0 + Duration::from_millis(500 * n);
            sink.part(PartIn {
                data: Bytes::from(vec![n as u8; 10]),
                ..part(n.is_multiple_of(4), 500, at)
            })
        };
        // Segments 0 and 1 complete, 2 begun.
        (0..9).for_each(push);
        let now = OffsetDateTime::now_utc();
        assert!(growing(&pkg, "720p", 4, now), "announced, still to come");
        assert!(!growing(&pkg, "720p", 6, now), "not announced yet");
        let ask = |msn: u64| {
            let pkg = pkg.clone();
            tokio::spawn(async move {
                let headers = hyper::HeaderMap::new();
                let target = Target::Segment("720p".into(), msn);
                let (_serving, stopping) = crate::shutdown::Shutdown::new();
                answer(&pkg, target, (&headers, None), "http://h/time", &stopping).await
            })
        };
        let refused = ask(6).await.unwrap();
        assert_eq!(refused.status(), StatusCode::NOT_FOUND);
        let held = ask(4);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!held.is_finished(), "held while the encoder catches up");
        // The encoder goes on, part by part: segment 4 is parts 16 to 19.
        for n in 9..21 {
            push(n);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let resp = held.await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let expected: Vec<u8> = (16..20u8).flat_map(|n| [n; 10]).collect();
        assert_eq!(body.as_ref(), expected.as_slice());
    }

    #[test]
    fn live_media_is_cached_no_longer_than_a_stream_lingers() {
        let secs = |v: &str| -> u64 {
            v.split(", ")
                .find_map(|d| d.strip_prefix("max-age="))
                .unwrap()
                .parse()
                .unwrap()
        };
        let linger = crate::live::ENDED_LINGER.as_secs();
        assert!(secs(super::IMMUTABLE) <= linger);
        assert!(secs(super::BLOCKING_PLAYLIST_CACHE) <= linger);
    }

    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parse_path("/cmaf/7/master.m3u8"), Some((7, Target::Master)));
        assert_eq!(
            parse_path("/cmaf/7/720p/part_12_3.m4s"),
            Some((7, Target::Part("720p".into(), 12, 3)))
        );
        assert_eq!(
            parse_path("/cmaf/7/audio/init_0.mp4"),
            Some((7, Target::Init("audio".into(), 0)))
        );
        assert_eq!(
            parse_path("/screenshots/7/last.jpg"),
            Some((7, Target::Screenshot))
        );
        assert_eq!(parse_path("/screenshots/0/last.jpg"), None);
        assert_eq!(parse_path("/screenshots/7/../last.jpg"), None);
        assert_eq!(parse_path("/screenshots/7/last.png"), None);
        assert_eq!(
            parse_path("/mpegts/7/master_mpegts.m3u8"),
            Some((7, Target::TsMaster))
        );
        assert_eq!(
            parse_path("/mpegts/7/720p/index.m3u8"),
            Some((7, Target::TsPlaylist("720p".into())))
        );
        assert_eq!(
            parse_path("/mpegts/7/720p/seg_3.ts"),
            Some((7, Target::TsSegment("720p".into(), 3)))
        );
        assert_eq!(parse_path("/mpegts/7/720p/seg_03.ts"), None);
        assert_eq!(parse_path("/mpegts/7/../seg_3.ts"), None);
        for bad in [
            "/cmaf/07/master.m3u8",
            "/cmaf/7/../master.m3u8",
            "/cmaf/7/%2e%2e/index.m3u8",
            "/cmaf/7/720p/../../x",
            "/cmaf/7/720p/seg_01.m4s",
            "/cmaf/7/720p/seg_1.m4s/x",
            "/cmaf/7/720p/part_1.m4s",
            "/cmaf/7/72 0p/index.m3u8",
            "/cmaf/7/720p/seg_18446744073709551616.m4s",
            "/cmaf//master.m3u8",
        ] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), RangeSpec::Satisfiable(0, 9));
        assert_eq!(
            parse_range("bytes=90-", 100),
            RangeSpec::Satisfiable(90, 99)
        );
        assert_eq!(
            parse_range("bytes=-10", 100),
            RangeSpec::Satisfiable(90, 99)
        );
        assert_eq!(
            parse_range("bytes=50-500", 100),
            RangeSpec::Satisfiable(50, 99)
        );
        assert_eq!(parse_range("bytes=100-", 100), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 100), RangeSpec::Ignore);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), RangeSpec::Ignore);
        assert_eq!(parse_range("items=0-1", 100), RangeSpec::Ignore);
    }
}
