//! LL-HLS (draft-pantos-hls-rfc8216bis) from the segment store: master and media playlists, the
//! blocking-reload query rules, delta updates. Pure functions: the HTTP layer does the waiting.

use bytes::Bytes;
use std::fmt::Write;
use std::time::Duration;

use super::state::{PackageState, Rendition, RenditionKind, Segment};

/// rfc8216bis §6.2.5.2: "the server SHOULD immediately return Bad Request … if the _HLS_part
/// exceeds the last Partial Segment in the current Playlist by the Advance Part Limit", which
/// is 3.
pub const ADVANCE_PART_LIMIT: u64 = 3;
/// Parts and segments a client may ask for in advance of the live edge (§6.2.5.2: "greater than
/// the Media Sequence Number of the last Media Segment in the current Playlist plus two").
pub const ADVANCE_MSN_LIMIT: u64 = 2;
/// §6.2.5.2 lets the server give up on a blocking request after three target durations.
pub const BLOCK_TIMEOUT_TARGETS: u32 = 3;
pub const AUDIO_GROUP: &str = "aac";
pub const PLAYLIST_VERSION: u32 = 9;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaQuery {
    pub msn: Option<u64>,
    pub part: Option<u64>,
    /// `_HLS_skip=YES` (or `v2`): a delta update.
    pub skip: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest(pub String);

/// Parses the LL-HLS delivery directives; other query parameters are not ours to judge.
pub fn parse_query(query: Option<&str>) -> Result<MediaQuery, BadRequest> {
    let mut q = MediaQuery::default();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let number = |what: &str| {
            v.parse::<u64>()
                .map_err(|_| BadRequest(format!("{what} must be a decimal integer")))
        };
        match k.as_ref() {
            "_HLS_msn" => q.msn = Some(number("_HLS_msn")?),
            "_HLS_part" => q.part = Some(number("_HLS_part")?),
            "_HLS_skip" => match v.as_ref() {
                "YES" | "v2" => q.skip = true,
                _ => return Err(BadRequest("_HLS_skip must be YES or v2".into())),
            },
            _ => {}
        }
    }
    if q.part.is_some() && q.msn.is_none() {
        // §6.2.5.2: "_HLS_part … MUST be ignored [is invalid] without _HLS_msn": we answer 400.
        return Err(BadRequest("_HLS_part requires _HLS_msn".into()));
    }
    Ok(q)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Answer now.
    Ready,
    /// Hold the request until the store changes.
    Wait,
    Bad(BadRequest),
}

/// Decides a playlist request against the rendition's current state: a blocking one (§6.2.5.2)
/// waits for its part; a plain one waits for the first complete segment, because hls.js counts
/// a playlist of parts alone as empty (`levelEmptyError`), retries a second later and then
/// starts behind its target latency with a stall on its record (MediaMTX holds it the same way).
pub fn readiness(r: &Rendition, ended: bool, q: &MediaQuery, parts_per_segment: u64) -> Readiness {
    let Some(msn) = q.msn else {
        return if ended || r.last_complete_msn().is_some() {
            Readiness::Ready
        } else {
            Readiness::Wait
        };
    };
    let Some((last_msn, last_part)) = r.last_part() else {
        return if ended {
            Readiness::Ready
        } else {
            Readiness::Wait
        };
    };
    if msn > last_msn.saturating_add(ADVANCE_MSN_LIMIT) {
        return Readiness::Bad(BadRequest(format!(
            "_HLS_msn {msn} is beyond the live edge ({last_msn}) plus {ADVANCE_MSN_LIMIT}"
        )));
    }
    if let Some(part) = q.part {
        // Distance in parts from the newest part; more than the Advance Part Limit is refused.
        let ahead = (msn - last_msn.min(msn))
            .saturating_mul(parts_per_segment)
            .saturating_add(part)
            .saturating_sub(if msn == last_msn { last_part as u64 } else { 0 });
        if msn >= last_msn && ahead > ADVANCE_PART_LIMIT + parts_per_segment {
            return Readiness::Bad(BadRequest(format!(
                "_HLS_part {part} of segment {msn} is too far ahead of the live edge"
            )));
        }
    }
    if ended {
        return Readiness::Ready;
    }
    // A player that followed the stream from another node asks for that node's next part; a
    // playlist of this node's first parts alone would count as empty to it (as above).
    if r.last_complete_msn().is_none() {
        return Readiness::Wait;
    }
    let satisfied = match q.part {
        Some(part) => r.part_settled(msn, usize::try_from(part).unwrap_or(usize::MAX)),
        None => r.last_complete_msn().is_some_and(|done| done >= msn),
    };
    if satisfied {
        Readiness::Ready
    } else {
        Readiness::Wait
    }
}

