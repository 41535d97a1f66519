//! LL-DASH: a dynamic MPD (ISO 23009-1, DASH-IF IOP low-latency) over the same CMAF segments as
//! LL-HLS. `$Number$` templates with the renditions' own sequence numbers; the segment being
//! produced is announced early (`availabilityTimeOffset`) and delivered with chunked transfer.
//! An encoder behind real time gets the numbers not announced yet timed from a new Period
//! ([`clock`]).

use std::fmt::Write;
use std::time::Duration;

use time::OffsetDateTime;

use super::state::{PackageState, Rendition, RenditionKind};
use super::utc_ms;

pub mod clock;

use clock::Timing;

/// ServiceDescription latency target: three parts. dash.js plays at its target (it catches up), so
/// unlike LL-HLS's PART-HOLD-BACK (2 parts, `hls::part_hold_back`) this is where it sits.
pub const LATENCY_PARTS: u32 = 3;

/// GStreamer 1.22.0's `dashdemux2` (Debian 12's) goes to PLAYING only once 30 s of media are
/// buffered: its stream buffering threshold starts at 0 and falls back to `max-buffering-time`
/// (fixed in 1.22.1, GStreamer issue #2064). It ignores `ServiceDescription` and
/// `availabilityTimeOffset` and starts `suggestedPresentationDelay` behind the live edge (10 s
/// when absent), so on our MPD it sat in "buffering…" for ~21 s. Told to start 30 s + a
/// segment back, it has its 30 s at once and renders in under a second.
const DASHDEMUX2_1_22_0_BUFFERING: Duration = Duration::from_secs(30);

/// How often a player refetches the MPD while an epoch is live: its Periods change only when
/// the publisher leaves or comes back.
const MINIMUM_UPDATE_PERIOD: Duration = Duration::from_secs(10);

/// Which DASH client asks, for the one attribute that differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DashClient {
    /// Every client that honours `ServiceDescription` (dash.js, shaka, VLC, GStreamer ≥ 1.22.1).
    LowLatency,
    /// GStreamer's `souphttpsrc` before 1.22.1: needs `suggestedPresentationDelay` (which shaka
    /// would also apply, ~32 s behind live, so it is not sent to everyone).
    Gstreamer1220,
}

impl DashClient {
    /// From a request's `User-Agent` (`GStreamer souphttpsrc 1.22.0 libsoup/3.2.3`).
    pub fn from_user_agent(ua: Option<&str>) -> DashClient {
        let version = ua
            .and_then(|ua| ua.strip_prefix("GStreamer souphttpsrc "))
            .and_then(|rest| rest.split_whitespace().next())
            .map(|v| {
                v.split('.')
                    .map(|n| n.parse::<u32>().unwrap_or(0))
                    .collect::<Vec<u32>>()
            });
        match version {
            Some(v) if v.as_slice() < [1, 22, 1].as_slice() => DashClient::Gstreamer1220,
            _ => DashClient::LowLatency,
        }
    }

    /// The start delay to suggest to this client, if any.
    fn presentation_delay(self, segment: Duration) -> Option<Duration> {
        match self {
            DashClient::LowLatency => None,
            DashClient::Gstreamer1220 => Some(DASHDEMUX2_1_22_0_BUFFERING + segment),
        }
    }
}

fn xs_duration(d: Duration) -> String {
    format!("PT{:.3}S", d.as_secs_f64())
}

/// The `@duration` of every SegmentTemplate, one value for the whole stream: a `$Number$`
/// template places segment k at (k − startNumber) × duration, so a value that is off (or that
/// changes between two MPD updates) moves every later segment. Video segments start on forced
/// keyframes exactly every segment, and with video the audio splits on the video's grid
/// (`pipeline::build::VideoGrid`: each audio segment within one AAC frame of the video's, 2.005 s
/// then 1.984 s…): both are the configured segment. Without video, AAC fragments are a fixed
/// number of frames (93 × 1024 samples = 1.984 s at 48 kHz): a full one is measured. The last
/// segment of an epoch is cut short where the publisher left, so it never sets the value.
fn template_duration(pkg: &PackageState, r: &Rendition, with_video: bool) -> Option<Duration> {
    if with_video {
        return Some(pkg.config().segment);
    }
    let segments = r.segments();
    let full = (1..segments.len()).rev().find(|&i| {
        let (s, next) = (&segments[i - 1], &segments[i]);
        s.complete && next.epoch_msn == s.epoch_msn
    });
    full.map(|i| segments[i - 1].duration()).or_else(|| {
        segments
            .iter()
            .rev()
            .find(|s| s.complete)
            .map(|s| s.duration())
    })
}