pub fn block_timeout(pkg: &PackageState) -> Duration {
    Duration::from_secs(pkg.config().target_duration_secs()) * BLOCK_TIMEOUT_TARGETS
}

fn secs(d: Duration) -> String {
    format!("{:.5}", d.as_secs_f64())
}

/// The multivariant playlist: one variant per video rendition, audio as an EXT-X-MEDIA group
/// (or an audio-only variant when there is no video).
pub fn render_master(pkg: &PackageState) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#EXTM3U\n#EXT-X-VERSION:{PLAYLIST_VERSION}\n#EXT-X-INDEPENDENT-SEGMENTS"
    );
    let audio = pkg
        .renditions()
        .iter()
        .find(|r| matches!(r.kind, RenditionKind::Audio { .. }));
    let videos: Vec<&Rendition> = pkg
        .renditions()
        .iter()
        .filter(|r| matches!(r.kind, RenditionKind::Video { .. }))
        .collect();
    if let Some(a) = audio {
        let channels = match a.kind {
            RenditionKind::Audio { channels, .. } => channels,
            RenditionKind::Video { .. } => 2,
        };
        if videos.is_empty() {
            let _ = writeln!(
                out,
                "#EXT-X-STREAM-INF:BANDWIDTH={},AVERAGE-BANDWIDTH={},CODECS=\"{}\"\n{}/index.m3u8",
                a.peak_bitrate(),
                a.average_bitrate(),
                a.codecs,
                a.name
            );
            return out;
        }
        let _ = writeln!(
            out,
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"{AUDIO_GROUP}\",NAME=\"{}\",DEFAULT=YES,AUTOSELECT=YES,CHANNELS=\"{channels}\",URI=\"{}/index.m3u8\"",
            a.name, a.name
        );
    }
    for v in videos {
        let RenditionKind::Video {
            width,
            height,
            frame_rate,
        } = v.kind
        else {
            continue;
        };
        let (peak, avg, codecs, group) = match audio {
            Some(a) => (
                v.peak_bitrate() + a.peak_bitrate(),
                v.average_bitrate() + a.average_bitrate(),
                format!("{},{}", v.codecs, a.codecs),
                format!(",AUDIO=\"{AUDIO_GROUP}\""),
            ),
            None => (
                v.peak_bitrate(),
                v.average_bitrate(),
                v.codecs.clone(),
                String::new(),
            ),
        };
        let _ = writeln!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={peak},AVERAGE-BANDWIDTH={avg},CODECS=\"{codecs}\",RESOLUTION={width}x{height},FRAME-RATE={frame_rate:.3}{group}\n{}/index.m3u8",
            v.name
        );
    }
    out
}

/// PART-HOLD-BACK, where LL-HLS players aim to start and hold: two parts, the least §4.4.3.8
/// allows ("MUST be at least twice the Part Target Duration"; it "SHOULD be at least three
/// times"). A player never starts where it aims: hls.js (which never catches up by default)
/// spends 0.3–0.6 s between the playlist and its first frame — fetching from the GOP's
/// keyframe, decoding to the start — and keeps that as latency for the session; at 2.5 parts
/// the 90th percentile of joins at random instants was above 2 s. That start-up
/// time is also margin: a part here is fetchable within 150 ms of its last frame (p99,
/// `scripts/bench-latency`), so a player 1 s + its start-up behind the edge keeps at least
/// 0.6 s buffered before each part lands (no stall in `scripts/bench-player-latency`).
pub fn part_hold_back(part_target: Duration) -> Duration {
    part_target * 2
}

/// [`render_media`], rendered once per package version: a part landing wakes every held
/// blocking request of a rendition at once and they all need the same text.
pub fn media_playlist(pkg: &PackageState, r: &Rendition, skip: bool, endlist: bool) -> Bytes {
    pkg.cached_playlist(r, skip, endlist, || render_media(pkg, r, skip, endlist))
}