/// When the epoch starting at `epoch_msn` began on the wall clock: the start of its newest
/// segment in `r` minus the segments before it in that epoch (so the live edge lines up).
fn epoch_start(r: &Rendition, epoch_msn: u64, d: Duration) -> Option<OffsetDateTime> {
    let in_epoch = || {
        r.segments()
            .iter()
            .rev()
            .filter(|s| s.epoch_msn == epoch_msn)
    };
    let s = in_epoch()
        .find(|s| s.complete)
        .or_else(|| in_epoch().next())?;
    Some(s.pdt - d * u32::try_from(s.msn - epoch_msn).ok()?)
}

/// The newest sequence number `r` holds in epoch `epoch`, if it has one there.
fn last_in_epoch(r: &Rendition, epoch: u64) -> Option<u64> {
    r.segments()
        .iter()
        .rev()
        .find(|s| s.epoch_msn == epoch)
        .map(|s| s.msn)
}

/// One Period: a pipeline epoch as the MPD announces it, or the part of one that the clock
/// started later because the encoder fell behind ([`clock`]).
struct PeriodPlan {
    epoch: u64,
    /// Its first number (`startNumber`): the epoch's, or where the clock moved.
    first: u64,
    start: OffsetDateTime,
    /// How long an epoch that is over lasts (`None`: the live epoch): up to where the first of
    /// its renditions to stop has media. Its last segment is cut short where the publisher
    /// left, so a whole number of segments would describe media that does not exist, and a
    /// player that joins at the Period's end waits for it (dash.js stalled at 7 s of 8).
    length: Option<Duration>,
}

/// The Periods to announce, oldest first; `None` until the first can be.
///
/// ISO 23009-1 §5.3.9.5 (segment availability): once its availability start time has passed, a
/// segment the MPD describes is available — so the MPD must not describe one that does not exist
/// and never will. Two ways it did across a reconnect: an epoch that is over kept announcing `$Number$`s by the wall clock until the next
/// Period began (numbers the new epoch then reuses for other media, or that no rendition of the
/// old one holds), and the tracks of one epoch end ragged (the publisher leaves mid-segment; one
/// track may have opened segment n when another had not), so numbers one track has are missing
/// in another. An epoch that is over therefore gets a `Period@duration` (§5.3.2) covering only
/// the media every one of its renditions holds. And a new epoch is announced only once every
/// rendition has begun it: a Period without audio would make a player start it video-only, or
/// (while the last Period had no end) look for its audio in the old Period.
///
/// The availability start time is the oldest listed epoch's start (returned with the Periods):
/// it stays while that epoch is listed, even once the part of it before a later Period of the
/// clock has left the window.
fn plan_periods(
    pkg: &PackageState,
    reference: &Rendition,
    d: Duration,
) -> Option<(Vec<PeriodPlan>, OffsetDateTime)> {
    let mut epochs: Vec<u64> = reference.segments().iter().map(|s| s.epoch_msn).collect();
    epochs.dedup();
    let newest = *epochs.last()?;
    let begun = |e: u64| {
        pkg.renditions()
            .iter()
            .all(|r| last_in_epoch(r, e).is_some())
    };
    if !begun(newest) {
        epochs.pop();
    }
    // The live epoch goes on unless the broadcast ended or the publisher left.
    let live_over = pkg.ended() || pkg.renditions().iter().any(Rendition::awaiting_epoch);
    let mut periods: Vec<PeriodPlan> = Vec::with_capacity(epochs.len());
    let mut ast = None;
    for &epoch in &epochs {
        let Some(start) = epoch_start(reference, epoch, d) else {
            continue;
        };
        // Never before the previous Period's end: announced late is safe, early is not.
        let start = (periods.last().and_then(period_end)).map_or(start, |end| start.max(end));
        ast.get_or_insert(start);
        let over = epoch != newest || live_over;
        // Where the media of an epoch that is over ends, from the epoch's start.
        let media = over.then(|| {
            pkg.renditions()
                .iter()
                .filter_map(|r| media_in_epoch(r, epoch, d))
                .min()
                .unwrap_or_default()
        });
        let offset = |first: u64| d * u32::try_from(first - epoch).unwrap_or(u32::MAX);
        // The epoch's own clock, then the ones an encoder behind real time started; one past
        // the media of an epoch that is over never began.
        let mut runs = vec![(epoch, start)];
        runs.extend(pkg.dash_clock().of(epoch).map(|a| (a.msn, a.start)));
        runs.retain(|&(first, _)| first == epoch || media.is_none_or(|m| offset(first) < m));
        let oldest = (reference.segments().iter())
            .find(|s| s.epoch_msn == epoch)
            .map_or(epoch, |s| s.msn);
        for (i, &(first, start)) in runs.iter().enumerate() {
            let next = runs.get(i + 1).map(|r| r.0);
            if next.is_some_and(|n| n <= oldest) {
                continue; // every number it times has left the window
            }
            let length = match next {
                Some(n) => Some(offset(n) - offset(first)),
                None => media.map(|m| m.saturating_sub(offset(first))),
            };
            let start = (periods.last().and_then(period_end)).map_or(start, |end| start.max(end));
            periods.push(PeriodPlan {
                epoch,
                first,
                start,
                length,
            });
        }
    }
    (!periods.is_empty()).then_some((periods, ast?))
}