/// A media playlist (§4.4): the live window of `r`, its parts near the live edge, the preload
/// hint and the other renditions' reports. `skip` makes it a delta update (§6.2.5.1).
pub fn render_media(pkg: &PackageState, r: &Rendition, skip: bool, endlist: bool) -> String {
    let td = pkg.config().target_duration_secs();
    let skip_until = Duration::from_secs(td * 6);
    // The listed window: the newest complete segments (or the DVR window) plus the open one.
    let first_listed = pkg.first_listed(r);
    let listed = r.segments().range(first_listed..);
    let bridge = if first_listed == 0 {
        bridge_gaps(r, pkg.config().segment)
    } else {
        Vec::new()
    };
    let mut out = String::new();
    write_media_header(&mut out, pkg, r, first_listed, skip_until, &bridge);
    // Delta update: skip the leading segments older than the Skip Boundary from the end.
    let total: Duration = listed.clone().map(|s| s.duration()).sum();
    let mut skipped = 0usize;
    let mut bridge = bridge.as_slice();
    if skip {
        skipped = skippable(listed.clone(), total, skip_until);
        // The bridge goes with the first segment: both skipped, or both listed.
        let skipped_bridge = if skipped > 0 { bridge.len() } else { 0 };
        bridge = &bridge[skipped_bridge..];
        let _ = writeln!(
            out,
            "#EXT-X-SKIP:SKIPPED-SEGMENTS={}",
            skipped + skipped_bridge
        );
    }
    // §4.4.4.9: parts of segments "more than three Target Durations from the end" are removed.
    let parts_from = total.saturating_sub(Duration::from_secs(td * 3));
    let mut start = Duration::ZERO;
    let mut map: Option<u32> = None;
    for (i, s) in listed.skip(skipped).enumerate() {
        if i == 0 && !bridge.is_empty() {
            write_bridge(&mut out, bridge, s.init_version, &mut map);
            // The segment after the gaps starts this node's timeline.
            out.push_str("#EXT-X-DISCONTINUITY\n");
        }
        let with_parts = !s.complete || start >= parts_from;
        start += s.duration();
        write_segment(&mut out, s, with_parts, &mut map);
    }
    write_media_tail(&mut out, pkg, r, endlist);
    out
}

/// Gap segments the bridge from a stopping node lists at most: the numbers it left unused.
const MAX_BRIDGE: u64 = 8;

/// One gap segment of a bridge: its number, date and duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gap {
    msn: u64,
    pdt: time::OffsetDateTime,
    duration: Duration,
}

/// The gap segments from where the node before left its viewers to this rendition's first
/// segment ([`super::Handover`]): the numbers between, spanning the time between (at most a
/// segment each), in the discontinuity before this node's. None when there is no handover,
/// the numbers do not fit, or the dates go backwards (clocks apart).
fn bridge_gaps(r: &Rendition, segment: Duration) -> Vec<Gap> {
    let (Some(h), Some(first)) = (r.handover(), r.segments().front()) else {
        return Vec::new();
    };
    let count = first.msn.saturating_sub(h.first_msn);
    if count == 0 || count > MAX_BRIDGE || r.discontinuity_sequence() == 0 {
        return Vec::new();
    }
    let count = count as u32;
    let edge = time::OffsetDateTime::UNIX_EPOCH + Duration::from_millis(h.edge_ms.max(0) as u64);
    let Ok(span) = Duration::try_from(first.pdt - edge) else {
        return Vec::new();
    };
    let span = span.min(segment * count);
    let each = span / count;
    if each.is_zero() {
        return Vec::new();
    }
    (0..count)
        .map(|i| Gap {
            msn: h.first_msn + u64::from(i),
            pdt: first.pdt - span + each * i,
            duration: each,
        })
        .collect()
}

/// The bridge's lines (§4.4.4.7 EXT-X-GAP: its segments are never to be loaded), in the init
/// segment of the first segment after it; that one starts a discontinuity, so it states its
/// init segment again.
fn write_bridge(out: &mut String, bridge: &[Gap], init_version: u32, map: &mut Option<u32>) {
    let _ = writeln!(out, "#EXT-X-MAP:URI=\"init_{init_version}.mp4\"");
    *map = None;
    for g in bridge {
        let _ = writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", super::utc_ms(g.pdt));
        out.push_str("#EXT-X-GAP\n");
        let _ = writeln!(out, "#EXTINF:{},\nseg_{}.m4s", secs(g.duration), g.msn);
    }
}