fn period_end(p: &PeriodPlan) -> Option<OffsetDateTime> {
    Some(p.start + p.length?)
}

/// Where `r`'s media in epoch `epoch` ends on the Period's timeline: its newest segment there
/// starts at (n − startNumber) × d. Never past the numbers it holds, so a Period this long
/// announces none that `r` lacks.
fn media_in_epoch(r: &Rendition, epoch: u64, d: Duration) -> Option<Duration> {
    let last = r.segments().iter().rev().find(|s| s.epoch_msn == epoch)?;
    let before = d * u32::try_from(last.msn - epoch).ok()?;
    Some(before + last.duration().min(d))
}

/// The track the MPD's timing follows: the top video rung, else the audio.
fn reference(pkg: &PackageState) -> Option<&Rendition> {
    let renditions = pkg.renditions();
    let of = |video: bool| {
        (renditions.iter()).find(move |r| matches!(r.kind, RenditionKind::Video { .. }) == video)
    };
    of(true).or_else(|| of(false))
}

/// What the MPD announces: its Periods, availability start time and every template's segment
/// duration, from the reference track: `None` until it has a complete segment.
struct Timeline {
    periods: Vec<PeriodPlan>,
    ast: OffsetDateTime,
    d: Duration,
}

fn timeline(pkg: &PackageState) -> Option<Timeline> {
    let reference = reference(pkg)?;
    reference.last_complete_msn()?;
    let with_video = matches!(reference.kind, RenditionKind::Video { .. });
    let d = template_duration(pkg, reference, with_video)?;
    let (periods, ast) = plan_periods(pkg, reference, d)?;
    Some(Timeline { periods, ast, d })
}