/// The tags before the segments: version, target duration, server control, part target and
/// the sequence numbers of the first listed segment (or gap) and discontinuity.
fn write_media_header(
    out: &mut String,
    pkg: &PackageState,
    r: &Rendition,
    first_listed: usize,
    skip_until: Duration,
    bridge: &[Gap],
) {
    let cfg = pkg.config();
    let segments = r.segments();
    let hidden_discontinuities = segments
        .range(..first_listed)
        .filter(|s| s.discontinuity)
        .count() as u64;
    let first_msn = bridge.first().map_or_else(
        || segments.get(first_listed).map_or(r.next_msn(), |s| s.msn),
        |g| g.msn,
    );
    let _ = writeln!(out, "#EXTM3U\n#EXT-X-VERSION:{PLAYLIST_VERSION}");
    let _ = writeln!(
        out,
        "#EXT-X-TARGETDURATION:{}",
        cfg.target_duration_for(segments.range(first_listed..))
    );
    let _ = writeln!(
        out,
        "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,CAN-SKIP-UNTIL={:.1},PART-HOLD-BACK={:.3}",
        skip_until.as_secs_f64(),
        part_hold_back(cfg.part).as_secs_f64()
    );
    let _ = writeln!(
        out,
        "#EXT-X-PART-INF:PART-TARGET={:.3}",
        cfg.part.as_secs_f64()
    );
    let _ = writeln!(out, "#EXT-X-MEDIA-SEQUENCE:{first_msn}");
    // The bridge is in the discontinuity before this node's first segment.
    let disc_seq = (r.discontinuity_sequence() + hidden_discontinuities)
        .saturating_sub(u64::from(!bridge.is_empty()));
    if disc_seq > 0 {
        let _ = writeln!(out, "#EXT-X-DISCONTINUITY-SEQUENCE:{disc_seq}");
    }
}

/// How many leading complete segments a delta update skips: those that end more than
/// `skip_until` before the end of the `total` listed.
fn skippable<'a>(
    listed: impl Iterator<Item = &'a Segment>,
    total: Duration,
    skip_until: Duration,
) -> usize {
    let mut elapsed = Duration::ZERO;
    let mut skipped = 0;
    for s in listed {
        elapsed += s.duration();
        if s.complete && total.saturating_sub(elapsed) > skip_until {
            skipped += 1;
        } else {
            break;
        }
    }
    skipped
}

/// One segment's lines: its discontinuity, a new init segment, its date, its parts (near the
/// live edge) and, once complete, the segment itself.
fn write_segment(out: &mut String, s: &Segment, with_parts: bool, map: &mut Option<u32>) {
    if s.discontinuity {
        out.push_str("#EXT-X-DISCONTINUITY\n");
    }
    // §4.4.4.5: EXT-X-MAP applies to every segment after it until the next one.
    if *map != Some(s.init_version) {
        let _ = writeln!(out, "#EXT-X-MAP:URI=\"init_{}.mp4\"", s.init_version);
        *map = Some(s.init_version);
    }
    let _ = writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", super::utc_ms(s.pdt));
    if with_parts {
        for (i, p) in s.parts.iter().enumerate() {
            let _ = write!(
                out,
                "#EXT-X-PART:DURATION={},URI=\"part_{}_{i}.m4s\"",
                secs(p.duration),
                s.msn
            );
            out.push_str(if p.independent {
                ",INDEPENDENT=YES\n"
            } else {
                "\n"
            });
        }
    }
    if s.complete {
        let _ = writeln!(out, "#EXTINF:{},\nseg_{}.m4s", secs(s.duration()), s.msn);
    }
}

/// The tags after the segments: the preload hint while live, the other renditions' reports,
/// the end list.
fn write_media_tail(out: &mut String, pkg: &PackageState, r: &Rendition, endlist: bool) {
    if !pkg.ended() {
        if let Some((msn, idx)) = next_part_hint(r, pkg.config().segment) {
            let _ = writeln!(
                out,
                "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part_{msn}_{idx}.m4s\""
            );
        }
    }
    for other in pkg.renditions().iter().filter(|o| o.name != r.name) {
        if let Some((msn, part)) = other.last_part() {
            let _ = writeln!(
                out,
                "#EXT-X-RENDITION-REPORT:URI=\"../{}/index.m3u8\",LAST-MSN={msn},LAST-PART={part}",
                other.name
            );
        }
    }
    if endlist {
        out.push_str("#EXT-X-ENDLIST\n");
    }
}