/// The reference track (`name`) began a segment at `now`: the clock hears when, against when
/// the MPD announced it ([`clock::Clock::segment_began`]).
pub fn segment_began(pkg: &mut PackageState, name: &str, now: OffsetDateTime) {
    let Some(r) = reference(pkg).filter(|r| r.name == name) else {
        return;
    };
    let Some((epoch, msn)) = r.open_segment().map(|s| (s.epoch_msn, s.msn)) else {
        return;
    };
    let with_video = matches!(r.kind, RenditionKind::Video { .. });
    let Some(d) = template_duration(pkg, r, with_video) else {
        return;
    };
    let Some(start) = epoch_start(r, epoch, d) else {
        return;
    };
    // Each epoch the window holds, with its oldest number there.
    let mut held: Vec<(u64, u64)> = r.segments().iter().map(|s| (s.epoch_msn, s.msn)).collect();
    held.dedup_by_key(|(e, _)| *e);
    // The clock in force for `msn`: the epoch's own, or the newest it started before it.
    let (first, start) = (pkg.dash_clock().of(epoch))
        .filter(|a| a.msn <= msn)
        .last()
        .map_or((epoch, start), |a| (a.msn, a.start));
    let timing = Timing {
        first,
        start,
        d,
        part: pkg.config().part,
    };
    let clock = pkg.dash_clock_mut();
    clock.segment_began(epoch, msn, now, timing);
    clock.retain(&held);
}

/// The newest `$Number$` of the live Period that the MPD lets a player request at `now`:
/// segment k of a Period starting at `start` becomes available at `start + (k + 1) × d − ato`
/// (ISO 23009-1 §5.3.9.5), `ato` being all of it but its first part. `None` between epochs or
/// once the stream ended. That time comes from the ingest's clock, so an encoder behind real
/// time has not begun a segment the MPD already announced: the segment handler holds such a
/// request until it begins rather than refusing what the MPD promised.
///
/// A player that has not refetched the MPD since the clock moved ([`clock`]) still times the
/// live epoch from its first listed Period, which announces the most: that is the bound.
pub fn announced_msn(pkg: &PackageState, now: OffsetDateTime) -> Option<u64> {
    let t = timeline(pkg)?;
    let live = t.periods.last().filter(|p| p.length.is_none())?;
    let first = t.periods.iter().find(|p| p.epoch == live.epoch)?;
    let timing = Timing {
        first: first.first,
        start: first.start,
        d: t.d,
        part: pkg.config().part,
    };
    timing.announced(now)
}

/// `s` as the value of a double-quoted XML attribute (XML 1.0 §2.4 and §3.3.3: `<`, `&` and
/// the quote must be escaped; tabs and line breaks too, or attribute normalisation turns them
/// into spaces).
pub fn xml_attr(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['<', '>', '&', '"', '\'', '\t', '\n', '\r']) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
    out.into()
}

/// Renders the MPD, or `None` until the reference track (the top video rung, else the audio) has
/// a complete segment and every rendition has begun its epoch. Media time
/// restarts at 0 with each pipeline epoch (a publisher reconnect), so each epoch is a Period
/// whose `$Number$` addressing starts at the epoch's first sequence number; a main/backup or
/// PULL source switch keeps media time going and stays within its Period.
pub fn render_mpd(
    pkg: &PackageState,
    now: OffsetDateTime,
    time_url: &str,
    client: DashClient,
) -> Option<String> {
    // The one string from outside the package: escaped once, here, whatever its origin.
    let time_url = &*xml_attr(time_url);
    let video: Vec<&Rendition> = pkg
        .renditions()
        .iter()
        .filter(|r| matches!(r.kind, RenditionKind::Video { .. }))
        .collect();
    let audio: Vec<&Rendition> = pkg
        .renditions()
        .iter()
        .filter(|r| matches!(r.kind, RenditionKind::Audio { .. }))
        .collect();
    // The oldest listed epoch's start: a stream without reconnects has one Period at PT0S,
    // which every client (ffmpeg's dashdec included) handles; later Periods start after it.
    let Timeline { periods, ast, d } = timeline(pkg)?;
    // Between epochs (the publisher left within its grace period) the last Period has ended:
    // players look for the next one as often as a segment would have come, not every 10 s.
    // So they do while the encoder is behind real time: the clock may move the numbers after
    // the next one announced again, and a player must learn of it before it asks for them.
    let waiting = !pkg.ended() && periods.last().is_some_and(|p| p.length.is_some());
    let behind = periods.last().is_some_and(|p| p.first != p.epoch);
    let update = if waiting || behind {
        pkg.config().segment
    } else {
        MINIMUM_UPDATE_PERIOD
    };
    let part = pkg.config().part;
    let window = pkg
        .dvr_window()
        .unwrap_or(pkg.config().segment * u32::try_from(pkg.config().window_segments).unwrap_or(6));
    let latency_ms = part.as_millis() as u32 * LATENCY_PARTS;
    // ISO 23009-1 §5.3.1.2: suggestedPresentationDelay, for a client that needs it; the
    // time-shift buffer then reaches that far back (the store keeps those segments).
    let delay = client.presentation_delay(pkg.config().segment);
    let window = delay.map_or(window, |d| window.max(d + pkg.config().segment));
    let suggested = delay
        .map(|d| format!("suggestedPresentationDelay=\"{}\" ", xs_duration(d)))
        .unwrap_or_default();
    let mut out = String::new();
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
<MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" type=\"dynamic\" \
profiles=\"urn:mpeg:dash:profile:isoff-live:2011,urn:mpeg:dash:profile:cmaf:2019\" \
availabilityStartTime=\"{}\" publishTime=\"{}\" minimumUpdatePeriod=\"{}\" \
minBufferTime=\"{}\" timeShiftBufferDepth=\"{}\" {suggested}maxSegmentDuration=\"{}\">\n",
        utc_ms(ast),
        utc_ms(now),
        xs_duration(update),
        xs_duration(part),
        xs_duration(window),
        xs_duration(pkg.config().segment + part),
    );
    // DASH-IF low-latency: the latency the service aims for, and the playback-rate band.
    let _ = writeln!(
        out,
        "  <ServiceDescription id=\"0\">\n    <Latency referenceId=\"0\" target=\"{latency_ms}\" min=\"{}\" max=\"{}\"/>\n    <PlaybackRate min=\"0.96\" max=\"1.04\"/>\n  </ServiceDescription>",
        latency_ms / 2,
        latency_ms * 4
    );
    for period in &periods {
        let timing = PeriodTiming {
            first: period.first,
            skipped: period.first - period.epoch,
            start: period.start,
            d,
            part,
            time_url,
        };
        write_period(&mut out, period, ast, &timing, [&video, &audio]);
    }
    let _ = writeln!(
        out,
        "  <UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:http-iso:2014\" value=\"{time_url}\"/>\n</MPD>"
    );
    Some(out)
}

/// One `<Period>`: its start on the MPD's timeline, its end once the epoch is over, and an
/// adaptation set per track the epoch has.
fn write_period(
    out: &mut String,
    period: &PeriodPlan,
    ast: OffsetDateTime,
    timing: &PeriodTiming,
    [video, audio]: [&[&Rendition]; 2],
) {
    let offset = (period.start - ast).max(time::Duration::ZERO);
    let duration = period
        .length
        .map(|l| format!(" duration=\"{}\"", xs_duration(l)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  <Period id=\"{}\" start=\"PT{}.{:03}S\"{duration}>",
        period.first,
        offset.whole_seconds(),
        offset.subsec_milliseconds()
    );
    for (set_id, (content, mime, group)) in
        [("video", "video/mp4", video), ("audio", "audio/mp4", audio)]
            .into_iter()
            .enumerate()
    {
        let Some(first) = group.first() else { continue };
        let Some(epoch_init) = first
            .segments()
            .iter()
            .find(|s| s.epoch_msn == period.epoch)
            .map(|s| s.init_version)
        else {
            continue; // this epoch had no such track
        };
        adaptation_set(out, (set_id, content, mime), group, epoch_init, timing);
    }
    out.push_str("  </Period>\n");
}

/// What every adaptation set of one Period shares.
struct PeriodTiming<'a> {
    /// The Period's first sequence number (the template's startNumber).
    first: u64,
    /// The epoch's segments before it: their media time comes before the Period's start.
    skipped: u64,
    start: OffsetDateTime,
    /// Every template's segment duration ([`template_duration`]).
    d: Duration,
    part: Duration,
    time_url: &'a str,
}