/// The part the client should ask for next: the open segment's next part, or the first part of
/// the next segment once the open one has reached its target duration (segments are cut at
/// forced keyframes, so that is when the next fragment starts).
pub fn next_part_hint(r: &Rendition, segment_target: Duration) -> Option<(u64, usize)> {
    let (msn, idx) = r.last_part()?;
    let open = r.open_segment();
    let full = open.is_none_or(|s| s.duration() + Duration::from_millis(50) >= segment_target);
    Some(if full { (msn + 1, 0) } else { (msn, idx + 1) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::state::tests::{part, stereo_audio, video_720p};
    use crate::package::state::PackagingConfig;
    use time::OffsetDateTime;

    fn package(parts: usize) -> PackageState {
        package_with(parts, 3)
    }

    fn package_with(parts: usize, window_segments: usize) -> PackageState {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let mut video = video_720p(3_000_000);
        let mut audio = stereo_audio(128_000);
        video.set_init(bytes::Bytes::from_static(b"init"));
        audio.set_init(bytes::Bytes::from_static(b"init"));
        let mut pkg = PackageState::new(
            PackagingConfig {
                window_segments,
                retain_segments: 1,
                ..PackagingConfig::default()
            },
            vec![video, audio],
        );
        for i in 0..parts {
            let t = t0 + Duration::from_millis(500 * i as u64);
            pkg.push_part(0, part(i % 4 == 0, 500, t));
            pkg.push_part(1, part(i % 4 == 0, 500, t));
        }
        pkg
    }

    #[test]
    fn golden_master() {
        let pkg = package(1);
        assert_eq!(
            render_master(&pkg),
            "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-INDEPENDENT-SEGMENTS\n\
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"aac\",NAME=\"audio\",DEFAULT=YES,AUTOSELECT=YES,CHANNELS=\"2\",URI=\"audio/index.m3u8\"\n\
#EXT-X-STREAM-INF:BANDWIDTH=3128000,AVERAGE-BANDWIDTH=3128000,CODECS=\"avc1.64001f,mp4a.40.2\",RESOLUTION=1280x720,FRAME-RATE=30.000,AUDIO=\"aac\"\n\
720p/index.m3u8\n"
        );
    }

    #[test]
    fn golden_media_playlist() {
        // 22 parts = 5 complete segments (msn 0..4) + 2 parts of msn 5.
        let pkg = package(22);
        let text = render_media(&pkg, &pkg.renditions()[0], false, false);
        assert_eq!(
            text,
            "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:2\n\
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,CAN-SKIP-UNTIL=12.0,PART-HOLD-BACK=1.000\n\
#EXT-X-PART-INF:PART-TARGET=0.500\n#EXT-X-MEDIA-SEQUENCE:2\n\
#EXT-X-MAP:URI=\"init_0.mp4\"\n#EXT-X-PROGRAM-DATE-TIME:2027-01-15T08:00:04.000Z\n\
#EXTINF:2.00000,\nseg_2.m4s\n\
#EXT-X-PROGRAM-DATE-TIME:2027-01-15T08:00:06.000Z\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_3_0.m4s\",INDEPENDENT=YES\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_3_1.m4s\"\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_3_2.m4s\"\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_3_3.m4s\"\n\
#EXTINF:2.00000,\nseg_3.m4s\n\
#EXT-X-PROGRAM-DATE-TIME:2027-01-15T08:00:08.000Z\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_4_0.m4s\",INDEPENDENT=YES\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_4_1.m4s\"\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_4_2.m4s\"\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_4_3.m4s\"\n\
#EXTINF:2.00000,\nseg_4.m4s\n\
#EXT-X-PROGRAM-DATE-TIME:2027-01-15T08:00:10.000Z\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_5_0.m4s\",INDEPENDENT=YES\n\
#EXT-X-PART:DURATION=0.50000,URI=\"part_5_1.m4s\"\n\
#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part_5_2.m4s\"\n\
#EXT-X-RENDITION-REPORT:URI=\"../audio/index.m3u8\",LAST-MSN=5,LAST-PART=1\n"
        );
    }

    #[test]
    fn hint_moves_to_next_segment_when_open_one_is_full() {
        let pkg = package(8);
        assert_eq!(
            next_part_hint(&pkg.renditions()[0], pkg.config().segment),
            Some((2, 0))
        );
        let pkg = package(9);
        assert_eq!(
            next_part_hint(&pkg.renditions()[0], pkg.config().segment),
            Some((2, 1))
        );
    }

    #[test]
    fn delta_update_skips_old_segments_and_endlist() {
        let pkg = package_with(22, 10);
        let full = render_media(&pkg, &pkg.renditions()[0], false, false);
        assert!(!full.contains("EXT-X-SKIP"));
        let delta = render_media(&pkg, &pkg.renditions()[0], true, false);
        // 11 s of media listed (6 segments incl. the open one); 12 s skip boundary: none skipped.
        assert!(delta.contains("#EXT-X-SKIP:SKIPPED-SEGMENTS=0\n"));
        let mut long = package_with(60, 10);
        let delta = render_media(&long, &long.renditions()[0], true, false);
        assert!(delta.contains("#EXT-X-SKIP:SKIPPED-SEGMENTS="), "{delta}");
        assert!(!delta.contains("SKIPPED-SEGMENTS=0"), "{delta}");
        long.set_ended(true);
        let ended = render_media(&long, &long.renditions()[0], false, true);
        assert!(ended.ends_with("#EXT-X-ENDLIST\n"));
        assert!(!ended.contains("PRELOAD-HINT"));
    }

    #[test]
    fn query_rules() {
        assert_eq!(parse_query(None).unwrap(), MediaQuery::default());
        let q = parse_query(Some("_HLS_msn=5&_HLS_part=2&_HLS_skip=YES&x=1")).unwrap();
        assert_eq!((q.msn, q.part, q.skip), (Some(5), Some(2), true));
        assert!(parse_query(Some("_HLS_part=1")).is_err());
        assert!(parse_query(Some("_HLS_msn=-1")).is_err());
        assert!(parse_query(Some("_HLS_msn=18446744073709551616")).is_err());
        assert!(parse_query(Some("_HLS_skip=NO")).is_err());
        assert!(parse_query(Some("_HLS_msn=18446744073709551615")).is_ok());
    }

    #[test]
    fn blocking_table() {
        // Live edge: segment 5 open with parts 0 and 1; segment 4 complete. 4 parts/segment.
        let pkg = package(22);
        let r = &pkg.renditions()[0];
        let q = |msn: Option<u64>, part: Option<u64>| MediaQuery {
            msn,
            part,
            skip: false,
        };
        let table = [
            (q(None, None), Readiness::Ready),
            (q(Some(4), None), Readiness::Ready),
            (q(Some(5), None), Readiness::Wait),
            (q(Some(5), Some(1)), Readiness::Ready),
            (q(Some(5), Some(2)), Readiness::Wait),
            (q(Some(6), Some(0)), Readiness::Wait),
            (q(Some(7), None), Readiness::Wait),
            (q(Some(2), Some(9)), Readiness::Ready),
        ];
        for (query, expected) in table {
            assert_eq!(readiness(r, false, &query, 4), expected, "{query:?}");
        }
        for bad in [
            q(Some(8), None),
            q(Some(u64::MAX), None),
            q(Some(5), Some(100)),
            q(Some(7), Some(9)),
        ] {
            assert!(
                matches!(readiness(r, false, &bad, 4), Readiness::Bad(_)),
                "{bad:?}"
            );
        }
        // After the end nothing blocks.
        assert_eq!(
            readiness(r, true, &q(Some(6), Some(0)), 4),
            Readiness::Ready
        );
        // Parts of the first segment only: a request waits for it to complete (hls.js reads
        // such a playlist as empty), a blocking one too (a player following the stream from
        // another node asks for parts this node has), unless the stream has ended.
        let young = package(3);
        let r = &young.renditions()[0];
        assert_eq!(readiness(r, false, &q(None, None), 4), Readiness::Wait);
        assert_eq!(
            readiness(r, false, &q(Some(0), Some(2)), 4),
            Readiness::Wait
        );
        assert_eq!(
            readiness(r, true, &q(Some(0), Some(2)), 4),
            Readiness::Ready
        );
        assert_eq!(readiness(r, true, &q(None, None), 4), Readiness::Ready);
        let grown = package(5);
        assert_eq!(
            readiness(&grown.renditions()[0], false, &q(None, None), 4),
            Readiness::Ready
        );
    }
}