fn adaptation_set(
    out: &mut String,
    (set_id, content, mime): (usize, &str, &str),
    group: &[&Rendition],
    init_version: u32,
    period: &PeriodTiming,
) {
    let PeriodTiming {
        first: start_number,
        skipped,
        start,
        d,
        part,
        time_url,
    } = *period;
    let timescale: u64 = match group[0].kind {
        RenditionKind::Audio { sample_rate, .. } => u64::from(sample_rate),
        RenditionKind::Video { .. } => 1000,
    };
    let d_ts = (d.as_secs_f64() * timescale as f64).round() as u64;
    // Media time restarts with the epoch, not with a Period the clock started within it.
    let pto = d_ts * skipped;
    let pto_attr = if pto > 0 {
        format!(" presentationTimeOffset=\"{pto}\"")
    } else {
        String::new()
    };
    // How early the segment being produced can be requested: all but its first part.
    let ato = d.saturating_sub(part);
    let _ = writeln!(
        out,
        "    <AdaptationSet id=\"{set_id}\" contentType=\"{content}\" mimeType=\"{mime}\" segmentAlignment=\"true\" startWithSAP=\"1\">"
    );
    let _ = writeln!(
        out,
        "      <ProducerReferenceTime id=\"0\" type=\"encoder\" wallClockTime=\"{}\" presentationTime=\"{pto}\">\n        <UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:http-iso:2014\" value=\"{time_url}\"/>\n      </ProducerReferenceTime>",
        utc_ms(start)
    );
    let _ = writeln!(
        out,
        "      <SegmentTemplate timescale=\"{timescale}\" duration=\"{d_ts}\"{pto_attr} startNumber=\"{start_number}\" media=\"$RepresentationID$/seg_$Number$.m4s\" initialization=\"$RepresentationID$/init_{init_version}.mp4\" availabilityTimeOffset=\"{:.3}\" availabilityTimeComplete=\"false\"/>",
        ato.as_secs_f64()
    );
    for r in group {
        let bw = r.peak_bitrate();
        match r.kind {
            RenditionKind::Video {
                width,
                height,
                frame_rate,
            } => {
                let _ = writeln!(
                    out,
                    "      <Representation id=\"{}\" codecs=\"{}\" bandwidth=\"{bw}\" width=\"{width}\" height=\"{height}\" frameRate=\"{}\" sar=\"1:1\"/>",
                    r.name, r.codecs, frame_rate.round()
                );
            }
            RenditionKind::Audio {
                channels,
                sample_rate,
            } => {
                let _ = writeln!(
                    out,
                    "      <Representation id=\"{}\" codecs=\"{}\" bandwidth=\"{bw}\" audioSamplingRate=\"{sample_rate}\">\n        <AudioChannelConfiguration schemeIdUri=\"urn:mpeg:dash:23003:3:audio_channel_configuration:2011\" value=\"{channels}\"/>\n      </Representation>",
                    r.name, r.codecs
                );
            }
        }
    }
    out.push_str("    </AdaptationSet>\n");
}

/// The `/time` answer for `urn:mpeg:dash:utc:http-iso:2014`.
pub fn utc_now_text(now: OffsetDateTime) -> String {
    utc_ms(now)
}

#[cfg(test)]
mod reconnect_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::state::tests::{part, stereo_audio, video_720p};
    use crate::package::PackagingConfig;

    #[test]
    fn mpd_announces_both_sets_with_low_latency_fields() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let mut pkg = PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(3_000_000), stereo_audio(128_000)],
        );
        assert!(
            render_mpd(&pkg, t0, "http://h/time", DashClient::LowLatency).is_none(),
            "nothing complete yet"
        );
        for i in 0..10u64 {
            let t = t0 + Duration::from_millis(500 * i);
            pkg.push_part(0, part(i % 4 == 0, 500, t));
            pkg.push_part(1, part(i % 4 == 0, 496, t));
        }
        let mpd = render_mpd(
            &pkg,
            t0 + Duration::from_secs(5),
            "http://h/time",
            DashClient::LowLatency,
        )
        .unwrap();
        for needle in [
            "type=\"dynamic\"",
            "availabilityStartTime=\"2027-01-15T08:00:00.000Z\"",
            "<Period id=\"0\" start=\"PT0.000S\">",
            "<Latency referenceId=\"0\" target=\"1500\"",
            "timeShiftBufferDepth=\"PT12.000S\"",
            "<SegmentTemplate timescale=\"1000\" duration=\"2000\" startNumber=\"0\"",
            // The audio follows the video's segment grid (`template_duration`).
            "<SegmentTemplate timescale=\"48000\" duration=\"96000\"",
            "availabilityTimeOffset=\"1.500\" availabilityTimeComplete=\"false\"",
            "<Representation id=\"720p\" codecs=\"avc1.64001f\"",
            "<Representation id=\"audio\" codecs=\"mp4a.40.2\"",
            "<ProducerReferenceTime",
            "<UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:http-iso:2014\" value=\"http://h/time\"/>",
        ] {
            assert!(mpd.contains(needle), "missing {needle} in\n{mpd}");
        }
        assert!(!mpd.contains("suggestedPresentationDelay"));
        // GStreamer 1.22.0 alone is told where to start, with a time-shift buffer to match.
        let gst = render_mpd(
            &pkg,
            t0 + Duration::from_secs(5),
            "http://h/time",
            DashClient::Gstreamer1220,
        )
        .unwrap();
        assert!(gst.contains(
            "timeShiftBufferDepth=\"PT34.000S\" suggestedPresentationDelay=\"PT32.000S\""
        ));
        assert_eq!(
            gst.replace(" suggestedPresentationDelay=\"PT32.000S\"", "")
                .replace("PT34.000S", "PT12.000S"),
            mpd
        );
    }

    #[test]
    fn only_gstreamer_before_1_22_1_gets_the_start_delay() {
        for (ua, client) in [
            (
                Some("GStreamer souphttpsrc 1.22.0 libsoup/3.2.3"),
                DashClient::Gstreamer1220,
            ),
            (
                Some("GStreamer souphttpsrc 1.20.3 libsoup/2.74.2"),
                DashClient::Gstreamer1220,
            ),
            (
                Some("GStreamer souphttpsrc 1.22.1 libsoup/3.2.3"),
                DashClient::LowLatency,
            ),
            (Some("GStreamer souphttpsrc 1.24.2"), DashClient::LowLatency),
            (
                Some("Mozilla/5.0 (X11; Linux x86_64) Chrome/120"),
                DashClient::LowLatency,
            ),
            (Some("VLC/3.0.18 LibVLC/3.0.18"), DashClient::LowLatency),
            (None, DashClient::LowLatency),
        ] {
            assert_eq!(DashClient::from_user_agent(ua), client, "{ua:?}");
        }
    }

    /// The numbers the MPD's clock makes requestable follow the wall clock, not the encoder:
    /// with two segments made since a start 9 s ago (an encoder behind real time), the MPD
    /// already announces segment 4 (available from 8.5 s: its first part after its start).
    #[test]
    fn the_announced_numbers_follow_the_clock_not_the_encoder() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let mut pkg = PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(3_000_000), stereo_audio(128_000)],
        );
        for i in 0..9u64 {
            let t = t0 + Duration::from_millis(500 * i);
            pkg.push_part(0, part(i % 4 == 0, 500, t));
            pkg.push_part(1, part(i % 4 == 0, 500, t));
        }
        let at = |ms: u64| announced_msn(&pkg, t0 + Duration::from_millis(ms));
        assert_eq!(at(400), None, "nothing before the first part's end");
        assert_eq!(at(500), Some(0));
        assert_eq!(at(2_499), Some(0));
        assert_eq!(at(2_500), Some(1));
        assert_eq!(at(9_000), Some(4));
        assert_eq!(pkg.renditions()[0].next_msn(), 3, "segment 2 is being made");
        // Between epochs (the publisher left) the MPD announces nothing more.
        for r in pkg.list_mut(crate::package::Output::Cmaf).unwrap() {
            r.mark_discontinuity();
        }
        assert_eq!(announced_msn(&pkg, t0 + Duration::from_secs(9)), None);
    }

    /// An encoder at two thirds of real time: each segment begins a second later than the one
    /// before against the MPD's clock. Segment 3, begun 3 s after it was announced, moves the
    /// numbers not announced yet: the epoch's Period ends after segment 5 and a new one times 6
    /// on from when it begins if the encoder keeps real time from 9.5 s: at 15.5 s; its media
    /// time goes on from the epoch's. Players refetch
    /// the MPD every segment meanwhile; the held-request bound stays the first Period's.
    #[test]
    fn an_encoder_behind_real_time_gets_a_period_started_where_it_is() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let mut pkg = PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(3_000_000), stereo_audio(128_000)],
        );
        for i in 0..17u64 {
            let t = t0 + Duration::from_millis(500 * i);
            pkg.push_part(0, part(i.is_multiple_of(4), 500, t));
            pkg.push_part(1, part(i.is_multiple_of(4), 500, t));
            if i.is_multiple_of(4) {
                // Out of the muxer (first part done) a second later per segment before it.
                let began = t + Duration::from_millis(500 + 1000 * (i / 4));
                segment_began(&mut pkg, "720p", began);
            }
        }
        let now = t0 + Duration::from_secs(10);
        let mpd = render_mpd(&pkg, now, "http://h/time", DashClient::LowLatency).unwrap();
        for needle in [
            "minimumUpdatePeriod=\"PT2.000S\"",
            "<Period id=\"0\" start=\"PT0.000S\" duration=\"PT12.000S\">",
            "<Period id=\"6\" start=\"PT15.000S\">",
            "<SegmentTemplate timescale=\"1000\" duration=\"2000\" presentationTimeOffset=\"12000\" startNumber=\"6\"",
            "<SegmentTemplate timescale=\"48000\" duration=\"96000\" presentationTimeOffset=\"576000\" startNumber=\"6\"",
            "wallClockTime=\"2027-01-15T08:00:15.000Z\" presentationTime=\"12000\"",
        ] {
            assert!(mpd.contains(needle), "missing {needle} in\n{mpd}");
        }
        assert_eq!(mpd.matches("<Period ").count(), 2, "{mpd}");
        assert_eq!(announced_msn(&pkg, now), Some(4));
    }

    #[test]
    fn a_reconnect_starts_a_period_numbered_from_its_first_segment() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let mut pkg = PackageState::new(
            PackagingConfig::default(),
            vec![video_720p(3_000_000), stereo_audio(128_000)],
        );
        for i in 0..8u64 {
            let t = t0 + Duration::from_millis(500 * i);
            pkg.push_part(0, part(i % 4 == 0, 500, t));
            pkg.push_part(1, part(i % 4 == 0, 496, t));
        }
        // The publisher leaves; 30 s later a new epoch continues the numbering.
        let next = pkg.renditions().iter().map(|r| r.next_msn()).max().unwrap();
        for r in pkg.list_mut(crate::package::Output::Cmaf).unwrap() {
            r.mark_discontinuity();
            r.continue_after(next - 1);
        }
        let t1 = t0 + Duration::from_secs(34);
        for i in 0..8u64 {
            let t = t1 + Duration::from_millis(500 * i);
            pkg.push_part(0, part(i % 4 == 0, 500, t));
            pkg.push_part(1, part(i % 4 == 0, 496, t));
        }
        let mpd = render_mpd(
            &pkg,
            t1 + Duration::from_secs(4),
            "http://h/time",
            DashClient::LowLatency,
        )
        .unwrap();
        assert_eq!(mpd.matches("<Period ").count(), 2, "{mpd}");
        for needle in [
            "availabilityStartTime=\"2027-01-15T08:00:00.000Z\"",
            // The old epoch ends where its media does (the audio's last segment starts at 2 s
            // on the template and holds 4 × 496 ms), not where the new one begins.
            "<Period id=\"0\" start=\"PT0.000S\" duration=\"PT3.984S\">",
            "<Period id=\"2\" start=\"PT34.000S\">",
            "duration=\"2000\" startNumber=\"2\"",
            "duration=\"96000\" startNumber=\"2\"",
        ] {
            assert!(mpd.contains(needle), "missing {needle} in\n{mpd}");
        }
    }
}
